"""The watchdog watches Reckon's own loops from a process of its own: with the qcluster, the sweeper
and the reconciler frozen (SIGSTOP, real processes), the dead-man gate closes and the alert reaches
a real webhook receiver; when they are let go (SIGCONT), the gate reopens and the resolution does."""

import os
import signal
import sys

import pytest

from alerts.models import AlertState
from ledger.gate import gate_status
from tests.processes import ROOT, ManagedProcess, database_url_of_tests, qcluster, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BOUND_S = 3


def _loop(*argv: str, env: dict, name: str) -> ManagedProcess:
    return ManagedProcess([sys.executable, str(ROOT / "manage.py"), *argv],
                          env={"DATABASE_URL": database_url_of_tests(), **env}, log_name=name)


def _signal_groups(processes, signum) -> None:
    for process in processes:
        os.killpg(process.pid, signum)  # the whole group: qcluster's workers and sentinel too


def test_the_watchdog_alerts_when_the_loops_freeze_and_again_when_they_resume(webhook, settings):
    settings.RECKON_GATE_BOUND_S = BOUND_S  # what this process reads to see the gate
    env = {"RECKON_GATE_BOUND_S": str(BOUND_S), "RECKON_SWEEP_INTERVAL": "0.5",
           "RECKON_ALERT_WEBHOOK_URL": webhook.url, "RECKON_CONSOLE_URL": "https://reckon.example.com"}
    loops = [qcluster(workers=1, env=env), _loop("sweep_leases", "--loop", env=env, name="sweeper"),
             _loop("reconcile", "--loop", "--interval", "0.5", env=env, name="reconciler")]
    watchdog = _loop("watchdog", "--loop", "--interval", "0.5", env=env, name="watchdog")
    try:
        for process in loops:
            process.start()
        wait_for(lambda: gate_status().open, timeout=90, message="both loops to complete a pass")
        watchdog.start()
        wait_for(lambda: AlertState.objects.filter(condition="gate_closed", firing=False).exists(), timeout=60,
                 message=f"the watchdog's first pass\n{watchdog.output()[-1500:]}")
        assert webhook.messages == []  # the loops run: nothing to say

        _signal_groups(loops, signal.SIGSTOP)
        wait_for(lambda: webhook.messages, timeout=BOUND_S + 30,
                 message=f"the alert with the loops frozen\n{watchdog.output()[-1500:]}")
        [fired] = webhook.texts
        assert fired.startswith("[Reckon] FIRING: Dead-man gate closed: Reckon's own loops stopped")
        assert "has not completed a pass" in fired and "Held (0): https://reckon.example.com/" in fired

        _signal_groups(loops, signal.SIGCONT)
        wait_for(lambda: len(webhook.messages) == 2, timeout=60,
                 message=f"the resolution once the loops run again\n{watchdog.output()[-1500:]}")
        assert webhook.texts[1].startswith("[Reckon] RESOLVED: Dead-man gate closed: Reckon's own loops stopped")
        assert gate_status().open
        # The firing alert came from the watchdog (the qcluster's schedule was frozen with the loops);
        # the resolution from whichever evaluator saw it first (the row lock sends it once).
        assert "FIRING gate_closed: sent by webhook" in watchdog.output()
    finally:
        _signal_groups([p for p in loops if p.process and p.process.poll() is None], signal.SIGCONT)
        for process in [watchdog, *loops]:
            process.stop()
