"""The demo personas `make run` prints: one per role, plus a second operator and an admin.

Every demo user sees every tenant (the demo workload spans several)."""

from django.contrib.auth.models import Group, User
from django.db import transaction

from console.models import TenantScope

ROLES = ("operators", "approvers", "auditors")

DEMO_USERS = [
    # username, password, groups, superuser
    ("operator", "operator-demo-pw", ("operators",), False),
    ("operator2", "operator2-demo-pw", ("operators",), False),
    ("approver", "approver-demo-pw", ("approvers",), False),
    ("auditor", "auditor-demo-pw", ("auditors",), False),
    ("admin", "admin-demo-pw", (), True),
]


@transaction.atomic
def ensure_demo_users() -> list[tuple[str, str, str]]:
    """Create (or reset) the demo users; returns (username, password, role) rows to print."""
    groups = {name: Group.objects.get_or_create(name=name)[0] for name in ROLES}
    rows = []
    for username, password, user_groups, superuser in DEMO_USERS:
        user, _ = User.objects.get_or_create(username=username)
        user.set_password(password)
        user.is_staff = user.is_superuser = superuser
        user.save()
        user.groups.set([groups[g] for g in user_groups])
        TenantScope.objects.update_or_create(user=user, defaults={"all_tenants": True, "tenants": []})
        rows.append((username, password, "superuser" if superuser else ", ".join(user_groups)))
    return rows
