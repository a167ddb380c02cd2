"""Webhook reconcilers: a team's own endpoint, asked over real HTTP with a signed request.

The receiver here is a real HTTP server (a thread of the test process) that checks every
question with `verify_webhook`, remembers the question ids it took, and signs its answers with
`sign_answer`, answering as each test tells it to; examples/webhook_receiver.py runs as a process.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.exceptions import ImproperlyConfigured
from hypothesis import given
from hypothesis import strategies as st
from reckon_client import (
    WEBHOOK_SIGNATURE_HEADER,
    QuestionLog,
    WebhookSignatureError,
    sign_answer,
    sign_webhook,
    verify_answer,
    verify_webhook,
)

from approvals.models import ApprovalRequest
from ledger.actions import _registry
from ledger.declarations import load_actions_file, parse_action
from ledger.models import Job, LedgerEvent
from reconciliation.models import ReconciliationCheck
from reconciliation.passes import reconcile_job
from tests.conftest import latest_attempt
from tests.processes import ROOT, ManagedProcess, free_port, wait_for
from tests.reconciliation.helpers import MAIL, assert_ledger_clean, make_due, send_message, unknown_job

pytestmark = pytest.mark.django_db

HANG = object()  # an answer that never comes within the webhook's timeout
SECRET = "s" * 40
OLD_SECRET = "o" * 40


class Receiver:
    """A webhook endpoint: verifies each request, records it, answers what `answer` returns,
    signed as `sign(answer_bytes, question_id)` says (by default with its secrets, for the question)."""

    def __init__(self, secrets: list[str]):
        self.secrets, self.requests, self.refused = secrets, [], []
        self.seen = QuestionLog()
        self.sign = lambda data, question_id: sign_answer(data, question_id, self.secrets)
        # A receiver told to hang holds its answer until the test has seen Reckon give up waiting.
        self.released = threading.Event()
        self.answer = lambda question: (200, {"outcome": "confirmed", "reason": "seen", "result_ref": "r"})
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                question = None
                try:
                    question = verify_webhook(body, self.headers.get(WEBHOOK_SIGNATURE_HEADER), receiver.secrets,
                                              seen=receiver.seen)
                except WebhookSignatureError as exc:
                    receiver.refused.append(str(exc))
                    status, reply = 401, {"error": str(exc)}
                else:
                    receiver.requests.append(question)
                    answer = receiver.answer(question)
                    if answer is HANG:
                        receiver.released.wait(timeout=30)
                        answer = (200, {"outcome": "confirmed", "reason": "late"})
                    status, reply = answer
                data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                signature = question and receiver.sign(data, question["question_id"])
                if signature:
                    self.send_header(WEBHOOK_SIGNATURE_HEADER, signature)
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
    assert verify_webhook(body, header, [SECRET]) == {"job_id": "j"}  # the receiver that knows the new secret
    verify_webhook(body, header, [OLD_SECRET])  # and one that still knows the old one
    with pytest.raises(WebhookSignatureError, match="no signature matches"):
        verify_webhook(body, header, ["w" * 40])
    with pytest.raises(WebhookSignatureError, match="no signature matches"):
        verify_webhook(body + b" ", header, [SECRET])  # the exact body is signed
    with pytest.raises(WebhookSignatureError, match="malformed"):
        verify_webhook(body, "v1=abc", [SECRET])


def test_a_question_is_good_for_one_minute_either_way():
    body = b'{"question_id":"q_1"}'
    now = time.time()
    verify_webhook(body, sign_webhook(body, [SECRET], at=int(now) - 59), [SECRET], now=now)
    for skew in (-61, 61):  # captured a minute ago, or stamped ahead to outlive the window
        stale = sign_webhook(body, [SECRET], at=int(now) + skew)
        with pytest.raises(WebhookSignatureError, match="more than 60 s"):
            verify_webhook(body, stale, [SECRET], now=now)


def test_a_question_replayed_within_its_minute_is_refused_by_a_receiver_that_remembers_ids():
    seen = QuestionLog()
    body = b'{"question_id":"q_1","job_id":"j"}'
    header = sign_webhook(body, [SECRET])
    assert verify_webhook(body, header, [SECRET], seen=seen)["question_id"] == "q_1"
    with pytest.raises(WebhookSignatureError, match="question q_1 was already asked: a replay"):
        verify_webhook(body, header, [SECRET], seen=seen)
    other = b'{"question_id":"q_2","job_id":"j"}'  # Reckon asking again: a new id, taken
    verify_webhook(other, sign_webhook(other, [SECRET]), [SECRET], seen=seen)
    with pytest.raises(WebhookSignatureError, match="no question_id"):
        unnumbered = b'{"job_id":"j"}'
        verify_webhook(unnumbered, sign_webhook(unnumbered, [SECRET]), [SECRET], seen=seen)


# Header values a receiver may be handed: anything, and near-misses of the real shape.
HEX = st.text("0123456789abcdef", min_size=64, max_size=64)
PIECES = st.one_of(
    st.text(), HEX, st.integers(-10**400, 10**400).map(str), st.sampled_from(["²", "١٢", "𝟗", "1e400", "-1", " 1"]),
)
HEADERS = st.one_of(
    st.text(),
    st.lists(st.tuples(st.sampled_from(["t", "v1", "v0", "", " t", "T"]), st.sampled_from(["=", "", "=="]), PIECES),
             max_size=6).map(lambda parts: ",".join(k + eq + v for k, eq, v in parts)),
    st.builds(lambda t, v: f"t={t},v1={v}", PIECES, PIECES),
    st.binary(), st.none(), st.integers(), st.lists(st.text(), max_size=2),
)


@given(header=HEADERS, body=st.binary(max_size=64))
def test_any_header_is_refused_with_the_one_documented_error(header, body):
    """A receiver written as the README shows answers 401 to whatever the header holds, never 500."""
    try:
        verify_webhook(body, header, [SECRET], seen=QuestionLog())
    except WebhookSignatureError:
        pass
    try:
        verify_answer(body, header, "q_1", [SECRET])
    except WebhookSignatureError:
        pass


@pytest.mark.parametrize("header", [
    "t=²,v1=" + "0" * 64,  # str.isdigit() says yes, int() says no
    "t=" + "9" * 5000 + ",v1=" + "0" * 64,  # longer than int() reads
    "t=1" + "0" * 400 + ",v1=" + "0" * 64,  # beyond a float
    lambda: f"t={int(time.time())},v1=é",  # compare_digest takes no non-ASCII text
    b"t=1,v1=00",
    None,
])
def test_the_crafted_headers_that_broke_receivers_are_refused(header):
    header = header() if callable(header) else header
    with pytest.raises(WebhookSignatureError):
        verify_webhook(b"{}", header, [SECRET])


def test_an_answer_is_signed_for_its_question_only():
    answer = b'{"outcome":"confirmed","reason":"seen"}'
    header = sign_answer(answer, "q_1", [SECRET])
    verify_answer(answer, header, "q_1", [SECRET, OLD_SECRET])
    for body, question_id, secrets in ((answer, "q_2", [SECRET]), (answer + b" ", "q_1", [SECRET]),
                                       (answer, "q_1", [OLD_SECRET])):
        with pytest.raises(WebhookSignatureError, match="no signature matches"):
            verify_answer(body, header, question_id, secrets)
    # A question's own signature is never taken for an answer's (each is over a different message).
    question = b'{"question_id":"q_1"}'
    with pytest.raises(WebhookSignatureError):
        verify_answer(question, sign_webhook(question, [SECRET]), "q_1", [SECRET])


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
    # only the MCP gateway writes the result it answers its agent's next identical call from
    (lambda q: (200, {"outcome": "confirmed", "reason": "seen", "evidence": {"mcp_result": {"content": []}}}),
     "its evidence holds 'mcp_result'"),
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
    assert not LedgerEvent.objects.filter(job=job, evidence__has_key="mcp_result").exists()
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


def test_every_question_carries_a_new_id(receiver):
    unknown_job("w7", "hook.charge", PAYLOAD)
    receiver.answer = lambda q: (503, {"error": "down"})
    reconcile_job(job_id="w7")
    make_due("w7")
    receiver.answer = lambda q: (200, {"outcome": "confirmed", "reason": "seen", "result_ref": "r"})
    assert reconcile_job(job_id="w7").applied == "succeeded"
    first, second = (q["question_id"] for q in receiver.requests)
    assert first != second and first.startswith("q_") and len(first) == 34
    check = ReconciliationCheck.objects.filter(job__job_id="w7", outcome="confirmed").get()
    assert check.evidence["webhook"]["request"]["question_id"] == second


@pytest.mark.parametrize("outcome", ["confirmed", "not_found", "conflict"])
@pytest.mark.parametrize("sign, why", [
    (lambda data, question_id: None, f"no {WEBHOOK_SIGNATURE_HEADER} header"),
    (lambda data, question_id: sign_answer(data, "q_" + "0" * 32, [SECRET]), "no signature matches"),
    (lambda data, question_id: sign_answer(data, question_id, ["x" * 40]), "no signature matches"),
    (lambda data, question_id: sign_answer(data.replace(b"seen", b"sign"), question_id, [SECRET]),
     "no signature matches"),
    (lambda data, question_id: "v1=" + "g" * 64, "malformed"),
], ids=["unsigned", "for-another-question", "unknown-secret", "another-body", "malformed"])
def test_an_answer_not_signed_for_the_question_proves_nothing(receiver, sign, why, outcome):
    """Whoever answers in the receiver's place (a hijacked DNS name, a proxy, a stale capture) can
    neither close a job nor make it replayable nor escalate it: the look is unavailable, and says why."""
    receiver.sign = sign
    receiver.answer = lambda q: (200, {"outcome": outcome, "reason": "seen", "result_ref": "r"})
    unknown_job("w8", "hook.charge", PAYLOAD)
    decision = reconcile_job(job_id="w8")
    assert decision.outcome == "unavailable" and decision.applied.startswith("retry in")
    [question] = receiver.requests
    assert f"webhook answered 200, not signed for question {question['question_id']}: {why}" in decision.note
    assert "reckon_client.sign_answer" in decision.note
    job = Job.objects.get(job_id="w8")
    assert job.status == "needs_reconciliation" and latest_attempt("w8").number == 1
    assert latest_attempt("w8").execution_state == "unknown"
    check = ReconciliationCheck.objects.get(job=job)
    assert check.outcome == "unavailable" and '"seen"' in check.evidence["webhook"]["answer_text"]
    assert "answer" not in check.evidence["webhook"]
    assert not ApprovalRequest.objects.filter(job=job).exists()
    assert_ledger_clean()


@pytest.mark.parametrize("url, allowed", [
    ("https://agents.example.com/reckon", True),
    ("http://127.0.0.1:9000/reckon", True),
    ("http://127.8.9.10/reckon", True),
    ("http://[::1]:9000/reckon", True),
    ("http://localhost:9000/reckon", True),
    ("http://agents.example.com/reckon", False),
    ("http://10.0.0.5:9000/reckon", False),
    ("http://reconciler.internal:9000/reckon", False),
    ("http://127.0.0.1.example.com/reckon", False),
    ("http://127.0.0.1:port/reckon", False),
    ("ftp://127.0.0.1/reckon", False),
])
def test_a_plain_http_webhook_is_refused_at_start_up_unless_loopback(monkeypatch, url, allowed):
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    table = {"executor": "external", "reversible": True, "queryable": True, "reconciler": "webhook",
             "webhook_url": url, "webhook_secrets": ["TEST_WEBHOOK_SECRET"]}
    if allowed:
        assert str(parse_action("hook.x", table, source="actions.toml").reconciler) == f"webhook {url}"
        return
    with pytest.raises(ImproperlyConfigured) as refused:
        parse_action("hook.x", table, source="actions.toml")
    if url.startswith("http://") and ":port" not in url:
        assert "is plain http to" in str(refused.value) and "RECKON_WEBHOOK_HTTP_HOSTS" in str(refused.value)


def test_a_host_named_in_the_setting_may_be_asked_over_plain_http(monkeypatch, settings):
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    settings.RECKON_WEBHOOK_HTTP_HOSTS = ["Reconciler.Internal"]
    table = {"executor": "external", "reversible": True, "queryable": True, "reconciler": "webhook",
             "webhook_secrets": ["TEST_WEBHOOK_SECRET"]}
    parse_action("hook.x", {**table, "webhook_url": "http://reconciler.internal:9000/r"}, source="actions.toml")
    with pytest.raises(ImproperlyConfigured, match="plain http to agents.example.com"):
        parse_action("hook.x", {**table, "webhook_url": "http://agents.example.com/r"}, source="actions.toml")


@pytest.fixture
def example_receiver(provider):
    """examples/webhook_receiver.py in its own process, asking the sandbox."""
    port = free_port()
    process = ManagedProcess([sys.executable, str(ROOT / "examples" / "webhook_receiver.py"), str(port)],
                             env={"RECKON_WEBHOOK_SECRET": SECRET, "PROVIDER_URL": provider.url},
                             log_name="webhook-receiver")
    with process:
        wait_for(lambda: "webhook reconciler on" in process.output(), timeout=30,
                 message="the example receiver to listen")
        process.url = f"http://127.0.0.1:{port}/reckon"
        yield process


def _post(url: str, body: bytes, signature: str) -> tuple[int, bytes, str]:
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", WEBHOOK_SIGNATURE_HEADER: signature})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:  # nosec B310  # our own test receiver
            return reply.status, reply.read(), reply.headers.get(WEBHOOK_SIGNATURE_HEADER, "")
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read(), refused.headers.get(WEBHOOK_SIGNATURE_HEADER, "")


def test_the_example_receiver_signs_its_answers_and_refuses_a_replayed_question(example_receiver, provider):
    send_message(provider, "mail.send:e1", MAIL)
    question = json.dumps({"question_id": "q_e1", "job_id": "e1", "marker": "mail.send:e1"}).encode()
    signature = sign_webhook(question, [SECRET])

    status, answer, answer_signature = _post(example_receiver.url, question, signature)
    assert status == 200 and json.loads(answer)["outcome"] == "confirmed"
    verify_answer(answer, answer_signature, "q_e1", [SECRET])  # what Reckon checks

    status, answer, _ = _post(example_receiver.url, question, signature)  # the same question, captured
    assert status == 401 and json.loads(answer) == {"error": "question q_e1 was already asked: a replay"}
    status, answer, _ = _post(example_receiver.url, question, "t=²,v1=" + "0" * 64)  # crafted: 401, not 500
    assert status == 401 and "malformed" in json.loads(answer)["error"]


def test_reckon_takes_the_example_receivers_signed_answer(example_receiver, provider, monkeypatch, tmp_path):
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    path = tmp_path / "actions.toml"
    path.write_text(f"""
[actions."hook.mail"]
executor = "python:sandbox.demo_actions.send_mail"
reversible = true
queryable = true
reconciler = "webhook"
webhook_url = "{example_receiver.url}"
webhook_secrets = ["TEST_WEBHOOK_SECRET"]
""")
    load_actions_file(path, required=True)
    try:
        unknown_job("e2", "hook.mail", MAIL)
        send_message(provider, "hook.mail:e2", MAIL)
        assert reconcile_job(job_id="e2").applied == "succeeded"
        unknown_job("e3", "hook.mail", MAIL)  # never sent: not_found, signed, so replayed
        assert reconcile_job(job_id="e3").applied == "replayed"
    finally:
        _registry.pop("hook.mail")
    assert_ledger_clean()
