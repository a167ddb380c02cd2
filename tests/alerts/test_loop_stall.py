"""A stalled reconciler is found on its own: with only the `reconcile --loop` process frozen
(SIGSTOP, real processes), the qcluster's once-a-minute pass keeps the dead-man gate open, and the
stalled-loop alert still reaches a real webhook receiver within its bound; let go (SIGCONT), it
resolves. A loop stopped cleanly (SIGTERM) takes its heartbeat with it and raises nothing."""

import signal
import sys
import time

import pytest

from alerts.evaluate import evaluate_alerts
from alerts.models import AlertState
from ledger.gate import gate_status
from ledger.models import LoopBeat
from tests.processes import ROOT, ManagedProcess, database_url_of_tests, qcluster, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

STALL_S = 3


def _loop(*argv: str, env: dict, name: str) -> ManagedProcess:
    return ManagedProcess([sys.executable, str(ROOT / "manage.py"), *argv],
                          env={"DATABASE_URL": database_url_of_tests(), **env}, log_name=name)


def test_only_the_reconciler_frozen_alerts_within_the_bound_and_resolves_when_it_runs(webhook, settings):
    settings.RECKON_ALERT_LOOP_STALL_S = STALL_S
    env = {"RECKON_ALERT_LOOP_STALL_S": str(STALL_S), "RECKON_SWEEP_INTERVAL": "0.5",
           "RECKON_ALERT_WEBHOOK_URL": webhook.url, "RECKON_CONSOLE_URL": "https://reckon.example.com"}
    cluster = qcluster(workers=1, env=env)
    sweeper = _loop("sweep_leases", "--loop", env=env, name="sweeper")
    reconciler = _loop("reconcile", "--loop", "--interval", "0.5", env=env, name="reconciler")
    watchdog = _loop("watchdog", "--loop", "--interval", "0.5", env=env, name="watchdog")
    processes = [cluster, sweeper, reconciler, watchdog]
    try:
        for process in (cluster, sweeper, reconciler):
            process.start()
        wait_for(lambda: gate_status().open and LoopBeat.objects.filter(loop="reconciler").exists()
                 and LoopBeat.objects.filter(loop="sweeper").exists(), timeout=90,
                 message="both loops to complete a pass")
        watchdog.start()
        wait_for(lambda: AlertState.objects.filter(condition="loop_stalled", firing=False).exists(), timeout=60,
                 message=f"the watchdog's first pass\n{watchdog.output()[-1500:]}")
        assert webhook.messages == []

        reconciler.process.send_signal(signal.SIGSTOP)  # the reconciler alone: the qcluster runs on
        frozen_at = time.monotonic()
        wait_for(lambda: webhook.messages, timeout=STALL_S + 30,
                 message=f"the stalled-loop alert\n{watchdog.output()[-1500:]}")
        took = time.monotonic() - frozen_at
        [fired] = webhook.texts
        assert fired.startswith("[Reckon] FIRING: A reconciler or sweeper loop stalled")
        assert "the reconciler loop" in fired and "has not completed a pass for" in fired
        assert gate_status().open  # the gate could not tell: another process's passes keep it open
        assert took < STALL_S + 15, f"{took:.1f} s from SIGSTOP to the alert"
        print(f"stalled reconciler to alert: {took:.1f} s (bound {STALL_S} s, watchdog every 0.5 s)")

        reconciler.process.send_signal(signal.SIGCONT)
        wait_for(lambda: len(webhook.messages) == 2, timeout=60,
                 message=f"the resolution once the reconciler runs again\n{watchdog.output()[-1500:]}")
        assert webhook.texts[1].startswith("[Reckon] RESOLVED: A reconciler or sweeper loop stalled")

        sweeper.stop()  # a clean stop (SIGTERM): its heartbeat goes with it, nothing stalls
        assert not LoopBeat.objects.filter(loop="sweeper").exists()
        assert LoopBeat.objects.filter(loop="reconciler").exists()
        evaluate_alerts()
        assert len(webhook.messages) == 2
    finally:
        if reconciler.process and reconciler.process.poll() is None:
            reconciler.process.send_signal(signal.SIGCONT)
        for process in processes:
            process.stop()
