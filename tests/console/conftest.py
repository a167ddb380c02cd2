"""Unknown jobs for the console tests, made the way production makes them: through the services."""

from __future__ import annotations

import pytest

from console.models import TenantScope
from ledger import services
from ledger.models import Job
from tests.conftest import make_job

INVOICE = {"customer": "cus_1", "amount_cents": 1200, "currency": "EUR"}


def make_unknown_job(
    job_id: str, *, action: str = "billing.create_invoice", tenant: str = "acme", payload: dict | None = None
) -> Job:
    """A job whose worker submitted the side effect and then lost sight of it."""
    make_job(
        job_id,
        action=action,
        tenant=tenant,
        payload=payload
        if payload is not None
        else (INVOICE if action.startswith("billing") else {"name": f"cred-{job_id}"}),
    )
    lease = services.claim_job(job_id=job_id, worker="worker-a")
    services.begin_side_effect(lease=lease)
    services.record_unknown(lease=lease, reason="connection dropped after the request was sent")
    return Job.objects.get(job_id=job_id)


def make_operator_job(job_id: str, **kwargs) -> Job:
    """An unknown irreversible job that reconciliation handed to a human (it cannot be queried)."""
    from reconciliation.passes import reconcile_job

    make_unknown_job(job_id, action="vault.rotate_credential", **kwargs)
    reconcile_job(job_id=job_id)
    return Job.objects.get(job_id=job_id)


def latest_version(job_id: str) -> int:
    return Job.objects.get(job_id=job_id).attempts.order_by("-number").first().version


def htmx(**extra) -> dict:
    """Headers of a request htmx makes."""
    return {"HTTP_HX_REQUEST": "true", **extra}


def with_tenants(user, *tenants: str):
    """Give `user` a tenant scope: the tenants named, or every tenant when none is named."""
    TenantScope.objects.update_or_create(user=user, defaults={"all_tenants": not tenants, "tenants": list(tenants)})
    return user


# The shared personas see every tenant in the console's tests; the tenant fence's own tests
# narrow them, or take their scope away.
@pytest.fixture
def operator(operator):
    return with_tenants(operator)


@pytest.fixture
def approver(approver):
    return with_tenants(approver)


@pytest.fixture
def auditor(auditor):
    return with_tenants(auditor)


@pytest.fixture
def operator2(db):
    from tests.conftest import _persona

    return with_tenants(_persona("otto", "operators"))


@pytest.fixture
def approver2(db):
    from tests.conftest import _persona

    return with_tenants(_persona("ada", "approvers"))
