"""django-q2 tasks: interfaces, not logic. Each is named after the function it runs."""

from ledger import runtime, services


def run_job(job_id: str) -> str:
    return runtime.run_job(job_id)


def sweep_expired_leases() -> int:
    return services.sweep_expired_leases().total


def end_stale_holds() -> int:
    return services.end_stale_holds()


def create_partitions_ahead() -> int:
    from ledger.partitions import ensure_ahead

    return len(ensure_ahead())
