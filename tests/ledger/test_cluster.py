"""Every deployment needs a qcluster: when none runs Reckon's schedules, the sweeper and
`check --deploy` say so."""

import sys
from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.models import Schedule

from config.apps import _a_cluster_runs_the_schedules
from ledger.cluster import cluster_problem

pytestmark = pytest.mark.django_db


def test_schedules_past_due_mean_no_cluster_runs_them():
    now = timezone.now()
    Schedule.objects.filter(name__startswith="reckon.").update(next_run=now + timedelta(seconds=30))
    assert cluster_problem(now=now) is None and _a_cluster_runs_the_schedules() == []

    Schedule.objects.filter(name="reckon.expire_due_approvals").update(next_run=now - timedelta(minutes=2))
    assert cluster_problem(now=now) is None  # a cluster looks every 30 s: a little late is not missing

    Schedule.objects.filter(name="reckon.expire_due_approvals").update(next_run=now - timedelta(minutes=7))
    problem = cluster_problem(now=now)
    assert problem.startswith("no qcluster has run Reckon's schedules for 7 minutes (reckon.expire_due_approvals "
                              "overdue): approval expiry, alerts and the overview's sampling run only in a cluster.")
    (warning,) = _a_cluster_runs_the_schedules()
    assert warning.id == "config.W001" and "no qcluster has run Reckon's schedules" in warning.msg


@pytest.mark.django_db(transaction=True)
def test_the_sweeper_loop_says_when_no_cluster_runs_the_schedules():
    from config.schedules import sync_schedules
    from tests.processes import ROOT, ManagedProcess, database_url_of_tests, wait_for

    sync_schedules()
    Schedule.objects.filter(name__startswith="reckon.").update(next_run=timezone.now() - timedelta(minutes=10))
    sweeper = ManagedProcess([sys.executable, str(ROOT / "manage.py"), "sweep_leases", "--loop", "--interval", "0.2"],
                             env={"DATABASE_URL": database_url_of_tests(), "PYTHONUNBUFFERED": "1"},
                             log_name="sweeper-cluster")
    with sweeper:
        wait_for(lambda: "warning: no qcluster has run Reckon's schedules for 10 minutes" in sweeper.output(),
                 timeout=60, message="the sweeper's warning")
        Schedule.objects.filter(name__startswith="reckon.").update(next_run=timezone.now() + timedelta(minutes=1))
        wait_for(lambda: "a qcluster runs the schedules again" in sweeper.output(), timeout=30,
                 message="the sweeper saying the cluster is back")
    assert sweeper.output().count("warning: no qcluster") == 1  # said once, not at every pass
