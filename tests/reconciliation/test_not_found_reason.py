"""A reconciler's not_found must say why a replay is safe; one that cannot is unavailable."""

import pytest

from ledger.actions import Action, register
from reconciliation.findings import Finding
from reconciliation.models import CheckOutcome, ReconciliationCheck
from reconciliation.passes import reconcile_job
from sandbox.demo_actions import send_mail
from tests.conftest import latest_attempt
from tests.reconciliation.helpers import MAIL, unknown_job

pytestmark = pytest.mark.django_db


def shrugging_reconciler(job, attempt):
    return Finding(CheckOutcome.NOT_FOUND, "   ")


def test_a_not_found_without_a_reason_is_taken_as_unavailable_and_nothing_is_replayed(provider):
    register(Action(name="test.mail_shrug", executor=send_mail, queryable=True,
                    reconciler="tests.reconciliation.test_not_found_reason.shrugging_reconciler"))
    job = unknown_job("shrug-1", "test.mail_shrug", MAIL)
    decision = reconcile_job(job_id=job.job_id)
    assert decision.outcome == CheckOutcome.UNAVAILABLE
    check = ReconciliationCheck.objects.get(job=job)
    assert check.outcome == "unavailable" and "without a stated reason" in check.error
    assert job.attempts.count() == 1
    assert latest_attempt("shrug-1").execution_state == "unknown"
