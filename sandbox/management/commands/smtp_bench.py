"""``python manage.py smtp_bench``: SMTP sends/s through the worker loop, and how many end unknown.

Starts an SMTP sandbox of its own with the given drop-after-DATA rate, runs `smtp.send_mail`
jobs through `ledger.runtime.run_job` (the worker loop, in this process), reconciles the ones
that ended unknown, and checks the archive: one message per job, none twice. The jobs are
written into the configured database; it refuses to start while other Reckon processes use that
database (a `make run` beside it), whose reconciler would take the bench's unknown jobs, look them up
at another archive, find nothing and send them again.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from itertools import chain

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.test.utils import override_settings
from django.utils import timezone

from ledger.models import Job
from ledger.providers import NoAnswer
from ledger.runtime import run_job
from ledger.services import enqueue_job
from ledger.smtp import compose, message_id_for, send
from reconciliation.passes import reconcile_job
from sandbox.smtp.testing import SmtpSandboxProcess

ACTION = "smtp.send_mail"


def other_reckon_processes() -> list[int]:
    """The pids of the other Reckon processes connected to this database (each names itself
    `reckon:...:<pid>` in pg_stat_activity; see DATABASES in config/settings.py)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT application_name FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name LIKE %s",
                       ["reckon:%"])
        names = [row[0] for row in cursor.fetchall()]
    pids = {int(name.rsplit(":", 1)[1]) for name in names if name.rsplit(":", 1)[1].isdigit()}
    return sorted(pids - {os.getpid()})


def _run_share(job_ids: list[str]) -> list[str]:
    return [run_job(job_id) for job_id in job_ids]


def _side_by_side(work, shares: list[list]) -> list:
    """`work` on each share: in this thread for one share, else one thread each (each thread
    closes the database connection it opened)."""
    if len(shares) == 1:
        return [work(shares[0])]

    def in_thread(share: list):
        try:
            return work(share)
        finally:
            connection.close()

    with ThreadPoolExecutor(len(shares)) as pool:
        return list(pool.map(in_thread, shares))


def _send_bare(numbers: list[int]) -> None:
    """The baseline: the same SMTP transactions with no ledger around them."""
    for n in numbers:
        message = compose(sender=settings.RECKON_SMTP_FROM, to=f"customer{n}@bench.example", subject="Your receipt",
                          body=f"Thank you for order #{n}.", marker=f"baseline-{n}")
        try:
            send(message, host=settings.RECKON_SMTP_HOST, port=settings.RECKON_SMTP_PORT,
                 timeout=settings.RECKON_PROVIDER_TIMEOUT)
        except NoAnswer:
            pass  # a dropped connection is a finished transaction here


class Command(BaseCommand):
    help = "SMTP sends/s through the worker loop at a drop-after-DATA rate, the share that ends unknown, " \
           "and their reconciliation (needs the demo's actions: RECKON_DEMO=true)."

    def add_arguments(self, parser):
        parser.add_argument("--jobs", type=int, default=200)
        parser.add_argument("--drop-after-data-rate", type=float, default=0.1,
                            help="share of sends whose connection the server drops after archiving the message")
        parser.add_argument("--workers", type=int, default=1,
                            help="worker loops side by side (1: in this thread; more: one thread each)")
        parser.add_argument("--seed", type=int, default=7, help="seed of the server's fault draws")

    def handle(self, *args, jobs, drop_after_data_rate, workers, seed, **options):
        if jobs < 1 or workers < 1 or not 0 <= drop_after_data_rate <= 1:
            raise CommandError("--jobs and --workers must be positive; the rate must be between 0 and 1")
        if others := other_reckon_processes():
            raise CommandError(
                f"the database {connection.settings_dict['NAME']!r} is in use by {len(others)} other Reckon "
                f"process(es) (pids {', '.join(map(str, others[:10]))}): a running stack (`make run`)? Its "
                "reconciler would take this bench's unknown jobs, look them up at its own SMTP archive, find "
                "nothing and send them again. Stop it, or run the bench on a database of its own "
                "(DATABASE_URL=postgresql://.../reckon_bench, after `manage.py migrate` there).")
        if settings.RECKON_DEMO_ACTION_MODULE not in settings.RECKON_ACTION_MODULES:
            raise CommandError(f"{ACTION} is one of the demo's actions, which are not registered here: "
                               "set RECKON_DEMO=true")
        with SmtpSandboxProcess(rates={"drop_after_data": drop_after_data_rate}, seed=seed) as smtp, \
                override_settings(RECKON_DISPATCH=False, **smtp.settings):
            self._bench(smtp, jobs=jobs, rate=drop_after_data_rate, workers=workers, seed=seed)

    def _bench(self, smtp: SmtpSandboxProcess, *, jobs: int, rate: float, workers: int, seed: int) -> None:
        prefix = f"smtp-bench-{timezone.now():%Y%m%d-%H%M%S-%f}"
        job_ids = [enqueue_job(job_id=f"{prefix}-{n:05d}", tenant="bench", action=ACTION, actor="smtp_bench",
                               payload={"to": f"customer{n}@bench.example", "subject": "Your receipt",
                                        "body": f"Thank you for order #{n}."}).job_id
                   for n in range(jobs)]
        self.stdout.write(f"{jobs} {ACTION} jobs ({prefix}-*), {workers} worker loop(s), drop_after_data rate "
                          f"{rate} (seed {seed}), SMTP sandbox on {smtp.host}:{smtp.smtp_port}")
        started = time.monotonic()
        _side_by_side(_send_bare, [list(range(jobs))[i::workers] for i in range(workers)])
        bare = time.monotonic() - started
        smtp.reset()  # an empty archive, and the fault draws start again from the seed
        self.stdout.write(f"  bare SMTP sends (no ledger): {jobs / bare:.1f}/s")

        shares = [job_ids[i::workers] for i in range(workers)]
        started = time.monotonic()
        ran = dict(zip(chain(*shares), chain(*_side_by_side(_run_share, shares)), strict=True))
        sending = time.monotonic() - started
        unknown = [job_id for job_id, result in ran.items() if result == "unknown"]
        counts = Counter(ran.values())
        self.stdout.write(f"  through the worker loop: {jobs / sending:.1f} sends/s ({bare / sending:.2f} of bare); "
                          + ", ".join(f"{name}: {n}" for name, n in sorted(counts.items())))
        self.stdout.write(f"  ended unknown: {len(unknown)} of {jobs} ({len(unknown) / jobs:.1%})")

        started = time.monotonic()
        decisions = [reconcile_job(job_id=job_id) for job_id in unknown]
        reconciling = time.monotonic() - started
        outcomes = Counter(decision.outcome for decision in decisions)
        self.stdout.write(f"  reconciled {len(decisions)} in {reconciling:.2f} s: "
                          + (", ".join(f"{name}: {n}" for name, n in sorted(outcomes.items())) or "nothing to do"))

        archived = smtp.messages()
        per_job = {job_id: 0 for job_id in job_ids}
        by_message_id = {message_id_for(f"{ACTION}:{job_id}"): job_id for job_id in job_ids}
        for message in archived:
            per_job[by_message_id[message["message_id"]]] += 1
        twice = sorted(job_id for job_id, n in per_job.items() if n > 1)
        missing = sorted(job_id for job_id, n in per_job.items() if n == 0)
        succeeded = Job.objects.filter(job_id__startswith=f"{prefix}-", status="succeeded").count()
        self.stdout.write(f"  archive: {len(archived)} messages; jobs succeeded: {succeeded}/{jobs}; "
                          f"delivered twice: {len(twice)}; never delivered: {len(missing)}")
        if twice:
            raise CommandError(f"delivered more than once: {', '.join(twice[:10])}")
