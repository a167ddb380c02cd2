"""The worker's ordinary steps run as one database round trip each (ledger/fastpath.py).

The database functions must be the ones ledger/stepsql.py generates from ledger/states.py, must
write exactly what the general Python path writes, and must decline (change nothing) in every
case the general path refuses or treats specially.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations import RunSQL, SeparateDatabaseAndState
from django.db.models import DateTimeField
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from ledger import fastpath, services, stepsql
from ledger.actions import _registry
from ledger.invariants import find_violations, first_broken_event
from ledger.models import Attempt, Job, LedgerEvent
from ledger.services import Lease, snapshot
from ledger.states import Execution
from reconciliation import decisions
from reconciliation.recovery import hold_for_recovery
from tests.conftest import expire_lease, latest_attempt, make_job

pytestmark = pytest.mark.django_db


# -- the functions in the database are the generated ones ---------------------------------------


def _normalised(sql: str) -> str:
    """Whitespace is layout, in PL/pgSQL as in SQL: compare the tokens."""
    return " ".join(sql.split())


def _migration_to_write() -> str:
    loader = MigrationLoader(None, ignore_no_migrations=True)
    (_, leaf), = loader.graph.leaf_nodes("ledger")
    return (
        f"write migration ledger/migrations/{int(leaf[:4]) + 1:04d}_….py (after {leaf}): "
        "migrations.RunSQL with the text of [f.create_sql for f in ledger.stepsql.step_functions()] "
        "frozen into it (a migration never imports the generator), and the previous text as its reverse; "
        "print the text with: python manage.py shell -c \"from ledger.stepsql import step_functions; "
        "print(*(f.create_sql for f in step_functions()))\""
    )


def _sql_statements(operations):
    for operation in operations:
        if isinstance(operation, RunSQL):
            statements = [operation.sql] if isinstance(operation.sql, str) else operation.sql
            yield from (s if isinstance(s, str) else s[0] for s in statements)
        elif isinstance(operation, SeparateDatabaseAndState):
            yield from _sql_statements(operation.database_operations)


def _frozen_in_migrations() -> dict[str, tuple[str, str]]:
    """Each step function's text as the last migration (in the order they apply) froze it."""
    loader = MigrationLoader(None, ignore_no_migrations=True)
    (leaf,) = loader.graph.leaf_nodes("ledger")
    frozen = {}
    for key in loader.graph.forwards_plan(leaf):
        for statement in _sql_statements(loader.graph.nodes[key].operations):
            created = re.search(r"CREATE (?:OR REPLACE )?FUNCTION (\w+)\(", statement)
            if created:
                frozen[created[1]] = (key[1], statement)
    return frozen


def _drift_from_migrations(generated: list[stepsql.StepFunction]) -> list[str]:
    frozen = _frozen_in_migrations()
    return [
        f"{f.name}: ledger/stepsql.py generates a different function than migration "
        f"{frozen[f.name][0] if f.name in frozen else '(none)'} froze; {_migration_to_write()}"
        for f in generated
        if f.name not in frozen or _normalised(frozen[f.name][1]) != _normalised(f.create_sql)
    ]


def _drift_from_database(generated: list[stepsql.StepFunction]) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT p.proname, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),
                      l.lanname, p.prosrc
               FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
               WHERE p.proname = ANY(%s) AND pg_function_is_visible(p.oid)""",
            [[f.name for f in generated]],
        )
        installed = {}
        for name, *definition in cursor.fetchall():
            installed.setdefault(name, []).append([_normalised(part) for part in definition])
    expected = {f.name: [[_normalised(part) for part in (f.arguments, f.RESULT, f.LANGUAGE, f.body)]]
                for f in generated}
    return [
        f"{name}: the database's function is not the one ledger/stepsql.py generates; {_migration_to_write()}"
        for name in expected
        if installed.get(name) != expected[name]
    ]


def test_the_installed_step_functions_are_the_generated_ones():
    assert _drift_from_database(stepsql.step_functions()) == []


def test_the_latest_migration_freezes_the_generated_step_functions():
    assert _drift_from_migrations(stepsql.step_functions()) == []


def test_a_rule_changed_in_python_but_not_in_a_migration_fails_and_says_which_migration_to_write(monkeypatch):
    monkeypatch.setattr(stepsql, "FINISHED_JOB", stepsql.FINISHED_JOB[:2])  # e.g. a cancelled job claimable
    changed = stepsql.step_functions()
    for drift in (_drift_from_database(changed), _drift_from_migrations(changed)):
        # the rule is the one-job claim's and the batch claim's (one rule, read by both)
        assert [d.split(":")[0] for d in drift] == ["reckon_claim", "reckon_claim_many"]
        assert re.search(r"write migration ledger/migrations/\d{4}_…\.py \(after \d{4}_\w+\)", drift[0])


def test_the_functions_snapshot_is_the_python_paths_snapshot():
    make_job("j")
    lease = services.claim_job(job_id="j", worker="w1")
    job, attempt = Job.objects.get(job_id="j"), Attempt.objects.get(pk=lease.attempt_id)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {stepsql.snapshot_sql('j.status')} FROM ledger_attempt a "
                       "JOIN ledger_job j ON j.id = a.job_id WHERE a.id = %s", [attempt.pk])
        assert json.loads(cursor.fetchone()[0]) == snapshot(job, attempt)
        pinned = {"delivery_state": "queued", "execution_state": "not_started", "side_effect_state": "not_attempted"}
        before = stepsql.snapshot_sql("'pending'", **pinned)  # the job's status as a literal too
        cursor.execute(f"SELECT {before} FROM ledger_attempt a WHERE a.id = %s", [attempt.pk])
        assert json.loads(cursor.fetchone()[0]) == snapshot(Job(status="pending"), Attempt(number=1, **pinned))


def test_the_before_snapshot_is_pinned_only_where_the_check_constraints_leave_one_state():
    with pytest.raises(ValueError, match="more than one state"):
        stepsql.states_before(Execution.RUNNING)  # not_attempted or submitted: the old row would be needed
    assert stepsql.states_before(Execution.RUNNING, "submitted") == {
        "delivery_state": "leased", "execution_state": "running", "side_effect_state": "submitted"}


# -- the same scenario through the functions and through the Python path ------------------------

ISO_TIME = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d|Z)?")
ROW_IDS = {"approval_request"}  # evidence naming another table's row by its primary key


def _scrubbed(value):
    """Times inside text (a lease's expiry in a note) and row ids inside evidence differ between
    two runs; nothing else may."""
    if isinstance(value, str):
        return ISO_TIME.sub("<time>", value)
    if isinstance(value, dict):
        return {k: "<id>" if k in ROW_IDS else _scrubbed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrubbed(v) for v in value]
    return value


def _columns(obj) -> dict:
    """Every column but the primary key and the hashes: a foreign key as the row it names, a time
    as whether it is set (updated_at: whether the row changed after it was inserted)."""
    row = {}
    for field in type(obj)._meta.concrete_fields:
        if field.primary_key or field.name in ("hash", "prev_hash"):
            continue
        value = getattr(obj, field.name)
        if isinstance(value, Job):
            value = value.job_id
        elif isinstance(value, Attempt):
            value = (value.job.job_id, value.number)
        elif isinstance(field, DateTimeField):
            value = value is not None if field.name != "updated_at" else value != obj.created_at
        row[field.name] = _scrubbed(value)
    return row


def _written() -> dict:
    events = list(LedgerEvent.objects.select_related("job", "attempt__job").order_by("id"))
    previous_hash = {}
    chain = []
    for event in events:  # the hash chain's shape: each event links to its job's previous one
        chain.append((event.prev_hash == previous_hash.get(event.job_id, ""), len(event.hash) == 64))
        previous_hash[event.job_id] = event.hash
    assert all(first_broken_event(job.pk) is None for job in Job.objects.all())
    return {
        "jobs": [_columns(job) for job in Job.objects.order_by("job_id")],
        "attempts": [_columns(a) for a in Attempt.objects.select_related("job").order_by("job__job_id", "number")],
        "events": [_columns(event) for event in events],
        "chain": chain,
    }


def _ledger_rows() -> tuple:
    return (list(Job.objects.values().order_by("id")), list(Attempt.objects.values().order_by("id")),
            list(LedgerEvent.objects.values().order_by("id")))


class Run:
    """Runs a scenario's steps and keeps what each returned, or how it was refused."""

    def __init__(self) -> None:
        self.outcomes: list = []

    def __call__(self, service, **kwargs):
        result = service(**kwargs)
        if isinstance(result, Lease):
            self.outcomes.append((service.__name__, result.attempt_number, result.owner, result.token))
        else:
            self.outcomes.append((service.__name__, _columns(result) if isinstance(result, Attempt) else result))
        return result

    def refused(self, service, error: type, recorded: list[str], **kwargs) -> None:
        """The step is refused with `error`, having recorded exactly the events `recorded`."""
        seen = LedgerEvent.objects.count()
        with pytest.raises(services.LedgerError) as refusal:
            service(**kwargs)
        assert type(refusal.value) is error, refusal.value
        kinds = list(LedgerEvent.objects.order_by("id").values_list("kind", flat=True)[seen:])
        assert kinds == recorded, (service.__name__, str(refusal.value))
        self.outcomes.append((service.__name__, error.__name__, _scrubbed(str(refusal.value)),
                              getattr(refusal.value, "reason", None)))


SCENARIOS = {}


def scenario(*fast_calls: str):
    """A scenario, with what the fast path must do at each step call: `claim` took the step,
    `claim:declined` returned no row and changed nothing."""
    def register(steps):
        SCENARIOS[steps.__name__] = (steps, list(fast_calls))
        return steps
    return register


def _cycle(run: Run, *, by: str = "w1") -> Lease:
    lease = run(services.claim_job, job_id="j", worker=by)
    run(services.begin_side_effect, lease=lease)
    run(services.record_success, lease=lease, result_ref="ref-1", evidence={"provider_id": "p-1"})
    return lease


def _vault_job(*, snapshot: bool = True) -> None:
    """An irreversible job; without `snapshot`, one enqueued before jobs kept their policy."""
    make_job("j", action="vault.rotate_credential", payload={"name": "db"})
    if not snapshot:
        Job.objects.filter(job_id="j").update(policy=None)


# The ordinary cases: the functions take the steps.

@scenario("claim", "begin", "succeed")
def a_plain_job(run):
    make_job("j")
    lease = run(services.claim_job, job_id="j", worker="w1")
    run(services.begin_side_effect, lease=lease)
    run(services.record_success, lease=lease, result_ref="ref-" + "x" * 600, evidence={"provider_id": "p-1"})


@scenario("claim", "begin", "succeed")
def a_job_whose_worker_says_where_it_sends_the_effect(run):
    make_job("j")
    lease = run(services.claim_job, job_id="j", worker="w1")
    run(services.begin_side_effect, lease=lease, sent_to="https://u:secret@billing.example:8443/acct_1?key=k")
    run(services.record_success, lease=lease, result_ref="ref-1")


@scenario("claim:declined", "begin:declined", "succeed")
def a_job_enqueued_irreversible_says_where_it_sends_the_effect_on_the_python_path(run):
    _vault_job()
    lease = run(services.claim_job, job_id="j", worker="w1")
    run(services.begin_side_effect, lease=lease, sent_to="smtp://mail.example:587")
    run(services.record_success, lease=lease, result_ref="ref-1")


@scenario("claim", "begin", "succeed")
def an_identity_bound_job(run):
    make_job("j", identity={"account": "acme"})
    lease = run(services.claim_job, job_id="j", worker="w1")
    run(services.verify_identity, lease=lease, observed={"account": "acme"})
    run(services.begin_side_effect, lease=lease)
    run(services.record_success, lease=lease, result_ref="ref-1")


@scenario("claim", "begin", "claim", "begin", "succeed")
def a_second_attempt_after_a_retryable_failure(run):
    make_job("j")
    lease = run(services.claim_job, job_id="j", worker="w1")
    run(services.begin_side_effect, lease=lease)
    run(services.record_failure, lease=lease, error="provider said 429", retryable=True, evidence={"status": 429})
    _cycle(run, by="w2")


@scenario("claim", "claim:declined", "begin", "succeed")
def a_second_attempt_after_an_expired_lease(run):
    make_job("j")
    run(services.claim_job, job_id="j", worker="w1")
    expire_lease("j")
    _cycle(run, by="w2")  # the Python path dead-letters attempt 1 and leases attempt 2


@scenario("claim", "claim", "begin", "succeed")
def a_second_attempt_after_the_sweeper_reclaimed_the_first(run):
    make_job("j")
    run(services.claim_job, job_id="j", worker="w1")
    expire_lease("j")
    services.sweep_expired_leases()
    _cycle(run, by="w2")


@scenario("claim", "begin", "succeed")
def a_result_after_the_lease_expired_but_before_anyone_took_over(run):
    make_job("j")
    lease = run(services.claim_job, job_id="j", worker="w1")
    run(services.begin_side_effect, lease=lease)
    expire_lease("j")
    run(services.record_success, lease=lease, result_ref="ref-late")


# reckon_claim declines.

@scenario("claim:declined")
def a_claim_of_no_such_job(run):
    make_job("j")
    run.refused(services.claim_job, services.LedgerError, [], job_id="nope", worker="w1")


@scenario("claim", "begin", "succeed", "claim:declined")
def a_claim_of_a_finished_job(run):
    make_job("j")
    _cycle(run)
    run.refused(services.claim_job, services.ClaimRefused, ["duplicate_delivery"], job_id="j", worker="w2")


@scenario("claim", "claim:declined")
def a_claim_during_a_live_lease_held_by_another(run):
    make_job("j")
    run(services.claim_job, job_id="j", worker="w1")
    run.refused(services.claim_job, services.ClaimRefused, ["duplicate_delivery"], job_id="j", worker="w2")


@scenario("claim", "begin", "claim:declined")
def a_claim_after_a_lease_expired_during_its_side_effect(run):
    make_job("j")
    lease = run(services.claim_job, job_id="j", worker="w1")
    run(services.begin_side_effect, lease=lease)
    expire_lease("j")
    run.refused(services.claim_job, services.ClaimRefused, ["lease_expired_unknown", "claim_refused"],
                job_id="j", worker="w2")


@scenario("claim", "claim:declined", "claim:declined", "claim:declined")
def a_claim_after_the_last_attempt_expired(run):
    make_job("j")
    for worker_name in ("w1", "w2", "w3"):
        run(services.claim_job, job_id="j", worker=worker_name)
        expire_lease("j")
    run.refused(services.claim_job, services.ClaimRefused, ["lease_expired_reclaimed", "attempts_exhausted"],
                job_id="j", worker="w4")


@scenario("claim:declined")
def a_claim_of_a_job_enqueued_irreversible_whose_action_is_declared_reversible_since(run):
    _vault_job()  # its snapshot says irreversible
    was = _registry["vault.rotate_credential"]
    _registry[was.name] = replace(was, reversible=True)  # so the gate would not hold the action now
    try:
        with override_settings(RECKON_GATE_BOUND_S=60):  # no sweeper or reconciler pass recorded
            run.refused(services.claim_job, services.ClaimRefused, ["claim_refused"], job_id="j", worker="w1")
    finally:
        _registry[was.name] = was


@scenario("claim:declined", "begin:declined", "succeed")
def a_cycle_of_a_job_enqueued_irreversible_takes_the_python_path_until_its_result(run):
    _vault_job()
    _cycle(run)


@scenario("claim:declined")
def a_claim_of_an_irreversible_action_while_the_gate_is_closed(run):
    _vault_job()
    with override_settings(RECKON_GATE_BOUND_S=60):  # no sweeper or reconciler pass recorded
        run.refused(services.claim_job, services.ClaimRefused, ["claim_refused"], job_id="j", worker="w1")


@scenario("claim:declined")
def a_claim_under_recovery(run):
    make_job("j")
    hold_for_recovery(window_minutes=5)
    run.refused(services.claim_job, services.ClaimRefused, ["claim_refused"], job_id="j", worker="w1")


@scenario("claim", "claim:declined")
def a_claim_of_a_blocked_attempt(run):
    make_job("j", identity={"account": "acme"})
    lease = run(services.claim_job, job_id="j", worker="w1")
    run.refused(services.verify_identity, services.IdentityMismatch, ["identity_mismatch"],
                lease=lease, observed={"account": "someone-else"})
    run.refused(services.claim_job, services.ClaimRefused, ["claim_refused"], job_id="j", worker="w2")


@scenario("claim", "begin", "claim:declined")
def a_claim_while_the_previous_attempt_is_unknown(run):
    make_job("j")
    lease = run(services.claim_job, job_id="j", worker="w1")
    run(services.begin_side_effect, lease=lease)
    run(services.record_unknown, lease=lease, reason="connection reset after sending")
    run.refused(services.claim_job, services.ClaimRefused, ["claim_refused"], job_id="j", worker="w2")


@scenario("claim", "begin", "claim:declined")
def a_claim_while_an_irreversible_replay_awaits_approval(run):
    _vault_job(snapshot=False)
    lease = run(services.claim_job, job_id="j", worker="w1")
    run(services.begin_side_effect, lease=lease)
    run(services.record_unknown, lease=lease, reason="timeout")
    decisions.mark_not_found(job_id="j", version=latest_attempt("j").version,
                            user=User.objects.create_user("olga"), note="not at the provider")
    run.refused(services.claim_job, services.ClaimRefused, ["claim_refused"], job_id="j", worker="w2")


# reckon_begin declines.

@scenario("begin:declined")
def a_begin_for_no_such_job(run):
    make_job("j")
    lease = Lease("nope", 1, 1, "w1", 1, None)
    run.refused(services.begin_side_effect, services.LedgerError, [], lease=lease)


@scenario("claim", "begin:declined")
def a_begin_with_a_stale_token(run):
    make_job("j")
    lease = run(services.claim_job, job_id="j", worker="w1")
    run.refused(services.begin_side_effect, services.StaleLease, ["late_write_rejected"],
                lease=replace(lease, token=lease.token + 1))


@scenario("claim", "begin:declined")
def a_begin_by_another_owner(run):
    make_job("j")
    lease = run(services.claim_job, job_id="j", worker="w1")
    run.refused(services.begin_side_effect, services.StaleLease, ["late_write_rejected"],
                lease=replace(lease, owner="w2"))


@scenario("claim", "begin:declined")
def a_begin_after_the_lease_expired(run):
    make_job("j")
    lease = run(services.claim_job, job_id="j", worker="w1")
    expire_lease("j")
    run.refused(services.begin_side_effect, services.StaleLease, ["late_write_rejected"], lease=lease)


@scenario("claim", "claim:declined", "begin:declined")
def a_begin_after_another_worker_took_over(run):
    make_job("j")
    lease = run(services.claim_job, job_id="j", worker="w1")
    expire_lease("j")
    run(services.claim_job, job_id="j", worker="w2")
    run.refused(services.begin_side_effect, services.StaleLease, ["late_write_rejected"], lease=lease)


@scenario("claim", "begin", "succeed", "begin:declined")
def a_begin_of_a_finished_job(run):
    make_job("j")
    lease = _cycle(run)
    run.refused(services.begin_side_effect, services.StaleLease, ["late_write_rejected"], lease=lease)


@scenario("claim", "begin:declined")
def a_begin_under_recovery(run):
    make_job("j")
    lease = run(services.claim_job, job_id="j", worker="w1")
    hold_for_recovery(window_minutes=5)
    run.refused(services.begin_side_effect, services.LedgerError, [], lease=lease)


@scenario("claim", "begin", "begin:declined")
def a_begin_when_the_side_effect_was_already_submitted(run):
    make_job("j")
    lease = run(services.claim_job, job_id="j", worker="w1")
    run(services.begin_side_effect, lease=lease)
    run.refused(services.begin_side_effect, services.LedgerError, [], lease=lease)


@scenario("claim", "begin:declined")
def a_begin_before_the_identity_is_verified(run):
    make_job("j", identity={"account": "acme"})
    lease = run(services.claim_job, job_id="j", worker="w1")
    run.refused(services.begin_side_effect, services.LedgerError, [], lease=lease)


@scenario("claim", "begin:declined")
def a_begin_of_an_irreversible_action_after_the_gate_closed(run):
    _vault_job(snapshot=False)
    lease = run(services.claim_job, job_id="j", worker="w1")  # the gate is off: the claim is fast
    with override_settings(RECKON_GATE_BOUND_S=60):
        run.refused(services.begin_side_effect, services.GateClosed, ["side_effect_held"], lease=lease)


# reckon_succeed declines.

@scenario("succeed:declined")
def a_success_for_no_such_job(run):
    make_job("j")
    lease = Lease("nope", 1, 1, "w1", 1, None)
    run.refused(services.record_success, services.LedgerError, [], lease=lease, result_ref="r")


@scenario("claim", "begin", "succeed:declined")
def a_success_with_a_stale_token(run):
    make_job("j")
    lease = run(services.claim_job, job_id="j", worker="w1")
    run(services.begin_side_effect, lease=lease)
    run.refused(services.record_success, services.StaleLease, ["late_write_rejected"],
                lease=replace(lease, token=lease.token - 1), result_ref="r", evidence={"provider_id": "p"})


@scenario("claim", "begin", "succeed:declined")
def a_success_by_another_owner(run):
    make_job("j")
    lease = run(services.claim_job, job_id="j", worker="w1")
    run(services.begin_side_effect, lease=lease)
    run.refused(services.record_success, services.StaleLease, ["late_write_rejected"],
                lease=replace(lease, owner="w2"), result_ref="r")


@scenario("claim", "succeed:declined")
def a_success_before_the_side_effect_began(run):
    make_job("j")
    lease = run(services.claim_job, job_id="j", worker="w1")
    run.refused(services.record_success, services.LedgerError, [], lease=lease, result_ref="r")


@scenario("claim", "begin", "succeed:declined")
def a_success_after_the_sweeper_marked_the_attempt_unknown(run):
    make_job("j")
    lease = run(services.claim_job, job_id="j", worker="w1")
    run(services.begin_side_effect, lease=lease)
    expire_lease("j")
    services.sweep_expired_leases()
    run.refused(services.record_success, services.StaleLease, ["late_write_rejected"], lease=lease,
                result_ref="r", evidence={"provider_id": "p-late"})


@scenario("claim", "begin", "succeed", "succeed:declined")
def a_second_success_of_a_finished_job(run):
    make_job("j")
    lease = _cycle(run)
    run.refused(services.record_success, services.StaleLease, ["late_write_rejected"], lease=lease, result_ref="r2")


def _watched(calls: list):
    """The real step call; a call that returns no row must have changed nothing."""
    run_step = fastpath.run_step

    def watched(step, params):
        before = _ledger_rows()
        row = run_step(step, params)
        if row is None:
            assert _ledger_rows() == before, f"{step} declined but changed the ledger"
        calls.append(step + ("" if row is not None else ":declined"))
        return row
    return watched


def _declining(calls: list):
    """The fast path returns no row: the general Python path does every step."""
    def declining(step, params):
        calls.append(step + ":declined")
    return declining


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_functions_write_exactly_what_the_python_path_writes(name, monkeypatch):
    steps, fast_calls = SCENARIOS[name]
    results = {}
    for path, call_step in (("fast", _watched), ("python", _declining)):
        calls = []
        # Both runs start from the same empty ledger and end rolled back, so job ids, keys and
        # notes are identical; only ids, times and hashes can differ.
        with monkeypatch.context() as patched, transaction.atomic():
            patched.setattr(fastpath, "run_step", call_step(calls))
            run = Run()
            steps(run)
            results[path] = (run.outcomes, _written(), calls)
            assert [finding.check for finding in find_violations() if finding.count] == []
            transaction.set_rollback(True)
    (fast_outcomes, fast_written, calls), (python_outcomes, python_written, python_calls) = (
        results["fast"], results["python"])
    assert calls == fast_calls
    assert [call.split(":")[0] for call in python_calls] == [call.split(":")[0] for call in calls]
    assert fast_outcomes == python_outcomes
    assert _differences(fast_written, python_written) == []


def _differences(fast: dict, python: dict) -> list:
    """(table, row, column, fast path's value, Python path's value) wherever the two differ."""
    differences = []
    for table in fast:
        if len(fast[table]) != len(python[table]):
            differences.append((table, "rows", len(fast[table]), len(python[table])))
            continue
        for n, (a, b) in enumerate(zip(fast[table], python[table], strict=True)):
            if isinstance(a, dict):
                differences += [(table, n, key, a[key], b.get(key)) for key in a if a[key] != b.get(key)]
            elif a != b:
                differences.append((table, n, a, b))
    return differences


def test_every_step_function_is_exercised_both_ways():
    done = {call for _, calls in SCENARIOS.values() for call in calls}
    assert done >= {"claim", "begin", "succeed", "claim:declined", "begin:declined", "succeed:declined"}


def _two_steps(run: Run) -> Lease:
    lease = run(services.claim_job, job_id="j", worker="w1")
    run(services.begin_side_effect, lease=lease)
    return lease


def _one_statement(run: Run) -> Lease:
    return run(services.claim_and_begin, job_id="j", worker="w1")


@pytest.mark.parametrize("way", ["fast", "python"])
def test_claim_and_begin_in_one_statement_writes_what_the_two_steps_write(way, monkeypatch):
    written, calls = {}, {}
    for name, claim_and_begin in (("two steps", _two_steps), ("one statement", _one_statement)):
        seen = calls[name] = []
        with monkeypatch.context() as patched, transaction.atomic():
            patched.setattr(fastpath, "run_step", (_watched if way == "fast" else _declining)(seen))
            make_job("j")
            run = Run()
            lease = claim_and_begin(run)
            run(services.record_success, lease=lease, result_ref="r")
            written[name] = _written()
            transaction.set_rollback(True)
    assert _differences(written["one statement"], written["two steps"]) == []
    if way == "fast":
        assert (calls["two steps"], calls["one statement"]) == (["claim", "begin", "succeed"], ["claim_begin", "succeed"])


def test_a_claim_whose_begin_the_statement_declines_stays_claimed_and_begin_says_why():
    make_job("j", identity={"account": "a"})  # begin waits for the identity to be verified

    with pytest.raises(services.LedgerError, match="verify it before any side effect"):
        services.claim_and_begin(job_id="j", worker="w1")

    attempt = latest_attempt("j")
    assert (attempt.execution_state, attempt.side_effect_state, attempt.lease_owner) == (
        Execution.RUNNING, "not_attempted", "w1")


# -- the fast path's own properties ---------------------------------------------------------------


def test_each_ordinary_step_is_one_round_trip():
    make_job("j")
    with CaptureQueriesContext(connection) as claim:
        lease = services.claim_job(job_id="j", worker="w1")
    with CaptureQueriesContext(connection) as begin:
        services.begin_side_effect(lease=lease)
    with CaptureQueriesContext(connection) as success:
        services.record_success(lease=lease, result_ref="r")
    assert [len(q.captured_queries) for q in (claim, begin, success)] == [1, 1, 1]
    assert latest_attempt("j").execution_state == "succeeded"


def test_irreversible_work_is_never_offered_to_the_functions_while_the_gate_may_hold_it(settings):
    settings.RECKON_GATE_BOUND_S = 60
    assert "vault.rotate_credential" not in fastpath.ungated_actions().obj
    assert "reckon.echo" in fastpath.ungated_actions().obj


def test_a_claim_inside_a_larger_transaction_leaves_that_transaction_durable():
    """Only a claim that is its own transaction commits without waiting for the WAL flush."""
    make_job("j")
    services.claim_job(job_id="j", worker="w1")  # the test runs inside a transaction
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('synchronous_commit')")
        assert cursor.fetchone()[0] == "on"
        cursor.execute("SELECT * FROM reckon_claim('nope', 'w', '{}'::jsonb, true)")  # declines before any change
        cursor.execute("SELECT current_setting('synchronous_commit')")
        assert cursor.fetchone()[0] == "on"


def test_the_step_calls_are_prepared_once_per_connection_and_nothing_else_is():
    for n in range(7):
        make_job(f"p{n}")
        lease = services.claim_job(job_id=f"p{n}", worker="w1")
        services.begin_side_effect(lease=lease)
        services.record_success(lease=lease, result_ref="r")
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert sorted(name for name in ("reckon_claim", "reckon_begin", "reckon_succeed")
                  if any(name in statement for statement in prepared)) == [
        "reckon_begin", "reckon_claim", "reckon_succeed"]
    assert all("reckon_" in statement for statement in prepared), prepared  # Django's own queries are not
