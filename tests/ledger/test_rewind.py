"""The ledger watch notices, with no command run and within seconds, that the ledger went back in
time: a real `sweep_leases --loop` process watches the test database while it is pg_dumped, moves
on, and is pg_restored under it; the process enters recovery by itself."""

import json
import sys
import time
from pathlib import Path

import pytest

from ledger.models import Job, LedgerEvent, RecoveryWindow
from ledger.rewind import Seen, compare
from ledger.runtime import run_job
from tests.conftest import make_job
from tests.processes import ROOT, ManagedProcess, database_url_of_tests, wait_for
from tests.reconciliation.helpers import INVOICE, MAIL
from tests.reconciliation.test_restore import _pg

INV, MSG = "billing.create_invoice", "mail.send"


def test_a_position_behind_or_another_system_is_lost_history_and_a_new_timeline_alone_is_not():
    seen = Seen("7001", 1, 40, {"a": 12, "b": 35, "c": 40}, complete_above=10)
    assert compare(None, Seen("7001", 1, 5)) is None  # nothing remembered yet
    assert compare(seen, Seen("7001", 2, 41)) is None  # a clean switchover
    behind = compare(seen, Seen("7001", 2, 30))
    assert behind is not None and behind.touched == ["b", "c"]  # the jobs of the lost events
    assert compare(seen, Seen("7001", 1, 8)).touched is None  # lost beyond memory: every unfinished job
    assert compare(seen, Seen("9999", 1, 400)).touched is None  # another database altogether


def _remembered(folder: Path) -> Seen | None:
    files = list(folder.glob("ledger-*.json"))
    return Seen(**json.loads(files[0].read_text())) if files else None


def _newest_event() -> int:
    return LedgerEvent.objects.order_by("-id").values_list("id", flat=True).first()


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_restore_under_a_running_process_is_noticed_in_seconds_and_held(provider, tmp_path):
    folder = tmp_path / "watch"
    env = {"DATABASE_URL": database_url_of_tests(), "PYTHONUNBUFFERED": "1", "RECKON_LEDGER_WATCH": "true",
           "RECKON_LEDGER_WATCH_DIR": str(folder), "RECKON_LEDGER_WATCH_INTERVAL_S": "0.5"}
    make_job("done", action=INV, payload=INVOICE)
    assert run_job("done") == "succeeded"
    make_job("queued", action=MSG, payload=MAIL)  # queued at the backup point, run after it
    with ManagedProcess([sys.executable, str(ROOT / "manage.py"), "sweep_leases", "--loop", "--interval", "0.2"],
                        env=env, log_name="ledger-watch") as watcher:
        wait_for(lambda: (_remembered(folder) or Seen()).position >= _newest_event(), timeout=30,
                 message="the watch to remember the ledger")
        backup = tmp_path / "ledger.dump"
        _pg("pg_dump", "-Fc", "-f", str(backup))
        assert run_job("queued") == "succeeded"  # sent after the backup
        make_job("new", action=MSG, payload=MAIL)
        assert run_job("new") == "succeeded"  # created and sent after the backup
        wait_for(lambda: _remembered(folder).position >= _newest_event(), timeout=30,
                 message="the watch to see the work after the backup")
        assert RecoveryWindow.objects.count() == 0  # nothing lost so far: no false alarm

        _pg("pg_restore", "--clean", "--if-exists", "--single-transaction", str(backup))
        restored = time.monotonic()
        window = wait_for(lambda: RecoveryWindow.objects.filter(cause="rollback_detected").first(), timeout=30,
                          message="the watch to notice the restore")
        noticed = time.monotonic() - restored
        assert noticed < 10, f"noticed after {noticed:.1f} s"
        assert "lost history" in watcher.output()
    lost = window.evidence
    assert lost["found"]["position"] < lost["remembered"]["position"] and lost["lost_events"] > 0
    assert lost["forgotten_jobs"] == 1 and lost["forgotten_sample"] == ["new"]  # not in the restored ledger
    assert Job.objects.get(job_id="queued").recovery_pending  # touched in the lost window: held
    assert not Job.objects.get(job_id="done").recovery_pending  # finished before the backup
    assert run_job("queued") == "refused:under_recovery"
    make_job("new", action=MSG, payload=MAIL)  # its agent retries the forgotten key
    assert Job.objects.get(job_id="new").recovery_pending
    assert run_job("new") == "refused:under_recovery"
    for job_id in ("queued", "new"):
        assert provider.effects(marker=f"{MSG}:{job_id}")["count"] == 1  # never a second message
