"""A console with something on every page: jobs in every attempt state, made through the services.

The layout and accessibility tests look at each page in the states an operator meets: running,
retried, failed, unknown, handed to a human, blocked by an identity mismatch, waiting for an
approval, escalated, cancelled, confirmed, and a job whose history was tampered with.
"""

from __future__ import annotations

import pytest
from django.db import connection

from approvals import services as approvals
from approvals.models import ApprovalRequest
from ledger import services
from ledger.models import Job
from reconciliation import decisions
from reconciliation.passes import reconcile_job
from tests.conftest import latest_attempt, make_job
from tests.console.conftest import make_operator_job, make_unknown_job

# Worker names as a deployment has them (pod names): long, and they must wrap, not widen a table.
POD = "billing-worker-7f9c6d5b8-xk2lp"
# What providers answer: URLs and JSON without a space to break a line at.
RESULT = "https://billing.example.com/v1/invoices/in_1NqLx2eZvKYlo2C0a8m3?expand=lines.data.price"
DECLINED = ('card_declined: {"error":{"code":"card_declined","decline_code":"insufficient_funds",'
            '"request_log_url":"https://dashboard.example.com/logs/req_8f7d6c5b4a3e2d1c0b9a"}}')
NOTE = "Checked the provider's dashboard for this key: see the evidence"
# Where a worker sent an effect, when it is not where this deployment's reconciler asks.
SENT_TO = "https://billing.staging.example.com/v1/accounts/acct_1NqLx2eZvKYlo2C0a8m3"


def _version(job_id: str) -> int:
    return latest_attempt(job_id).version


def _tamper(job_id: str) -> None:
    """Rewrite one event behind Reckon's back, as someone with database access could."""
    event = Job.objects.get(job_id=job_id).events.order_by("id")[2]
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE ledger_ledgerevent DISABLE TRIGGER USER")
        cursor.execute("UPDATE ledger_ledgerevent SET note = 'nothing to see' WHERE id = %s", [event.pk])
        cursor.execute("ALTER TABLE ledger_ledgerevent ENABLE TRIGGER USER")


def populate(operator, approver) -> dict[str, str]:
    """Jobs in every attempt state; returns {what it shows: job id}. `operator` asks for one
    approval that `approver` rejects, and leaves another pending."""
    jobs = {}

    lease = services.claim_job(job_id=make_job("pay-running").job_id, worker=POD)
    services.begin_side_effect(lease=lease)
    jobs["running, leased, submitted"] = "pay-running"

    lease = services.claim_job(job_id=make_job("pay-retried").job_id, worker=POD)
    services.record_failure(lease=lease, error="provider answered 503: try again later", retryable=True)
    lease = services.claim_job(job_id="pay-retried", worker=POD + "-2")
    services.begin_side_effect(lease=lease)
    services.record_success(lease=lease, result_ref=RESULT)
    jobs["failed then confirmed"] = "pay-retried"

    lease = services.claim_job(job_id=make_job("pay-failed").job_id, worker=POD)
    services.begin_side_effect(lease=lease)
    services.record_failure(lease=lease, error=DECLINED)
    jobs["failed"] = "pay-failed"

    jobs["unknown, ambiguous"] = make_unknown_job("inv-unknown").job_id
    jobs["needs an operator, with checks"] = make_operator_job("rot-operator").job_id

    make_job("id-blocked", identity={"account": "prod-billing"})
    lease = services.claim_job(job_id="id-blocked", worker=POD)
    with pytest.raises(services.IdentityMismatch):
        services.verify_identity(lease=lease, observed={"account": "staging-billing"})
    jobs["blocked by an identity mismatch"] = "id-blocked"

    make_operator_job("rot-approval", payload={"name": "db-primary"})
    decisions.mark_not_found(job_id="rot-approval", version=_version("rot-approval"), user=operator, note=NOTE)
    jobs["awaiting approval"] = "rot-approval"

    make_operator_job("rot-rejected", payload={"name": "db-replica"})
    decisions.mark_not_found(job_id="rot-rejected", version=_version("rot-rejected"), user=operator, note=NOTE)
    rejected = ApprovalRequest.objects.get(job__job_id="rot-rejected")
    approvals.reject(request_id=rejected.pk, user=approver, note="The vault log shows a rotation at 03:12")
    jobs["approval rejected"] = "rot-rejected"

    make_unknown_job("inv-escalated")
    decisions.escalate(job_id="inv-escalated", version=_version("inv-escalated"), user=operator, note=NOTE)
    jobs["escalated"] = "inv-escalated"

    make_unknown_job("inv-cancelled")
    decisions.cancel_job(job_id="inv-cancelled", version=_version("inv-cancelled"), user=operator, note=NOTE)
    jobs["cancelled"] = "inv-cancelled"

    make_unknown_job("inv-confirmed")
    decisions.confirm_effect(job_id="inv-confirmed", version=_version("inv-confirmed"), user=operator, note=NOTE)
    jobs["confirmed by an operator"] = "inv-confirmed"

    make_job("inv-elsewhere", action="billing.create_invoice", payload={"customer": "c", "amount_cents": 1})
    lease = services.claim_job(job_id="inv-elsewhere", worker=POD)
    services.begin_side_effect(lease=lease, sent_to=SENT_TO)
    services.record_unknown(lease=lease, reason="connection dropped after the request was sent")
    reconcile_job(job_id="inv-elsewhere")  # asks this deployment's billing URL: unavailable, not asked
    jobs["sent elsewhere than reconciliation asks"] = "inv-elsewhere"

    _tamper(make_unknown_job("inv-tampered").job_id)
    jobs["history broken"] = "inv-tampered"
    return jobs
