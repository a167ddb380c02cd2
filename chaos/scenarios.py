"""The failure-injection matrix of docs/architecture.md §12, with real processes and real signals.

Each scenario takes the world and a run number, injects its failure into real `qcluster`
workers (a named fault point makes a worker SIGSTOP itself; we then SIGKILL it there, or
SIGCONT it later), lets Reckon's own machinery recover, and returns what it observed.
"""

from __future__ import annotations

import io
import os
import random
import secrets
import signal
import subprocess
import sys
import time

from django_q.tasks import async_task

from chaos.checks import RunResult, evaluate, event_count, recover
from chaos.world import EXTERNAL_ACTION, ROOT, World, answers, kill, wait_until
from config.processes import ChildProcess, free_port
from ledger.actions import _registry
from ledger.declarations import load_actions_file
from ledger.models import Attempt, Job, LedgerEvent
from ledger.services import enqueue_job
from ledger.states import EventKind, Execution, JobStatus
from ledger.tasks import run_job
from reconciliation.models import CheckOutcome, ReconciliationCheck

MAIL = {"to": "ops@acme.example", "subject": "Receipt", "body": "Thanks for your order."}


def _invoice(n: int) -> dict:
    return {"customer": f"cus_{n}", "amount_cents": 1000 + n, "currency": "EUR", "description": "Plan"}


def _enqueue(job_id: str, action: str = "mail.send", payload: dict | None = None) -> str:
    enqueue_job(job_id=job_id, tenant="chaos", action=action, payload=payload or MAIL, actor="chaos")
    return job_id


def _end_recovery_windows() -> None:
    """An operator ends a restore scenario's recovery window once its run is checked: the runs and
    scenarios after it start outside recovery, as they would on a ledger that never lost history."""
    from ledger.services.recovery import end_recovery_windows

    end_recovery_windows(actor="chaos", note="the restore scenario's run is over and checked")


def _status(job_id: str) -> str:
    return Job.objects.get(job_id=job_id).status


def _expect(result: RunResult, ok: bool, message: str) -> None:
    if not ok:
        result.expectations.append(message)


class Scenario:
    name = ""
    summary = ""
    recover_timeout = 60.0
    needs_ha = False  # runs in an HaWorld (a Patroni cluster) instead of the single PostgreSQL

    def setup(self, world: World) -> None:
        """Start the workers this scenario's runs share."""

    def run(self, world: World, result: RunResult) -> list[str]:
        raise NotImplementedError

    def count_effects(self, world: World, job: Job) -> int:
        """The effects the provider holds for `job` (the HTTP sandbox's, by the job's marker)."""
        return world.sandbox.effects(marker=job.idempotency_key)["count"]


class CrashAtPoint(Scenario):
    """SIGKILL a worker stopped at a fault point; recovery must close the job with one effect."""

    point = ""
    expected_attempts = 1

    def setup(self, world):
        world.worker(self.name, fault_point=self.point, jobs=f"{self.name}-*", workers=2)

    def run(self, world, result):
        job_id = _enqueue(f"{self.name}-{result.seed}-{result.run}")
        pid = world.wait_for_fault(job_id, self.point)
        kill(pid)
        result.recover_seconds = recover([job_id], timeout=self.recover_timeout)
        _expect(result, _status(job_id) == JobStatus.SUCCEEDED, f"{job_id} ended {_status(job_id)}, not succeeded")
        attempts = Job.objects.get(job_id=job_id).attempts.count()
        _expect(result, attempts == self.expected_attempts,
                f"{job_id} used {attempts} attempts, expected {self.expected_attempts}")
        return [job_id]


class CrashBeforeCall(CrashAtPoint):
    name, point, expected_attempts = "crash_before_call", "before_call", 2
    summary = "killed before the external call -> reclaimed after lease expiry, one effect"


class CrashDuringCall(CrashAtPoint):
    name, point = "crash_during_call", "during_call"
    summary = "killed with the request on the wire -> unknown, reconciled by marker, one effect"


class CrashAfterSuccess(CrashAtPoint):
    name, point = "crash_after_provider_success", "after_provider_success"
    summary = "killed after the provider's 2xx, before the local write -> unknown, reconciled, one effect"


class CrashAfterLocalWrite(CrashAtPoint):
    name, point = "crash_after_local_write", "after_local_write"
    summary = "killed after the local write, before the queue's ack -> redelivered, refused as duplicate"
    recover_timeout = World.Q_RETRY + 30

    def run(self, world, result):
        [job_id] = super().run(world, result)
        # django-q2 never saw the ack: it redelivers after `retry`, and the ledger refuses it.
        started = time.monotonic()
        wait_until(lambda: event_count(job_id, "duplicate_delivery") >= 1, timeout=World.Q_RETRY + 30,
                   interval=0.2, what=f"django-q2 to redeliver {job_id}")
        result.recover_seconds = max(result.recover_seconds, time.monotonic() - started)
        return [job_id]


class DuplicateDelivery(Scenario):
    name = "duplicate_delivery"
    summary = "the same task delivered twice at once -> one attempt runs, the other is refused"

    def setup(self, world):
        world.worker(self.name, workers=2)

    def run(self, world, result):
        job_id = f"{self.name}-{result.seed}-{result.run}"
        _enqueue(job_id, "billing.create_invoice", _invoice(result.run))
        async_task(run_job, job_id, task_name=f"dup:{job_id}")
        result.recover_seconds = recover([job_id], timeout=self.recover_timeout)
        wait_until(lambda: event_count(job_id, "duplicate_delivery") >= 1, timeout=20,
                   what=f"the second delivery of {job_id} to be refused")
        _expect(result, _status(job_id) == JobStatus.SUCCEEDED, f"{job_id} ended {_status(job_id)}")
        return [job_id]


class SlowWorkerLeaseExpiry(Scenario):
    name = "slow_worker_lease_expiry"
    summary = "SIGSTOP past the lease, another worker takes over, SIGCONT -> late write rejected"

    def setup(self, world):
        # A long django-q2 timeout, so django-q2 does not kill the stopped worker for us.
        world.worker(self.name, fault_point="before_call", jobs=f"{self.name}-*", workers=2,
                     env={"RECKON_Q_TIMEOUT": "60", "RECKON_Q_RETRY": "90"})

    def run(self, world, result):
        job_id = _enqueue(f"{self.name}-{result.seed}-{result.run}")
        pid = world.wait_for_fault(job_id, "before_call")  # stopped, holding attempt 1's lease
        result.recover_seconds = recover([job_id], timeout=self.recover_timeout)  # reclaimed, attempt 2 runs
        os.kill(pid, signal.SIGCONT)  # the slow worker wakes up and tries to begin its side effect
        wait_until(lambda: event_count(job_id, "late_write_rejected") >= 1, timeout=20,
                   what=f"the slow worker's late write on {job_id} to be rejected")
        _expect(result, _status(job_id) == JobStatus.SUCCEEDED, f"{job_id} ended {_status(job_id)}")
        return [job_id]


class PostgresKilled(Scenario):
    name = "postgres_killed"
    summary = "PostgreSQL SIGKILLed mid-load and restarted -> every in-flight attempt ends correctly"
    recover_timeout = 90.0

    def run(self, world, result):
        world.sandbox.request("PUT", "/_admin/faults", {"latency": {"min": 0.05, "max": 0.3}})
        worker = world.worker(f"{self.name}-{result.run}", workers=2)
        job_ids = [_enqueue(f"{self.name}-{result.seed}-{result.run}-{n}",
                            *(("billing.create_invoice", _invoice(n)) if n % 2 else ("mail.send", MAIL)))
                   for n in range(10)]
        wait_until(lambda: Job.objects.filter(job_id__in=job_ids, status=JobStatus.SUCCEEDED).count() >= 2,
                   timeout=30, what="the load to be under way")
        world.kill_postgres()
        world.restart_postgres()
        if worker.process.poll() is not None:  # a cluster that died with its database is restarted
            worker = world.worker(f"{self.name}-{result.run}-again", workers=2)
        result.recover_seconds = recover(job_ids, timeout=self.recover_timeout)
        world.sandbox.request("PUT", "/_admin/faults", {"latency": {"min": 0, "max": 0}})
        world.stop_workers()
        return job_ids


class RandomKills(Scenario):
    name = "random_kills"
    summary = "whole worker clusters SIGKILLed at random moments during a mixed workload"
    recover_timeout = 120.0

    def run(self, world, result):
        rng = random.Random(result.seed * 1000 + result.run)  # nosec B311  # a seeded schedule of faults, reproducible on purpose; not security
        world.sandbox.request("PUT", "/_admin/faults", {"latency": {"min": 0.0, "max": 0.2}})
        job_ids = []
        for n in range(12):
            action, payload = [("mail.send", MAIL), ("billing.create_invoice", _invoice(n))][n % 2]
            job_ids.append(_enqueue(f"{self.name}-{result.seed}-{result.run}-{n}", action, payload))
        for kill_round in range(3):
            worker = world.worker(f"{self.name}-{result.run}-{kill_round}", workers=2)
            time.sleep(rng.uniform(0.5, 2.5))  # a random moment: the point of this scenario
            worker.kill()
        world.worker(f"{self.name}-{result.run}-survivor", workers=2)
        result.recover_seconds = recover(job_ids, timeout=self.recover_timeout)
        world.sandbox.request("PUT", "/_admin/faults", {"latency": {"min": 0, "max": 0}})
        world.stop_workers()
        return job_ids


class StateStoreRestore(Scenario):
    name = "state_store_restore"
    summary = "dump, more work, restore, recover -> reconciliation before any new side effect"
    recover_timeout = 90.0

    def run(self, world, result):
        from django.core.management import call_command
        from django.db import connections

        prefix = f"{self.name}-{result.seed}-{result.run}"
        worker = world.worker(f"{prefix}-before", workers=2)
        done = [_enqueue(f"{prefix}-a{n}", "billing.create_invoice", _invoice(n)) for n in range(2)]
        recover(done, timeout=30)
        worker.stop()
        # Queued when the backup is taken; they run (with effects) after it.
        queued = [_enqueue(f"{prefix}-b{n}", "mail.send", MAIL) for n in range(3)]
        dump = world.workdir / f"{prefix}.dump"
        _pg(world, "pg_dump", "-Fc", "-f", str(dump), world.database)
        worker = world.worker(f"{prefix}-between", workers=2)
        recover(queued, timeout=30)
        worker.stop()
        connections.close_all()
        _pg(world, "pg_restore", "--clean", "--if-exists", "-d", world.database, str(dump))
        # The restored ledger believes the queued jobs never ran; their tasks are queued again.
        started = time.monotonic()
        call_command("recover", verbosity=0, stdout=io.StringIO())
        after = world.worker(f"{prefix}-after", workers=2)
        recover(done + queued, timeout=self.recover_timeout)
        result.recover_seconds = time.monotonic() - started
        after.stop()  # no worker of this run may outlive it (the next run restores under it)
        _end_recovery_windows()
        return done + queued


class RestoreForgetsNewJobs(Scenario):
    """Jobs created after the backup run their effects; the ledger is restored from the backup (it
    has never heard of them); their agents retry the same keys. Nobody runs `recover`: the ledger
    must notice by itself that it went back in time, and look each retried key up first."""

    name = "restore_forgets_new_jobs"
    summary = ("jobs created after a pg_dump run their effects (every sandbox action), the ledger is "
               "restored, no command is run, the agents retry the same keys -> no second effect")
    recover_timeout = 90.0
    profile = {"profile": "chaos-social", "account": "chaos-brand"}

    def _workload(self, prefix: str) -> list[tuple[str, str, dict, dict]]:
        """(job id, action, payload, identity): every sandbox action, the non-idempotent relay twice."""
        return [
            (f"{prefix}-mail0", "mail.send", MAIL, {}),
            (f"{prefix}-mail1", "mail.send", {**MAIL, "to": "billing@acme.example"}, {}),
            (f"{prefix}-invoice", "billing.create_invoice", _invoice(7), {}),
            (f"{prefix}-post", "social.publish_post", {"body": "Release notes are out"}, self.profile),
            (f"{prefix}-vault", "vault.rotate_credential", {"name": f"{prefix}-db"}, {}),
        ]

    def run(self, world, result):
        from django.db import connections

        prefix = f"{self.name}-{result.seed}-{result.run}"
        world.sandbox.request("PUT", f"/_admin/profiles/{self.profile['profile']}",
                              {"account": self.profile["account"], "session": "active"})
        worker = world.worker(f"{prefix}-before", workers=2)
        done = [_enqueue(f"{prefix}-a{n}", "billing.create_invoice", _invoice(n)) for n in range(2)]
        recover(done, timeout=30)
        dump = world.workdir / f"{prefix}.dump"
        _pg(world, "pg_dump", "-Fc", "-f", str(dump), world.database)
        # After the backup: new jobs, and their effects at the providers.
        workload = self._workload(prefix)
        new = [self._agent(job_id, action, payload, identity) for job_id, action, payload, identity in workload]
        recover(new, timeout=30)
        worker.stop()
        ran = {job_id: _status(job_id) for job_id in new}
        _expect(result, set(ran.values()) == {JobStatus.SUCCEEDED}, f"before the restore: {ran}")
        connections.close_all()
        _pg(world, "pg_restore", "--clean", "--if-exists", "-d", world.database, str(dump))
        killed_at = time.monotonic()
        # No command: the agents retry the same keys, and the workers go on.
        after = world.worker(f"{prefix}-after", workers=2)
        for job_id, action, payload, identity in workload:
            self._agent(job_id, action, payload, identity)
        recover(done + new, timeout=self.recover_timeout)
        result.recover_seconds = time.monotonic() - killed_at
        after.stop()  # no worker of this run may outlive it (the next run restores under it)
        effects = {job_id: world.sandbox.effects(marker=Job.objects.get(job_id=job_id).idempotency_key)["count"]
                   for job_id in new}
        statuses = {job_id: _status(job_id) for job_id in new}
        result.figures = {
            "retried_keys": len(new),
            "second_effects": sum(max(0, count - 1) for count in effects.values()),
            "confirmed_by_lookup": sum(status == JobStatus.SUCCEEDED and effects[job_id] == 1
                                       for job_id, status in statuses.items()),
            "waiting_for_a_person": sum(status == JobStatus.NEEDS_OPERATOR for status in statuses.values()),
        }
        _expect(result, all(count == 1 for count in effects.values()),
                f"effects at the providers after the retries: {effects} (statuses {statuses})")
        _end_recovery_windows()
        return done + new

    @staticmethod
    def _agent(job_id: str, action: str, payload: dict, identity: dict) -> str:
        enqueue_job(job_id=job_id, tenant="chaos", action=action, payload=payload, identity=identity,
                    actor="chaos agent")
        return job_id


class ExternalWorkerKilled(Scenario):
    """A worker outside Reckon, speaking only HTTP, SIGKILLed with its provider call on the wire."""

    name = "external_worker_killed"
    summary = "an external HTTP worker SIGKILLed mid-call -> lease expires unknown, reconciled, one effect"

    def setup(self, world):
        from api.tokens import worker_token_create

        self.url = world.web(f"{self.name}-web")
        self.token = worker_token_create(name=self.name, tenants=["chaos"], actions=[EXTERNAL_ACTION]).token

    def run(self, world, result):
        prefix = f"{self.name}-{result.seed}-{result.run}"
        job_id = _enqueue(f"{prefix}-0", EXTERNAL_ACTION)
        armed = world.external_worker(f"{prefix}-armed", url=self.url, token=self.token,
                                      fault_point="during_call", jobs=job_id)
        try:
            kill(world.wait_for_fault(job_id, "during_call"))  # the request reached the provider; no answer read
        finally:
            armed.stop()
        # Work goes on: another external worker takes the next jobs; the killed one's is unknown.
        others = [_enqueue(f"{prefix}-{n}", EXTERNAL_ACTION) for n in (1, 2)]
        survivor = world.external_worker(f"{prefix}-survivor", url=self.url, token=self.token)
        try:
            result.recover_seconds = recover([job_id, *others], timeout=self.recover_timeout)
        finally:
            survivor.stop()
        for done in (job_id, *others):
            _expect(result, _status(done) == JobStatus.SUCCEEDED, f"{done} ended {_status(done)}, not succeeded")
        job = Job.objects.get(job_id=job_id)
        _expect(result, job.attempts.count() == 1, f"{job_id} used {job.attempts.count()} attempts, expected 1")
        _expect(result, job.events.filter(kind="lease_expired_unknown").exists(),
                f"{job_id} did not go through unknown: {list(job.events.values_list('kind', flat=True))}")
        return [job_id, *others]


class BatchedWorkerKilled(Scenario):
    """A batched worker over HTTP (N jobs per claim, begin and results request) SIGKILLed between
    the claim and the batch's begin, and another between the begin (every mail sent) and the results."""

    name = "batched_worker_killed"
    summary = ("a batched HTTP worker SIGKILLed after its claim (before begin) and after its sends (before "
               "the results) -> reclaimed / unknown and reconciled, one effect per job")
    batch = 4

    def setup(self, world):
        from api.tokens import worker_token_create

        self.url = world.web(f"{self.name}-web")
        self.token = worker_token_create(name=self.name, tenants=["chaos"], actions=[EXTERNAL_ACTION]).token

    def _killed_at(self, world, point: str, prefix: str) -> list[str]:
        """A batch of jobs, taken by an armed batched worker that is SIGKILLed at `point`."""
        job_ids = [_enqueue(f"{prefix}-{n}", EXTERNAL_ACTION) for n in range(self.batch)]
        armed = world.external_worker(f"{prefix}-armed", url=self.url, token=self.token, fault_point=point,
                                      jobs=f"{prefix}-*", batch=self.batch)
        try:
            kill(world.wait_for_fault(job_ids[0], point))
        finally:
            armed.stop()
        return job_ids

    def run(self, world, result):
        prefix = f"{self.name}-{result.seed}-{result.run}"
        claimed = self._killed_at(world, "before_call", f"{prefix}-claimed")
        sent = self._killed_at(world, "after_provider_success", f"{prefix}-sent")
        others = [_enqueue(f"{prefix}-more-{n}", EXTERNAL_ACTION) for n in range(self.batch + 1)]
        survivor = world.external_worker(f"{prefix}-survivor", url=self.url, token=self.token, batch=self.batch)
        try:
            result.recover_seconds = recover([*claimed, *sent, *others], timeout=self.recover_timeout)
        finally:
            survivor.stop()
        for job_id in (*claimed, *sent, *others):
            _expect(result, _status(job_id) == JobStatus.SUCCEEDED, f"{job_id} ended {_status(job_id)}, not succeeded")
        for job_id in claimed:  # nothing was begun: the lease ran out, the next attempt sent it once
            kinds = list(Job.objects.get(job_id=job_id).events.values_list("kind", flat=True))
            _expect(result, "lease_expired_reclaimed" in kinds and "observation_lost" not in kinds,
                    f"{job_id} was not reclaimed unbegun: {kinds}")
        for job_id in sent:  # begun and sent, never recorded: unknown, then confirmed by its marker
            job = Job.objects.get(job_id=job_id)
            _expect(result, job.attempts.count() == 1, f"{job_id} used {job.attempts.count()} attempts, expected 1")
            _expect(result, job.events.filter(kind="lease_expired_unknown").exists(),
                    f"{job_id} did not go through unknown: {list(job.events.values_list('kind', flat=True))}")
        result.figures = {"killed_after_claim": len(claimed), "killed_after_send": len(sent)}
        return [*claimed, *sent, *others]


def _pg(world: World, tool: str, *args: str) -> None:
    from config.localdb import find_bindir

    command = [str(find_bindir() / tool), "-h", "127.0.0.1", "-p", str(world.cluster.port), "-U", "postgres", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120,  # nosec B603  # argv built here from the PostgreSQL bindir; no shell, no outside input
                          env={**os.environ, **world.cluster.client_env()})
    if done.returncode != 0:
        raise RuntimeError(f"{tool} failed: {done.stderr.strip()[:500]}")


class WebhookReconcilerDown(Scenario):
    """The team's own webhook reconciler (examples/webhook_receiver.py) is down when the job goes
    unknown: every look proves nothing and backs off; once it is back, the job is confirmed."""

    name = "webhook_reconciler_down"
    summary = "killed after the provider's 2xx while the webhook reconciler is down -> backs off, confirmed once it is back"
    action = "chaos.webhook_mail"
    secret_variable = "RECKON_CHAOS_WEBHOOK_SECRET"  # nosec B105  # the name of a variable, not a secret

    def setup(self, world):
        self.secret, self.port = secrets.token_urlsafe(32), free_port()
        os.environ[self.secret_variable] = self.secret  # this process reconciles too
        declared = world.workdir / "webhook-actions.toml"
        declared.write_text(
            f'[actions."{self.action}"]\nexecutor = "python:sandbox.demo_actions.send_mail"\nreversible = true\n'
            f'queryable = true\nreconciler = "webhook"\nwebhook_url = "http://127.0.0.1:{self.port}/reckon"\n'
            f'webhook_secrets = ["{self.secret_variable}"]\nwebhook_timeout = 2\nlease_ttl = {World.LEASE_TTL}\n'
        )
        _registry.pop(self.action, None)  # a new port and secret for this world
        load_actions_file(declared, required=True)
        world.worker(self.name, fault_point="after_provider_success", jobs=f"{self.name}-*", workers=2,
                     env={"RECKON_ACTIONS_FILE": str(declared), self.secret_variable: self.secret})

    def run(self, world, result):
        job_id = _enqueue(f"{self.name}-{result.seed}-{result.run}", action=self.action)
        kill(world.wait_for_fault(job_id, "after_provider_success"))

        def looked_while_down() -> bool:
            recover([job_id], timeout=0)  # one sweep and one reconciliation pass
            return event_count(job_id, "reconciliation_unavailable") >= 1

        wait_until(looked_while_down, timeout=30, interval=0.2, what=f"a look at {job_id} while the webhook is down")
        receiver = ChildProcess([sys.executable, ROOT / "examples" / "webhook_receiver.py", str(self.port)],
                                env={"RECKON_WEBHOOK_SECRET": self.secret, "PROVIDER_URL": world.sandbox.url})
        with receiver:
            result.recover_seconds = recover([job_id], timeout=self.recover_timeout)
        _expect(result, _status(job_id) == JobStatus.SUCCEEDED, f"{job_id} ended {_status(job_id)}, not succeeded")
        confirmed = ReconciliationCheck.objects.filter(job__job_id=job_id, outcome="confirmed",
                                                       reconciler__startswith="webhook ").count()
        _expect(result, confirmed == 1, f"{job_id}: {confirmed} webhook confirmations, expected 1")
        return [job_id]


class ProviderInProgress409(Scenario):
    """Issue 24's team, in small: its own payments provider with Stripe-style keys, which answers
    409 "in progress" for ever to a key whose request was acted on and dropped; three external
    workers over claim-next, SIGKILLed one at a time every 1-3 s; the deployment's loops
    (`sweep_leases --loop`, `reconcile --loop`) and a webhook reconciler (chaos/charge_receiver.py)
    that looks each unknown key up at the provider. Each run: no key charged twice, every job
    succeeded (one charge) or failed with none, every unknown attempt settled by the webhook."""

    name = "provider_409_in_progress"
    summary = ("charges at a provider answering 409 'in progress' after a drop, external workers SIGKILLed "
               "every 1-3 s, webhook reconciler -> one charge per key, every unknown settled")
    action = "chaos.charge"
    secret_variable = "RECKON_CHAOS_CHARGES_SECRET"  # nosec B105  # the name of a variable, not a secret
    jobs = 12  # per run; `manage.py chaos --jobs N` sets it
    workers = 3
    declined_every = 10  # every 10th charge is one the provider refuses (amount 0): a legitimate failure
    faults = {"rates": {"drop_after_commit": 0.3, "error_5xx": 0.05}, "latency": {"min": 0.1, "max": 0.5}}
    recover_timeout = 120.0

    def setup(self, world):
        from api.tokens import worker_token_create

        secret, port = secrets.token_urlsafe(32), free_port()
        os.environ[self.secret_variable] = secret  # this process loads the declaration too
        declared = world.workdir / "charge-actions.toml"
        declared.write_text(
            f'[actions."{self.action}"]\nexecutor = "external"\nreversible = true\nqueryable = true\n'
            f'reconciler = "webhook"\nwebhook_url = "http://127.0.0.1:{port}/reckon"\n'
            f'webhook_secrets = ["{self.secret_variable}"]\nwebhook_timeout = 3\nmax_attempts = 5\n'
            f'lease_ttl = {World.LEASE_TTL}\n'
        )
        _registry.pop(self.action, None)  # a new port and secret for this world
        load_actions_file(declared, required=True)
        env = {"RECKON_ACTIONS_FILE": str(declared), self.secret_variable: secret}
        self.url = world.web(f"{self.name}-web", env)
        self.token = worker_token_create(name=self.name, tenants=["chaos"], actions=[self.action]).token
        world.process(f"{self.name}-receiver", [sys.executable, "-m", "chaos.charge_receiver", "--port", str(port),
                                                "--provider", world.sandbox.url], {"RECKON_WEBHOOK_SECRET": secret})
        wait_until(lambda: answers(f"http://127.0.0.1:{port}/_health"), timeout=30, what="the webhook receiver")
        manage = [sys.executable, str(ROOT / "manage.py")]
        world.process(f"{self.name}-sweep", [*manage, "sweep_leases", "--loop", "--interval", "0.5"], env)
        world.process(f"{self.name}-reconcile", [*manage, "reconcile", "--loop", "--interval", "0.5"], env)

    def run(self, world, result):
        rng = random.Random(result.seed * 1000 + result.run)  # nosec B311  # a seeded schedule of faults and kills, reproducible on purpose; not security
        prefix = f"{self.name}-{result.seed}-{result.run}"
        world.sandbox.request("PUT", "/_admin/faults", {**self.faults, "seed": rng.randrange(2**31)})
        declined = {f"{prefix}-{n}" for n in range(self.jobs) if n % self.declined_every == self.declined_every - 1}
        job_ids = [_enqueue(f"{prefix}-{n}", self.action, {
            "customer": f"cus_{n}", "currency": "EUR",
            "amount_cents": 0 if f"{prefix}-{n}" in declined else 1000 + n}) for n in range(self.jobs)]

        def start(slot: int, generation: int):
            return world.external_worker(f"{prefix}-w{slot}.{generation}", url=self.url, token=self.token,
                                         action=self.action, kind="charge")

        live = [start(slot, 0) for slot in range(self.workers)]
        kills, started = 0, time.monotonic()
        bound = self.recover_timeout + self.jobs  # a second a job for the work itself, then recovery's bound
        try:
            while not _finished(job_ids) and time.monotonic() - started < bound:
                try:  # the next kill comes 1-3 s from now, unless the work is done first
                    wait_until(lambda: _finished(job_ids), timeout=rng.uniform(1, 3), interval=0.1,
                               what="the charges to settle")
                except TimeoutError:
                    slot = rng.randrange(self.workers)
                    live[slot].kill()
                    kills += 1
                    live[slot] = start(slot, kills)
            result.recover_seconds = time.monotonic() - started
        finally:
            for worker in live:
                worker.stop()
            world.sandbox.request("PUT", "/_admin/faults", {"rates": {}, "latency": {}})
        self._check(world, result, job_ids, declined, kills)
        return job_ids

    def _check(self, world, result, job_ids, declined, kills):
        jobs = {job.job_id: job for job in Job.objects.filter(job_id__in=job_ids)}
        duplicates = 0
        for job_id, job in jobs.items():
            charges = world.sandbox.effects(key=job.idempotency_key)["count"]
            duplicates += max(0, charges - 1)
            if job_id in declined:
                _expect(result, job.status == JobStatus.FAILED and charges == 0,
                        f"{job_id} (declined by the provider) ended {job.status} with {charges} charges")
            elif job.status == JobStatus.FAILED:  # retries ran out with nothing charged: honest, and counted
                _expect(result, charges == 0, f"{job_id} failed although the provider holds {charges} charge(s)")
            else:
                _expect(result, job.status == JobStatus.SUCCEEDED and charges == 1,
                        f"{job_id} ended {job.status} with {charges} charge(s), not succeeded with one")
        lost_sight = LedgerEvent.objects.filter(
            job__job_id__in=job_ids, kind__in=[EventKind.OBSERVATION_LOST, EventKind.LEASE_EXPIRED_UNKNOWN])
        unknown = set(lost_sight.values_list("attempt_id", flat=True))
        in_progress = sum(1 for evidence in lost_sight.filter(kind=EventKind.OBSERVATION_LOST)
                          .values_list("evidence", flat=True) if (evidence or {}).get("provider_status") == 409)
        settled = set(Attempt.objects.filter(id__in=unknown, execution_state__in=[Execution.SUCCEEDED, Execution.FAILED])
                      .values_list("id", flat=True))
        answered = set(ReconciliationCheck.objects.filter(
            attempt_id__in=unknown, reconciler__startswith="webhook ",
            outcome__in=[CheckOutcome.CONFIRMED, CheckOutcome.NOT_FOUND]).values_list("attempt_id", flat=True))
        _expect(result, settled == unknown, f"{len(unknown - settled)} of {len(unknown)} unknown attempts not settled")
        _expect(result, answered >= settled, f"{len(settled - answered)} unknown attempts settled without the webhook")
        result.figures = {
            "jobs": len(job_ids), "kills": kills, "unknown": len(unknown), "in_progress_409": in_progress,
            "settled": len(settled & answered), "duplicates": duplicates,
            "succeeded": sum(job.status == JobStatus.SUCCEEDED for job in jobs.values()),
            "failed": sum(job.status == JobStatus.FAILED for job in jobs.values()),
        }


class PrimaryFailover(Scenario):
    """A Patroni cluster (chaos/ha.py) loses its primary under a mixed load of every sandbox action:
    the primary's Patroni and its PostgreSQL are SIGKILLed; Patroni promotes the synchronous standby.
    The deployment's own processes (a qcluster, the sweeper and reconciler loops, the watchdog, the
    web server) are given the multi-host URL and are not restarted: each must reconnect by itself.
    A probe asks the worker API throughout: while there is no primary it must answer 503 with
    Retry-After, never 500."""

    name = "primary_failover"
    summary = ("the primary's Patroni and PostgreSQL SIGKILLed under a mixed load (the SMTP relay too) -> a replica promoted, "
               "every process reconnects unrestarted, no duplicate, 503 + Retry-After meanwhile")
    needs_ha = True
    jobs = 24
    recover_timeout = 120.0

    def setup(self, world):
        from django.conf import settings

        from api.tokens import worker_token_create
        from sandbox.smtp.testing import SmtpSandboxProcess

        # The non-idempotent mail relay: smtp.send_mail through the SMTP sandbox (a resend is a
        # second message), reconciled by its Message-ID marker.
        self.smtp = SmtpSandboxProcess(world.workdir / "smtp.sqlite3").start()
        world.workers.append(self.smtp)  # stopped with the scenario's processes
        for name, value in self.smtp.settings.items():
            setattr(settings, name, value)  # this process reconciles too
        env = self.smtp.env
        manage = [sys.executable, str(ROOT / "manage.py")]
        self.loops = [world.worker(f"{self.name}-qcluster", workers=2, env=env),
                      world.process(f"{self.name}-sweep", [*manage, "sweep_leases", "--loop", "--interval", "0.5"],
                                    env),
                      world.process(f"{self.name}-reconcile", [*manage, "reconcile", "--loop", "--interval", "0.5"],
                                    env),
                      world.process(f"{self.name}-watchdog", [*manage, "watchdog", "--loop", "--interval", "1"], env)]
        self.url = world.web(f"{self.name}-web", env)
        self.loops.append(world.workers[-1])
        self.token = worker_token_create(name=self.name, tenants=["chaos"], actions=["mail.send"]).token
        for profile in ("chaos-social",):
            world.sandbox.request("PUT", f"/_admin/profiles/{profile}", {"account": "chaos-brand", "session": "active"})

    def _job(self, prefix: str, n: int) -> str:
        kinds = [("mail.send", MAIL, {}), ("billing.create_invoice", _invoice(n), {}),
                 ("social.publish_post", {"body": f"Release notes {n}"}, {"profile": "chaos-social",
                                                                          "account": "chaos-brand"}),
                 ("vault.rotate_credential", {"name": f"chaos-db-{n}"}, {}),
                 ("smtp.send_mail", MAIL, {})]
        action, payload, identity = kinds[n % len(kinds)]
        job_id = f"{prefix}-{n}"
        wait_until(lambda: enqueue_job(job_id=job_id, tenant="chaos", action=action, payload=payload,
                                       identity=identity, actor="chaos"),
                   timeout=60, interval=0.2, what=f"{job_id} to be enqueued (an agent retrying its key)")
        return job_id

    def count_effects(self, world, job):
        if job.action == "smtp.send_mail":
            return len(self.smtp.messages(marker=job.idempotency_key))
        return super().count_effects(world, job)

    def run(self, world, result):
        import threading

        prefix = f"{self.name}-{result.seed}-{result.run}"
        world.sandbox.request("PUT", "/_admin/faults", {"latency": {"min": 0.05, "max": 0.3}})
        before = [self._job(prefix, n) for n in range(self.jobs)]
        wait_until(lambda: Job.objects.filter(job_id__in=before, status=JobStatus.SUCCEEDED).count() >= 4,
                   timeout=60, interval=0.1, what="the load to be under way")
        answers, stop = [], threading.Event()
        probe = threading.Thread(target=_probe_api, args=(f"{self.url}/api/v1/jobs/{before[0]}", self.token,
                                                          answers, stop), daemon=True)
        probe.start()
        node = world.ha.kill_primary()
        killed_at = time.time()  # every process of the old primary is dead: a later claim is the new one's
        # The agents go on: new keys arrive while there is no primary (each retried until taken).
        after = [self._job(f"{prefix}-after", n) for n in range(self.jobs // 2)]
        first_claim = wait_until(lambda: _first_claim_after(killed_at), timeout=60, interval=0.1,
                                 what="the first claim after the kill")
        result.recover_seconds = recover(before + after, timeout=self.recover_timeout)
        settled_at = time.time()
        stop.set()
        probe.join(10)
        world.sandbox.request("PUT", "/_admin/faults", {"latency": {"min": 0, "max": 0}})
        for loop in self.loops:
            _expect(result, loop.running(), f"{loop.name} exited during the failover: {loop.output_tail(5)}")
        statuses = [status for status, _ in answers]
        _expect(result, 500 not in statuses, f"the API answered 500 during the failover: {statuses}")
        unavailable = [retry for status, retry in answers if status == 503]
        _expect(result, bool(unavailable) and all(unavailable),
                f"no 503 with Retry-After while there was no primary: {sorted(set(statuses))}")
        _expect(result, statuses[-1:] == [200], f"the API did not answer 200 again: {statuses[-5:]}")
        result.figures = {
            "kill_to_first_claim_s": round(first_claim - killed_at, 2),
            "kill_to_all_settled_s": round(settled_at - killed_at, 2),
            "api_503": len(unavailable), "api_500": statuses.count(500),
            # How the jobs ended: a step the switch cut short went unknown and was looked up.
            "went_unknown": LedgerEvent.objects.filter(job__job_id__in=before + after, kind__in=[
                EventKind.OBSERVATION_LOST, EventKind.LEASE_EXPIRED_UNKNOWN]).values("job").distinct().count(),
            "needs_operator": Job.objects.filter(job_id__in=before + after, status=JobStatus.NEEDS_OPERATOR).count(),
        }
        world.ha.restart(node)  # the next run has every node again
        return before + after


def _first_claim_after(moment: float) -> float | None:
    """The database time of the first claim whose transaction began after `moment` (an epoch)."""
    from datetime import UTC, datetime

    first = (LedgerEvent.objects.filter(kind=EventKind.CLAIMED, at__gt=datetime.fromtimestamp(moment, UTC))
             .order_by("at").values_list("at", flat=True).first())
    return first.timestamp() if first else None


def _probe_api(url: str, token: str, answers: list, stop) -> None:
    """GET `url` every 0.2 s until `stop`: (status, has Retry-After) per answer."""
    import urllib.error
    import urllib.request

    while not stop.is_set():
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:  # nosec B310  # our own server's http:// URL
                answers.append((answer.status, bool(answer.headers.get("Retry-After"))))
        except urllib.error.HTTPError as refused:
            answers.append((refused.code, bool(refused.headers.get("Retry-After"))))
        except OSError:
            pass  # no answer at all is not an answer
        stop.wait(0.2)


def _finished(job_ids: list[str]) -> bool:
    """Every job succeeded or failed: nothing running, unknown or waiting for a person."""
    done = Job.objects.filter(job_id__in=job_ids, status__in=[JobStatus.SUCCEEDED, JobStatus.FAILED]).count()
    return done == len(job_ids)


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    CrashBeforeCall(), CrashDuringCall(), CrashAfterSuccess(), CrashAfterLocalWrite(), DuplicateDelivery(),
    SlowWorkerLeaseExpiry(), StateStoreRestore(), RestoreForgetsNewJobs(), PostgresKilled(), RandomKills(),
    ExternalWorkerKilled(), BatchedWorkerKilled(), WebhookReconcilerDown(), ProviderInProgress409(), PrimaryFailover(),
)}


def run_scenario(world: World, scenario: Scenario, *, runs: int, seed: int) -> list[RunResult]:
    results = []
    scenario.setup(world)
    try:
        for run in range(runs):
            result = RunResult(scenario=scenario.name, run=run, seed=seed)
            job_ids: list[str] = []
            try:
                job_ids = scenario.run(world, result)
            except Exception as exc:  # a scenario that breaks is a failed run, with its reason
                result.error = f"{type(exc).__name__}: {exc}"
            if job_ids:
                evaluate(result, job_ids, world.sandbox, lambda job: scenario.count_effects(world, job))
            results.append(result)
    finally:
        world.stop_workers()
    return results
