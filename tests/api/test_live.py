"""The API against a live server, over real HTTP: concurrent enqueues, and Schemathesis."""

import json
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ledger.actions import _registry
from ledger.declarations import load_actions_file
from ledger.models import Job
from tests.api.conftest import issue
from tests.conftest import event_kinds, make_job
from tests.processes import ROOT
from tests.reconciliation.helpers import unknown_job

pytestmark = pytest.mark.django_db(transaction=True)


def _post(url: str, token: str, body: bytes) -> int:
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as refused:
        return refused.code


def test_of_twenty_concurrent_identical_enqueues_exactly_one_is_told_it_created_the_job(live_server):
    token = issue(name="racer")
    body = json.dumps({"job_id": "race", "tenant": "acme", "action": "reckon.echo", "payload": {"n": 1e23}})
    start = threading.Barrier(20)

    def enqueue(_):
        start.wait(timeout=30)  # all twenty threads send at once
        return _post(f"{live_server.url}/api/v1/jobs", token, body.encode())

    with ThreadPoolExecutor(max_workers=20) as pool:
        statuses = list(pool.map(enqueue, range(20)))

    assert sorted(statuses) == [200] * 19 + [201]
    assert Job.objects.filter(job_id="race").count() == 1
    assert event_kinds("race") == ["enqueued"] + ["enqueue_repeated"] * 19


# A pull-reconciled action with unknown work in two tenants: without one, the reconciliation
# endpoints answer 204 before they read the request's tenants, which is how the first runs (one
# token of every scope, no such action) missed a 500 the issue's reviewer found in every phase.
PULL_ACTIONS = """
[actions."fuzz.pull"]
executor = "external"
reversible = true
queryable = true
reconciler = "external"
reconciliation_lease = 2
"""


@pytest.fixture
def pull_work(tmp_path):
    path = tmp_path / "actions.toml"
    path.write_text(PULL_ACTIONS)
    load_actions_file(path, required=True)
    for n in range(40):
        unknown_job(f"pull-{n}", "fuzz.pull", {"n": n})
        if n % 2:
            Job.objects.filter(job_id=f"pull-{n}").update(tenant="beta")
    for n in range(60):  # pending work for claims of the next job, whose leases the links carry on
        make_job(f"next-{n}", action="fuzz.pull", tenant="acme" if n % 2 else "beta")
    yield
    _registry.pop("fuzz.pull")


# The batched steps (api/batches.py) have a run of their own (below), so that each run keeps its budget.
BATCH_OPERATIONS = ("beginSideEffects", "recordResults")


def _schemathesis(url: str, token: str, cwd: Path, *phases: str, only: tuple[str, ...] = (),
                  without: tuple[str, ...] = BATCH_OPERATIONS) -> tuple[str, float]:
    started = time.monotonic()
    selected = [*(a for operation in only for a in ("--include-operation-id", operation)),
                *(a for operation in without if not only for a in ("--exclude-operation-id", operation))]
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("st")),
            "--config-file",
            str(ROOT / "tests/api/schemathesis.toml"),
            "run",
            f"{url}/api/v1/openapi.json",
            "--header",
            f"Authorization: Bearer {token}",
            "--checks",
            "all",
            "--workers",
            "1",
            "--no-color",
            # Input generation slowed by a loaded machine is not a finding (it failed a CI-like run at
            # load 15); what is generated and every check on the answers stay as they are.
            "--suppress-health-check",
            "too_slow",
            *(["--phases", ",".join(phases)] if phases else []),
            *selected,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    summary = result.stdout[result.stdout.index("SUMMARY") :]
    assert "❌" not in summary and re.search(r"(\d+) generated, \1 passed", summary), summary
    return result.stdout, time.monotonic() - started


def _links(output: str) -> tuple[int, int]:
    covered, total = re.search(r"API Links:\s+(\d+) covered / \d+ selected / (\d+) total", output).groups()
    return int(covered), int(total)


def test_schemathesis_finds_no_failure_in_any_phase(live_server, tmp_path, settings, pull_work):
    """Every phase (coverage, fuzzing, stateful through the document's links) and every check:
    no 5xx, every answer documented and conforming, schema-valid data accepted, invalid refused."""
    settings.RECKON_CLAIM_WAITS = 0  # a claim of the next job answers at once, not after wait_seconds
    output, elapsed = _schemathesis(live_server.url, issue(name="schemathesis"), tmp_path)
    assert "Coverage" in output and "Fuzzing" in output and "Stateful" in output
    covered, total = _links(output)
    print(f"Schemathesis, a token of every scope: {covered} of {total} API links covered in {elapsed:.0f} s")
    # 11-13 of 32 measured in today's runs (17-22 before the batched claim: a claim with `max` over 1 answers
    # {"leases": [...]}, which the claim's links, written for one lease, do not resolve); 2/5 failed once at 11.
    assert covered >= total // 4, output[-3000:]
    assert elapsed < 300, f"Schemathesis took {elapsed:.0f} s"


def test_schemathesis_with_a_token_of_narrow_scope(live_server, tmp_path, settings, pull_work):
    """A token for one tenant and two actions: whatever it names outside its scope is refused with
    a reason (403, 404), never a 500 (a claim naming other tenants answered 500 before)."""
    settings.RECKON_CLAIM_WAITS = 0
    narrow = issue(["acme"], ["reckon.echo", "fuzz.pull"], name="schemathesis-narrow")
    output, elapsed = _schemathesis(live_server.url, narrow, tmp_path, "fuzzing", "stateful")
    covered, total = _links(output)
    print(f"Schemathesis, a token of one tenant: {covered} of {total} API links covered in {elapsed:.0f} s")
    assert elapsed < 300, f"Schemathesis took {elapsed:.0f} s"


def test_schemathesis_on_the_batched_steps(live_server, tmp_path, settings, pull_work):
    """Beginning and recording many leases at once: every item's shape is checked, each answer
    conforms, schema-valid batches are accepted (an item that names no lease of this token is
    refused in its place, never the whole request)."""
    settings.RECKON_CLAIM_WAITS = 0
    output, elapsed = _schemathesis(live_server.url, issue(name="schemathesis-batches"), tmp_path,
                                    "coverage", "fuzzing", only=BATCH_OPERATIONS)
    assert "Coverage" in output and "Fuzzing" in output
    assert "2 selected" in output, output[-3000:]
    assert elapsed < 300, f"Schemathesis took {elapsed:.0f} s"
