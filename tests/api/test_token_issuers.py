"""Issue 40, finding 5: a person behind every token that can reach irreversible work.

A token whose actions reach an irreversible action (a "*", a named irreversible action, or a name
nothing declares here) is issued only by an active user, who then may not approve what its calls
and answers ask for; without one, nothing is written and the refusal says how. A token of
reversible actions alone may still be issued from the command line with nobody named."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from api import tokens
from api.models import WorkerToken
from console.models import AdminAuditEntry
from ledger.actions import _registry
from ledger.declarations import load_actions_file

pytestmark = pytest.mark.django_db


@pytest.fixture
def irreversible_action(tmp_path):
    path = tmp_path / "actions.toml"
    path.write_text('[actions."bank.wire"]\nexecutor = "external"\nreversible = false\n')
    load_actions_file(path, required=True)
    yield "bank.wire"
    _registry.pop("bank.wire")


def _create(*arguments: str) -> str:
    out = io.StringIO()
    call_command("worker_token", "create", "--name", "agent", "--tenant", "acme", *arguments,
                 stdout=out, stderr=io.StringIO())
    return out.getvalue().strip()


def _nothing_written() -> bool:
    return not WorkerToken.objects.exists() and not AdminAuditEntry.objects.exists()


@pytest.mark.parametrize(("actions", "reach"), [
    (["*"], 'every action ("*"'),
    (["reckon.echo", "bank.wire"], "the irreversible action(s) bank.wire"),
    (["nobody.declares.this"], "nobody.declares.this, which nothing declares here"),
])
def test_a_token_that_can_reach_irreversible_work_is_refused_without_a_person(irreversible_action, actions, reach):
    with pytest.raises(CommandError) as refused:
        _create(*[part for action in actions for part in ("--action", action)])

    said = str(refused.value)
    assert reach in said and "no person issues it" in said and "--by USERNAME" in said
    assert _nothing_written()
    with pytest.raises(tokens.IssuerRequired):  # the service refuses it too, whoever calls it
        tokens.worker_token_create(name="agent", tenants=["acme"], actions=actions)
    assert _nothing_written()


def test_an_inactive_user_cannot_stand_behind_one(irreversible_action):
    User.objects.create_user("gone", is_active=False)

    with pytest.raises(CommandError, match="gone is not an active user"):
        _create("--action", "bank.wire", "--by", "gone")
    assert _nothing_written()


def test_a_person_named_with_by_issues_it_and_is_recorded_as_its_issuer(irreversible_action):
    tess = User.objects.create_user("tess")

    token = _create("--action", "*", "--by", "tess")

    issued = WorkerToken.objects.get()
    assert tokens.authenticate(f"Bearer {token}") == issued
    assert (issued.created_by, issued.issued_by) == (tess, "tess")
    assert AdminAuditEntry.objects.get(object_type="api.workertoken").actor == "tess"


def test_a_token_of_reversible_actions_alone_needs_no_person():
    token = _create("--action", "reckon.echo")

    issued = WorkerToken.objects.get()
    assert tokens.authenticate(f"Bearer {token}") == issued
    assert issued.created_by is None and issued.issued_by.startswith("cli (os user ")


def test_the_admin_issues_it_as_the_signed_in_user(client, admin_user, irreversible_action):
    client.force_login(admin_user)

    client.post("/admin/api/workertoken/add/", {"name": "ops", "tenants_text": "*", "actions_text": "bank.wire"})

    assert WorkerToken.objects.get(name="ops").created_by == admin_user


# -- who stands behind a worker's or an agent's name --------------------------------------------


def test_an_agents_name_names_its_token_and_is_no_worker_api_holders_name():
    tess = User.objects.create_user("tess")
    mine = tokens.worker_token_create(name="agent", tenants=["acme"], actions=["*"], created_by=tess).worker_token
    other = tokens.worker_token_create(name="other", tenants=["acme"], actions=["*"], created_by=tess).worker_token
    # The client names itself: even as another token's worker, the name ends with its own token.
    forged = tokens.agent_name(mine, f"x{tokens.holder_tag(other)}")

    for agent in (tokens.agent_name(mine, "client/1.0"), forged):
        assert agent.startswith("mcp:agent:") and agent.endswith(f"(token {mine.prefix})")
        assert not tokens.holds(mine, agent) and not tokens.holds(other, agent)
        assert tokens.token_of(agent) == mine
    assert tokens.token_of(tokens.holder_name(mine, "w-1")) == mine
    assert tokens.token_of(tokens.agent_name(mine, "c" * 300)) == mine  # a long name keeps its tag
    for nobody in ("w-1", "reconciler", "mcp:agent:client/1.0", "w [token agent rk_0000000]"):
        assert tokens.token_of(nobody) is None
    tokens.worker_token_revoke(worker_token=mine)
    assert tokens.issuer_of(tokens.agent_name(mine, "client/1.0")) == tess  # revoked, still theirs


def nothing_there(job, attempt):
    """A reconciler that finds no trace of the effect."""
    from reconciliation.findings import Finding

    return Finding("not_found", "the provider has no transfer with this key")


def test_the_reconciler_asks_in_the_name_of_whoever_issued_the_token_that_began_the_attempt(tmp_path, approver):
    from approvals import services as approvals
    from approvals.models import ApprovalRequest
    from ledger import services
    from reconciliation.passes import reconcile_job

    path = tmp_path / "actions.toml"
    path.write_text('[actions."bank.transfer"]\nexecutor = "external"\nreversible = false\nqueryable = true\n'
                    f'reconciler = "python:{__name__}.nothing_there"\n')
    load_actions_file(path, required=True)
    try:
        tess = User.objects.create_user("tess")
        token = tokens.worker_token_create(name="payer", tenants=["acme"], actions=["bank.transfer"],
                                           created_by=tess).worker_token
        services.enqueue_job(job_id="t-1", tenant="acme", action="bank.transfer", payload={"cents": 100})
        lease = services.claim_job(job_id="t-1", worker=tokens.holder_name(token, "w-1"))
        services.begin_side_effect(lease=lease)
        services.record_unknown(lease=lease, reason="the bank did not answer")

        assert reconcile_job(job_id="t-1").applied == "awaiting_approval"
        request = ApprovalRequest.objects.get(job__job_id="t-1")
        assert (request.requested_by, request.requested_by_actor) == (tess, "reconciler")
        with pytest.raises(approvals.ApprovalRefused, match="four eyes: tess requested this approval"):
            approvals.approve(request_id=request.pk, user=tess, note="my worker's transfer")
        approvals.approve(request_id=request.pk, user=approver, note="the bank has no trace of it")
    finally:
        _registry.pop("bank.transfer")
