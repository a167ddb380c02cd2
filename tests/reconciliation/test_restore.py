"""A real restore: pg_dump the ledger, let the world move on, pg_restore, then `recover`.

The sandbox keeps its own store, so after the restore the ledger is behind the world; no
side effect may be repeated and every job must reach the right end.
"""

import os
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection

from ledger import services
from ledger.models import Job, LedgerEvent
from ledger.runtime import run_job
from tests.conftest import expire_lease, latest_attempt, make_job
from tests.reconciliation.helpers import INVOICE, MAIL, assert_ledger_clean

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BIN = Path("/usr/lib/postgresql/15/bin")
INV, MSG = "billing.create_invoice", "mail.send"


def _pg(tool: str, *args: str) -> None:
    s = connection.settings_dict
    connection.close()  # nothing of ours may hold a lock while the dump or restore runs
    command = [
        str(BIN / tool),
        "-h",
        s["HOST"],
        "-p",
        str(s["PORT"]),
        "-U",
        s["USER"] or "postgres",
        "-d",
        s["NAME"],
        *args,
    ]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PGPASSWORD": s["PASSWORD"] or ""},
    )
    assert done.returncode == 0, done.stderr


def test_after_a_restore_no_effect_is_repeated_and_every_job_ends_right(provider, tmp_path):
    make_job("done", action=MSG, payload=MAIL)
    assert run_job("done") == "succeeded"
    for job_id, action, payload in [
        ("inv-later", INV, INVOICE),
        ("mail-lost", MSG, MAIL),
        ("inv-idle", INV, INVOICE),
        ("mail-running", MSG, MAIL),
    ]:
        make_job(job_id, action=action, payload=payload)
    stale = services.claim_job(job_id="mail-running", worker="w-old")  # running at the backup point
    backup = tmp_path / "ledger.dump"
    _pg("pg_dump", "-Fc", "-f", str(backup))

    # After the backup, the world moves on.
    assert run_job("inv-later") == "succeeded"
    provider.request("PUT", "/_admin/faults", {"rates": {"drop_after_commit": 1.0}})
    assert run_job("mail-lost") == "unknown"  # sent, answer lost
    provider.request("PUT", "/_admin/faults", {"rates": {}})
    services.begin_side_effect(lease=stale)
    services.record_success(lease=stale, result_ref="sent-before-restore")
    from sandbox.demo_actions import send_mail

    send_mail(Job.objects.get(job_id="mail-running"))  # the old worker's effect
    effects_before = provider.effects()["by_marker"]

    _pg("pg_restore", "--clean", "--if-exists", "--single-transaction", str(backup))
    assert Job.objects.get(job_id="inv-later").status == "pending"  # the ledger forgot

    call_command("recover", "--window-minutes", "5", "--no-reconcile")
    held = set(Job.objects.filter(recovery_pending=True).values_list("job_id", flat=True))
    assert held == {"inv-later", "mail-lost", "inv-idle", "mail-running"}
    assert LedgerEvent.objects.filter(kind="recovery_started").count() == 4
    with pytest.raises(services.ClaimRefused, match="under recovery"):
        services.claim_job(job_id="inv-idle", worker="eager")
    with pytest.raises(services.LedgerError, match="under recovery"):
        services.begin_side_effect(lease=stale)  # valid in the restored ledger, yet held

    call_command("reconcile", "--once")
    expire_lease("mail-running")  # its worker is long gone
    services.sweep_expired_leases()
    call_command("reconcile", "--once")
    assert run_job("inv-idle") == "succeeded"
    for job_id in ("inv-later", "mail-lost", "mail-running"):
        assert run_job(job_id).startswith("refused")  # nothing left to run

    statuses = dict(Job.objects.values_list("job_id", "status"))
    assert set(statuses.values()) == {"succeeded"}, statuses
    assert latest_attempt("inv-later").number == 1 and latest_attempt("mail-lost").number == 1
    assert "recovery_released" in Job.objects.get(job_id="inv-idle").events.values_list("kind", flat=True)
    effects = provider.effects()["by_marker"]
    assert all(count == 1 for count in effects.values()), effects
    assert set(effects) == set(effects_before) | {f"{INV}:inv-idle"}
    assert_ledger_clean()
