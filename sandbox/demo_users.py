"""The demo personas `make run` prints: one per role, plus a second operator and an admin.

Their passwords are published (here and in the README), so they exist only for a local demo:
`runstack` and `seed_demo` create them with RECKON_DEBUG=true only, an account that already
exists is never touched again (a password changed since stays changed), and with debug off
every start refuses to run while one of them still has its demo password (sandbox/checks.py).
"""

from django.contrib.auth.hashers import check_password
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
DEMO_PASSWORDS = {username: password for username, password, _, _ in DEMO_USERS}


@transaction.atomic
def ensure_demo_users() -> list[tuple[str, str, str]]:
    """Create the demo users that do not exist yet; returns (username, password, role) rows to print.

    An existing account keeps its password and groups; its row says whether the demo password
    still works rather than showing one that may not.
    """
    groups = {name: Group.objects.get_or_create(name=name)[0] for name in ROLES}
    rows = []
    for username, password, user_groups, superuser in DEMO_USERS:
        user, created = User.objects.get_or_create(username=username)
        if created:
            user.set_password(password)
            user.is_staff = user.is_superuser = superuser
            user.save()
            user.groups.set([groups[g] for g in user_groups])
            # The demo workload spans several tenants: every demo user sees them all.
            TenantScope.objects.create(user=user, all_tenants=True)
        elif not check_password(password, user.password):
            password = "(changed; kept)"  # nosec B105  # a label printed instead of a password someone changed
        rows.append((username, password, "superuser" if superuser else ", ".join(user_groups)))
    return rows


def accounts_with_demo_passwords() -> list[str]:
    """The demo accounts whose password is still the published one."""
    stored = User.objects.filter(username__in=DEMO_PASSWORDS).values_list("username", "password")
    return sorted(username for username, encoded in stored if check_password(DEMO_PASSWORDS[username], encoded))
