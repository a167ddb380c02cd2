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


def test_tenant_scopes_have_their_own_page_for_superusers_only(client, admin_user, operator):
    from django.contrib.auth.models import Permission

    newcomer = User.objects.create_user("newcomer", password="pw")
    client.force_login(admin_user)
    _submit(client, "/admin/console/tenantscope/add/", "tenantscope_form", user=str(newcomer.pk), tenants="acme")
    (entry,) = _entries(object_type="console.tenantscope")
    assert entry.changes["user"] == {"before": None, "after": "newcomer"}
    assert entry.changes["tenants"] == {"before": None, "after": ["acme"]}
    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    staff.user_permissions.set(Permission.objects.all())  # every model permission, but no superuser
    client.force_login(staff)
    assert client.get("/admin/console/tenantscope/").status_code == 403
    assert client.get(f"/admin/auth/user/{operator.pk}/change/").status_code == 200
    assert b"tenant_scope-0-tenants" not in client.get(f"/admin/auth/user/{operator.pk}/change/").content


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
