"""django-q2 tasks: interfaces, not logic. Each loads by id and calls one function."""

from ledger.runtime import execute


def run_job(job_id: str) -> str:
    return execute(job_id)


def sweep_leases() -> int:
    from ledger.services import sweep_expired_leases

    return sweep_expired_leases().total
