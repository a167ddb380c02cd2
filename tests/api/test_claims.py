"""POST /api/v1/claims against a real gunicorn: the next job in scope, never twice, and waiting for
work with a prompt wake-up (a NOTIFY) rather than the poll."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections import Counter

import pytest
from django.db import transaction
from reckon_client import Client, ReckonError

from api.models import WorkerToken
from api.tokens import worker_token_revoke
from ledger.models import Job, LedgerEvent
from tests.api.conftest import ApiClient, issue
from tests.conftest import make_job
from tests.processes import wait_for
from tests.reconciliation.helpers import assert_ledger_clean

pytestmark = pytest.mark.django_db(transaction=True)

POLL_S = 10  # the server's fallback poll (api_server): a wake-up well before it came from the NOTIFY


def _waits_logged(server) -> int:
    return server.output().count(" waits up to ")


def _in_threads(*targets, timeout: float = 90) -> list:
    """Run each callable in a thread of its own, released together; their results in order."""
    barrier = threading.Barrier(len(targets))
    results: list = [None] * len(targets)

    def runner(index, target):
        barrier.wait(timeout=timeout)
        try:
            results[index] = ("ok", target())
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            results[index] = ("error", exc)

    threads = [threading.Thread(target=runner, args=(i, t), daemon=True) for i, t in enumerate(targets)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a worker thread is still running"
    return results


def test_eight_concurrent_workers_never_claim_a_job_twice_and_stay_in_their_scope(api_server):
    acme = issue(["acme"], ["*"], name="acme-any")
    broad = issue(["*"], ["ext.alpha", "ext.beta"], name="ext-everywhere")
    jobs = {}
    for n in range(24):
        tenant = ("acme", "beta", "gamma")[n % 3]
        jobs[f"a-{n}"] = make_job(f"a-{n}", action="ext.alpha", tenant=tenant)
    for n in range(8):
        jobs[f"b-{n}"] = make_job(f"b-{n}", action="ext.beta", tenant=("acme", "gamma")[n % 2])
    make_job("in-process", action="reckon.echo", tenant="acme")  # for the django-q2 workers
    workers = (
        [(acme, {}, lambda job: job.tenant == "acme")] * 4
        + [(broad, {"actions": ["ext.beta"]}, lambda job: job.action == "ext.beta")] * 2
        + [(broad, {"tenants": ["beta"]}, lambda job: job.tenant == "beta")] * 2
    )

    def worker(n: int, token: str, filters: dict):
        def claim_until_idle() -> list[str]:
            client, taken = Client(api_server.url, token), []
            while (lease := client.next_lease(f"w{n}", wait_seconds=1, **filters)) is not None:
                taken.append(lease.job_id)
            return taken
        return claim_until_idle

    results = _in_threads(*[worker(n, token, filters) for n, (token, filters, _) in enumerate(workers)])
    assert all(kind == "ok" for kind, _ in results), results
    taken = Counter(job_id for _, claimed in results for job_id in claimed)
    assert max(taken.values()) == 1, taken.most_common(3)  # no job claimed twice
    for (_, claimed), (_, _, in_scope) in zip(results, workers, strict=True):
        assert all(in_scope(jobs[job_id]) for job_id in claimed)
    reachable = {job_id for job_id, job in jobs.items()
                 if job.tenant in ("acme", "beta") or job.action == "ext.beta"}
    assert set(taken) == reachable
    assert set(Job.objects.filter(status="pending").values_list("job_id", flat=True)) == (
        set(jobs) - reachable | {"in-process"}
    )
    assert not LedgerEvent.objects.filter(kind__in=["duplicate_delivery", "claim_refused"]).exists()
    assert_ledger_clean()


def test_nothing_claimable_answers_204_after_the_wait(api_server):
    client = Client(api_server.url, issue(name="idle"))
    started = time.monotonic()
    answer = client.call("POST", "/claims", {"worker": "idle-1", "wait_seconds": 2}, timeout=20, expect=(201, 204))
    elapsed = time.monotonic() - started
    assert answer.status == 204 and answer.json == {} and "retry-after" not in answer.headers
    assert answer.headers["reckon-reason"] == "no_work"  # why: nothing in scope (not the dead-man gate)
    assert 2 <= elapsed < 4, elapsed
    assert not LedgerEvent.objects.exists()


def test_waiting_workers_are_woken_by_an_enqueue_well_before_the_poll(api_server):
    token = issue(["acme"], ["ext.alpha"], name="waiters")
    before = _waits_logged(api_server)
    got: dict[str, float] = {}

    def waiter(n: int):
        def wait_for_work():
            lease = Client(api_server.url, token).next_lease(f"waiter-{n}", wait_seconds=25)
            got[lease.job_id] = time.monotonic()
            return lease.job_id
        return wait_for_work

    threads = [threading.Thread(target=waiter(n), daemon=True) for n in range(8)]
    for thread in threads:
        thread.start()
    # Every claim has looked, found nothing and is waiting (the server logs it, at DEBUG).
    wait_for(lambda: _waits_logged(api_server) - before >= 8, timeout=30, message="8 claims to be waiting")
    with transaction.atomic():  # one commit, so one notification for all eight
        for n in range(8):
            make_job(f"wake-{n}", action="ext.alpha", tenant="acme")
    enqueued = time.monotonic()
    for thread in threads:
        thread.join(30)
    assert sorted(got) == [f"wake-{n}" for n in range(8)]
    latency = max(got.values()) - enqueued
    assert latency < 3, f"the last waiter got its job {latency:.2f} s after the enqueue (poll: {POLL_S} s)"
    assert_ledger_clean()


def test_in_process_actions_are_handed_out_only_when_named_and_scope_is_enforced(api_server):
    token = issue(["acme"], ["ext.alpha", "reckon.echo"], name="named")
    client = Client(api_server.url, token)
    make_job("echo-1", action="reckon.echo", tenant="acme")
    assert client.next_lease("w", wait_seconds=0) is None  # reckon.echo runs in django-q2 workers
    assert client.next_lease("w", actions=["reckon.echo"], wait_seconds=0).job_id == "echo-1"
    for filters, outside in (({"tenants": ["beta"]}, "tenant(s) beta"), ({"actions": ["ext.beta"]}, "action(s) ext.beta")):
        with pytest.raises(ReckonError) as refused:
            client.next_lease("w", wait_seconds=0, **filters)
        assert refused.value.status == 403 and outside in str(refused.value)
    assert_ledger_clean()


def test_a_token_revoked_while_its_claim_waits_gets_nothing(api_server):
    token = issue(["acme"], ["ext.alpha"], name="revoked")
    before = _waits_logged(api_server)
    answers = []
    thread = threading.Thread(
        target=lambda: answers.append(_claim(api_server.url, token, {"worker": "r", "wait_seconds": 20})), daemon=True
    )
    thread.start()
    wait_for(lambda: _waits_logged(api_server) > before, timeout=30, message="the claim to wait")
    worker_token_revoke(worker_token=WorkerToken.objects.get(name="revoked"))
    make_job("after-revocation", action="ext.alpha", tenant="acme")  # wakes the claim
    thread.join(30)
    assert answers == [401]
    assert Job.objects.get(job_id="after-revocation").status == "pending"


def test_a_claim_whose_client_hung_up_while_waiting_takes_nothing(api_server):
    token = issue(["acme"], ["ext.alpha"], name="gone")
    before = _waits_logged(api_server)
    host, port = api_server.url.removeprefix("http://").split(":")
    hung_up = http.client.HTTPConnection(host, int(port), timeout=10)
    hung_up.request("POST", "/api/v1/claims", body=json.dumps({"worker": "gone-1", "wait_seconds": 25}),
                    headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    wait_for(lambda: _waits_logged(api_server) > before, timeout=30, message="the claim to wait")
    hung_up.close()  # the worker died (or gave up) while its claim waited
    make_job("for-the-living", action="ext.alpha", tenant="acme")  # wakes the orphaned claim
    wait_for(lambda: "claim by gone-1 ends: its client has gone" in api_server.output(), timeout=30,
             message="the orphaned claim to notice")
    assert Job.objects.get(job_id="for-the-living").status == "pending"
    lease = Client(api_server.url, token).next_lease("alive-1", wait_seconds=0)
    assert lease.job_id == "for-the-living" and lease.fencing_token == 1


def _claim(url: str, token: str, body: dict) -> int:
    try:
        return Client(url, token).call("POST", "/claims", body, timeout=40).status
    except ReckonError as refused:
        return refused.status


def test_a_single_threaded_server_answers_at_once_and_says_when_to_ask_again(token, settings):
    settings.RECKON_CLAIM_POLL_S = 3
    started = time.monotonic()
    answer = ApiClient(token).post("/api/v1/claims", {"worker": "w", "wait_seconds": 30})  # wsgi.multithread: False
    assert answer.status == 204 and answer.headers["Retry-After"] == "3"
    assert time.monotonic() - started < 2


@pytest.mark.parametrize(
    "body, field",
    [
        ({"worker": "w", "wait_seconds": 31}, "wait_seconds"),
        ({"worker": "w", "wait_seconds": -1}, "wait_seconds"),
        ({"worker": "w", "wait_seconds": "5"}, "wait_seconds"),
        ({"worker": "w", "actions": []}, "actions"),
        ({"worker": "w", "actions": ["no.such"]}, "actions.0"),
        ({"worker": "w", "tenants": ["bad tenant"]}, "tenants.0"),
        ({"wait_seconds": 1}, "worker"),
    ],
)
def test_bad_claims_are_refused_naming_the_field(api, body, field):
    answer = api.post("/api/v1/claims", body)
    assert answer.status == 400 and field in answer.json["error"]["fields"], answer.json
    assert not LedgerEvent.objects.exists()
