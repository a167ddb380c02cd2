import json

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = ("Try a tool's look-up rule (its reconcile table) against the live upstream for one call, and print "
            "the verdict the reconciler would reach. Changes nothing: a dry run for writing declarations.")

    def add_arguments(self, parser):
        parser.add_argument("tool", help="the tool as tools/list names it (notes_create_note), or as Reckon does (notes.create_note)")
        given = parser.add_mutually_exclusive_group(required=True)
        given.add_argument("--arguments", help="the call's arguments, as JSON")
        given.add_argument("--job", help="a job of this tool in the ledger: its recorded arguments and key")
        parser.add_argument("--meta-key", default="", help='for a tool with key = "meta": the call\'s key')

    def handle(self, *args, tool: str, arguments: str | None, job: str | None, meta_key: str, **options):
        from gateway.calls import Refused, job_id_for
        from gateway.config import META_KEY, get_upstream, policy_named
        from gateway.reconcile import verdict
        from ledger.models import Job
        from ledger.services.jobs import idempotency_key_for

        policy = policy_named(tool)
        upstream = get_upstream(policy.upstream) if policy is not None else None
        if policy is None or policy.lookup is None:
            raise CommandError(f"{tool} is not a declared tool with a look-up rule (reconcile = {{ tool, arguments, "
                               "found, match }}) in the actions file (RECKON_ACTIONS_FILE)")
        if problems := upstream.missing_variables():
            raise CommandError("\n".join(problems))
        if job:
            found = Job.objects.filter(job_id=job, action=policy.action).first()
            if found is None:
                raise CommandError(f"no job {job!r} of {tool} in the ledger")
            called, key = found.payload.get("arguments", {}), found.idempotency_key
        else:
            try:
                called = json.loads(arguments)
            except ValueError as exc:
                raise CommandError(f"--arguments is not JSON: {exc}") from None
            if not isinstance(called, dict):
                raise CommandError("--arguments must be a JSON object: the call's arguments")
            try:
                job_id, *_ = job_id_for(policy, upstream.tenant, called, {META_KEY: meta_key} if meta_key else {})
            except Refused as exc:
                raise CommandError(str(exc)) from None
            key = idempotency_key_for(action=policy.action, job_id=job_id)
        finding = verdict(policy, upstream, called, key)
        self.stdout.write(f"rule: found = {policy.lookup.found!r}, match = {json.dumps(policy.lookup.match)}")
        if "lookup" in finding.evidence:
            self.stdout.write(f"asked: {json.dumps(finding.evidence['lookup'])}")
        if "answer" in finding.evidence:
            self.stdout.write(f"answer: {json.dumps(finding.evidence['answer'])[:2000]}")
        self.stdout.write(f"verdict: {finding.outcome}: {finding.reason}")
