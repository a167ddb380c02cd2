import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections
from django.utils import timezone

from ledger.models import Job
from ledger.states import JobStatus
from sandbox.simulation import Workload, run

SETTLED = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.NEEDS_RECONCILIATION, JobStatus.NEEDS_OPERATOR,
           JobStatus.ESCALATED, JobStatus.AWAITING_APPROVAL, JobStatus.BLOCKED, JobStatus.CANCELLED}


class Command(BaseCommand):
    help = "Enqueue a realistic mixed workload against the sandbox provider, with injected faults."

    def add_arguments(self, parser):
        parser.add_argument("--jobs", type=int, default=40)
        parser.add_argument("--fault-rate", type=float, default=0.1,
                            help="share of provider calls that fail (5xx, failure before commit, dropped response)")
        parser.add_argument("--tenants", type=int, default=3)
        parser.add_argument("--mismatch-rate", type=float, default=0.1,
                            help="share of social posts whose profile is logged into another account")
        parser.add_argument("--bad-address-every", type=int, default=0,
                            help="every Nth mail.send job goes to a malformed address the provider refuses (failed)")
        parser.add_argument("--seed", type=int)
        parser.add_argument("--prefix", help="job id prefix (default: sim-<timestamp>)")
        parser.add_argument("--every", type=float, default=0,
                            help="repeat every N seconds (a live demo) instead of once")
        parser.add_argument("--smtp", action="store_true",
                            help="also mail over SMTP (smtp.send_mail) through the SMTP sandbox (RECKON_SMTP_*)")
        parser.add_argument("--wait", type=float, default=0,
                            help="wait up to N seconds for the batch to settle and print throughput")

    def handle(self, *args, jobs, fault_rate, tenants, mismatch_rate, bad_address_every, seed, prefix, every, wait, smtp, **options):
        if jobs < 1 or not 0 <= fault_rate <= 1 or not 0 <= mismatch_rate <= 1 or tenants < 1 or bad_address_every < 0:
            raise CommandError("--jobs and --tenants must be positive, --bad-address-every not negative; rates must be "
                               "between 0 and 1")
        if settings.RECKON_DEMO_ACTION_MODULE not in settings.RECKON_ACTION_MODULES:
            raise CommandError("the workload is made of the demo's actions, which are not registered here: set "
                               "RECKON_DEMO=true, for this command and for the workers that will run the jobs")
        first = True
        while True:
            batch_prefix = prefix or f"sim-{timezone.now():%Y%m%d-%H%M%S}"
            started = time.monotonic()
            # The sandbox's faults and profiles are set on the first batch only: a person's changes
            # to them (an injected fault, a fixed login) stay until that person changes them back.
            job_ids = run(Workload(jobs=jobs, fault_rate=fault_rate, tenants=tenants, mismatch_rate=mismatch_rate,
                                   bad_address_every=bad_address_every, seed=seed, prefix=batch_prefix, smtp=smtp,
                                   configure=first))
            self.stdout.write(f"enqueued {len(job_ids)} jobs ({batch_prefix}-*) at fault rate {fault_rate}"
                              + ("" if first else "; the sandbox's faults and profiles are left as they are now"))
            first = False
            if wait:
                self._report(batch_prefix, started, wait)
            if not every:
                return
            close_old_connections()
            time.sleep(every)  # demo pacing, not synchronisation
            prefix = None

    def _report(self, batch_prefix: str, started: float, wait: float) -> None:
        jobs = Job.objects.filter(job_id__startswith=f"{batch_prefix}-")
        deadline = started + wait
        while time.monotonic() < deadline and jobs.exclude(status__in=SETTLED).exists():
            time.sleep(0.2)  # polling for the batch to settle, with a bound
        elapsed = time.monotonic() - started
        counts = jobs.counts_by_status()
        total = sum(counts.values())
        settled = sum(n for status, n in counts.items() if status in SETTLED)
        unknown = sum(counts.get(s, 0) for s in ("needs_reconciliation", "needs_operator", "escalated",
                                                 "awaiting_approval"))
        self.stdout.write(f"settled {settled}/{total} in {elapsed:.1f} s = {settled / elapsed:.1f} jobs/s")
        self.stdout.write("  " + ", ".join(f"{status}: {n}" for status, n in sorted(counts.items())))
        self.stdout.write(f"  left unknown or waiting for a human: {unknown} ({unknown / total:.0%})")
