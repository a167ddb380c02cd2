"""Batched reconciliation: one transaction per batch, the same rules for every job in it."""

import json
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from approvals.models import ApprovalRequest
from ledger.actions import Action, _registry, get_action, register
from ledger.models import Job, LedgerEvent
from ledger.services import claim_for_reconciliation, latest_attempts
from ledger.tasks import run_job
from reconciliation import decisions
from reconciliation import passes as reconciliation
from reconciliation.applying import apply_looks
from reconciliation.findings import Finding, prefetch_reported
from reconciliation.lookups import Look, Lookups, look_up
from reconciliation.models import CheckOutcome, ReconciliationCheck
from sandbox.demo_actions import send_mail
from sandbox.testing import free_port
from tests.conftest import event_kinds, latest_attempt
from tests.reconciliation.helpers import INVOICE, MAIL, assert_ledger_clean, send_message, unknown_job

pytestmark = pytest.mark.django_db

BARRIER = threading.Barrier(4)
PAIR = threading.Barrier(2)


def meeting_reconciler(job, attempt):
    """Confirms only if three other lookups are in flight at the same moment."""
    BARRIER.wait(timeout=20)
    return Finding(CheckOutcome.CONFIRMED, "seen while three others were looking", result_ref=f"ref-{job.job_id}")


def pair_reconciler(job, attempt):
    """Confirms only if another lookup is in flight at the same moment (waits briefly for it)."""
    PAIR.wait(timeout=0.5)
    return Finding(CheckOutcome.CONFIRMED, "seen while another was looking", result_ref=f"ref-{job.job_id}")


def unserialisable_reconciler(job, attempt):
    return Finding(CheckOutcome.CONFIRMED, "found", {"not json": {1, 2}}, result_ref="ref")


@pytest.fixture
def test_actions(provider):
    names = {
        "test.irreversible_mail": dict(reversible=False, reconciler="sandbox.reconcilers.mail"),
        "test.meeting": dict(reconciler="tests.reconciliation.test_batch.meeting_reconciler"),
        "test.pair": dict(reconciler="tests.reconciliation.test_batch.pair_reconciler"),
        "test.unserialisable": dict(reconciler="tests.reconciliation.test_batch.unserialisable_reconciler"),
    }
    for name, options in names.items():
        register(Action(name=name, executor=send_mail, queryable=True, lease_ttl=timedelta(seconds=30), **options))
    yield
    for name in names:
        _registry.pop(name)


def _mixed_batch(provider, settings, *, prefix: str = "", n: int = 1, approvals: bool = True) -> dict:
    """n of each: confirmed, not found (replayed), conflict, unavailable, not queryable, and
    not found for an irreversible action (approval). Returns job id -> expected applied."""
    expected = {}
    for i in range(n):
        unknown_job(f"{prefix}ok{i}", "mail.send", MAIL)
        send_message(provider, f"mail.send:{prefix}ok{i}")
        expected[f"{prefix}ok{i}"] = "succeeded"
        unknown_job(f"{prefix}gone{i}", "mail.send", MAIL)
        expected[f"{prefix}gone{i}"] = "replayed"
        unknown_job(f"{prefix}odd{i}", "mail.send", MAIL)
        send_message(provider, f"mail.send:{prefix}odd{i}", {**MAIL, "body": "something else"})
        expected[f"{prefix}odd{i}"] = "escalated"
        unknown_job(f"{prefix}down{i}", "billing.create_invoice", INVOICE)
        expected[f"{prefix}down{i}"] = "retry"
        unknown_job(f"{prefix}vault{i}", "vault.rotate_credential", {"name": "db"})
        expected[f"{prefix}vault{i}"] = "needs_operator"
        if approvals:  # (each approval request is opened on its own, after the batch)
            unknown_job(f"{prefix}irr{i}", "test.irreversible_mail", MAIL)
            expected[f"{prefix}irr{i}"] = "awaiting_approval"
    settings.RECKON_BILLING_URL = f"http://127.0.0.1:{free_port()}"  # nobody answers there
    return expected


def test_a_batch_with_every_outcome_applies_each_by_the_rules(provider, settings, test_actions):
    expected = _mixed_batch(provider, settings)
    decisions = reconciliation.reconcile_until_idle(limit=50, concurrency=3)
    applied = {d.job_id: d.applied for d in decisions}
    assert applied.keys() == expected.keys()
    for job_id, want in expected.items():
        assert applied[job_id].startswith(want), (job_id, applied[job_id])
    statuses = dict(Job.objects.values_list("job_id", "status"))
    assert statuses == {"ok0": "succeeded", "gone0": "pending", "odd0": "escalated",
                        "down0": "needs_reconciliation", "vault0": "needs_operator",
                        "irr0": "awaiting_approval"}
    assert latest_attempt("ok0").states == {"delivery": "acknowledged", "execution": "succeeded",
                                            "side_effect": "confirmed"}
    assert latest_attempt("gone0").number == 2
    assert event_kinds("gone0")[-2:] == ["reconciled_not_found", "attempt_opened"]
    assert event_kinds("irr0")[-2:] == ["reconciled_not_found", "approval_requested"]
    assert ApprovalRequest.objects.get(job__job_id="irr0").status == "pending"
    down = Job.objects.get(job_id="down0")
    assert down.check_count == 1 and down.next_check_at is not None
    assert event_kinds("down0")[-1] == "reconciliation_unavailable"
    # One check per look; the action that cannot be queried was not looked at.
    checks = dict(ReconciliationCheck.objects.values_list("job__job_id", "outcome"))
    assert checks == {"ok0": "confirmed", "gone0": "not_found", "odd0": "conflict",
                      "down0": "unavailable", "irr0": "not_found"}
    assert_ledger_clean()


def test_a_batch_costs_the_same_statements_whatever_its_size(provider, settings, test_actions):
    # Five failures in a row would open the unanswering provider's circuit, and publishing that
    # (reconciliation.providers) is one more statement, once: not what this test measures.
    settings.RECKON_PROVIDER_CIRCUIT_FAILURES = 100
    # The first round's unavailable job must not come due again while the second round is set up
    # (a back-off of 1-2 s was shorter than that set-up on a loaded machine).
    settings.RECKON_RECONCILE_BACKOFF_BASE = 60
    counts = []
    for prefix, n in (("a-", 1), ("b-", 4)):
        expected = _mixed_batch(provider, settings, prefix=prefix, n=n, approvals=False)
        jobs = claim_for_reconciliation(limit=50)
        attempts = latest_attempts(jobs)
        prefetch_reported(list(attempts.values()))
        looks = [look_up(job, attempts[job.pk], reconciler) if (reconciler := get_action(job.action).reconciler)
                 else Look(job, attempts[job.pk], None, None) for job in jobs]
        with CaptureQueriesContext(connection) as queries:
            decisions = apply_looks(looks)  # what a pass does with each batch of finished lookups
        assert {d.job_id for d in decisions} == set(expected)
        # Publishing the provider's calls for the console (every few seconds while calls are
        # made, reconciliation.providers) depends on the clock, not on the batch: not counted.
        counts.append(sum(1 for query in queries if "reconciliation_providerstate" not in query["sql"]))
    assert counts[0] == counts[1] <= 12, counts  # 5 jobs or 20: the same statements
    assert_ledger_clean()


def test_a_job_that_changed_between_lookup_and_apply_is_superseded_and_its_look_recorded(provider, operator):
    for job_id in ("m1", "m2", "m3"):
        unknown_job(job_id, "mail.send", MAIL)
        send_message(provider, f"mail.send:{job_id}")
    jobs = claim_for_reconciliation(limit=10)
    with Lookups(1, background=False) as pool:
        early, looking = reconciliation._start_lookups(pool, jobs)
    assert not early and len(looking) == 3
    # An operator decides about m2 while the lookups were out: its attempt's version moves on.
    version = latest_attempt("m2").version
    decisions.escalate(job_id="m2", user=operator, version=version, note="looking into it myself")
    decided = {d.job_id: d for d in apply_looks([future.result() for _, future in looking])}
    assert decided["m1"].applied == decided["m3"].applied == "succeeded"
    assert (decided["m2"].outcome, decided["m2"].applied) == ("confirmed", "superseded")
    assert Job.objects.get(job_id="m2").status == "escalated"
    assert ReconciliationCheck.objects.filter(job__job_id="m2", outcome="confirmed").count() == 1
    assert "reconciled_confirmed" not in event_kinds("m2")
    assert_ledger_clean()


def test_lookups_of_a_batch_run_concurrently(provider, test_actions):
    BARRIER.reset()
    for n in range(4):
        unknown_job(f"t{n}", "test.meeting", MAIL)
    decisions = reconciliation.reconcile_until_idle(limit=4, concurrency=4)
    assert [d.applied for d in decisions] == ["succeeded"] * 4  # the barrier needed all four at once
    assert set(Job.objects.values_list("status", flat=True)) == {"succeeded"}
    assert_ledger_clean()


@pytest.mark.parametrize(("concurrency", "outcome"), [(1, "unavailable"), (2, "confirmed")])
def test_lookups_run_one_at_a_time_with_a_concurrency_of_one(provider, test_actions, concurrency, outcome):
    PAIR.reset()
    for n in range(2):
        unknown_job(f"p{n}", "test.pair", MAIL)
    decisions = reconciliation.reconcile_until_idle(limit=4, concurrency=concurrency)
    assert [d.outcome for d in decisions] == [outcome] * 2, decisions


def test_a_job_the_batch_cannot_write_is_skipped_and_the_others_applied(provider, test_actions):
    unknown_job("m1", "mail.send", MAIL)
    send_message(provider, "mail.send:m1")
    unknown_job("bad", "test.unserialisable", MAIL)
    unknown_job("m2", "mail.send", MAIL)
    decisions = reconciliation.reconcile_until_idle(limit=10, concurrency=2)
    assert {d.job_id: d.applied for d in decisions} == {"m1": "succeeded", "m2": "replayed"}
    assert Job.objects.get(job_id="bad").status == "needs_reconciliation"  # its claim runs out
    assert not ReconciliationCheck.objects.filter(job__job_id="bad").exists()
    assert_ledger_clean()


def test_replays_are_queued_for_workers_in_the_same_transaction(provider, settings):
    settings.RECKON_DISPATCH = True
    for job_id in ("g1", "g2", "g3"):
        unknown_job(job_id, "mail.send", MAIL)
    OrmQ.objects.all().delete()
    decisions = reconciliation.reconcile_until_idle(limit=10, concurrency=2)
    assert [d.applied for d in decisions] == ["replayed"] * 3
    tasks = [SignedPackage.loads(row.payload) for row in OrmQ.objects.order_by("id")]
    assert [(t["func"], t["args"], t["name"]) for t in tasks] == [
        (run_job, (job_id,), f"run_job:{job_id}") for job_id in ("g1", "g2", "g3")
    ]


@pytest.mark.django_db(transaction=True)
def test_overlapping_batches_look_at_each_job_once_and_leave_no_connections(provider):
    for n in range(30):
        unknown_job(f"m{n}", "mail.send", MAIL)
        if n % 3 == 0:
            send_message(provider, f"mail.send:m{n}")
    before = threading.active_count()
    decisions = reconciliation.reconcile_until_idle(limit=4, concurrency=3)
    assert sorted(d.job_id for d in decisions) == sorted(f"m{n}" for n in range(30))
    assert ReconciliationCheck.objects.count() == 30
    assert Job.objects.filter(status="succeeded").count() == 10
    assert Job.objects.filter(status="pending").count() == 20
    assert LedgerEvent.objects.filter(kind="attempt_opened").count() == 20
    assert threading.active_count() == before  # the lookup threads are gone
    assert_ledger_clean()


def test_a_claim_locks_its_jobs_in_one_evaluation_whatever_the_plan(db):
    """The claim's locking SELECT runs once (a MATERIALIZED CTE). A subquery in FROM ran again for
    every row of the job table when the planner put that table on the outer side of a nested loop,
    and each run skipped the rows just updated and locked the next: CI saw a claim of one job mark
    all six due jobs claimed, handing out one."""
    for n in range(6):
        unknown_job(f"once-{n}", "billing.create_invoice", INVOICE)
    with CaptureQueriesContext(connection) as captured:
        [job] = claim_for_reconciliation(limit=1)
    [claim] = [query["sql"] for query in captured.captured_queries if "SKIP LOCKED" in query["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + claim)
        plan = json.dumps(cursor.fetchone()[0])
    assert '"CTE Name": "due"' in plan and '"Node Type": "CTE Scan"' in plan, plan  # evaluated once
    claimed = Job.objects.filter(job_id__startswith="once-", next_check_at__isnull=False)
    assert list(claimed.values_list("job_id", flat=True)) == [job.job_id] == ["once-0"]
