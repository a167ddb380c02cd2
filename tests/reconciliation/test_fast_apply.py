"""The common outcomes applied in the database (reconciliation/fastpath.py) write what the Python
path writes: the same transitions, checks and events (kinds, notes, evidence, before/after), the
hash chain intact, the same replays dispatched; a stale finding is refused for its job alone."""

from __future__ import annotations

import json
import random
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations import RunSQL
from django.test.utils import CaptureQueriesContext
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from approvals.models import ApprovalRequest
from ledger.actions import Action, _registry, register
from ledger.invariants import first_broken_event
from ledger.models import Attempt, Job, LedgerEvent
from reconciliation import fastpath
from reconciliation.applying import apply_looks
from reconciliation.findings import Finding
from reconciliation.lookups import Look
from reconciliation.models import CheckOutcome, ReconciliationCheck
from sandbox.demo_actions import send_mail
from tests.conftest import latest_attempt
from tests.reconciliation.helpers import MAIL, assert_ledger_clean, unknown_job

pytestmark = pytest.mark.django_db

REASON = "the provider has no message with this marker; the key was never used"


@pytest.fixture
def irreversible_mail():
    register(Action(name="test.fast_irreversible_mail", executor=send_mail, queryable=True, reversible=False,
                    reconciler="sandbox.reconcilers.mail", lease_ttl=timedelta(seconds=30)))
    yield "test.fast_irreversible_mail"
    _registry.pop("test.fast_irreversible_mail")


def _normalised(sql: str) -> str:
    return " ".join(sql.split())


# -- the function in the database is the generated one --------------------------------------------


def test_the_installed_function_is_the_generated_one():
    generated = fastpath.apply_function()
    with connection.cursor() as cursor:
        cursor.execute("""SELECT pg_get_function_arguments(p.oid), pg_get_function_result(p.oid), p.prosrc
                          FROM pg_proc p WHERE p.proname = %s""", [generated.name])
        installed = cursor.fetchall()
    assert [[_normalised(part) for part in row] for row in installed] == [
        [_normalised(generated.arguments), _normalised(generated.result), _normalised(generated.body)]
    ], ("the database's reckon_reconcile_apply is not the one reconciliation/fastpath.py generates: freeze "
        "apply_function().create_sql in a new reconciliation migration")


def test_the_latest_migration_freezes_the_generated_function():
    loader = MigrationLoader(None, ignore_no_migrations=True)
    (leaf,) = loader.graph.leaf_nodes("reconciliation")
    frozen = None
    for key in loader.graph.forwards_plan(leaf):
        for operation in loader.graph.nodes[key].operations:
            if isinstance(operation, RunSQL) and isinstance(operation.sql, str) \
                    and re.search(r"FUNCTION reckon_reconcile_apply\(", operation.sql):
                frozen = operation.sql
    assert frozen is not None and _normalised(frozen) == _normalised(fastpath.apply_function().create_sql)


# -- twins: the same findings applied both ways --------------------------------------------------


def _twins(prefix: str, irreversible: str) -> dict[str, str]:
    """Unknown jobs, one per case; returns case -> job id."""
    jobs = {case: f"{prefix}{case}" for case in (
        "confirmed", "not_found", "unavailable", "unavailable_again", "not_asked", "last_look", "conflict",
        "irreversible", "stale", "exhausted")}
    for case, job_id in jobs.items():
        unknown_job(job_id, irreversible if case == "irreversible" else "mail.send", MAIL)
    Job.objects.filter(job_id=jobs["unavailable_again"]).update(check_count=2)
    Job.objects.filter(job_id=jobs["last_look"]).update(check_count=4)  # RECKON_RECONCILE_MAX_CHECKS - 1
    Job.objects.filter(job_id=jobs["exhausted"]).update(policy={**Job.objects.get(job_id=jobs["exhausted"]).policy,
                                                                 "max_attempts": 1})
    return jobs


def _looks(jobs: dict[str, str]) -> list[Look]:
    def look(case: str, finding: Finding) -> Look:
        job = Job.objects.get(job_id=jobs[case])
        return Look(job, latest_attempt(job.job_id), "tests.reconciler", finding, duration_ms=7)

    unavailable = Finding(CheckOutcome.UNAVAILABLE, "provider answered 503", {"status": 503}, asked="mail.example")
    return [
        look("confirmed", Finding(CheckOutcome.CONFIRMED, "found by marker", {"message_id": "m-1"},
                                  result_ref="m-1", asked="mail.example")),
        look("not_found", Finding(CheckOutcome.NOT_FOUND, REASON, {"searched": ["marker"]})),
        look("unavailable", unavailable),
        look("unavailable_again", unavailable),
        look("not_asked", Finding(CheckOutcome.UNAVAILABLE, "rate limited here", retry_in=2.0)),
        look("last_look", unavailable),
        look("conflict", Finding(CheckOutcome.CONFLICT, "found with another body", {"body": "x"})),
        look("irreversible", Finding(CheckOutcome.NOT_FOUND, REASON)),
        look("stale", Finding(CheckOutcome.CONFIRMED, "found, late", result_ref="m-2")),
        look("exhausted", Finding(CheckOutcome.NOT_FOUND, REASON)),
    ]


def _written(job_id: str, since: int) -> dict:
    """What applying wrote for a job, with its id (and the time-dependent schedule) taken out."""
    job = Job.objects.get(job_id=job_id)
    events = list(LedgerEvent.objects.filter(job=job, id__gt=since).order_by("id"))
    rows = []
    for event in events:
        evidence = dict(event.evidence)
        if "next_check_at" in evidence:  # the job's schedule, as the job has it
            assert evidence.pop("next_check_at") == job.next_check_at.isoformat()
        if "approval_request" in evidence:  # the request's own id
            assert evidence.pop("approval_request") == ApprovalRequest.objects.get(job=job).pk
        rows.append((event.kind, event.actor_type, event.actor, event.attempt.number if event.attempt else None,
                     event.before, event.after, event.note, evidence))
    attempts = [(a.number, a.delivery_state, a.execution_state, a.side_effect_state, a.result_ref, a.version)
                for a in Attempt.objects.filter(job=job).order_by("number")]
    checks = list(ReconciliationCheck.objects.filter(job=job).order_by("id").values_list(
        "attempt__number", "reconciler", "asked", "outcome", "evidence", "error", "duration_ms"))
    assert first_broken_event(job.pk) is None
    written = {"status": job.status, "check_count": job.check_count, "scheduled": job.next_check_at is not None,
               "recovery_pending": job.recovery_pending, "attempts": attempts, "events": rows, "checks": checks,
               "approval": ApprovalRequest.objects.filter(job=job).exists()}
    return json.loads(json.dumps(written, default=str).replace(job_id, "JOB"))


def _apply_twin(jobs: dict[str, str], *, python_only: bool, monkeypatch) -> tuple[list, dict, list]:
    looks = _looks(jobs)
    [stale] = apply_looks([looks[8]])  # the stale job is confirmed first: the batch's look of it is stale
    assert stale.applied == "succeeded"
    since = LedgerEvent.objects.order_by("-id").values_list("id", flat=True).first()
    OrmQ.objects.all().delete()
    seen = []
    real_apply = fastpath.apply

    def spied(rows):
        done = real_apply(rows)
        seen.extend(done)
        return done

    monkeypatch.setattr(fastpath, "apply", spied)
    if python_only:
        monkeypatch.setattr(fastpath, "prepare", lambda *args, **kwargs: None)
    random.seed(29)
    decisions = apply_looks(looks)
    monkeypatch.undo()
    written = {case: _written(job_id, since) for case, job_id in jobs.items()}
    dispatched = [SignedPackage.loads(row.payload)["args"][0] for row in OrmQ.objects.order_by("id")]
    summary = [(d.outcome, d.applied, d.note) for d in decisions]
    return summary, written, [seen, [job_id.split("-", 1)[1] for job_id in dispatched]]


def test_the_same_findings_applied_both_ways_write_the_same(settings, irreversible_mail, monkeypatch):
    settings.RECKON_DISPATCH = True
    settings.RECKON_RECONCILE_MAX_CHECKS = 5
    python_jobs, database_jobs = _twins("py-", irreversible_mail), _twins("db-", irreversible_mail)

    python = _apply_twin(python_jobs, python_only=True, monkeypatch=monkeypatch)
    database = _apply_twin(database_jobs, python_only=False, monkeypatch=monkeypatch)

    assert python[0] == database[0]  # the same decisions
    for case in python[1]:
        assert python[1][case] == database[1][case], case
    assert python[1] == database[1]  # the same states, attempts, checks and events, case by case
    assert python[2][1] == database[2][1] == ["not_found"]  # the one replay dispatched, both ways
    # The Python path never called the function; the database applied the common outcomes and
    # refused the stale finding alone; the rest (conflict, approval, last look, exhausted) is Python's.
    assert python[2][0] == []
    assert database[2][0] == ["succeeded", "replayed", "backed_off", "backed_off", "backed_off", "superseded"]
    applied = dict(zip(python_jobs, [d[1] for d in database[0]], strict=True))
    assert applied["stale"] == "superseded" and applied["confirmed"] == "succeeded"
    assert applied["conflict"] == "escalated" and applied["irreversible"] == "awaiting_approval"
    assert applied["last_look"] == "needs_operator" and applied["exhausted"] == "failed"
    assert database[1]["stale"]["checks"][-1][3] == "confirmed"  # the stale look is on record
    assert_ledger_clean()


def test_a_batch_of_common_findings_is_one_call_with_no_per_job_statements():
    jobs = [unknown_job(f"j{n}", "mail.send", MAIL) for n in range(20)]
    looks = [Look(job, latest_attempt(job.job_id), "tests.reconciler",
                  Finding(CheckOutcome.NOT_FOUND if n % 2 else CheckOutcome.CONFIRMED, REASON, result_ref="r"))
             for n, job in enumerate(jobs)]
    with CaptureQueriesContext(connection) as queries:
        decisions = apply_looks(looks)
    assert [d.applied for d in decisions] == ["succeeded", "replayed"] * 10
    statements = [q["sql"] for q in queries.captured_queries
                  if not q["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))]
    assert sum("reckon_reconcile_apply" in sql for sql in statements) == 1
    assert len(statements) <= 4, statements  # the function, the provider states' publication, no per-job rows
    assert_ledger_clean()


def test_a_declined_finding_takes_the_python_path_in_the_same_batch():
    """A job whose check count moved since it was looked up (not stale: the same attempt version)
    is left by the function to the transition layer, which judges it on what it reads now."""
    job = unknown_job("moved", "mail.send", MAIL)
    look = Look(job, latest_attempt("moved"), "tests.reconciler",
                Finding(CheckOutcome.UNAVAILABLE, "provider answered 503"))
    Job.objects.filter(job_id="moved").update(check_count=3)
    [decision] = apply_looks([look])
    assert decision.applied.startswith("retry in")
    job.refresh_from_db()
    assert job.check_count == 4  # counted from what the job says now, as the Python path does
    event = LedgerEvent.objects.filter(job=job).latest("id")
    assert event.kind == "reconciliation_unavailable" and event.evidence["check_count"] == 4
    assert ReconciliationCheck.objects.filter(job=job).count() == 1
