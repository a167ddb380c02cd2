"""A benchmark stopped with SIGTERM (a CI timeout, systemd, `kill`) leaves nothing running: its
scratch world's PostgreSQL, sandbox and servers are stopped as on Ctrl-C, and its folder removed."""

import contextlib
import os
import signal
import sys
from pathlib import Path

import pytest

from config.processes import ChildProcess, wait_until
from tests.processes import ROOT

pytestmark = pytest.mark.slow


def _processes_naming(folder: Path) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(folder) in command:
            found.append(f"{pid}: {command[:200]}")
    return found


@pytest.fixture
def scratch(scratch_folder):
    """The benchmark's TMPDIR: its world's folder is made here, so that its processes name it."""
    yield scratch_folder
    for line in _processes_naming(scratch_folder):  # what a failed run left: killed, so that it does not linger
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split(":")[0]), signal.SIGKILL)


def test_a_terminated_benchmark_stops_its_world_and_removes_its_folder(scratch, tmp_path):
    bench = ChildProcess([sys.executable, str(ROOT / "manage.py"), "bench", "--quick", "--only", "cycles"],
                         env={"TMPDIR": str(scratch)}, cwd=ROOT, log=tmp_path / "bench.log").start()
    try:
        # The first section has begun: the world (PostgreSQL, the sandbox) is up.
        wait_until(lambda: "== ledger cycle" in bench.output() or not bench.running(), timeout=120,
                   what="the benchmark's first section")
        assert bench.running(), bench.output_tail()
        assert _processes_naming(scratch), "the world's processes should run in the scratch folder"
        bench.process.send_signal(signal.SIGTERM)
        bench.process.wait(timeout=60)
    finally:
        bench.stop()
    assert bench.returncode != 0  # interrupted, not a finished run
    wait_until(lambda: not _processes_naming(scratch), timeout=30, what="the world's processes to stop")
    assert list(scratch.iterdir()) == [], "the world's folder is removed"
