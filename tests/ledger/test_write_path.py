"""One write path: every statement that changes a job or an attempt, or writes a ledger event,
is issued by the transition layer's batch (ledger/services/transitions.py and bulk.py).

A workload that goes through every kind of change — the worker loop and its refusals, the
sweeper, the dead-man gate, the reconciler, operators' decisions, approvals, a recovery hold —
runs with every SQL statement inspected: the first frame of our own code that issued a write to
those tables must be the layer's.
"""

import re
import traceback
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection

from approvals import services as approvals
from approvals.models import ApprovalRequest
from ledger import services
from ledger.actions import Action, _registry, register
from reconciliation import decisions
from reconciliation.passes import reconcile_job, reconcile_until_idle
from reconciliation.recovery import hold_for_recovery
from sandbox.demo_actions import send_mail
from tests.conftest import expire_lease, latest_attempt, make_job
from tests.reconciliation.helpers import INVOICE, MAIL, create_invoice, unknown_job

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
LAYER = {ROOT / "ledger" / "services" / "transitions.py", ROOT / "ledger" / "services" / "bulk.py"}
WRITES = re.compile(
    r'^\s*(UPDATE\s+"?ledger_(job|attempt)"?|INSERT\s+INTO\s+"?ledger_(attempt|ledgerevent)"?)', re.IGNORECASE
)


def _issuer() -> Path | None:
    """The innermost frame of the project's own code (not Django, not a library)."""
    for frame in reversed(traceback.extract_stack()):
        path = Path(frame.filename).resolve()
        if ROOT in path.parents and ".venv" not in path.parts and path != Path(__file__).resolve():
            return path
    return None


@pytest.fixture
def writes():
    """Every write to the ledger's tables, with the file of ours that issued it."""
    seen: list[tuple[str, Path]] = []

    def inspect(execute, sql, params, many, context):
        if found := WRITES.match(sql):
            write = f"UPDATE {found.group(2)}" if found.group(2) else f"INSERT {found.group(3)}"
            seen.append((write, _issuer()))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(inspect):
        yield seen


@pytest.fixture
def irreversible_mail(provider):
    register(Action(name="test.write_path_mail", executor=send_mail, reversible=False, queryable=True,
                    reconciler="sandbox.reconcilers.mail", lease_ttl=timedelta(seconds=30)))
    yield "test.write_path_mail"
    _registry.pop("test.write_path_mail")


def _worker_loop() -> None:
    make_job("w1")
    lease = services.claim_job(job_id="w1", worker="a")
    with pytest.raises(services.ClaimRefused):
        services.claim_job(job_id="w1", worker="b")  # a duplicate delivery
    lease = services.renew_lease(lease=lease)
    services.begin_side_effect(lease=lease)
    services.record_success(lease=lease, result_ref="r")
    make_job("w2", payload={"n": 2})
    lease = services.claim_job(job_id="w2", worker="a")
    services.record_failure(lease=lease, error="refused", retryable=True)
    lease = services.claim_job(job_id="w2", worker="a")
    services.begin_side_effect(lease=lease)
    expire_lease("w2")
    services.sweep_expired_leases()  # submitted, then lost: unknown
    with pytest.raises(services.StaleLease):
        services.record_success(lease=lease, result_ref="late")
    make_job("w3", identity={"account": "@a"})
    lease = services.claim_job(job_id="w3", worker="a")
    with pytest.raises(services.IdentityMismatch):
        services.verify_identity(lease=lease, observed={"account": "@b"})
    make_job("w4")
    services.claim_job(job_id="w4", worker="a")
    expire_lease("w4")
    services.sweep_expired_leases()  # not attempted: reclaimed, next attempt


def _gate(settings) -> None:
    settings.RECKON_GATE_BOUND_S = 30
    make_job("g1", action="vault.rotate_credential", payload={"name": "db"})
    with pytest.raises(services.ClaimRefused):
        services.claim_job(job_id="g1", worker="a")
    services.complete_pass("sweeper")
    services.complete_pass("reconciler")  # the gate reopens: the held job is released
    settings.RECKON_GATE_BOUND_S = 0


def _reconciliation_and_people(provider, irreversible_mail, operator, approver) -> None:
    unknown_job("r1", "billing.create_invoice", INVOICE)
    create_invoice(provider, "billing.create_invoice:r1")
    unknown_job("r2", "mail.send", MAIL)  # never sent: replayed
    unknown_job("r3", irreversible_mail, MAIL)  # never sent, irreversible: approval
    reconcile_until_idle()
    request = ApprovalRequest.objects.get(job__job_id="r3")
    approvals.approve(request_id=request.pk, user=approver, note="ok")
    for job_id, decide in (("d1", decisions.confirm_effect), ("d2", decisions.mark_not_found),
                           ("d3", decisions.escalate), ("d4", decisions.cancel_job),
                           ("d5", decisions.retry_reconciliation)):
        unknown_job(job_id, "mail.send", MAIL)
        decide(job_id=job_id, version=latest_attempt(job_id).version, user=operator, note="decided")
    reconcile_job(job_id="d5")
    for job_id, close in (("a1", approvals.reject), ("a2", approvals.withdraw)):
        unknown_job(job_id, irreversible_mail, MAIL)
        decisions.mark_not_found(job_id=job_id, version=latest_attempt(job_id).version, user=operator, note="x")
        close(request_id=ApprovalRequest.objects.get(job__job_id=job_id).pk, user=approver, note="no")
    for job_id, decide, extra in (("f1", decisions.retry_failed, {}), ("f2", decisions.close_failed, {}),
                                  ("f3", decisions.retry_corrected, {"payload": {"n": 3}})):
        make_job(job_id, payload={"fail": "refused"})
        services.record_failure(lease=services.claim_job(job_id=job_id, worker="a"), error="refused")
        decide(job_id=job_id, version=latest_attempt(job_id).version, user=operator, note="decided", **extra)
    make_job("h1")
    hold_for_recovery(window_minutes=5)
    reconcile_job(job_id="h1")


def test_every_change_of_a_job_or_an_attempt_comes_from_the_transition_layer(
    writes, settings, provider, irreversible_mail, operator, approver
):
    _worker_loop()
    _gate(settings)
    _reconciliation_and_people(provider, irreversible_mail, operator, approver)
    outside = sorted({(statement, str(issuer.relative_to(ROOT))) for statement, issuer in writes
                      if issuer not in LAYER and "tests" not in issuer.parts})
    assert outside == []
    # The workload did reach every kind of write, through the layer.
    assert {write for write, issuer in writes if issuer in LAYER} == {
        "UPDATE job", "UPDATE attempt", "INSERT attempt", "INSERT ledgerevent"
    }
