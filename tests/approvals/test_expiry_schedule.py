"""An approval request past its time is expired by the periodic work, and its job goes back to
an operator: no request holds a job in awaiting_approval forever.

The schedule comes from config/schedules.py (written into django-q2's table after migrate);
django-q2's own scheduler turns it into a task, and a real cluster runs it.
"""

import pytest
from django.db import connection
from django_q.models import Schedule
from django_q.scheduler import scheduler

from approvals.models import ApprovalRequest
from config.schedules import SCHEDULES
from ledger.models import Job
from reconciliation import decisions
from tests.conftest import latest_attempt
from tests.processes import qcluster, wait_for
from tests.reconciliation.helpers import assert_ledger_clean, unknown_job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_every_declared_schedule_is_in_django_q2s_table_and_nothing_else_of_ours():
    rows = {s.name: s.func for s in Schedule.objects.filter(name__startswith="reckon.")}
    assert rows == {s.name: s.func for s in SCHEDULES}
    assert "reckon.expire_due_approvals" in rows


def test_an_expired_request_is_closed_by_the_schedule_and_the_job_goes_to_an_operator(operator, approver):
    unknown_job("v1", "vault.rotate_credential", {"name": "db-password"})
    decisions.mark_not_found(job_id="v1", version=latest_attempt("v1").version, user=operator,
                             note="the vault's audit log shows no rotation")
    request = ApprovalRequest.objects.get(job__job_id="v1")
    with connection.cursor() as cursor:  # its time runs out
        cursor.execute("UPDATE approvals_approvalrequest SET expires_at = now() - interval '1 minute'")

    with qcluster(workers=1) as cluster:
        scheduler()  # what the cluster's sentinel does every 30 s: due schedules become tasks
        wait_for(lambda: ApprovalRequest.objects.get(pk=request.pk).status == "expired", timeout=60,
                 interval=0.2, message=f"the request to expire\n{cluster.output()[-1500:]}")

    job = Job.objects.get(job_id="v1")
    assert job.status == "needs_operator"
    closing = job.events.order_by("-id").first()
    assert (closing.kind, closing.actor_type, closing.actor) == ("approval_expired", "system", "approval-expiry")
    assert_ledger_clean()
