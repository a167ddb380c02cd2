"""The safe worker loop: claim -> verify identity -> begin side effect -> call -> record.

Used by the django-q2 task `ledger.tasks.run_job` (and later by the HTTP worker API's
clients). Every state change goes through `ledger.services`.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid

from django.db import connection

from ledger import endpoints, hooks, rewind, services
from ledger.actions import Failed, Outcome, Succeeded, Unknown, get_action
from ledger.budget import BUDGET
from ledger.faults import fault_point
from ledger.models import Job

log = logging.getLogger("reckon.worker")


def worker_identity() -> str:
    """host:pid:nonce — unique per delivery, so two deliveries in one process never share a lease."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class LeaseKeeper:
    """Renews a lease from a background thread while a slow provider call runs.

    The keeper never writes results; if renewal is rejected it stops, and the worker's final
    write will be rejected by compare-and-set as well.
    """

    def __init__(self, lease: services.Lease, interval: float):
        self.lease = lease
        self.interval = interval
        self.lost: str = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                try:
                    self.lease = services.renew_lease(lease=self.lease)
                except services.StaleLease as stale:
                    self.lost = str(stale)
                    return
        finally:
            connection.close()


def run_job(job_id: str, *, worker: str | None = None) -> str:
    """Run one delivery of a job. Returns a short word for what happened (for logs and tests)."""
    worker = worker or worker_identity()
    rewind.tick()  # has the ledger gone back in time? (at most once a second; before this claim)
    try:
        lease = services.claim_job(job_id=job_id, worker=worker)
    except services.ClaimRefused as refused:
        log.info("job %s: claim refused (%s)", job_id, refused.reason)
        return f"refused:{refused.reason}"
    job = Job.objects.get(job_id=job_id)
    action = get_action(job.action)
    try:
        if action.observe_identity is not None:
            try:
                observed = action.observe_identity(job)
            except Exception as exc:  # we could not even look: nothing was sent, try again later
                services.record_failure(
                    lease=lease, error=f"could not observe identity: {exc}", retryable=True
                )
                return "failed"
            try:
                services.verify_identity(lease=lease, observed=observed)
            except services.IdentityMismatch:
                return "blocked"
        try:
            sent_to = endpoints.recorded(action.sent_to(job)) if action.sent_to is not None else ""
        except Exception as exc:  # nothing was sent: try again when the configuration can be read
            services.record_failure(lease=lease, error=f"could not say where the effect goes: {exc}", retryable=True)
            return "failed"
        if action.provider and (wait := BUDGET.circuit_wait(action.provider)) is not None:
            # Its circuit is open: no call would leave, so no attempt is spent on one.
            services.hold_for_provider(lease=lease, provider=action.provider, retry_in=wait,
                                       reason="its circuit is open")
            return "held:circuit"
        probe = bool(action.provider) and BUDGET.would_probe(action.provider)
        fault_point("before_call", job_id)
        services.begin_side_effect(lease=lease, sent_to=sent_to)
        renew_every = max(action.lease_ttl.total_seconds() / 3, 0.05)
        with LeaseKeeper(lease, renew_every) as keeper:
            outcome = _call(action.executor, job)
        hooks.provider_called()  # what this call taught the provider's budget, for the console
        if isinstance(outcome, Succeeded):
            fault_point("after_provider_success", job_id)
        result = _record(keeper.lease, outcome, probe=probe)
        fault_point("after_local_write", job_id)
        return result
    except services.StaleLease as stale:
        log.warning("job %s: %s", job_id, stale)
        return "stale"
    except services.GateClosed as held:
        log.warning("job %s: %s", job_id, held)
        return "held"


def _call(executor, job: Job) -> Outcome:
    try:
        outcome = executor(job)
    except Exception as exc:  # an executor that crashed mid-call proves nothing either way
        return Unknown(reason=f"executor raised {type(exc).__name__}: {exc}")
    if not isinstance(outcome, (Succeeded, Failed, Unknown)):
        return Unknown(reason=f"executor returned {outcome!r}, not an outcome")
    return outcome


def _record(lease: services.Lease, outcome: Outcome, *, probe: bool = False) -> str:
    if isinstance(outcome, Succeeded):
        services.record_success(lease=lease, result_ref=outcome.result_ref, evidence=outcome.evidence)
        return "succeeded"
    if isinstance(outcome, Failed):
        services.record_failure(
            lease=lease, error=outcome.error, retryable=outcome.retryable, evidence=outcome.evidence,
            retry_in=outcome.retry_in, probe=probe,
        )
        return "failed"
    services.record_unknown(lease=lease, reason=outcome.reason, evidence=outcome.evidence)
    return "unknown"
