"""The quick benchmark runs on every build, on the same code paths as the full one, so it cannot rot."""

import json
import subprocess
import sys

import pytest

from tests.processes import ROOT

pytestmark = pytest.mark.slow


def test_the_quick_benchmark_measures_every_section(tmp_path):
    report_path = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "bench", "--quick", "--json", str(report_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert [row["workers"] for row in report["cycles"]] == [1, 4]
    for row in report["cycles"]:
        assert row["ledger_cycles_per_s"] > 0 and row["pgbench_tps"] > 0
    e2e = report["end_to_end"]
    assert e2e["bare_jobs_per_s"] > 0 and e2e["ledger_jobs_per_s"] > 0 and e2e["worker_rss_mb_end"] > 0
    assert report["reconciliation"]["decisions"] == report["reconciliation"]["jobs"]
    assert report["reconciliation"]["webhook_settled"] == report["reconciliation"]["jobs"]
    for run in ("small_run", "large_run"):
        pages = report["scale"][run]["pages"]
        assert {p["page"] for p in pages} == {"/", "/?range=7d", "/queue/", "/jobs/{job_id}/", "/audit/"}
        assert all(p["status"] == 200 for p in pages), pages
        assert all(not s["seq_scan"] for s in report["scale"][run]["selection"]), report["scale"][run]["selection"]
    # Query counts do not grow with the history.
    small = {p["page"]: p["queries"] for p in report["scale"]["small_run"]["pages"]}
    large = {p["page"]: p["queries"] for p in report["scale"]["large_run"]["pages"]}
    assert small == large
    assert set(report["targets"]) == {"cycle_ratio_at_4", "e2e_ratio", "reconcile_ratio", "page_growth",
                                      "selection_growth"}
