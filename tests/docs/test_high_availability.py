"""docs/deploying/high-availability.md's "Try it on one machine" runs as shown: its `ha-run` blocks, in
order, in one bash, from the checkout: a Patroni cluster of two nodes and an etcd come up, Reckon
runs a job on it, the primary is SIGKILLed, and a job enqueued afterwards runs on the new primary
with nothing of Reckon restarted."""

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.processes import ROOT

pytestmark = pytest.mark.slow

PAGE = ROOT / "docs" / "deploying" / "high-availability.md"
BLOCK = re.compile(r"<!-- check: ha-run -->\n```sh\n(.*?)```", re.S)
TRY_DIR = "/tmp/reckon-ha-try"  # the page's $HA


def run_blocks() -> list[str]:
    return BLOCK.findall(PAGE.read_text())


def _leftovers() -> list[int]:
    """Processes whose command line names the page's folder (its etcd, Patroni and PostgreSQL)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if TRY_DIR.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_the_pages_cluster_fails_over_under_reckon_as_shown():
    blocks = run_blocks()
    assert len(blocks) == 4, "setup, Reckon, the failover, the clean-up"
    env = {name: value for name, value in os.environ.items()
           if name not in ("DATABASE_URL", "DJANGO_ALLOW_ASYNC_UNSAFE") and not name.startswith("PG")}
    script = "set -euo pipefail\n" + "\n".join(blocks)
    try:
        done = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        assert re.search(r"sweeper: the database answers again after [\d.]+ s", done.stdout), done.stdout[-2000:]
    finally:
        for pid in _leftovers():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["rm", "-rf", TRY_DIR], check=False)
    assert not Path(TRY_DIR).exists()
