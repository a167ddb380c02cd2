"""The chaos matrix's external charge worker and its webhook reconciler, each against the real
sandbox payments provider and a real Reckon API: a 409 "in progress" after a dropped connection
is unknown (never a failure, never a success), and the receiver finds the truth by key."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
import uuid

import pytest
from reckon_client import Client, sign_webhook, verify_answer

from api.tokens import worker_token_create
from chaos.external_worker import create_charge
from ledger.actions import _registry
from ledger.declarations import load_actions_file
from ledger.models import Job
from ledger.services import enqueue_job
from ledger.states import EventKind, Execution, JobStatus
from tests.processes import ManagedProcess, WebServer, database_url_of_tests, free_port, wait_for

ACTION = "ext.charge"
CHARGE = {"customer": "cus_7", "amount_cents": 4200, "currency": "EUR"}


@pytest.fixture(scope="module")
def charge_action(tmp_path_factory):
    path = tmp_path_factory.mktemp("actions") / "actions.toml"
    path.write_text(f'[actions."{ACTION}"]\nexecutor = "external"\nreversible = true\nmax_attempts = 5\n')
    declared = load_actions_file(path, required=True)
    yield path
    for action in declared:
        _registry.pop(action.name, None)


@pytest.fixture(scope="module")
def api_server(django_db_setup, charge_action):
    env = {"DATABASE_URL": database_url_of_tests(), "RECKON_ACTIONS_FILE": str(charge_action)}
    with WebServer(env=env, log_name="charges-gunicorn") as server:
        yield server


@pytest.fixture
def lease_of(api_server, sandbox):
    """A claimed and begun lease of a new charge job (`payload` overrides the charge)."""
    client = Client(api_server.url, worker_token_create(name="charges", tenants=["t"], actions=[ACTION]).token)

    def begun(job_id: str, **payload):
        enqueue_job(job_id=job_id, tenant="t", action=ACTION, payload={**CHARGE, **payload}, actor="test")
        lease = client.claim_lease(job_id, worker="charger")
        lease.begin()
        return lease

    return begun


def faults(sandbox, **rates):
    sandbox.request("PUT", "/_admin/faults", {"rates": rates})


def observation_lost(job_id: str):
    return Job.objects.get(job_id=job_id).events.get(kind=EventKind.OBSERVATION_LOST)


@pytest.mark.django_db(transaction=True)
def test_a_409_in_progress_after_a_drop_is_unknown_and_the_charge_exists_once(lease_of, sandbox):
    faults(sandbox, drop_after_commit=1.0)  # acted on, answer dropped; the retry meets 409 "in progress"
    lease = lease_of("c-drop")
    assert create_charge(lease, sandbox.url, timeout=3) == "unknown (409 in progress)"
    job = Job.objects.get(job_id="c-drop")
    assert job.status == JobStatus.NEEDS_RECONCILIATION
    assert job.attempts.get().execution_state == Execution.UNKNOWN
    evidence = observation_lost("c-drop").evidence
    assert evidence["provider_status"] == 409 and evidence["after_drop"] is True
    assert evidence["provider_answer"] == {"error": "in progress"}
    assert sandbox.effects(key=job.idempotency_key)["count"] == 1  # the charge happened, once


@pytest.mark.django_db(transaction=True)
def test_a_409_in_progress_without_a_drop_is_unknown_too(lease_of, sandbox):
    job_key = "ext.charge:c-stuck"  # the key an earlier, dropped request left in progress
    faults(sandbox, drop_after_commit=1.0)
    with pytest.raises(OSError):
        sandbox.request("POST", "/charges", CHARGE, {"Idempotency-Key": job_key})
    faults(sandbox)
    lease = lease_of("c-stuck")
    assert lease.idempotency_key == job_key
    assert create_charge(lease, sandbox.url, timeout=3) == "unknown (409 in progress)"
    assert observation_lost("c-stuck").evidence["after_drop"] is False


@pytest.mark.django_db(transaction=True)
def test_a_503_that_did_nothing_is_a_retryable_failure_and_a_400_a_final_one(lease_of, sandbox):
    faults(sandbox, error_5xx=1.0)
    assert create_charge(lease_of("c-503"), sandbox.url, timeout=3) == "failed (503)"
    assert Job.objects.get(job_id="c-503").status == JobStatus.PENDING  # the next attempt may run
    faults(sandbox)
    assert create_charge(lease_of("c-400", amount_cents=0), sandbox.url, timeout=3) == "failed (400)"
    assert Job.objects.get(job_id="c-400").status == JobStatus.FAILED
    assert sandbox.effects()["total"] == 0


@pytest.mark.django_db(transaction=True)
def test_a_refused_connection_sent_nothing_and_is_a_retryable_failure(lease_of, sandbox):
    nobody = f"http://127.0.0.1:{free_port()}"
    assert create_charge(lease_of("c-refused"), nobody, timeout=3) == "failed (unreachable)"
    assert Job.objects.get(job_id="c-refused").status == JobStatus.PENDING


@pytest.mark.django_db(transaction=True)
def test_an_answered_charge_succeeds_with_its_id(lease_of, sandbox):
    assert create_charge(lease_of("c-ok"), sandbox.url, timeout=3) == "succeeded"
    job = Job.objects.get(job_id="c-ok")
    charge = sandbox.request("GET", f"/charges?idempotency_key={job.idempotency_key}").json["charges"][0]
    assert job.status == JobStatus.SUCCEEDED and job.attempts.get().result_ref == charge["id"]


# -- the webhook reconciler (chaos/charge_receiver.py) -----------------------------------------

SECRET = "s" * 40


@pytest.fixture
def receiver(sandbox):
    port = free_port()
    process = ManagedProcess([sys.executable, "-m", "chaos.charge_receiver", "--port", str(port),
                              "--provider", sandbox.url], env={"RECKON_WEBHOOK_SECRET": SECRET},
                             log_name="charge-receiver").start()
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: _health(url), timeout=30, message="the charge receiver")
    yield url
    process.stop()


def _health(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_health", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def ask(url: str, key: str, secret: str = SECRET) -> tuple[int, dict]:
    """Ask the receiver as Reckon does; a 200 answer must be signed for this question."""
    question_id = f"q_{uuid.uuid4().hex}"
    body = json.dumps({"job_id": key, "idempotency_key": key, "marker": key, "question_id": question_id}).encode()
    request = urllib.request.Request(url + "/reckon", data=body, method="POST", headers={
        "Content-Type": "application/json", "Reckon-Signature": sign_webhook(body, [secret])})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            data = answer.read()
            verify_answer(data, answer.headers.get("Reckon-Signature"), question_id, [SECRET])
            return answer.status, json.loads(data)
    except urllib.error.HTTPError as refused:
        return refused.code, json.load(refused)


def test_the_receiver_confirms_a_key_the_provider_answers_409_for(receiver, sandbox):
    faults(sandbox, drop_after_commit=1.0)
    with pytest.raises(OSError):
        sandbox.request("POST", "/charges", CHARGE, {"Idempotency-Key": "k-409"})
    faults(sandbox)
    assert sandbox.request("POST", "/charges", CHARGE, {"Idempotency-Key": "k-409"}).status == 409
    status, answer = ask(receiver, "k-409")
    charge_id = sandbox.effects(key="k-409")["effects"][0]["object_id"]
    assert (status, answer["outcome"], answer["result_ref"]) == (200, "confirmed", charge_id)
    assert answer["evidence"]["key_state"] == "in_progress"


def test_the_receiver_says_not_found_only_for_a_key_never_seen_and_why(receiver):
    status, answer = ask(receiver, "k-never")
    assert (status, answer["outcome"]) == (200, "not_found")
    assert "never seen" in answer["reason"]


def test_the_receiver_refuses_a_question_not_signed_with_its_secret(receiver, sandbox):
    status, answer = ask(receiver, "k-forged", secret="x" * 40)
    assert status == 401 and "signature" in answer["error"]
