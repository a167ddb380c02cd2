"""The quick benchmark runs on every build, on the same code paths as the full one, so it cannot rot."""

import json
import subprocess
import sys

import pytest

from tests.processes import ROOT

pytestmark = pytest.mark.slow


def test_the_quick_benchmark_measures_every_section(tmp_path):
    report_path = tmp_path / "bench.json"
    # Each throughput measurement for 0.3 s, not the quick run's 1.5 s: the sections make their jobs
    # in proportion (most of the run's time went to making 2,300 pending jobs per worker per
    # measurement), and every measuring loop does at least one cycle or call before it looks at the
    # clock, so each rate the test asserts on is measured and can only be above 0 if the path worked.
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "bench", "--quick", "--seconds", "0.3",
                           "--json", str(report_path)], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert [row["workers"] for row in report["cycles"]] == [1, 4]
    for row in report["cycles"]:
        assert row["ledger_cycles_per_s"] > 0 and row["pgbench_tps"] > 0
    # The search's write cost: the same cycle and enqueue with its indexes and trigger, with the
    # trigram indexes only (the word indexes' share), and without them.
    assert [row["search_indexes"] for row in report["search_index_cost"]] == ["with", "trigrams only", "without"]
    for row in report["search_index_cost"]:
        assert row["cycles_per_s"] > 0 and row["enqueues_per_s"] > 0 and row["wal_bytes_per_cycle"] > 0
    assert [row["workers"] for row in report["http"]] == [1, 4]
    for row in report["http"]:  # over HTTP (gunicorn as runstack runs it) and in-process, by id and claim-next
        assert min(row["in_process_per_s"], row["http_per_s"], row["in_process_next_per_s"], row["http_next_per_s"]) > 0
    # Batched steps (N = 1, 10, 50) in-process and over HTTP, 1 and 4 processes, with what each costs.
    assert [(r["way"], r["processes"], r["batch"]) for r in report["batch"]] == [
        (way, p, n) for p in (1, 4) for n in (1, 10, 50) for way in ("in_process", "http")]
    for row in report["batch"]:
        assert row["effects_per_s"] > 0 and row["commits_per_effect"] > 0 and row["wal_bytes_per_effect"] > 0, row
    e2e = report["end_to_end"]
    assert e2e["bare_jobs_per_s"] > 0 and e2e["ledger_jobs_per_s"] > 0 and e2e["worker_rss_mb_end"] > 0
    assert report["reconciliation"]["decisions"] == report["reconciliation"]["jobs"]
    assert report["reconciliation"]["webhook_settled"] == report["reconciliation"]["jobs"]
    for run in ("small_run", "large_run"):
        pages = report["scale"][run]["pages"]
        assert {p["page"] for p in pages} == {"/", "/?range=1h", "/?range=7d", "/queue/", "/jobs/{job_id}/", "/audit/",
                                              "/search/?q={near}", "/search/?q={shared}", "/search/?q={middle}",
                                              "/search/?q={email}", "/search/?q={answer}", "/audit/?q={email}"}
        assert {s["query"] for s in report["scale"][run]["selection"]} == {"search", "search by a payload value",
                                                                           "sweeper", "reconciler"}
        assert all(p["status"] == 200 for p in pages), pages
    # At the larger size every selection query reads through an index (on the small history's few
    # pages a sequential scan is the cheaper plan, and PostgreSQL rightly takes it).
    assert [s["query"] for s in report["scale"]["large_run"]["selection"] if s["seq_scan"]] == []
    # Query counts do not grow with the history.
    small = {p["page"]: p["queries"] for p in report["scale"]["small_run"]["pages"]}
    large = {p["page"]: p["queries"] for p in report["scale"]["large_run"]["pages"]}
    # (The answer searched for is a finished job's of the small history: found at both sizes.)
    assert small == large
    drain = report["drain"]
    assert [(c["latency_ms"], c["concurrency"]) for c in drain["cells"]] == [(0, 16), (50, 16)]
    assert all(c["jobs"] > 0 and c["reconciled_per_s"] > 0 and c["raw_per_s"] > 0 for c in drain["cells"])
    assert all(c["python_per_s"] > 0 for c in drain["cells"])  # the Python path's apply, beside it
    for row in drain["drains"]:  # the whole backlog, on the pass's one connection (none per lookup thread)
        assert row["decisions"] == row["backlog"] > 0 and row["left"] == 0
        assert row["db_connections_max"] == 1, row
    hosts = drain["hosts"]  # three reconcile --loop processes on one backlog: each job looked up once
    assert hosts["checks"] == hosts["jobs_checked"] == hosts["backlog"] == sum(hosts["shares"])
    assert hosts["most_checks_per_job"] == 1
    # each process: its pass's one connection, and its ledger watch's heartbeat (the world watches)
    assert hosts["db_connections_max"] == 3 * 2, hosts
    # The rate-limited backlog drained, and the sandbox did refuse: the limit was really there.
    rate_limit = report["rate_limit"]
    assert rate_limit["requests"] >= rate_limit["jobs"] and rate_limit["seconds"] >= rate_limit["ideal_s"] * 0.9
    # MCP tool calls through the gateway and directly, 1 and 4 clients
    assert [row["clients"] for row in report["mcp"]["rows"]] == [1, 4]
    assert all(row["direct_calls_per_s"] > 0 and row["gateway_calls_per_s"] > 0 for row in report["mcp"]["rows"])
    # ... beside the peers a team would pick, each of which made calls, and the journal alone
    assert [(row["system"], row["clients"]) for row in report["mcp"]["systems"]] == [
        (system, clients) for clients in (1, 4)
        for system in ("direct", "reckon gateway", "passthrough", "fastmcp", "fastmcp-reused")]
    assert all(row["calls_per_s"] > 0 for row in report["mcp"]["systems"])
    assert all(row["wal_bytes_per_call"] > 0 for row in report["mcp"]["systems"] if row["system"] == "reckon gateway")
    journal = report["mcp"]["journal"]
    assert journal["calls"] > 0 and journal["p50_ms"] > 0 and journal["wal_bytes_per_call"] > 0
    # Reckon beside its peers, each counted in its own tables (bench/peers.py refuses a figure otherwise)
    assert [(row["system"], row["processes"]) for row in report["peers"]["rows"]] == [
        (system, 4) for system in ("reckon ledger cycle", "reckon enqueue + ledger cycle", "reckon batched cycle (50)",
                                   "agent-once", "effect-ledger",
                                   "procrastinate", "pgqueuer (batches of 10)")] + [("pgbench -N", 4)]
    for row in report["peers"]["rows"]:
        assert row["effects"] > 0 and row["effects_per_s"] > 0 and row["commits_per_effect"] > 0, row
        assert row["wal_bytes_per_effect"] > 0, row
    # The history: expired partitions archived beside the ledger cycle, their archives verified.
    assert [row["attempts"] for row in report["history"]["rows"]] == [1_000, 4_000]
    # ... the pages over a year of partitions at both sizes, and the chain trigger's lookup: index scans only
    assert len(report["history"]["pages"]["large_run"]["pages"]) == len(report["history"]["pages"]["small_run"]["pages"]) > 0
    assert [row["partitions"] >= count for row, count in zip(report["history"]["chain_lookup"], (2, 5), strict=True)] == [True, True]
    assert all(row["index_scans"] == row["partitions"] and row["other_scans"] == 0
               for row in report["history"]["chain_lookup"]), report["history"]["chain_lookup"]
    for row in report["history"]["rows"]:
        assert row["partitions_archived"] > 0 and row["events_archived"] > 0, row
        assert row["cycles_s_during"] > 0 and row["verify_events_per_s"] > 0 and row["event_mb_dropped"] > 0, row
        assert row["windows_during"] >= 1, row  # the cycle measured for as long as the pass ran
    assert set(report["targets"]) == {"cycle_ratio_at_4", "http_ratio_at_4", "e2e_ratio", "reconcile_ratio", "page_growth",
                                      "selection_growth", "drain_0ms_ratio", "drain_latency_ratio",
                                      "rate_limit_drain_vs_ideal", "rate_limit_share_429",
                                      "mcp_added_over_passthrough_and_journal_ms_at_1", "mcp_journal_p50_ms",
                                      "mcp_ratio_at_4", "batch_http_ratio_at_4", "peers_agent_once_ratio_at_4",
                                      "peers_pgbench_ratio_at_4", "retention_cycle_ratio",
                                      "history_page_growth", "ledger_watch_cycle_cost_at_4"}
