"""The reduced failure-injection matrix, on every build: every scenario once, fixed seed.

One run per matrix point: each scenario injects its failure into real processes and is checked
for duplicates, losses, stale writes and its own expectations as in every run of `make chaos`
(which repeats them 50 times). The 409 scenario runs 36 jobs in its one run, as many as its three
runs of 12 did, so that its figures (kills, 409s "in progress", all settled) stay as sure to occur.

`manage.py chaos` builds its own scratch world (PostgreSQL cluster, sandbox, qclusters), so
killing PostgreSQL there cannot hurt this test run's database.
"""

import json
import subprocess
import sys

import pytest

from chaos.scenarios import SCENARIOS
from tests.processes import ROOT

pytestmark = pytest.mark.slow

SEED = 20261129


def test_every_scenario_recovers_with_no_duplicate_no_loss_and_no_stale_write(tmp_path):
    report = tmp_path / "chaos.json"
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "chaos", "--runs-per-point", "1",
                           "--jobs", "36", "--seed", str(SEED), "--json", str(report)],
                          cwd=ROOT, capture_output=True, text=True, timeout=1200)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"chaos failed (seed {SEED}):\n{output[-6000:]}"
    summary = {row["scenario"]: row for row in json.loads(report.read_text())["summary"]}
    assert set(summary) == set(SCENARIOS)
    for name, row in summary.items():
        assert row["runs"] == 1 and row["passed"] == 1, (name, row)
        assert row["duplicate_effects"] == 0 and row["lost_jobs"] == 0 and row["stale_writes_accepted"] == 0
    # The 409 scenario did what it says: workers were killed, the provider answered 409 "in progress"
    # after drops, those attempts went unknown, and the webhook reconciler settled every one of them.
    seen = summary["provider_409_in_progress"]["figures"]
    assert seen["kills"] > 0 and seen["in_progress_409"] > 0, seen
    assert seen["unknown"] >= seen["in_progress_409"] and seen["settled"] == seen["unknown"], seen
    assert seen["duplicates"] == 0 and seen["succeeded"] + seen["failed"] == seen["jobs"], seen
    # The batched worker was killed with a whole batch claimed (before its begin) and with a whole batch
    # sent (before its results): each of those jobs ended with one effect (checked above for every job).
    batched = summary["batched_worker_killed"]["figures"]
    runs = summary["batched_worker_killed"]["runs"]  # a batch of 4 killed at each point, every run
    assert batched["killed_after_claim"] == batched["killed_after_send"] == runs * 4, batched
