"""Pull-mode reconciliation over the API: agents claim unknown work of their actions and answer."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from api.models import WorkerToken
from approvals.models import ApprovalRequest
from ledger.actions import _registry
from ledger.declarations import load_actions_file
from ledger.models import Job, LedgerEvent
from reconciliation.models import ReconciliationCheck
from reconciliation.passes import reconcile_until_idle
from tests.api.conftest import ApiClient, issue
from tests.conftest import latest_attempt
from tests.reconciliation.helpers import assert_ledger_clean, unknown_job

pytestmark = pytest.mark.django_db

CLAIM = "/api/v1/reconciliations/claim"
PAYLOAD = {"amount_cents": 100}


@pytest.fixture
def pull_actions(tmp_path):
    path = tmp_path / "actions.toml"
    path.write_text("""
[actions."pull.refund"]
executor = "external"
reversible = true
queryable = true
reconciler = "external"
reconciliation_lease = 30

[actions."pull.wire"]
executor = "external"
reversible = false
queryable = true
reconciler = "external"
""")
    load_actions_file(path, required=True)
    yield
    _registry.pop("pull.refund")
    _registry.pop("pull.wire")


def _outcome(api: ApiClient, claimed: dict, **answer):
    return api.post(f"/api/v1/reconciliations/{claimed['reconciliation_id']}/outcome",
                    {"agent": "agent-1", **answer})


def test_an_agent_claims_unknown_work_and_its_answer_closes_the_job(api, pull_actions):
    unknown_job("r1", "pull.refund", PAYLOAD)
    claimed = api.post(CLAIM, {"agent": "agent-1"})
    assert claimed.status == 201
    assert claimed.json["job"]["job_id"] == "r1" and claimed.json["attempt"]["execution"] == "unknown"
    assert api.post(CLAIM, {"agent": "agent-2"}).status == 204  # leased: nobody else gets it
    answered = _outcome(api, claimed.json, outcome="confirmed", reason="refund re_9 found", result_ref="re_9")
    assert answered.status == 200 and answered.json["applied"] == "succeeded"
    assert latest_attempt("r1").result_ref == "re_9"
    check = ReconciliationCheck.objects.get(job__job_id="r1")
    token = WorkerToken.objects.get(name="all")
    answered_as = f"agent-1 [token all {token.prefix}]"
    assert (check.reconciler, check.outcome, check.evidence["agent"]) == (f"external agent {answered_as}",
                                                                         "confirmed", answered_as)
    # The outcome is recorded under the agent's and the token's name, not "reconciler".
    assert LedgerEvent.objects.get(job__job_id="r1", kind="reconciled_confirmed").actor == answered_as
    assert_ledger_clean()


def test_reckons_own_reconciler_leaves_pull_mode_work_to_the_agents(pull_actions):
    unknown_job("r2", "pull.refund", PAYLOAD)
    assert reconcile_until_idle() == []
    assert Job.objects.get(job_id="r2").status == "needs_reconciliation"
    assert not ReconciliationCheck.objects.exists()


def test_not_found_follows_the_same_rules(api, pull_actions):
    unknown_job("r3", "pull.refund", PAYLOAD)
    claimed = api.post(CLAIM, {"agent": "agent-1"}).json
    no_reason = _outcome(api, claimed, outcome="not_found")
    assert no_reason.json["applied"].startswith("retry in")  # proves nothing: back-off
    Job.objects.filter(job_id="r3").update(next_check_at=None)
    claimed = api.post(CLAIM, {"agent": "agent-1"}).json
    replayed = _outcome(api, claimed, outcome="not_found", reason="no refund with this key at the PSP")
    assert replayed.json["applied"] == "replayed" and latest_attempt("r3").number == 2
    unknown_job("w1", "pull.wire", PAYLOAD)
    claimed = api.post(CLAIM, {"agent": "agent-1"}).json
    assert _outcome(api, claimed, outcome="not_found", reason="no wire").json["applied"] == "awaiting_approval"
    assert ApprovalRequest.objects.filter(job__job_id="w1", status="pending").exists()
    assert_ledger_clean()


def test_an_answer_after_the_lease_moved_on_is_refused_and_counted_not_written(api, pull_actions):
    unknown_job("r4", "pull.refund", PAYLOAD)
    first = api.post(CLAIM, {"agent": "agent-1"}).json
    with connection.cursor() as cursor:  # agent-1 is slow: its lease runs out
        cursor.execute("UPDATE ledger_job SET next_check_at = clock_timestamp() - interval '1 second' "
                       "WHERE job_id = 'r4'")
    second = api.post(CLAIM, {"agent": "agent-2"}).json
    assert second["reconciliation_id"] != first["reconciliation_id"]
    late = _outcome(api, first, outcome="not_found", reason="nothing there")
    assert late.status == 409 and late.json["error"]["code"] == "answer_refused"
    assert "its reconciliation lease moved on" in late.json["error"]["message"]
    events = LedgerEvent.objects.filter(job__job_id="r4").count()
    for _ in range(5):  # a retry loop with a big body writes nothing to the history
        again = _outcome(api, first, outcome="not_found", reason="nothing there", evidence={"blob": "x" * 100_000})
        assert again.status == 409
    assert LedgerEvent.objects.filter(job__job_id="r4").count() == events
    assert not LedgerEvent.objects.filter(kind="reconciliation_answer_refused").exists()
    assert WorkerToken.objects.get(name="all").answers_refused == 6
    assert latest_attempt("r4").number == 1  # the late "not found" replayed nothing
    assert api.post(f"/api/v1/reconciliations/{second['reconciliation_id']}/outcome",
                    {"agent": "agent-2", "outcome": "confirmed", "reason": "found"}).json["applied"] == "succeeded"
    assert_ledger_clean()


@pytest.mark.django_db(transaction=True)
def test_four_agents_racing_never_get_the_same_job(pull_actions, token):
    for n in range(6):
        unknown_job(f"race-{n}", "pull.refund", PAYLOAD)
    got: list[str] = []
    last: list[tuple[int, dict]] = []  # how each agent's loop ended
    barrier = threading.Barrier(4)

    def agent(name: str):
        client = ApiClient(token)
        barrier.wait()
        try:
            while (claimed := client.post(CLAIM, {"agent": name})).status == 201:
                got.append(claimed.json["job"]["job_id"])
            last.append((claimed.status, claimed.json))
        finally:
            connection.close()

    threads = [threading.Thread(target=agent, args=(f"agent-{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    # What the jobs looked like at the end, should an agent have stopped early.
    seen = list(Job.objects.order_by("job_id").values_list("job_id", "status", "next_check_at"))
    assert last == [(204, {})] * 4, seen  # each agent stopped because nothing was left
    assert sorted(got) == [f"race-{n}" for n in range(6)], (got, seen)  # each once


def test_a_token_sees_only_its_scope(pull_actions):
    unknown_job("r5", "pull.refund", PAYLOAD)
    elsewhere = ApiClient(issue(tenants=["globex"], name="globex-agent"))
    assert elsewhere.post(CLAIM, {"agent": "g"}).status == 204
    mine = ApiClient(issue(tenants=["acme"], name="acme-agent"))
    claimed = mine.post(CLAIM, {"agent": "a"}).json
    stranger = elsewhere.post(f"/api/v1/reconciliations/{claimed['reconciliation_id']}/outcome",
                              {"agent": "g", "outcome": "confirmed", "reason": "x"})
    assert stranger.status == 404 and stranger.json["error"]["code"] == "not_found"
    assert Job.objects.get(job_id="r5").status == "needs_reconciliation"


def test_an_answer_for_a_job_agents_do_not_reconcile_is_refused_and_changes_nothing(api, pull_actions):
    unknown_job("r6", "pull.refund", PAYLOAD)
    claimed = api.post(CLAIM, {"agent": "agent-1"}).json
    unknown_job("m6", "reckon.echo", PAYLOAD)  # reconciled by Reckon's own reconciler, not by agents
    job, attempt = Job.objects.get(job_id="m6"), latest_attempt("m6")
    forged = f"{job.pk}-{attempt.pk}-{attempt.version}-{claimed['reconciliation_id'].split('-')[3]}"
    events = LedgerEvent.objects.count()
    answer = api.post(f"/api/v1/reconciliations/{forged}/outcome",
                      {"agent": "agent-1", "outcome": "not_found", "reason": "trust me"})
    assert answer.status == 409 and answer.json["error"]["code"] == "answer_refused"
    assert "reckon.echo is not reconciled by agents" in answer.json["error"]["message"]
    assert LedgerEvent.objects.count() == events and latest_attempt("m6").execution_state == "unknown"
    assert WorkerToken.objects.get(name="all").answers_refused == 1


@pytest.mark.parametrize("body, reason", [
    ({"agent": "a", "tenants": []}, "tenants"),
    ({"agent": "a", "actions": []}, "actions"),
])
def test_a_claim_naming_no_tenant_or_no_action_is_refused_with_a_reason(api, pull_actions, body, reason):
    unknown_job("r7", "pull.refund", PAYLOAD)
    answer = api.post(CLAIM, body)
    assert answer.status == 400 and reason in answer.json["error"]["fields"]


def test_a_claim_naming_tenants_outside_the_tokens_scope_is_refused_with_a_reason(pull_actions):
    unknown_job("r8", "pull.refund", PAYLOAD)
    narrow = ApiClient(issue(tenants=["acme"], actions=["pull.refund"], name="narrow"))
    answer = narrow.post(CLAIM, {"agent": "a", "tenants": ["globex"]})
    assert answer.status == 403 and "may not reconcile for tenant(s) globex" in answer.json["error"]["message"]
    answer = narrow.post(CLAIM, {"agent": "a", "actions": ["reckon.echo"]})
    assert answer.status == 403 and "action(s) reckon.echo" in answer.json["error"]["message"]
    assert narrow.post(CLAIM, {"agent": "a", "tenants": ["acme"]}).status == 201


def test_a_reason_with_a_nul_is_refused_with_a_reason_not_a_500(api, pull_actions):
    """Found by Schemathesis following the claim's link to the answer: the database's JSON cannot hold NUL."""
    unknown_job("r9", "pull.refund", PAYLOAD)
    claimed = api.post(CLAIM, {"agent": "agent-1"}).json
    answer = _outcome(api, claimed, outcome="not_found", reason="\u00ae\u0000")
    assert answer.status == 400 and "no NUL" in answer.json["error"]["fields"]["reason"]
    assert latest_attempt("r9").execution_state == "unknown"
