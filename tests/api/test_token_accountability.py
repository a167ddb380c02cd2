"""Issue 25, finding 1: no way around four eyes through a worker token.

A superuser who mints a worker token in /admin/, answers "not found" with it, and then tries to
approve the replay that answer led to, is refused; the answer is on record under the token's
name, and the token's issuance and revocation are in the admin trail (/audit/)."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command

from api.models import WorkerToken
from approvals.models import ApprovalRequest
from console.models import AdminAuditEntry, TenantScope
from ledger.actions import _registry
from ledger.declarations import load_actions_file
from ledger.models import Attempt, Job, LedgerEvent
from tests.api.conftest import ApiClient, ledger_state
from tests.conftest import _persona
from tests.reconciliation.helpers import assert_ledger_clean, unknown_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def irreversible_pull_action(tmp_path):
    path = tmp_path / "actions.toml"
    path.write_text("""
[actions."pull.wire"]
executor = "external"
reversible = false
queryable = true
reconciler = "external"
""")
    load_actions_file(path, required=True)
    yield "pull.wire"
    _registry.pop("pull.wire")


def _mint_in_admin(client, name: str) -> str:
    answer = client.post("/admin/api/workertoken/add/",
                         {"name": name, "tenants_text": "*", "actions_text": "*"}, follow=True)
    assert answer.status_code == 200
    return re.search(r"rk_[A-Za-z0-9_-]{40,}", answer.content.decode()).group(0)


def test_a_superuser_cannot_approve_the_replay_their_own_tokens_answer_led_to(
    client, admin_user, irreversible_pull_action
):
    client.force_login(admin_user)
    token = _mint_in_admin(client, "root's agent")
    minted = WorkerToken.objects.get(name="root's agent")
    assert (minted.created_by, minted.issued_by) == (admin_user, "root")
    issued = AdminAuditEntry.objects.get(object_type="api.workertoken", action="added")
    assert (issued.actor, issued.object_pk) == ("root", str(minted.pk))
    assert "token_hash" not in issued.changes and issued.changes["prefix"]["after"] == minted.prefix

    unknown_job("wire-1", irreversible_pull_action, {"amount_cents": 100})
    agent = ApiClient(token)
    claimed = agent.post("/api/v1/reconciliations/claim", {"agent": "mcp-desktop"}).json
    answered = agent.post(f"/api/v1/reconciliations/{claimed['reconciliation_id']}/outcome",
                          {"agent": "mcp-desktop", "outcome": "not_found", "reason": "no wire with this key"})
    assert answered.json["applied"] == "awaiting_approval"
    as_token = f"mcp-desktop [token root's-agent {minted.prefix}]"
    answer_event = LedgerEvent.objects.get(job__job_id="wire-1", kind="reconciled_not_found")
    assert (answer_event.actor_type, answer_event.actor) == ("reconciler", as_token)
    request = ApprovalRequest.objects.get(job__job_id="wire-1")
    assert (request.requested_by, request.requested_by_actor) == (admin_user, as_token)

    before, events = ledger_state(), LedgerEvent.objects.count()
    refused = client.post(f"/approvals/{request.pk}/decide/", {"decision": "approve", "note": "looks fine"},
                          follow=True)
    said = refused.content.decode()
    assert "four eyes: root requested this approval" in said and minted.prefix in said
    request.refresh_from_db()
    assert request.status == "pending" and Job.objects.get(job_id="wire-1").status == "awaiting_approval"
    assert ledger_state() == before and LedgerEvent.objects.count() == events
    assert Attempt.objects.filter(job__job_id="wire-1").count() == 1

    second = _persona("abe", "approvers")
    TenantScope.objects.create(user=second, all_tenants=True)
    client.force_login(second)  # a second person may
    client.post(f"/approvals/{request.pk}/decide/", {"decision": "approve", "note": "checked the bank"})
    assert Job.objects.get(job_id="wire-1").status == "pending"
    assert_ledger_clean()


def test_revoking_a_token_in_the_admin_is_in_the_admin_trail(client, admin_user):
    client.force_login(admin_user)
    _mint_in_admin(client, "short-lived")
    minted = WorkerToken.objects.get(name="short-lived")
    client.post("/admin/api/workertoken/", {"action": "revoke", "_selected_action": [minted.pk]})
    minted.refresh_from_db()
    assert minted.revoked_at is not None
    revoked = AdminAuditEntry.objects.get(object_type="api.workertoken", action="changed")
    assert revoked.actor == "root" and revoked.changes["revoked_at"]["before"] is None


def test_tokens_issued_and_revoked_on_the_command_line_are_in_the_admin_trail(admin_user):
    call_command("worker_token", "create", "--name", "ci", "--tenant", "*", "--action", "*", "--by", "root")
    call_command("worker_token", "create", "--name", "cron", "--tenant", "acme", "--action", "reckon.echo")
    call_command("worker_token", "revoke", "cron")
    ci, cron = WorkerToken.objects.get(name="ci"), WorkerToken.objects.get(name="cron")
    assert (ci.created_by, ci.issued_by) == (admin_user, "root")
    assert cron.created_by is None and cron.issued_by.startswith("cli (os user ")
    trail = list(AdminAuditEntry.objects.filter(object_type="api.workertoken").order_by("id")
                 .values_list("actor", "action", "object_repr"))
    assert [(actor.split(" (")[0], action) for actor, action, _ in trail] == [
        ("root", "added"), ("cli", "added"), ("cli", "changed")]
