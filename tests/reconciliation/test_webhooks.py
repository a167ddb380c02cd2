"""Webhook reconcilers: a team's own endpoint, asked over real HTTP with a signed request.

The receiver here is a real HTTP server (a thread of the test process) that checks every
signature with `verify_signature` and answers as each test tells it to.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from reckon_client import WEBHOOK_SIGNATURE_HEADER, WebhookSignatureError, sign_webhook, verify_webhook

from approvals.models import ApprovalRequest
from ledger.actions import _registry
from ledger.declarations import load_actions_file
from ledger.models import Job, LedgerEvent
from reconciliation.models import ReconciliationCheck
from reconciliation.passes import reconcile_job
from tests.conftest import latest_attempt
from tests.reconciliation.helpers import assert_ledger_clean, make_due, unknown_job

pytestmark = pytest.mark.django_db

HANG = object()  # an answer that never comes within the webhook's timeout
SECRET = "s" * 40
OLD_SECRET = "o" * 40


class Receiver:
    """A webhook endpoint: verifies each request, records it, answers what `answer` returns."""

    def __init__(self, secrets: list[str]):
        self.secrets, self.requests, self.refused = secrets, [], []
        # A receiver told to hang holds its answer until the test has seen Reckon give up waiting.
        self.released = threading.Event()
        self.answer = lambda question: (200, {"outcome": "confirmed", "reason": "seen", "result_ref": "r"})
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    verify_webhook(body, self.headers.get(WEBHOOK_SIGNATURE_HEADER, ""), receiver.secrets)
                except WebhookSignatureError as exc:
                    receiver.refused.append(str(exc))
                    status, reply = 401, {"error": str(exc)}
                else:
                    question = json.loads(body)
                    receiver.requests.append(question)
                    answer = receiver.answer(question)
                    if answer is HANG:
                        receiver.released.wait(timeout=30)
                        answer = (200, {"outcome": "confirmed", "reason": "late"})
                    status, reply = answer
                data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/reckon"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver(monkeypatch, tmp_path, provider):
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("TEST_WEBHOOK_SECRET_OLD", OLD_SECRET)
    endpoint = Receiver([SECRET])
    path = tmp_path / "actions.toml"
    path.write_text(f"""
[actions."hook.charge"]
executor = "python:sandbox.demo_actions.create_invoice"
reversible = true
queryable = true
reconciler = "webhook"
webhook_url = "{endpoint.url}"
webhook_secrets = ["TEST_WEBHOOK_SECRET", "TEST_WEBHOOK_SECRET_OLD"]
webhook_timeout = 1

[actions."hook.wire"]
executor = "external"
reversible = false
queryable = true
reconciler = "webhook"
webhook_url = "{endpoint.url}"
webhook_secrets = ["TEST_WEBHOOK_SECRET"]
webhook_timeout = 1
""")
    load_actions_file(path, required=True)
    yield endpoint
    endpoint.close()
    _registry.pop("hook.charge")
    _registry.pop("hook.wire")


PAYLOAD = {"customer": "cus_1", "amount_cents": 100, "currency": "EUR"}


def test_the_signature_holds_for_each_secret_and_nothing_else():
    body = b'{"job_id":"j"}'
    header = sign_webhook(body, [SECRET, OLD_SECRET])
    verify_webhook(body, header, [SECRET])  # the receiver that knows the new secret
    verify_webhook(body, header, [OLD_SECRET])  # and one that still knows the old one
    with pytest.raises(WebhookSignatureError, match="no signature matches"):
        verify_webhook(body, header, ["w" * 40])
    with pytest.raises(WebhookSignatureError, match="no signature matches"):
        verify_webhook(body + b" ", header, [SECRET])  # the exact body is signed
    stale = sign_webhook(body, [SECRET], at=int(time.time()) - 301)
    with pytest.raises(WebhookSignatureError, match="older than 300 s"):
        verify_webhook(body, stale, [SECRET])
    with pytest.raises(WebhookSignatureError, match="malformed"):
        verify_webhook(body, "v1=abc", [SECRET])


def test_confirmed_closes_the_job_and_the_check_records_the_request_and_the_answer(receiver):
    unknown_job("w1", "hook.charge", PAYLOAD)
    decision = reconcile_job(job_id="w1")
    assert (decision.outcome, decision.applied) == ("confirmed", "succeeded")
    [question] = receiver.requests
    assert question["idempotency_key"] == question["marker"] == "hook.charge:w1"
    assert question["attempt"]["execution"] == "unknown" and question["payload"] == PAYLOAD
    check = ReconciliationCheck.objects.get(job__job_id="w1")
    assert check.reconciler == f"webhook {receiver.url}"
    assert check.evidence["webhook"]["request"]["job_id"] == "w1"
    assert check.evidence["webhook"]["answer"]["outcome"] == "confirmed"
    assert latest_attempt("w1").result_ref == "r" and receiver.refused == []
    assert_ledger_clean()


def test_a_rotated_secret_still_verifies(receiver):
    receiver.secrets = [OLD_SECRET]  # the receiver has not picked up the new secret yet
    unknown_job("w2", "hook.charge", PAYLOAD)
    assert reconcile_job(job_id="w2").applied == "succeeded"
    assert receiver.refused == []


def test_not_found_replays_with_the_same_key_and_an_irreversible_one_asks_for_approval(receiver):
    receiver.answer = lambda q: (200, {"outcome": "not_found", "reason": f"no charge with key {q['idempotency_key']}"})
    unknown_job("w3", "hook.charge", PAYLOAD)
    assert reconcile_job(job_id="w3").applied == "replayed"
    assert latest_attempt("w3").number == 2
    unknown_job("w4", "hook.wire", PAYLOAD)
    assert reconcile_job(job_id="w4").applied == "awaiting_approval"
    assert ApprovalRequest.objects.filter(job__job_id="w4", status="pending").exists()
    assert_ledger_clean()


@pytest.mark.parametrize("answer, reason", [
    (lambda q: (503, {"error": "down"}), "webhook answered 503"),
    (lambda q: (200, b"<html>ok</html>"), "not JSON"),
    (lambda q: (200, {"outcome": "probably"}), "unknown outcome 'probably'"),
    (lambda q: (200, {"outcome": "not_found"}), "not_found without a stated reason"),
    (lambda q: (200, {"outcome": "confirmed", "evidence": "a string"}), "evidence an object"),
    (lambda q: HANG, "did not answer"),
])
def test_every_bad_answer_proves_nothing_and_backs_off(receiver, answer, reason):
    receiver.answer = answer
    unknown_job("w5", "hook.charge", PAYLOAD)
    decision = reconcile_job(job_id="w5")
    receiver.released.set()  # Reckon stopped waiting (webhook_timeout = 1): the hung answer may go
    assert decision.outcome == "unavailable" and decision.applied.startswith("retry in")
    assert reason in decision.note
    job = Job.objects.get(job_id="w5")
    assert (job.status, job.check_count) == ("needs_reconciliation", 1) and job.next_check_at is not None
    assert LedgerEvent.objects.filter(job=job, kind="reconciliation_unavailable").count() == 1
    assert ReconciliationCheck.objects.get(job=job).outcome == "unavailable"
    assert_ledger_clean()


def test_a_request_with_a_bad_signature_is_refused_by_the_receiver_helper(receiver, monkeypatch):
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", "x" * 40)  # Reckon signs with a secret the receiver never had
    monkeypatch.setenv("TEST_WEBHOOK_SECRET_OLD", "y" * 40)
    unknown_job("w6", "hook.charge", PAYLOAD)
    decision = reconcile_job(job_id="w6")
    assert decision.outcome == "unavailable" and "401" in decision.note
    assert receiver.refused == ["no signature matches a known secret"] and receiver.requests == []
    make_due("w6")
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    assert reconcile_job(job_id="w6").applied == "succeeded"  # fixed: the next look succeeds
