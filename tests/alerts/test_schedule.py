"""Through a real django-q2 cluster: the schedules declared in config/schedules.py sample the
levels, count the events and send the alert, once, to the webhook receiver."""

from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.models import Schedule
from django_q.scheduler import scheduler

from alerts.models import AlertState, EventCount, LevelSample
from config.schedules import PREFIX
from tests.console.conftest import make_unknown_job
from tests.processes import qcluster, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_the_cluster_samples_the_levels_and_sends_the_alert_once(webhook):
    make_unknown_job("inv-1")
    env = {"RECKON_ALERT_WEBHOOK_URL": webhook.url, "RECKON_ALERT_UNKNOWN_AGE_S": "0",
           "RECKON_CONSOLE_URL": "https://reckon.example.com"}
    # Only the two schedules this test is about are due: the others would queue four more tasks
    # ahead of them on the one worker (on a busy machine that took over a minute).
    (Schedule.objects.filter(name__startswith=PREFIX)
     .exclude(name__in=[PREFIX + "sample_history", PREFIX + "evaluate_alerts"])
     .update(next_run=timezone.now() + timedelta(hours=1)))
    with qcluster(workers=1, env=env) as cluster:
        scheduler()  # what the cluster's sentinel does every 30 s: due schedules become tasks
        wait_for(lambda: webhook.messages and LevelSample.objects.exists(), timeout=60, interval=0.2,
                 message=f"the alert and the sample\n{cluster.output()[-1500:]}")
        wait_for(lambda: AlertState.objects.filter(condition="unknown_too_old", firing=True).exists(), timeout=10)
    [text] = webhook.texts
    assert text.startswith("[Reckon] FIRING: Unknown work older than its bound") and "(acme 1)" in text
    sample = LevelSample.objects.get()
    assert sample.unknown_work == 1
    assert EventCount.objects.get(kind="claimed").count == 1
