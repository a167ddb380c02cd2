"""The ledger reaches the reconciler only through the hook the reconciliation app registers
(ledger.hooks): work that becomes unknown queues a pass when its change commits, never before."""

import pytest
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from reconciliation.tasks import reconcile_until_idle
from tests.reconciliation.helpers import MAIL, unknown_job

pytestmark = pytest.mark.django_db


def queued_passes() -> list:
    tasks = [SignedPackage.loads(row.payload) for row in OrmQ.objects.order_by("id")]
    return [task["func"] for task in tasks if task["name"] == "reconcile_until_idle"]


def test_unknown_work_queues_a_reconciliation_pass_when_its_change_commits(settings,
                                                                           django_capture_on_commit_callbacks):
    settings.RECKON_DISPATCH = True
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        unknown_job("hook-1", "mail.send", MAIL)
        assert queued_passes() == []  # nothing before the commit
    assert len(callbacks) == 1
    assert queued_passes() == [reconcile_until_idle]


def test_without_dispatch_nothing_is_queued(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        unknown_job("hook-2", "mail.send", MAIL)
    assert callbacks == [] and queued_passes() == []
