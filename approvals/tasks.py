"""django-q2 tasks: interfaces, not logic. Each is named after the function it runs."""

from approvals import services


def expire_due_approvals() -> int:
    return services.expire_due_approvals()
