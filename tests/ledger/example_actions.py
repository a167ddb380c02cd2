"""An action module as a deployment writes one: named in RECKON_ACTION_MODULES, registered on import."""

from datetime import timedelta

from ledger.actions import Outcome, Succeeded, action


@action("example.ping", reversible=False, max_attempts=2, lease_ttl=timedelta(seconds=5))
def ping(job) -> Outcome:
    return Succeeded(result_ref=f"pong:{job.idempotency_key}")
