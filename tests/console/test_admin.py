import csv
import io
import json

import pytest

from tests.console.conftest import make_operator_job

pytestmark = pytest.mark.django_db

MODELS = [
    "ledger/job",
    "ledger/attempt",
    "ledger/ledgerevent",
    "reconciliation/reconciliationcheck",
    "approvals/approvalrequest",
]


@pytest.mark.parametrize("model", MODELS)
def test_the_ledger_is_read_only_in_admin(client, admin_user, model):
    make_operator_job("vault-1")
    client.force_login(admin_user)
    listing = client.get(f"/admin/{model}/")
    assert listing.status_code == 200
    assert client.get(f"/admin/{model}/add/").status_code == 403
    html = listing.content.decode()
    assert f'href="/admin/{model}/add/"' not in html and 'name="action"' not in html  # no add, no delete


def test_a_detail_page_shows_without_a_save_button(client, admin_user):
    from ledger.models import Job

    job = make_operator_job("vault-1")
    client.force_login(admin_user)
    response = client.get(f"/admin/ledger/job/{job.pk}/change/")
    assert response.status_code == 200 and b'name="_save"' not in response.content
    assert client.post(f"/admin/ledger/job/{job.pk}/delete/").status_code == 403
    assert Job.objects.filter(pk=job.pk).exists()


# -- the writable part: people, groups, tenant scopes; every change on the admin trail ----------

from html.parser import HTMLParser  # noqa: E402

from django.contrib.auth.models import Group, User  # noqa: E402
from django.db import DatabaseError, connection, transaction  # noqa: E402

from console.models import AdminAuditEntry, TenantScope  # noqa: E402
from tests.console.conftest import with_tenants  # noqa: E402


class _FormFields(HTMLParser):
    """The values a browser would submit from the form with id `form_id`, as it stands."""

    def __init__(self, form_id: str):
        super().__init__()
        self.form_id, self.inside, self.select, self.textarea = form_id, False, None, None
        self.fields: dict[str, list[str]] = {}

    def _add(self, name, value):
        self.fields.setdefault(name, []).append(value)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self.inside = a.get("id") == self.form_id
        elif not self.inside:
            return
        elif tag == "input" and a.get("name"):
            kind = a.get("type", "text")
            if kind in ("checkbox", "radio"):
                if "checked" in a:
                    self._add(a["name"], a.get("value", "on"))
            elif kind not in ("submit", "button", "file"):
                self._add(a["name"], a.get("value") or "")
        elif tag == "select":
            self.select = a.get("name")
        elif tag == "option" and self.select and "selected" in a:
            self._add(self.select, a.get("value", ""))
        elif tag == "textarea":
            self.textarea, self.text = a.get("name"), ""

    def handle_endtag(self, tag):
        if tag == "form":
            self.inside = False
        elif tag == "select":
            self.select = None
        elif tag == "textarea" and self.textarea:
            self._add(self.textarea, self.text)
            self.textarea = None

    def handle_data(self, data):
        if self.textarea:
            self.text += data


def _form(client, url: str, form_id: str) -> dict:
    page = client.get(url)
    assert page.status_code == 200, url
    parser = _FormFields(form_id)
    parser.feed(page.content.decode())
    return {name: values if len(values) > 1 else values[0] for name, values in parser.fields.items()}


def _submit(client, url: str, form_id: str, **changes):
    data = {**_form(client, url, form_id), **changes}
    data = {name: value for name, value in data.items() if value is not None}
    response = client.post(url, data)
    assert response.status_code == 302, response.content.decode()[-3000:]
    return response


def _entries(**filters) -> list[AdminAuditEntry]:
    return list(AdminAuditEntry.objects.filter(**filters).order_by("id"))


def test_creating_an_account_and_making_it_an_approver_is_on_the_trail(client, admin_user):
    """The four-eyes loophole: a superuser makes a second account to approve their own request."""
    approvers = Group.objects.get_or_create(name="approvers")[0]
    client.force_login(admin_user)
    _submit(
        client,
        "/admin/auth/user/add/",
        "user_form",
        username="root-two",
        password1="a long password 123",
        password2="a long password 123",
        usable_password="true",
    )
    second = User.objects.get(username="root-two")
    _submit(client, f"/admin/auth/user/{second.pk}/change/", "user_form", groups=str(approvers.pk))
    added, changed = _entries(object_pk=str(second.pk))
    assert (added.actor, added.action, added.object_type, added.object_repr) == (
        "root",
        "added",
        "auth.user",
        "root-two",
    )
    assert added.changes["username"] == {"before": None, "after": "root-two"}
    assert added.changes["password"] == {"secret": True}
    assert (changed.action, changed.changes) == ("changed", {"groups": {"before": [], "after": ["approvers"]}})
    assert second.password not in json.dumps(added.changes)
    # …and every reader who sees all tenants finds it on /audit/ and in its CSV.
    html = client.get("/audit/").content.decode()
    assert f'data-admin-entry="{changed.pk}"' in html and "root-two" in html
    rows = list(csv.DictReader(io.StringIO(_csv(client, "/audit/admin-export.csv"))))
    assert [(r["actor"], r["action"], r["object"]) for r in rows[:2]] == [
        ("root", "changed", "root-two"),
        ("root", "added", "root-two"),
    ]


def _csv(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200
    return b"".join(response.streaming_content).decode()


def test_a_password_change_is_recorded_without_the_password(client, admin_user, operator):
    client.force_login(admin_user)
    old_hash = operator.password
    _submit(
        client,
        f"/admin/auth/user/{operator.pk}/password/",
        "user_form",
        password1="another long password 9",
        password2="another long password 9",
        usable_password="true",
    )
    operator.refresh_from_db()
    (entry,) = _entries(object_pk=str(operator.pk))
    assert (entry.action, entry.changes) == ("changed", {"password": {"secret": True}})
    assert old_hash not in json.dumps(entry.changes) and operator.password not in json.dumps(entry.changes)


def test_a_tenant_scope_set_on_the_users_page_is_recorded(client, admin_user, operator):
    client.force_login(admin_user)
    url = f"/admin/auth/user/{operator.pk}/change/"
    _submit(client, url, "user_form", **{"tenant_scope-0-all_tenants": None, "tenant_scope-0-tenants": "acme, globex"})
    assert TenantScope.objects.get(user=operator).tenants == ["acme", "globex"]
    (entry,) = _entries(object_pk=str(operator.pk))
    assert entry.changes == {"tenant_scope": {"before": "all tenants", "after": "acme, globex"}}


def test_tenant_scopes_have_their_own_page(client, admin_user):
    newcomer = User.objects.create_user("newcomer", password="pw")
    client.force_login(admin_user)
    _submit(client, "/admin/console/tenantscope/add/", "tenantscope_form", user=str(newcomer.pk), tenants="acme")
    (entry,) = _entries(object_type="console.tenantscope")
    assert entry.changes["user"] == {"before": None, "after": "newcomer"}
    assert entry.changes["tenants"] == {"before": None, "after": ["acme"]}


def test_a_staff_user_with_every_permission_gets_nothing_in_admin(client, operator):
    """Django's user page lets whoever may change users make anyone a superuser, and model
    permissions know no tenants: /admin/ is for superusers only, whatever else a person holds."""
    from django.contrib.auth.models import Permission

    staff = User.objects.create_user("staff", password="pw-staff", is_staff=True)
    staff.user_permissions.set(Permission.objects.all())
    client.force_login(staff)
    for url in ("/admin/", "/admin/auth/user/", f"/admin/auth/user/{operator.pk}/change/", "/admin/ledger/job/"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/"), url
    response = client.post(f"/admin/auth/user/{staff.pk}/change/", {"username": "staff", "is_superuser": "on"})
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
    staff.refresh_from_db()
    assert not staff.is_superuser and _entries() == []


def test_the_admin_login_refuses_a_staff_user_who_is_not_a_superuser(admin_user):
    from django.test import Client

    User.objects.create_user("staff", password="pw-staff", is_staff=True)
    browser = Client()
    refused = browser.post("/admin/login/", {"username": "staff", "password": "pw-staff"})
    assert refused.status_code == 200 and "Please enter the correct username and password" in refused.content.decode()
    assert "_auth_user_id" not in browser.session
    assert browser.post("/admin/login/", {"username": "root", "password": "pw-root"}).status_code == 302


def test_groups_added_renamed_and_deleted_are_recorded_with_their_members(client, admin_user, operator):
    client.force_login(admin_user)
    _submit(client, "/admin/auth/group/add/", "group_form", name="night-shift")
    group = Group.objects.get(name="night-shift")
    operator.groups.add(group)
    _submit(client, f"/admin/auth/group/{group.pk}/change/", "group_form", name="night-owls")
    response = client.post(f"/admin/auth/group/{group.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302 and not Group.objects.filter(pk=group.pk).exists()
    added, renamed, deleted = _entries(object_type="auth.group")
    assert added.changes["name"] == {"before": None, "after": "night-shift"}
    assert renamed.changes == {"name": {"before": "night-shift", "after": "night-owls"}}
    assert (deleted.action, deleted.object_pk) == ("deleted", str(group.pk))
    assert deleted.changes["members"] == {"before": [operator.username], "after": None}


def test_users_deleted_in_bulk_are_each_recorded(client, admin_user):
    doomed = [User.objects.create_user(f"temp{n}", password="pw") for n in range(2)]
    client.force_login(admin_user)
    response = client.post(
        "/admin/auth/user/",
        {"action": "delete_selected", "_selected_action": [str(u.pk) for u in doomed], "post": "yes"},
    )
    assert response.status_code == 302 and not User.objects.filter(username__startswith="temp").exists()
    assert sorted((e.action, e.object_repr) for e in _entries(object_type="auth.user")) == [
        ("deleted", "temp0"),
        ("deleted", "temp1"),
    ]


def test_a_save_that_changes_nothing_leaves_no_entry(client, admin_user, operator):
    client.force_login(admin_user)
    _submit(client, f"/admin/auth/user/{operator.pk}/change/", "user_form")
    assert _entries() == []


def test_the_trail_is_append_only(admin_user):
    from console.admin_trail import record_change

    entry = record_change(admin_user, AdminAuditEntry.ADDED, admin_user, {}, {"username": "root"})
    for statement in ("UPDATE console_adminauditentry SET actor = 'someone else'", "DELETE FROM console_adminauditentry"):
        with pytest.raises(DatabaseError, match="Cannot update or delete"), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(statement)
    entry.refresh_from_db()
    assert entry.actor == "root"


def test_only_readers_who_see_every_tenant_see_the_trail(client, admin_user, auditor):
    from console.admin_trail import record_change

    record_change(admin_user, AdminAuditEntry.ADDED, admin_user, {}, {"username": "root"})
    client.force_login(auditor)  # all tenants
    assert 'id="admin-trail"' in client.get("/audit/").content.decode()
    with_tenants(auditor, "acme")
    assert 'id="admin-trail"' not in client.get("/audit/").content.decode()
    assert client.get("/audit/admin-export.csv").status_code == 403


def test_the_trail_follows_the_actor_and_time_filters(client, admin_user, operator):
    from console.admin_trail import record_change

    record_change(admin_user, AdminAuditEntry.ADDED, admin_user, {}, {"username": "root"})
    record_change(operator, AdminAuditEntry.ADDED, operator, {}, {"username": "olga"})
    client.force_login(admin_user)
    assert [r["actor"] for r in csv.DictReader(io.StringIO(_csv(client, "/audit/admin-export.csv?actor=olga")))] == [
        "olga"
    ]
    assert _csv(client, "/audit/admin-export.csv?job=inv-1").count("\r\n") == 1  # the header only
    assert _csv(client, "/audit/admin-export.csv?until=2000-01-01T00:00").count("\r\n") == 1


def test_the_admin_csv_neutralises_formulas_too(client, admin_user):
    from console.admin_trail import record_change

    plus = User.objects.create_user("+1+cmd", password="pw")
    record_change(admin_user, AdminAuditEntry.ADDED, plus, {}, {"username": "+1+cmd"})
    client.force_login(admin_user)
    rows = list(csv.DictReader(io.StringIO(_csv(client, "/audit/admin-export.csv"))))
    assert rows[0]["object"] == "'+1+cmd"


# -- django-q2: what runs on the worker hosts is config/schedules.py's, not /admin/'s ------------


def _django_q_rows() -> dict:
    from django_q.models import OrmQ, Schedule, Task

    from console.admin_trail import snapshot

    return {model: {obj.pk: snapshot(obj) for obj in model.objects.all()} for model in (Schedule, Task, OrmQ)}


def test_a_superuser_can_change_nothing_in_django_q(client, admin_user, tmp_path):
    """`os.system` as a schedule or a resubmitted task would run as the cluster's user."""
    from django.utils import timezone
    from django_q.models import OrmQ, Schedule, Task

    now = timezone.now()
    schedule = Schedule.objects.create(name="reckon.example", func="math.floor", args="1", schedule_type=Schedule.MINUTES, minutes=1)
    success = Task.objects.create(id="a" * 32, name="ok", func="math.floor", args=(1,), started=now, stopped=now, success=True)
    failure = Task.objects.create(id="b" * 32, name="bad", func="math.floor", args=(1,), started=now, stopped=now, success=False)
    queued = OrmQ.objects.create(key="default", payload="not a task", lock=None)
    pwned = tmp_path / "pwned"
    evil = {"name": "evil", "func": "os.system", "args": repr(f"touch {pwned}"), "schedule_type": "O", "repeats": "-1",
            "next_run_0": "2020-01-01", "next_run_1": "00:00:00", "key": "default", "payload": "x"}
    rows = _django_q_rows()
    client.force_login(admin_user)
    for model, obj in (("schedule", schedule), ("success", success), ("failure", failure), ("ormq", queued)):
        base = f"/admin/django_q/{model}/"
        assert client.get(base).status_code == 200 and client.get(f"{base}{obj.pk}/change/").status_code == 200
        for url, data in (
            (f"{base}add/", evil),
            (f"{base}{obj.pk}/change/", evil),
            (f"{base}{obj.pk}/delete/", {"post": "yes"}),
        ):
            assert client.post(url, data).status_code == 403, url
        for action in ("delete_selected", "resubmit_task"):
            response = client.post(base, {"action": action, "_selected_action": [str(obj.pk)], "post": "yes"})
            assert response.status_code in (200, 302)  # the list again: no such action here
    assert _django_q_rows() == rows and not pwned.exists()
    assert _entries() == []


# -- every write /admin/ offers lands on the admin trail -----------------------------------------


def _writable_operations() -> list[tuple[str, str]]:
    """(model, operation) for every write the registered admin pages offer a superuser: add,
    change (a change form with a field left to edit), delete, and each action."""
    from django.contrib import admin
    from django.contrib.admin.utils import flatten_fieldsets
    from django.test import RequestFactory

    request = RequestFactory().get("/admin/")
    request.user = User(username="root", is_superuser=True, is_staff=True, is_active=True)
    operations = []
    for model, model_admin in admin.site._registry.items():
        label, obj = model._meta.label_lower, model()
        if model_admin.has_add_permission(request):
            operations.append((label, "add"))
        if model_admin.has_change_permission(request, obj):
            editable = set(flatten_fieldsets(model_admin.get_fieldsets(request, obj))) - set(
                model_admin.get_readonly_fields(request, obj)
            )
            if editable or model_admin.get_inlines(request, obj):
                operations.append((label, "change"))
        if model_admin.has_delete_permission(request, obj):
            operations.append((label, "delete"))
        operations += [(label, f"action:{name}") for name in model_admin.get_actions(request)]
    return sorted(operations)


def _attempt(username: str = "olga"):
    from axes.models import AccessAttempt

    return AccessAttempt.objects.create(username=username, ip_address="10.1.2.3", user_agent="test", http_accept="*/*",
                                        path_info="/accounts/login/", get_data="", post_data="", failures_since_start=5)


def _issue_token(client, name: str = "robot"):
    from api.models import WorkerToken

    data = {"name": name, "tenants_text": "acme", "actions_text": "*"}
    assert client.post("/admin/api/workertoken/add/", data).status_code == 302
    return WorkerToken.objects.get(name=name)


def _delete(path: str, make):
    def setup(client):
        return make()

    def act(client, obj):
        assert client.post(f"/admin/{path}/{obj.pk}/delete/", {"post": "yes"}).status_code == 302

    return setup, act


def _bulk(path: str, action: str, make):
    def setup(client):
        return make()

    def act(client, obj):
        response = client.post(f"/admin/{path}/", {"action": action, "_selected_action": [str(obj.pk)], "post": "yes"})
        assert response.status_code == 302

    return setup, act


def _edit(path: str, form_id: str, make=lambda: None, **changes):
    def act(client, obj):
        _submit(client, f"/admin/{path}/{obj.pk}/change/" if obj else f"/admin/{path}/add/", form_id, **changes)

    return (lambda client: make()), act


def _user(name="temp"):
    return lambda: User.objects.create_user(name, password="pw")


def _group(name="temps"):
    return lambda: Group.objects.create(name=name)


def _scope():
    return lambda: TenantScope.objects.create(user=User.objects.create_user("scoped", password="pw"), tenants=["acme"])


# How each write is made, as a person makes it in the browser. A write /admin/ offers that is not
# here fails test_every_write_in_admin_is_on_the_trail until it is added (and audited).
WRITES = {
    ("auth.user", "add"): _edit("auth/user", "user_form", username="new", password1="a long password 123",
                                password2="a long password 123", usable_password="true"),
    ("auth.user", "change"): _edit("auth/user", "user_form", _user(), first_name="Tempo", is_staff="on"),
    ("auth.user", "delete"): _delete("auth/user", _user()),
    ("auth.user", "action:delete_selected"): _bulk("auth/user", "delete_selected", _user()),
    ("auth.group", "add"): _edit("auth/group", "group_form", name="night-shift"),
    ("auth.group", "change"): _edit("auth/group", "group_form", _group(), name="night-owls"),
    ("auth.group", "delete"): _delete("auth/group", _group()),
    ("auth.group", "action:delete_selected"): _bulk("auth/group", "delete_selected", _group()),
    ("console.tenantscope", "add"): (
        lambda client: User.objects.create_user("newcomer", password="pw"),
        lambda client, newcomer: _submit(client, "/admin/console/tenantscope/add/", "tenantscope_form",
                                         user=str(newcomer.pk), tenants="acme"),
    ),
    ("console.tenantscope", "change"): _edit("console/tenantscope", "tenantscope_form", _scope(), tenants="acme, globex"),
    ("console.tenantscope", "delete"): _delete("console/tenantscope", _scope()),
    ("console.tenantscope", "action:delete_selected"): _bulk("console/tenantscope", "delete_selected", _scope()),
    ("axes.accessattempt", "delete"): _delete("axes/accessattempt", _attempt),
    ("axes.accessattempt", "action:delete_selected"): _bulk("axes/accessattempt", "delete_selected", _attempt),
    ("api.workertoken", "add"): (lambda client: None, lambda client, obj: _issue_token(client)),
    ("api.workertoken", "action:revoke"): (_issue_token, lambda client, obj: client.post(
        "/admin/api/workertoken/", {"action": "revoke", "_selected_action": [str(obj.pk)]})),
}


@pytest.mark.parametrize("label, operation", _writable_operations())
def test_every_write_in_admin_is_on_the_trail(client, admin_user, label, operation):
    """Walks the admin site as registered: every row a write adds, changes or deletes has its
    entry in the admin trail (a write that changes nothing needs none)."""
    from django.apps import apps

    from console.admin_trail import snapshot

    assert (label, operation) in WRITES, f"/admin/ offers {operation} on {label}: add it to WRITES, on the trail"
    setup, act = WRITES[label, operation]
    model = apps.get_model(label)
    client.force_login(admin_user)
    obj = setup(client)
    seen = set(AdminAuditEntry.objects.values_list("pk", flat=True))
    before = {row.pk: snapshot(row) for row in model._default_manager.all()}
    act(client, obj)
    after = {row.pk: snapshot(row) for row in model._default_manager.all()}
    touched = {str(pk) for pk in before.keys() | after.keys() if before.get(pk) != after.get(pk)}
    assert touched, f"{operation} on {label} changed nothing: the scenario does not exercise it"
    new = AdminAuditEntry.objects.exclude(pk__in=seen).filter(object_type=label)
    assert touched <= set(new.values_list("object_pk", flat=True))
    assert set(new.values_list("actor", flat=True)) == {"root"}


def test_the_walk_sees_every_writable_admin_page():
    """The walk above is only as good as its list of writes: it finds the ones /admin/ offers."""
    operations = set(_writable_operations())
    assert {("auth.user", "change"), ("axes.accessattempt", "delete"), ("api.workertoken", "add")} <= operations
    assert not any(label.startswith(("django_q.", "ledger.", "approvals.", "reconciliation.")) for label, _ in operations)
    assert ("axes.accesslog", "delete") not in operations and ("console.adminauditentry", "delete") not in operations
