"""The worker loop over HTTP: every endpoint, and every refusal the ledger can give."""

import pytest

from ledger.models import Job
from tests.api.conftest import ApiClient, event_count, lease_body, ledger_state
from tests.conftest import event_kinds, expire_lease, latest_attempt

pytestmark = pytest.mark.django_db

ECHO = {"job_id": "j-1", "tenant": "acme", "action": "reckon.echo", "payload": {"n": 1}}


def _claim(api: ApiClient, job_id: str = "j-1", worker: str = "w-1") -> dict:
    answer = api.post(f"/api/v1/jobs/{job_id}/claim", {"worker": worker})
    assert answer.status == 201, answer.json
    return answer.json


def _as_token(worker: str) -> str:
    """The name a worker of the test's token (named "all") acts under."""
    from api.models import WorkerToken

    return f"{worker} [token all {WorkerToken.objects.get(name='all').prefix}]"


def _enqueued(api: ApiClient, **overrides) -> dict:
    answer = api.post("/api/v1/jobs", {**ECHO, **overrides})
    assert answer.status == 201, answer.json
    return answer.json


def test_it_enqueues_a_job_with_its_first_attempt(api):
    job = _enqueued(api)
    assert job["status"] == "pending" and job["idempotency_key"] == "reckon.echo:j-1"
    assert [a["execution"] for a in job["attempts"]] == ["not_started"]
    assert event_kinds("j-1") == ["enqueued"]


def test_it_returns_the_existing_job_when_enqueued_again(api):
    _enqueued(api)
    again = api.post("/api/v1/jobs", ECHO)
    assert again.status == 200 and again.json["job_id"] == "j-1"
    assert Job.objects.count() == 1


def test_it_refuses_the_same_job_id_for_different_work(api):
    _enqueued(api)
    answer = api.post("/api/v1/jobs", {**ECHO, "payload": {"n": 2}})
    assert answer.status == 409 and answer.json["error"]["code"] == "job_conflict"
    assert Job.objects.get().payload == {"n": 1}


def test_it_names_every_invalid_field(api):
    before = event_count()
    answer = api.post(
        "/api/v1/jobs", {"job_id": "a/b", "tenant": "", "action": 5, "payload": [], "colour": "red"}
    )
    assert answer.status == 400
    fields = answer.json["error"]["fields"]
    assert set(fields) == {"job_id", "tenant", "action", "payload", "colour"}
    assert "'/'" in fields["job_id"] and "empty" in fields["tenant"] and "unexpected" in fields["colour"]
    assert Job.objects.count() == 0 and event_count() == before


def test_it_refuses_an_unknown_action_with_the_known_ones(api):
    answer = api.post("/api/v1/jobs", {**ECHO, "action": "fax.send"})
    assert answer.status == 400 and "mail.send" in answer.json["error"]["fields"]["action"]


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"{", "not valid JSON"),
        (b"[1]", "must be a JSON object"),
        (b'{"job_id": NaN}', "not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b'{"job_id": "j", "tenant": "t", "action": "reckon.echo", "payload": {"a": "\\u0000"}}', "NUL"),
        (b'{"job_id": "\\ud800"}', "surrogates"),
        (b"[" * 5000 + b"]" * 5000, "nested"),
    ],
)
def test_it_refuses_bodies_postgres_could_not_store(api, raw, message):
    answer = api.post("/api/v1/jobs", raw=raw)
    assert answer.status == 400 and message in str(answer.json["error"])
    assert Job.objects.count() == 0


def test_it_refuses_bodies_over_the_limit_with_413(api, settings):
    settings.RECKON_API_MAX_BODY_BYTES = 1024
    answer = api.post("/api/v1/jobs", {**ECHO, "payload": {"text": "x" * 2000}})
    assert answer.status == 413 and answer.json["error"]["code"] == "body_too_large"
    assert Job.objects.count() == 0


def test_it_reads_a_job_and_its_attempts(api):
    _enqueued(api)
    _claim(api)
    job = api.get("/api/v1/jobs/j-1").json
    assert job["status"] == "running"
    assert (
        job["attempts"][0] | {"lease_owner": _as_token("w-1"), "fencing_token": 1, "delivery": "leased"}
        == job["attempts"][0]
    )


def test_unknown_jobs_and_paths_are_json_404(api):
    assert api.get("/api/v1/jobs/nope").status == 404
    assert api.post("/api/v1/jobs/nope/claim", {"worker": "w"}).status == 404
    assert api.get("/api/v1/jobs/%00").status == 404
    answer = api.get("/api/v1/nothing/here")
    assert answer.status == 404 and answer.json["error"]["code"] == "not_found"


def test_wrong_methods_are_405_with_allow(api):
    answer = api.call("DELETE", "/api/v1/jobs")
    assert answer.status == 405 and answer.headers["Allow"] == "POST"


def test_a_claim_returns_the_lease_and_the_work(api):
    _enqueued(api)
    lease = _claim(api)
    assert lease["owner"] == _as_token("w-1") and lease["fencing_token"] == 1 and lease["attempt"] == 1
    assert lease["expires_at"] and lease["job"]["idempotency_key"] == "reckon.echo:j-1"
    assert lease["job"]["payload"] == {"n": 1}


def test_a_duplicate_delivery_is_refused_with_its_reason(api):
    _enqueued(api)
    _claim(api)
    answer = api.post("/api/v1/jobs/j-1/claim", {"worker": "w-2"})
    assert answer.status == 409
    assert (
        answer.json["error"] | {"code": "claim_refused", "reason": "duplicate_delivery"}
        == answer.json["error"]
    )
    assert latest_attempt("j-1").lease_owner == _as_token("w-1")


def test_the_full_cycle_succeeds(api):
    _enqueued(api)
    lease = _claim(api)
    begun = api.post("/api/v1/jobs/j-1/lease/begin", lease_body(lease))
    assert begun.status == 200 and begun.json["attempt"]["side_effect"] == "submitted"
    done = api.post(
        "/api/v1/jobs/j-1/lease/success", lease_body(lease, result_ref="msg-1", evidence={"ok": 1})
    )
    assert done.status == 200 and done.json["status"] == "succeeded"
    attempt = latest_attempt("j-1")
    assert (attempt.execution_state, attempt.side_effect_state, attempt.result_ref) == (
        "succeeded",
        "confirmed",
        "msg-1",
    )
    assert event_kinds("j-1") == ["enqueued", "claimed", "side_effect_started", "succeeded"]


def test_renew_extends_the_lease(api):
    _enqueued(api)
    lease = _claim(api)
    renewed = api.post("/api/v1/jobs/j-1/lease/renew", lease_body(lease))
    assert renewed.status == 200 and renewed.json["expires_at"] >= lease["expires_at"]
    assert renewed.json["fencing_token"] == lease["fencing_token"]


def test_a_retryable_failure_queues_the_next_attempt(api):
    _enqueued(api)
    lease = _claim(api)
    answer = api.post(
        "/api/v1/jobs/j-1/lease/failure", lease_body(lease, error="smtp said 451", retryable=True)
    )
    assert answer.status == 200 and answer.json["status"] == "pending"
    assert answer.json["attempt"]["execution"] == "failed"
    assert latest_attempt("j-1").number == 2
    assert _claim(api, worker="w-2")["fencing_token"] == 2


def test_a_definitive_failure_fails_the_job(api):
    _enqueued(api)
    lease = _claim(api)
    answer = api.post("/api/v1/jobs/j-1/lease/failure", lease_body(lease, error="no such mailbox"))
    assert answer.status == 200 and answer.json["status"] == "failed"


def test_unknown_sends_the_job_to_reconciliation_and_blocks_retries(api):
    _enqueued(api)
    lease = _claim(api)
    api.post("/api/v1/jobs/j-1/lease/begin", lease_body(lease))
    answer = api.post("/api/v1/jobs/j-1/lease/unknown", lease_body(lease, reason="connection reset"))
    assert answer.status == 200 and answer.json["status"] == "needs_reconciliation"
    assert answer.json["attempt"]["side_effect"] == "ambiguous"
    refused = api.post("/api/v1/jobs/j-1/claim", {"worker": "w-2"})
    assert refused.status == 409 and refused.json["error"]["reason"] == "previous_attempt_unknown"


def test_an_identity_is_verified_before_the_side_effect(api):
    _enqueued(api, identity={"profile": "p1", "account": "acct"})
    lease = _claim(api)
    early = api.post("/api/v1/jobs/j-1/lease/begin", lease_body(lease))
    assert early.status == 409 and early.json["error"]["code"] == "invalid_transition"
    seen = api.post(
        "/api/v1/jobs/j-1/lease/identity", lease_body(lease, observed={"profile": "p1", "account": "acct"})
    )
    assert seen.status == 200 and seen.json["attempt"]["observed_identity"] == {
        "profile": "p1",
        "account": "acct",
    }
    assert api.post("/api/v1/jobs/j-1/lease/begin", lease_body(lease)).status == 200


def test_an_identity_mismatch_blocks_the_attempt(api):
    _enqueued(api, identity={"account": "acct"})
    lease = _claim(api)
    answer = api.post("/api/v1/jobs/j-1/lease/identity", lease_body(lease, observed={"account": "other"}))
    assert answer.status == 409 and answer.json["error"]["code"] == "identity_mismatch"
    assert latest_attempt("j-1").execution_state == "blocked"
    assert Job.objects.get().status == "blocked"


def test_results_before_begin_are_refused(api):
    _enqueued(api)
    lease = _claim(api)
    for step, body in (("success", {}), ("unknown", {"reason": "lost"})):
        answer = api.post(f"/api/v1/jobs/j-1/lease/{step}", lease_body(lease, **body))
        assert answer.status == 409 and answer.json["error"]["code"] == "invalid_transition"
    assert latest_attempt("j-1").side_effect_state == "not_attempted"


@pytest.mark.parametrize(
    "step, extra",
    [
        ("renew", {}),
        ("identity", {"observed": {}}),
        ("begin", {}),
        ("success", {}),
        ("failure", {"error": "x"}),
        ("unknown", {"reason": "x"}),
    ],
)
def test_a_stale_fencing_token_is_409_and_changes_nothing(api, step, extra):
    _enqueued(api)
    old = _claim(api, worker="slow")
    expire_lease("j-1")
    new = _claim(api, worker="fast")  # reclaims: attempt 1 dead-lettered, attempt 2 leased
    api.post("/api/v1/jobs/j-1/lease/begin", lease_body(new))
    before = ledger_state()
    answer = api.post(f"/api/v1/jobs/j-1/lease/{step}", lease_body(old, **extra))
    assert answer.status == 409 and answer.json["error"]["code"] == "stale_lease"
    assert "fencing token 1" in answer.json["error"]["message"]
    assert ledger_state() == before
    assert event_kinds("j-1")[-1] == "late_write_rejected"


def test_a_token_the_job_never_issued_and_a_wrong_owner_are_stale(api):
    _enqueued(api)
    lease = _claim(api)
    before = ledger_state()
    for body in (lease_body(lease, fencing_token=99), lease_body(lease, owner="impostor")):
        answer = api.post("/api/v1/jobs/j-1/lease/begin", body)
        assert answer.status == 409 and answer.json["error"]["code"] == "stale_lease"
    assert ledger_state() == before


def test_lease_writes_validate_their_fields(api):
    _enqueued(api)
    _claim(api)
    answer = api.post(
        "/api/v1/jobs/j-1/lease/failure", {"owner": "", "fencing_token": True, "retryable": "yes"}
    )
    assert answer.status == 400
    assert set(answer.json["error"]["fields"]) == {"owner", "fencing_token", "retryable", "error"}
    huge = api.post("/api/v1/jobs/j-1/lease/begin", {"owner": "w-1", "fencing_token": 2**70})
    assert (
        huge.status == 400 and huge.json["error"]["fields"]["fencing_token"] == f"must be at most {2**63 - 1}"
    )
