"""`Idempotency-Key` on the enqueue (Stripe's semantics, the Agentic Commerce Protocol's codes):
the same key and request answer the same job; another request with the key is 422 and changes
nothing; a request while the key's first is being enqueued is 409 with Retry-After."""

import threading

import psycopg
import pytest
from django.db import connection

from api.enqueue_keys import LOCK_CLASS, _lock_key
from api.models import EnqueueKey, WorkerToken
from ledger.models import Job
from tests.api.conftest import ApiClient, event_count, issue, ledger_state

pytestmark = pytest.mark.django_db(transaction=True)

WORK = {"job_id": "invoice-1", "tenant": "acme", "action": "reckon.echo", "payload": {"amount": 5}}


def enqueue(api: ApiClient, body: dict, key: str | None = "order-7f3a"):
    return api.post("/api/v1/jobs", body, headers={"Idempotency-Key": key} if key is not None else None)


def test_the_same_key_and_request_answer_the_same_job(api):
    first = enqueue(api, WORK)
    again = enqueue(api, WORK)

    assert (first.status, again.status) == (201, 200)
    assert again.headers["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first.headers
    assert again.json["job_id"] == first.json["job_id"] == "invoice-1"
    assert Job.objects.count() == 1 and EnqueueKey.objects.get().job_id == "invoice-1"


def test_the_same_key_with_another_request_is_422_and_changes_nothing(api):
    enqueue(api, WORK)
    before, events = ledger_state(), event_count()

    for other in ({**WORK, "payload": {"amount": 6}}, {**WORK, "job_id": "invoice-2"}):
        refused = enqueue(api, other)

        assert refused.status == 422 and refused.json["error"]["code"] == "idempotency_key_reused"
        assert "sent before with another request" in refused.json["error"]["message"]
    assert ledger_state() == before and event_count() == events


def test_a_key_is_the_tokens_own(api):
    enqueue(api, WORK)
    other = ApiClient(issue(name="other"))

    answer = enqueue(other, {**WORK, "job_id": "invoice-2"})  # the same key, another token: another request

    assert answer.status == 201 and Job.objects.count() == 2


def test_a_request_while_the_keys_first_is_in_flight_is_409_with_retry_after(api):
    worker_token = WorkerToken.objects.get(name="all")  # api's
    params = connection.get_connection_params()
    # The first request with the key, in flight: its transaction holds the key's lock, uncommitted.
    with psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"}, autocommit=False) as first:
        first.execute("SELECT pg_advisory_xact_lock(%s, %s)", [LOCK_CLASS, _lock_key(worker_token, "order-7f3a")])

        busy = enqueue(api, WORK)

        assert busy.status == 409 and busy.json["error"]["code"] == "idempotency_key_in_flight"
        assert busy.headers["Retry-After"] == "1" and not Job.objects.exists()
        first.rollback()

    assert enqueue(api, WORK).status == 201  # the first gone, the key is free


def test_concurrent_requests_with_one_key_make_one_job(api):
    answers = []
    barrier = threading.Barrier(4)

    def send():
        barrier.wait(timeout=30)
        answers.append(enqueue(api, WORK).status)
        connection.close()

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert Job.objects.count() == 1 and EnqueueKey.objects.count() == 1
    assert answers.count(201) == 1 and set(answers) <= {201, 200, 409}, answers


@pytest.mark.parametrize("key", ["", "with space", "x" * 256, "ключ"])
def test_a_bad_key_is_400_and_changes_nothing(api, key):
    refused = enqueue(api, WORK, key=key)

    assert refused.status == 400 and "Idempotency-Key" in refused.json["error"]["fields"]
    assert not Job.objects.exists()


def test_without_a_key_the_enqueue_is_idempotent_on_job_id_as_before(api):
    assert enqueue(api, WORK, key=None).status == 201
    assert enqueue(api, WORK, key=None).status == 200
    assert enqueue(api, {**WORK, "payload": {"amount": 6}}, key=None).status == 409
    assert not EnqueueKey.objects.exists()


def test_the_openapi_document_states_the_header_and_its_answers(api):
    operation = api.get("/api/v1/openapi.json", token=None).json["paths"]["/jobs"]["post"]

    [header] = [p for p in operation["parameters"] if p["name"] == "Idempotency-Key"]
    assert header["in"] == "header" and not header["required"]
    assert "idempotency_key_reused" in operation["responses"]["422"]["description"]
    assert "idempotency_key_in_flight" in operation["responses"]["409"]["description"]
    assert "Retry-After" in operation["responses"]["409"]["headers"]
