"""Issue 25, finding 4: a lease belongs to the token that claimed it.

Two tokens whose scopes overlap: the second cannot see the first's lease owner or fencing token,
and cannot renew, begin, finish or fail the first's attempt even when it knows them."""

from __future__ import annotations

import pytest

from api.models import WorkerToken
from ledger import services
from ledger.models import LedgerEvent
from tests.api.conftest import ApiClient, issue, lease_body, ledger_state
from tests.conftest import latest_attempt

pytestmark = pytest.mark.django_db

STEPS = [("lease/renew", {}), ("lease/begin", {}), ("lease/failure", {"error": "refused"}),
         ("lease/unknown", {"reason": "lost"}), ("lease/success", {"result_ref": "x"})]


@pytest.fixture
def two_tokens(db):
    services.enqueue_job(job_id="j", tenant="acme", action="reckon.echo", payload={})
    return ApiClient(issue(["acme"], ["reckon.echo"], name="team-a")), ApiClient(issue(["*"], ["*"], name="team-b"))


def test_another_token_does_not_see_the_lease_owner_or_fencing_token(two_tokens):
    a, b = two_tokens
    lease = a.post("/api/v1/jobs/j/claim", {"worker": "w1"}).json
    prefix = WorkerToken.objects.get(name="team-a").prefix
    assert lease["owner"] == f"w1 [token team-a {prefix}]"
    mine = a.get("/api/v1/jobs/j").json["attempts"][0]
    assert (mine["lease_owner"], mine["fencing_token"]) == (lease["owner"], lease["fencing_token"])
    theirs = b.get("/api/v1/jobs/j").json["attempts"][0]
    assert (theirs["lease_owner"], theirs["fencing_token"]) == ("", None)
    history = b.get("/api/v1/jobs/j/events").json
    claimed = next(event for event in history if event["kind"] == "claimed")
    assert claimed["actor"] == "another token's worker" and "fencing_token" not in claimed["evidence"]
    assert "w1" not in str(history)


@pytest.mark.parametrize("step, extra", STEPS)
def test_another_token_cannot_write_to_the_lease_even_knowing_it(two_tokens, step, extra):
    a, b = two_tokens
    lease = a.post("/api/v1/jobs/j/claim", {"worker": "w1"}).json
    if step in ("lease/success", "lease/unknown"):
        assert a.post("/api/v1/jobs/j/lease/begin", lease_body(lease)).status == 200
    before = ledger_state()
    for owner in (lease["owner"], "w1"):  # the owner as the claim answered it, or as the worker named itself
        answer = b.post(f"/api/v1/jobs/j/{step}", {**lease_body(lease), "owner": owner, **extra})
        assert answer.status == 409 and answer.json["error"]["code"] == "stale_lease"
    assert ledger_state() == before
    rejected = LedgerEvent.objects.filter(job__job_id="j", kind="late_write_rejected").last()
    assert rejected.actor.endswith(f"[token team-b {WorkerToken.objects.get(name='team-b').prefix}]")
    # The lease is still the first token's to finish.
    if step not in ("lease/success", "lease/unknown"):
        assert a.post("/api/v1/jobs/j/lease/begin", lease_body(lease)).status == 200
    assert a.post("/api/v1/jobs/j/lease/success", lease_body(lease, result_ref="r")).status == 200
    assert latest_attempt("j").execution_state == "succeeded"


def test_a_worker_may_name_itself_or_echo_the_owner_it_was_given(two_tokens):
    a, _ = two_tokens
    lease = a.post("/api/v1/jobs/j/claim", {"worker": "w1"}).json
    assert a.post("/api/v1/jobs/j/lease/begin", {**lease_body(lease), "owner": "w1"}).status == 200
    assert a.post("/api/v1/jobs/j/lease/success", lease_body(lease)).status == 200
