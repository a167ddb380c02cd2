"""External worker processes, speaking only HTTP, run mail.external jobs against the real sandbox."""

import json
import subprocess
import sys

import pytest

from ledger import services
from ledger.models import Job
from tests.api.conftest import issue
from tests.processes import ROOT

pytestmark = pytest.mark.django_db(transaction=True)

MAIL = {"to": "ops@example.com", "subject": "Report", "body": "attached"}


def _worker(live_server, provider, token: str, jobs: list[str], name: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "examples/http_worker.py",
            "--api",
            live_server.url,
            "--token",
            token,
            "--mail",
            provider.url,
            "--worker",
            name,
            "--deadline",
            "60",
            *jobs,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(process: subprocess.Popen) -> list[dict]:
    out, err = process.communicate(timeout=90)
    assert process.returncode == 0, out + err
    return [json.loads(line) for line in out.splitlines()]


def test_two_http_workers_send_each_message_exactly_once(live_server, provider):
    token = issue(["acme"], ["mail.external"], name="mailer")
    jobs = [f"mail-{n}" for n in range(6)]
    for job_id in jobs:
        services.enqueue_job(job_id=job_id, tenant="acme", action="mail.external", payload=MAIL)
    services.enqueue_job(
        job_id="mail-bad", tenant="acme", action="mail.external", payload={**MAIL, "to": "nobody"}
    )

    workers = [_worker(live_server, provider, token, [*jobs, "mail-bad"], name) for name in ("left", "right")]
    for worker in workers:
        _finish(worker)

    for job_id in jobs:
        job = Job.objects.get(job_id=job_id)
        assert job.status == "succeeded"
        assert provider.effects(key=job.idempotency_key)["count"] == 1
        assert job.attempts.get().result_ref.endswith("@sandbox.local>")  # the Message-ID
    assert Job.objects.get(job_id="mail-bad").status == "failed"
    assert provider.effects(marker="mail.external:mail-bad")["count"] == 0
    assert provider.effects()["duplicate_keys"] == []


def test_a_job_someone_else_finished_is_reported_as_not_run_here(live_server, provider):
    token = issue(["acme"], ["mail.external"], name="mailer")
    services.enqueue_job(job_id="mail-done", tenant="acme", action="mail.external", payload=MAIL)
    assert _finish(_worker(live_server, provider, token, ["mail-done"], "first"))[-1]["outcome"] == "succeeded"
    late = _finish(_worker(live_server, provider, token, ["mail-done"], "second"))
    assert late[-1]["outcome"].startswith("refused:") and late[-1]["status"] == "succeeded"
    assert late[-1]["note"] == "finished elsewhere: nothing ran here"
    assert provider.effects(marker="mail.external:mail-done")["count"] == 1


def test_a_dropped_response_is_unknown_and_never_sent_again(live_server, provider):
    token = issue(["acme"], ["mail.external"], name="mailer")
    services.enqueue_job(job_id="mail-drop", tenant="acme", action="mail.external", payload=MAIL)
    status, _, body = provider.request("PUT", "/_admin/faults", {"rates": {"drop_after_commit": 1.0}})
    assert status == 200, body

    lines = _finish(_worker(live_server, provider, token, ["mail-drop"], "dropper"))
    assert lines[-1] == {"job_id": "mail-drop", "outcome": "unknown", "status": "needs_reconciliation"}
    assert provider.effects(marker="mail.external:mail-drop")["count"] == 1

    provider.request("PUT", "/_admin/faults", {"rates": {"drop_after_commit": 0.0}})
    again = _finish(_worker(live_server, provider, token, ["mail-drop"], "retrier"))
    assert again[-1]["outcome"] == "refused:previous_attempt_unknown" and "note" not in again[-1]
    assert provider.effects(marker="mail.external:mail-drop")["count"] == 1


def test_a_worker_with_the_wrong_scope_touches_nothing(live_server, provider):
    token = issue(["beta"], ["mail.external"], name="beta-mailer")
    services.enqueue_job(job_id="mail-acme", tenant="acme", action="mail.external", payload=MAIL)
    process = _worker(live_server, provider, token, ["mail-acme"], "outsider")
    out, err = process.communicate(timeout=60)
    assert process.returncode == 1, err
    line = json.loads(out.splitlines()[-1])
    # Another tenant's job is no job to this worker: the same 404 as an id nobody used.
    assert line["outcome"] == "refused:not_found" and line["error"] == "404 not_found: no such job"
    assert Job.objects.get(job_id="mail-acme").status == "pending"
    assert provider.effects(marker="mail.external:mail-acme")["count"] == 0
