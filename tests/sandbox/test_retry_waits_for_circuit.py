"""Retries wait for the provider: with the sandbox's vault answering every call "503 ... nothing was
done" (a failure its action declares: retried, not unknown), a real qcluster and a real sweeper
loop spend no attempt while the vault's circuit is open. A job that reaches a worker then is handed
back before its side effect, not spent, and starts when the circuit lets a call through. When the
fault ends, every job succeeds: the provider's blip leaves no job failed and no one to ask."""

import sys

import pytest
from django.db.models import Max

from ledger.invariants import find_violations
from ledger.models import Attempt, Job, LedgerEvent
from tests.conftest import make_job, sandbox_env
from tests.processes import ROOT, ManagedProcess, database_url_of_tests, qcluster, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

COOLDOWN_S = 3.0
FAILURES = 2
JOBS = 6


def _statuses() -> dict[str, str]:
    return dict(Job.objects.filter(job_id__startswith="rot-").values_list("job_id", "status"))


def test_no_attempt_is_spent_while_the_circuit_is_open_and_the_blip_leaves_no_job_failed(provider, settings):
    settings.RECKON_DISPATCH = True
    env = {**sandbox_env(provider), "RECKON_PROVIDER_CIRCUIT_FAILURES": str(FAILURES),
           "RECKON_PROVIDER_CIRCUIT_COOLDOWN_S": str(COOLDOWN_S), "RECKON_SWEEP_INTERVAL": "0.2"}
    status, _, body = provider.request("PUT", "/_admin/faults", {"rates": {"error_5xx": 1.0}})
    assert status == 200, body
    cluster = qcluster(workers=1, env=env)  # one worker process: one budget, one circuit
    sweeper = ManagedProcess([sys.executable, str(ROOT / "manage.py"), "sweep_leases", "--loop"],
                             env={"DATABASE_URL": database_url_of_tests(), **env}, log_name="sweeper")
    try:
        cluster.start()
        sweeper.start()
        for n in range(JOBS):
            make_job(f"rot-{n}", action="vault.rotate_credential", payload={"name": f"db-{n}"})
        # The fault lasts until the circuit has opened and held work back at least three times.
        wait_for(lambda: LedgerEvent.objects.filter(kind="side_effect_held", job__job_id__startswith="rot-").count()
                 >= 3 and LedgerEvent.objects.filter(kind="failed").count() >= FAILURES + 1, timeout=90,
                 message=f"the circuit to open and hold work\n{cluster.output()[-2000:]}")
        status, _, body = provider.request("PUT", "/_admin/faults", {"rates": {}})
        assert status == 200, body
        wait_for(lambda: set(_statuses().values()) == {"succeeded"}, timeout=120,
                 message=f"every rotation to succeed once the fault ends: {_statuses()}\n{cluster.output()[-2000:]}")
    finally:
        sweeper.stop()
        cluster.stop()

    started = list(LedgerEvent.objects.filter(kind="side_effect_started").order_by("at").values_list("at", flat=True))
    failed = list(LedgerEvent.objects.filter(kind="failed").order_by("at").values_list("at", "note"))
    assert all("proves nothing was done" in note for _, note in failed)
    # After the first FAILURES failures in a row the circuit is open: each later call is its one
    # probe per cool-down, so no two calls that failed start closer than the cool-down.
    later_starts = [at for at in started if at > failed[FAILURES - 1][0]]
    for (failed_at, _), next_start in zip(failed[FAILURES - 1:], later_starts, strict=False):
        assert (next_start - failed_at).total_seconds() >= COOLDOWN_S * 0.9, (failed_at, next_start)
    held = LedgerEvent.objects.filter(kind="side_effect_held").count()
    spent = Attempt.objects.filter(job__job_id__startswith="rot-", side_effect_state__in=["not_found", "confirmed"])
    most = Attempt.objects.filter(job__job_id__startswith="rot-").aggregate(n=Max("number"))["n"]
    print(f"{JOBS} jobs: {len(failed)} calls failed, {held} attempts held for the circuit (not spent), "
          f"{spent.count()} attempts spent in all, at most {most} attempts for one job")
    assert set(_statuses().values()) == {"succeeded"}  # the blip left no job failed and no one to ask
    assert spent.count() == JOBS + len(failed)  # every attempt spent was a call that reached the vault
    assert provider.effects(marker="vault.rotate_credential:rot-0")["count"] == 1
    assert not [f for f in find_violations() if f.count]
