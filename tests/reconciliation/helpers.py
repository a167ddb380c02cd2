"""Driving jobs and the sandbox into the states reconciliation must handle."""

from __future__ import annotations

from django.db.models.functions import Now

from ledger import services
from ledger.invariants import find_violations
from ledger.models import Job
from sandbox.testing import SandboxProcess
from tests.conftest import make_job

INVOICE = {"customer": "cus_1", "amount_cents": 1250, "currency": "EUR", "description": "Plan"}
MAIL = {"to": "ann@example.com", "subject": "Hello", "body": "Your order shipped"}
POST = {"body": "We are live"}
IDENTITY = {"profile": "brand-browser", "account": "@brand"}


def unknown_job(job_id: str, action: str, payload: dict, identity: dict | None = None, sent_to: str = "") -> Job:
    """A job whose first attempt submitted its side effect (to `sent_to`, if given) and then lost
    sight of it."""
    make_job(job_id, action=action, payload=payload, identity=identity)
    lease = services.claim_job(job_id=job_id, worker="worker-a")
    if identity:
        services.verify_identity(lease=lease, observed=identity)
    services.begin_side_effect(lease=lease, sent_to=sent_to)
    services.record_unknown(lease=lease, reason="connection dropped after sending")
    return Job.objects.get(job_id=job_id)


def make_due(job: Job | str) -> None:
    """Let a backed-off job's next check come due now (as the clock would)."""
    job_id = job.job_id if isinstance(job, Job) else job
    Job.objects.filter(job_id=job_id).update(next_check_at=Now())


def headers(key: str, **extra) -> dict:
    return {"Idempotency-Key": key, "X-Reckon-Marker": key, **extra}


def create_invoice(sandbox: SandboxProcess, key: str, payload: dict = INVOICE) -> dict:
    body = {**payload, "metadata": {"reckon_marker": key}}
    response = sandbox.request("POST", "/invoices", body, headers(key))
    assert response.status in (200, 201), response.json
    return response.json


def send_message(sandbox: SandboxProcess, key: str, payload: dict = MAIL) -> dict:
    response = sandbox.request("POST", "/messages", payload, headers(key))
    assert response.status == 201, response.json
    return response.json


def set_profile(sandbox: SandboxProcess, profile: str, account: str) -> None:
    response = sandbox.request("PUT", f"/_admin/profiles/{profile}", {"account": account})
    assert response.status == 200, response.json


def publish(
    sandbox: SandboxProcess, key: str, profile: str = "brand-browser", body: str = POST["body"]
) -> dict:
    response = sandbox.request(
        "POST", "/posts", {"body": body, "marker": key}, headers(key, **{"X-Profile": profile})
    )
    assert response.status == 201, response.json
    return response.json


def forget_keys(sandbox: SandboxProcess, forget: bool = True) -> None:
    assert sandbox.request("PUT", "/_admin/forget_keys", {"forget": forget}).status == 200


def assert_ledger_clean() -> None:
    violations = [f for f in find_violations() if f.count]
    assert not violations, violations
