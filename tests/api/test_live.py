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

from ledger.models import Job
from tests.api.conftest import issue
from tests.conftest import event_kinds
from tests.processes import ROOT

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


def test_schemathesis_finds_no_failure_in_any_phase(live_server, tmp_path, settings):
    """Every phase (coverage, fuzzing, stateful through the document's links) and every check:
    no 5xx, every answer documented and conforming, schema-valid data accepted, invalid refused."""
    settings.RECKON_CLAIM_WAITS = 0  # a claim of the next job answers at once, not after wait_seconds
    token = issue(name="schemathesis")
    started = time.monotonic()
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("st")),
            "--config-file",
            str(ROOT / "tests/api/schemathesis.toml"),
            "run",
            f"{live_server.url}/api/v1/openapi.json",
            "--header",
            f"Authorization: Bearer {token}",
            "--checks",
            "all",
            "--workers",
            "1",
            "--no-color",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    summary = result.stdout[result.stdout.index("SUMMARY") :]
    assert "Coverage" in summary and "Fuzzing" in summary and "Stateful" in summary
    assert "❌" not in summary and re.search(r"(\d+) generated, \1 passed", summary), summary
    assert elapsed < 180, f"Schemathesis took {elapsed:.0f} s"
