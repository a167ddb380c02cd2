import json

from django.core.management.base import BaseCommand, CommandError

from ledger.actions import UnknownAction
from ledger.services import LedgerError, enqueue_job


class Command(BaseCommand):
    help = "Enqueue one job (idempotent on --job-id); prints its status and idempotency key."

    def add_arguments(self, parser):
        parser.add_argument("--job-id", required=True)
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--action", required=True)
        parser.add_argument("--payload", required=True, help="a JSON object")
        parser.add_argument("--identity", default="{}", help="a JSON object: the profile/account binding")

    def handle(self, *args, job_id, tenant, action, payload, identity, **options):
        try:
            job = enqueue_job(job_id=job_id, tenant=tenant, action=action, payload=payload,
                              identity=json.loads(identity), actor="manage.py enqueue")
        except (LedgerError, UnknownAction, ValueError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{job.job_id} {job.status} key={job.idempotency_key}")
