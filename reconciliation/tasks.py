"""django-q2 tasks: interfaces, not logic. Each is named after the function it runs; `queue_pass`
queues one."""

from reconciliation import passes

# Stay well inside django-q2's task timeout; what is left is picked up by the next pass.
PASS_BUDGET_S = 30


def reconcile_until_idle() -> int:
    return len(passes.reconcile_until_idle(budget_s=PASS_BUDGET_S))


def queue_pass() -> None:
    """Queue a pass now: the ledger calls it (ledger.hooks) once unknown work has committed."""
    from django_q.tasks import async_task

    async_task(reconcile_until_idle, task_name="reconcile_until_idle")
