"""Batched steps over HTTP: POST /claims with `max`, POST /leases/begin and POST /leases/results,
and reckon_client's batch worker loop against a real gunicorn."""

from __future__ import annotations

import threading

import pytest
from reckon_client import Client, Outcome

from ledger import services
from ledger.models import Attempt, Job
from tests.api.conftest import ApiClient, issue, ledger_state
from tests.conftest import event_kinds, expire_lease, make_job
from tests.reconciliation.helpers import assert_ledger_clean

pytestmark = pytest.mark.django_db(transaction=True)

ECHO = ["reckon.echo"]


def _claim(api: ApiClient, **body) -> dict:
    answer = api.post("/api/v1/claims", {"worker": "w1", "actions": ECHO, **body})
    assert answer.status == 201, answer
    return answer.json


def _named(lease: dict) -> dict:
    return {"job_id": lease["job_id"], "owner": lease["owner"], "fencing_token": lease["fencing_token"]}


def test_a_claim_with_max_answers_up_to_n_leases_oldest_first_each_with_its_own_fencing_token(api):
    for n in range(4):
        make_job(f"j{n}")

    leases = _claim(api, max=3)["leases"]

    assert [lease["job_id"] for lease in leases] == ["j0", "j1", "j2"]
    assert {lease["fencing_token"] for lease in leases} == {1}
    assert all(lease["owner"].startswith("w1 [token all ") and lease["job"]["status"] == "running" for lease in leases)
    assert [event_kinds(f"j{n}")[-1] for n in range(4)] == ["claimed", "claimed", "claimed", "enqueued"]
    # max 1, the default: today's answer, one Lease
    one = _claim(api)
    assert one["job_id"] == "j3" and "leases" not in one
    assert api.post("/api/v1/claims", {"worker": "w1", "actions": ECHO, "max": 5}).status == 204


def test_a_batch_begins_and_records_each_job_in_its_place_and_refuses_a_stale_one_alone(api, token):
    for name in ("a", "b", "c"):
        make_job(name)
    leases = _claim(api, max=3)["leases"]
    expire_lease("b")
    services.sweep_expired_leases()
    services.claim_job(job_id="b", worker="someone-else")  # b's lease is now another worker's

    begun = api.post("/api/v1/leases/begin", {"leases": [_named(lease) for lease in leases],
                                              "sent_to": "https://mail.example/acct"})

    assert begun.status == 200
    a, b, c = begun.json["results"]
    assert (a["job_id"], a["status"], a["attempt"]["side_effect"], a["error"]) == ("a", "running", "submitted", None)
    assert b["job_id"] == "b" and b["status"] is None and b["error"]["code"] == "stale_lease"
    assert "fencing token 1 rejected" in b["error"]["message"]
    assert c["attempt"]["side_effect"] == "submitted" and c["attempt"]["sent_to"] == "https://mail.example/acct"

    recorded = api.post("/api/v1/leases/results", {"results": [
        {**_named(leases[0]), "outcome": "succeeded", "result_ref": "msg-a", "evidence": {"provider": "ok"}},
        {**_named(leases[1]), "outcome": "succeeded", "result_ref": "msg-b"},
        {**_named(leases[2]), "outcome": "unknown", "reason": "timed out", "evidence": {}},
    ]})

    assert recorded.status == 200
    a, b, c = recorded.json["results"]
    assert (a["status"], a["attempt"]["result_ref"]) == ("succeeded", "msg-a")
    assert b["error"]["code"] == "stale_lease"
    assert (c["status"], c["attempt"]["execution"]) == ("needs_reconciliation", "unknown")
    assert Attempt.objects.get(job__job_id="b", number=2).lease_owner == "someone-else"  # untouched
    assert event_kinds("b")[-1] == "late_write_rejected"
    assert_ledger_clean()


def test_a_job_outside_the_tokens_scope_is_no_job_to_a_batch_and_is_left_untouched(api):
    make_job("mine", tenant="acme")
    make_job("theirs", tenant="beta")
    services.claim_next_jobs(worker="w1", limit=2)
    acme = ApiClient(issue(["acme"], ECHO, name="acme"))
    leases = [{"job_id": job_id, "owner": "w1", "fencing_token": 1} for job_id in ("mine", "theirs")]
    before = Attempt.objects.get(job__job_id="theirs").version

    answer = acme.post("/api/v1/leases/begin", {"leases": leases})

    assert answer.status == 200
    mine, theirs = answer.json["results"]
    assert mine["error"]["code"] == "stale_lease"  # named by another token: not this token's lease
    assert theirs["error"] == {"code": "not_found", "message": "no such job"}
    assert Attempt.objects.get(job__job_id="theirs").version == before


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/api/v1/claims", {"worker": "w", "max": 0}, "max"),
    ("/api/v1/claims", {"worker": "w", "max": 101}, "max"),
    ("/api/v1/leases/begin", {"leases": []}, "leases"),
    ("/api/v1/leases/begin", {"leases": [{"job_id": "j", "owner": "w"}]}, "leases.0.fencing_token"),
    ("/api/v1/leases/results", {"results": [{"job_id": "j", "owner": "w", "fencing_token": 1, "outcome": "maybe"}]},
     "results.0.outcome"),
    ("/api/v1/leases/results", {"results": [{"job_id": "j", "owner": "w", "fencing_token": 1, "outcome": "failed",
                                             "error": "\u0000"}]}, "results.0.error"),
])
def test_a_bad_batch_is_refused_whole_naming_the_field_and_changes_nothing(api, path, body, field):
    make_job("j")
    services.claim_job(job_id="j", worker="w")
    before = ledger_state()

    answer = api.post(path, body)

    assert answer.status == 400 and field in answer.json["error"]["fields"], answer
    assert ledger_state() == before


# -- reckon_client's batch worker loop, against a real gunicorn -------------------------------------


def test_the_client_runs_batches_claiming_beginning_and_recording_n_jobs_per_request(api_server):
    for n in range(7):
        make_job(f"b{n}", action="ext.alpha", tenant="acme", payload={"n": n})
    client = Client(api_server.url, issue(["acme"], ["ext.alpha"], name="batcher"))
    performed = []

    def perform(lease):
        performed.append(lease.job_id)
        if lease.payload["n"] == 1:
            raise TimeoutError("the provider did not answer")
        if lease.payload["n"] == 2:
            return Outcome.failed("422: refused", evidence={"status": 422})
        return f"msg-{lease.job_id}"

    first = client.run_batch("batcher-1", perform, max=5, actions=["ext.alpha"], wait_seconds=0)
    rest = client.run_batch("batcher-1", perform, max=5, actions=["ext.alpha"], wait_seconds=0)
    none = client.run_batch("batcher-1", perform, max=5, actions=["ext.alpha"], wait_seconds=0)

    assert (first.claimed, first.recorded, first.refused) == (5, {"succeeded": 3, "unknown": 1, "failed": 1}, 0)
    assert (rest.claimed, rest.recorded, none.claimed) == (2, {"succeeded": 2}, 0)
    assert performed == [f"b{n}" for n in range(7)]
    statuses = dict(Job.objects.filter(job_id__startswith="b").values_list("job_id", "status"))
    assert statuses == {"b0": "succeeded", "b1": "needs_reconciliation", "b2": "failed", **{
        f"b{n}": "succeeded" for n in range(3, 7)}}
    assert Attempt.objects.get(job__job_id="b4").result_ref == "msg-b4"
    assert "TimeoutError: the provider did not answer" in Attempt.objects.get(job__job_id="b1").error
    assert event_kinds("b0") == ["enqueued", "claimed", "side_effect_started", "succeeded"]
    assert_ledger_clean()


def test_a_lease_that_expired_before_the_batch_began_is_not_performed_and_the_rest_are(api_server):
    for n in range(3):
        make_job(f"x{n}", action="ext.alpha", tenant="acme")
    client = Client(api_server.url, issue(["acme"], ["ext.alpha"], name="slowpoke"))
    leases = client.next_leases("slow-1", max=3, actions=["ext.alpha"], wait_seconds=0)
    expire_lease("x1")  # the worker stalled past x1's lease before it began the batch

    begun = client.begin_all(leases)

    assert [lease.job_id for lease in begun] == ["x0", "x2"]
    assert leases[1].outcome == "refused" and "its lease expired" in leases[1].refused
    answers = client.record_all([(lease, Outcome.succeeded("ok")) for lease in begun])
    assert [answer["status"] for answer in answers] == ["succeeded", "succeeded"]
    assert Job.objects.get(job_id="x1").events.filter(kind="side_effect_started").count() == 0


def test_the_batch_loop_runs_until_stopped(api_server):
    for n in range(12):
        make_job(f"l{n}", action="ext.beta", tenant="acme")
    client = Client(api_server.url, issue(["acme"], ["ext.beta"], name="looper"))
    stop = threading.Event()
    bound = threading.Timer(60, stop.set)  # a loop that never saw the backlog end stops anyway, and fails below
    bound.start()

    def perform(lease):
        if Job.objects.filter(job_id__startswith="l", status="pending").count() == 0:
            stop.set()  # the backlog is claimed: this is the last batch
        return "sent"

    try:
        total = client.run_batches("looper-1", perform, max=4, stop=stop, actions=["ext.beta"], wait_seconds=0)
    finally:
        bound.cancel()

    assert (total.claimed, total.recorded) == (12, {"succeeded": 12})
    assert Job.objects.filter(job_id__startswith="l", status="succeeded").count() == 12


def test_the_token_lookup_is_the_requests_database_health_check(api, monkeypatch):
    """A request's first statement is its token's lookup: once it has answered, the connection is
    known to work, and Django's health check (SELECT 1, one more round trip) is not run again when
    the step opens its transaction."""
    from django.db import connection

    make_job("hc")
    lease = _claim(api)
    checks = []
    monkeypatch.setattr(connection, "is_usable", lambda: checks.append("SELECT 1") or True)
    connection.health_check_enabled, connection.health_check_done = True, False  # a kept connection, a new request

    begun = api.post("/api/v1/leases/begin", {"leases": [_named(lease)]})

    assert begun.status == 200 and begun.json["results"][0]["attempt"]["side_effect"] == "submitted"
    assert checks == []
