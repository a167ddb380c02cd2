"""django-q2 tasks: interfaces, not logic."""

# Stay well inside django-q2's task timeout; what is left is picked up by the next pass.
PASS_BUDGET_S = 30


def reconcile_due_jobs() -> int:
    from reconciliation.services import reconcile_until_idle

    return len(reconcile_until_idle(budget_s=PASS_BUDGET_S))
