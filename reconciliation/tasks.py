"""django-q2 tasks: interfaces, not logic. Each is named after the function it runs."""

from reconciliation import passes

# Stay well inside django-q2's task timeout; what is left is picked up by the next pass.
PASS_BUDGET_S = 30


def reconcile_until_idle() -> int:
    return len(passes.reconcile_until_idle(budget_s=PASS_BUDGET_S))
