"""External worker processes, speaking only HTTP, run mail.external jobs against the real sandbox."""

import json
import os
import subprocess
import sys

import pytest

from ledger import services
from ledger.models import Job
from tests.api.conftest import issue
from tests.processes import ROOT, free_port

pytestmark = pytest.mark.django_db(transaction=True)

MAIL = {"to": "ops@example.com", "subject": "Report", "body": "attached"}


def _worker(live_server, provider, token: str, jobs: list[str], name: str, *options: str,
            mail: str | None = None) -> subprocess.Popen:
    """examples/http_worker.py as a process, its token in RECKON_API_TOKEN as the README has it."""
    return subprocess.Popen(
        [sys.executable, "examples/http_worker.py", "--url", live_server.url, "--mail", mail or provider.url,
         "--worker", name, "--deadline", "60", *options, *jobs],
        cwd=ROOT,
        env={**os.environ, "RECKON_API_TOKEN": token},
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


def test_an_answer_that_proves_nothing_happened_is_a_retryable_failure(live_server, provider):
    """503 (the provider did nothing) and a refused connection (nothing left): retried, never unknown."""
    token = issue(["acme"], ["mail.external"], name="mailer")
    services.enqueue_job(job_id="mail-503", tenant="acme", action="mail.external", payload=MAIL)
    status, _, body = provider.request("PUT", "/_admin/faults", {"rates": {"error_5xx": 1.0}})
    assert status == 200, body
    lines = _finish(_worker(live_server, provider, token, ["mail-503"], "busy"))
    assert lines[0] == {"job_id": "mail-503", "outcome": "failed", "verdict": "retryable", "status": "pending"}
    job = Job.objects.get(job_id="mail-503")
    assert job.status == "failed"  # every attempt was told 503: attempts exhausted, none unknown
    assert [(a.execution_state, a.error[:36]) for a in job.attempts.order_by("number")] == [
        ("failed", "503 from the mail provider: injected")] * 3
    assert provider.effects(marker="mail.external:mail-503")["count"] == 0
    provider.request("PUT", "/_admin/faults", {"rates": {"error_5xx": 0.0}})

    services.enqueue_job(job_id="mail-refused", tenant="acme", action="mail.external", payload=MAIL)
    refused = _finish(_worker(live_server, provider, token, ["mail-refused"], "nowhere",
                              mail=f"http://127.0.0.1:{free_port()}"))
    assert refused[0]["verdict"] == "retryable" and refused[-1]["status"] == "failed"
    attempts = Job.objects.get(job_id="mail-refused").attempts.order_by("number")
    assert all(a.execution_state == "failed" and "mail provider unreachable" in a.error for a in attempts)


def test_without_job_ids_it_pulls_the_next_jobs_and_says_why_it_stops(live_server, provider):
    token = issue(["acme"], ["mail.external"], name="mailer")
    for n in range(3):
        services.enqueue_job(job_id=f"pulled-{n}", tenant="acme", action="mail.external", payload=MAIL)
    lines = _finish(_worker(live_server, provider, token, [], "puller", "--idle", "1"))
    assert lines[:3] == [{"job_id": f"pulled-{n}", "outcome": "succeeded", "status": "succeeded"} for n in range(3)]
    assert lines[3]["reason"] == "no_work" and lines[3]["idle"].startswith("nothing claimed after")
    assert all(provider.effects(marker=f"mail.external:pulled-{n}")["count"] == 1 for n in range(3))
