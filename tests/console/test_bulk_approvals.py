"""Approve or reject many approval requests at once: a filter, a question with the count, then each
request on its own (four eyes per job, by the service and the database), with what was refused and why."""

import pytest
from django.contrib.auth.models import Group

from approvals.models import ApprovalRequest
from ledger.models import Job
from ledger.services import comment_on_job
from reconciliation import decisions
from tests.console.conftest import htmx, latest_version, make_operator_job, make_unknown_job

pytestmark = pytest.mark.django_db


def _not_found(job_id: str, user) -> ApprovalRequest:
    decisions.mark_not_found(job_id=job_id, version=latest_version(job_id), user=user, note="no rotation seen")
    return ApprovalRequest.objects.get(job__job_id=job_id)


@pytest.fixture
def pile(approver, approver2):
    """Three vault replays asked by approver2, one asked by approver himself, one with dissent, and
    one billing replay that the filter leaves out."""
    for user in (approver, approver2):
        user.groups.add(Group.objects.get_or_create(name="operators")[0])
    for n in range(1, 4):
        make_operator_job(f"vault-{n}")
        _not_found(f"vault-{n}", approver2)
    make_operator_job("vault-own")
    _not_found("vault-own", approver)
    make_operator_job("vault-dissent")
    _not_found("vault-dissent", approver2)
    comment_on_job(job_id="vault-dissent", author="olga", actor_type="operator",
                   text="the provider's log shows this one rotated at 14:02: do not replay")
    make_operator_job("other-1", tenant="globex")
    _not_found("other-1", approver2)
    return ApprovalRequest.objects.all()


def test_the_list_filters_and_flags_dissent_first(client, approver, pile):
    client.force_login(approver)
    html = client.get("/approvals/?q=vault-&sort=dissent").content.decode()
    assert "data-pending-count>5<" in html and "of 6, matching the filter" in html
    dissent = pile.get(job__job_id="vault-dissent")
    assert html.index(f'data-approval="{dissent.pk}"') < html.index(f'data-approval="{pile.get(job__job_id="vault-1").pk}"')
    assert "Dissent: 1 comment by olga" in html and "do not replay" in html
    assert pile.get(job__job_id="vault-1").payload_digest in html
    only = client.get("/approvals/?dissent=with").content.decode()
    assert "data-pending-count>1<" in only and f'data-approval="{dissent.pk}"' in only


def test_approving_every_request_a_filter_matches_asks_then_decides_each_on_its_own(client, approver, pile):
    client.force_login(approver)
    asked = client.post("/approvals/bulk/", {"scope": "filter", "q": "vault-", "decision": "approve",
                                             "note": "effect log shows none of these ran"}, **htmx())
    html = asked.content.decode()
    assert "Approve replay for 5 requests: are you sure?" in html
    assert ApprovalRequest.objects.filter(status="pending").count() == 6  # nothing decided yet
    ids = [pile.get(job__job_id=j).pk for j in ("vault-1", "vault-2", "vault-3", "vault-own", "vault-dissent")]
    answer = client.post("/approvals/bulk/", {"scope": "filter", "q": "vault-", "decision": "approve",
                                              "confirmed": "on", "selected": ids,
                                              "note": "effect log shows none of these ran"}, **htmx())
    html = answer.content.decode()
    assert "Approve replay: 3 recorded, 2 refused, each on its own." in html
    assert "four eyes: abe requested this approval" in html
    assert "olga commented on this job (1 comment of dissent): decide it on its own" in html
    statuses = dict(ApprovalRequest.objects.values_list("job__job_id", "status"))
    assert statuses == {"vault-1": "approved", "vault-2": "approved", "vault-3": "approved",
                        "vault-own": "pending", "vault-dissent": "pending", "other-1": "pending"}
    assert set(Job.objects.filter(job_id__startswith="vault-").values_list("job_id", "status")) == {
        ("vault-1", "pending"), ("vault-2", "pending"), ("vault-3", "pending"),
        ("vault-own", "awaiting_approval"), ("vault-dissent", "awaiting_approval")}


def test_rejecting_a_selection_without_javascript_reports_each_request(client, approver, pile):
    client.force_login(approver)
    chosen = [pile.get(job__job_id="vault-1").pk, pile.get(job__job_id="vault-own").pk]
    asked = client.post("/approvals/bulk/", {"selected": chosen, "decision": "reject", "note": "duplicates"})
    assert asked.status_code == 200 and "Reject for 2 requests: are you sure?" in asked.content.decode()
    done = client.post("/approvals/bulk/", {"selected": chosen, "decision": "reject", "note": "duplicates",
                                            "confirmed": "on"}, follow=True)
    html = done.content.decode()
    assert "Reject: 1 recorded, 1 refused, each on its own." in html
    assert f"Request #{chosen[1]} (vault-own): four eyes" in html
    assert Job.objects.get(job_id="vault-1").status == "cancelled"
    assert ApprovalRequest.objects.get(pk=chosen[1]).status == "pending"


def test_bulk_decisions_need_a_note_and_an_approver(client, operator, approver, pile):
    client.force_login(approver)
    html = client.post("/approvals/bulk/", {"scope": "filter", "decision": "approve", "note": " ",
                                            "confirmed": "on"}, **htmx()).content.decode()
    assert "This field is required." in html
    assert ApprovalRequest.objects.filter(status="pending").count() == 6
    client.force_login(operator)
    assert client.post("/approvals/bulk/", {"scope": "filter", "decision": "approve", "note": "x"}).status_code == 403


def test_an_agents_first_call_is_titled_for_what_it_is(client, approver, tmp_path):
    """The gateway asks before an irreversible tool's first run: it is no replay of anything."""
    from api.tokens import worker_token_create
    from gateway.calls import open_call
    from gateway.config import load_upstreams
    from tests.conftest import token_issuer

    path = tmp_path / "actions.toml"
    path.write_text('[[mcp.upstreams]]\nname = "vault_cfg"\ntenant = "acme"\nurl = "http://127.0.0.1:9/mcp"\n'
                    '[mcp.upstreams.tools.rotate]\neffect = "irreversible"\n')
    [declared] = load_upstreams(path)
    token = worker_token_create(name="ops-agent", tenants=["acme"], actions=["*"],
                                created_by=token_issuer()).worker_token
    open_call(token=token, policy=declared.tools["rotate"], arguments={"name": "db"}, meta={},
              agent="mcp:ops-agent:cli/1")
    client.force_login(approver)
    html = client.get("/approvals/").content.decode()
    assert "First call of <a" in html and "agent tool vault_cfg.rotate" in html and "Replay of" not in html


def test_unknown_jobs_only_are_confirmed_in_bulk(operator):
    make_unknown_job("inv-1")
    assert "confirm_effect" in decisions.allowed_decisions(Job.objects.get(job_id="inv-1"))
