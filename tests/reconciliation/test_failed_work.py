"""Failed work has ways out: retry as is, retry with a corrected payload (a new attempt under the
same job and key, the change and its author in the history), or close. An irreversible action
asks a second person first, as a replay does; a refused decision leaves the ledger untouched."""

import pytest

from approvals import services as approvals
from approvals.models import ApprovalRequest
from ledger import runtime, services
from ledger.models import Attempt, Job, LedgerEvent
from reconciliation import decisions
from tests.conftest import _persona, event_kinds, latest_attempt, make_job
from tests.reconciliation.helpers import assert_ledger_clean, unknown_job

pytestmark = pytest.mark.django_db


def failed_echo(job_id="f1", payload=None) -> Job:
    """A job the provider refused: its only attempt failed, nothing was done."""
    make_job(job_id, payload=payload or {"to": "ann@@example", "fail": "400: malformed address"})
    assert runtime.run_job(job_id, worker="w") == "failed"
    return Job.objects.get(job_id=job_id)


def failed_irreversible(job_id="v1") -> Job:
    make_job(job_id, action="vault.rotate_credential", payload={"name": "db"})
    lease = services.claim_job(job_id=job_id, worker="w")
    services.record_failure(lease=lease, error="403: no such credential")
    return Job.objects.get(job_id=job_id)


def _decide(decision, job_id, user, note="the address was mistyped", **extra):
    return decisions.decide(decision, job_id=job_id, version=latest_attempt(job_id).version, user=user, note=note,
                            **extra)


def _ledger(job_id):
    """Everything a refused decision must leave as it was."""
    job = Job.objects.get(job_id=job_id)
    attempts = list(Attempt.objects.filter(job=job).order_by("number").values())
    return job.status, job.payload, attempts, LedgerEvent.objects.filter(job=job).count()


def test_a_failed_job_offers_retry_retry_with_a_payload_and_close(operator):
    job = failed_echo()
    assert decisions.allowed_decisions(job) == ["retry_failed", "retry_corrected", "close_failed"]


def test_retry_as_is_opens_one_more_attempt_with_the_same_key_beyond_the_policy(operator):
    job = failed_echo(payload={"fail": "503 once"})
    assert job.policy["max_attempts"] == 3  # the refusal was not retryable: attempt 1 of 3 ended the job
    _decide("retry_failed", "f1", operator, note="provider fixed")
    job.refresh_from_db()
    first, second = job.attempts.order_by("number")
    assert job.status == "pending" and (first.execution_state, second.execution_state) == ("failed", "not_started")
    assert event_kinds("f1")[-2:] == ["operator_retried_failed", "attempt_opened"]
    retried = LedgerEvent.objects.get(job=job, kind="operator_retried_failed")
    assert (retried.actor, retried.actor_type, retried.note) == ("olga", "operator", "provider fixed")
    assert retried.evidence == {"attempt": 1, "payload_corrected": False}
    opened = LedgerEvent.objects.get(job=job, kind="attempt_opened", actor="olga")
    assert opened.evidence["idempotency_key"] == job.idempotency_key == "reckon.echo:f1"
    assert_ledger_clean()


def test_a_retry_is_granted_even_when_every_attempt_was_used(operator):
    make_job("x1", payload={"n": 1})
    for number in (1, 2, 3):
        lease = services.claim_job(job_id="x1", worker="w")
        services.record_failure(lease=lease, error=f"429 rate limited ({number})", retryable=True)
    assert Job.objects.get(job_id="x1").status == "failed" and event_kinds("x1")[-1] == "attempts_exhausted"
    _decide("retry_failed", "x1", operator, note="rate limit lifted")
    assert latest_attempt("x1").number == 4
    assert runtime.run_job("x1", worker="w") == "succeeded"
    assert_ledger_clean()


def test_retry_with_a_corrected_payload_records_the_change_and_its_author_then_runs_it(operator):
    failed_echo()
    corrected = '{"to": "ann@example.com"}'
    _decide("retry_corrected", "f1", operator, note="typo in the address", payload=corrected)
    job = Job.objects.get(job_id="f1")
    assert job.payload == {"to": "ann@example.com"} and job.status == "pending"
    assert event_kinds("f1")[-3:] == ["operator_corrected_payload", "operator_retried_failed", "attempt_opened"]
    change = LedgerEvent.objects.get(job=job, kind="operator_corrected_payload")
    assert (change.actor, change.actor_type, change.note) == ("olga", "operator", "typo in the address")
    assert change.evidence == {
        "before": {"to": "ann@@example", "fail": "400: malformed address"},
        "after": {"to": "ann@example.com"},
        "changed": ["fail", "to"],
    }
    assert runtime.run_job("f1", worker="w") == "succeeded"
    assert latest_attempt("f1").result_ref == "echo:reckon.echo:f1"  # the same key on the new attempt
    assert_ledger_clean()


@pytest.mark.parametrize(("payload", "why"), [
    ('{"to": ', "not valid JSON"),
    ("[1, 2]", "must be a JSON object, got list"),
    ("", "not valid JSON"),
    ('{"to": "ann@@example", "fail": "400: malformed address"}', "the payload is unchanged"),
])
def test_a_bad_payload_edit_is_explained_and_nothing_changes(operator, payload, why):
    failed_echo()
    before = _ledger("f1")
    with pytest.raises(decisions.DecisionRefused, match=why):
        _decide("retry_corrected", "f1", operator, payload=payload)
    assert _ledger("f1") == before


def test_close_ends_a_failed_job_for_good(operator):
    failed_echo()
    _decide("close_failed", "f1", operator, note="customer gave up")
    job = Job.objects.get(job_id="f1")
    assert job.status == "cancelled" and latest_attempt("f1").execution_state == "failed"
    event = LedgerEvent.objects.filter(job=job).latest("id")
    assert (event.kind, event.before["job"], event.after["job"]) == ("operator_closed_failed", "failed", "cancelled")
    assert decisions.allowed_decisions(job) == []
    assert_ledger_clean()


@pytest.mark.parametrize("decision", ["retry_failed", "retry_corrected", "close_failed"])
def test_failed_work_decisions_are_refused_on_other_jobs_and_change_nothing(provider, operator, decision):
    unknown_job("u1", "mail.send", {"to": "ann@example.com"})
    before = _ledger("u1")
    with pytest.raises(decisions.DecisionRefused, match="only a failed job can be retried or closed"):
        _decide(decision, "u1", operator, payload='{"to": "bob@example.com"}')
    assert _ledger("u1") == before


def test_a_decision_on_a_job_that_moved_on_is_refused_as_stale(operator, db):
    failed_echo()
    colleague = _persona("otto", "operators")
    version = latest_attempt("f1").version
    _decide("close_failed", "f1", colleague, note="duplicate of f2")
    before = _ledger("f1")
    with pytest.raises(decisions.StaleDecision, match="otto closed this failed job"):
        decisions.decide("retry_failed", job_id="f1", version=version, user=operator, note="try again")
    status, payload, attempts, events = _ledger("f1")
    # Nothing changed state; the loser's note is kept as a comment, the one event added.
    assert (status, payload, attempts, events) == (*before[:3], before[3] + 1)
    assert LedgerEvent.objects.filter(job__job_id="f1").latest("id").kind == "job_commented"


def test_no_retry_while_an_earlier_attempt_is_unknown(operator):
    """The invariant, checked by the decision itself: a history that somehow holds an unknown
    attempt behind a failed one (written here by hand; the transition layer never writes it)."""
    job = failed_echo()
    Attempt.objects.filter(job=job, number=1).update(number=2)
    Attempt.objects.create(job=job, number=1, execution_state="unknown", side_effect_state="ambiguous",
                           delivery_state="acknowledged")
    before = _ledger("f1")
    with pytest.raises(decisions.DecisionRefused, match="attempt 1 is unknown: no retry may run"):
        _decide("retry_failed", "f1", operator)
    assert _ledger("f1") == before


def test_an_irreversible_retry_waits_for_a_second_person_bound_to_the_corrected_payload(operator, approver):
    failed_irreversible()
    _decide("retry_corrected", "v1", operator, note="wrong credential name", payload='{"name": "db-main"}')
    job = Job.objects.get(job_id="v1")
    assert job.status == "awaiting_approval" and job.attempts.count() == 1  # nothing runs on one person's word
    request = ApprovalRequest.objects.get(job=job)
    assert request.requested_by == operator
    assert request.payload_digest == approvals.payload_digest({"name": "db-main"})
    assert request.evidence["payload_before"] == {"name": "db"}
    assert request.evidence["retry_of_failed_job"]["by"] == "olga"
    with pytest.raises(approvals.ApprovalRefused, match="four eyes"):
        approvals.approve(request_id=request.pk, user=_operator_as_approver(operator), note="mine")
    approvals.approve(request_id=request.pk, user=approver, note="name checked in the vault")
    attempt = latest_attempt("v1")
    assert (attempt.number, attempt.execution_state) == (2, "not_started")
    assert Job.objects.get(job_id="v1").status == "pending"
    assert_ledger_clean()


def _operator_as_approver(user):
    from django.contrib.auth.models import Group

    user.groups.add(Group.objects.get_or_create(name="approvers")[0])
    return user


def test_an_approved_irreversible_retry_runs_even_after_the_last_attempt(operator, approver):
    make_job("v2", action="vault.rotate_credential", payload={"name": "db"})
    for _ in range(3):
        lease = services.claim_job(job_id="v2", worker="w")
        services.record_failure(lease=lease, error="429", retryable=True)
    assert Job.objects.get(job_id="v2").status == "failed"
    _decide("retry_failed", "v2", operator, note="limit lifted")
    approvals.approve(request_id=ApprovalRequest.objects.get(job__job_id="v2").pk, user=approver, note="ok")
    assert latest_attempt("v2").number == 4 and Job.objects.get(job_id="v2").status == "pending"
    assert_ledger_clean()
