"""Shared fixtures: personas, job factories, and helpers that move time for leases."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection

from ledger import services
from ledger.models import Attempt, Job


@pytest.fixture(autouse=True)
def _test_settings(settings):
    """Unit tests drive the worker loop by hand; tests with real clusters turn dispatch back on."""
    settings.RECKON_DISPATCH = False
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def make_job(job_id: str = "job-1", *, action: str = "reckon.echo", tenant: str = "acme",
             payload: dict | None = None, identity: dict | None = None) -> Job:
    return services.enqueue_job(job_id=job_id, tenant=tenant, action=action,
                                payload=payload if payload is not None else {"n": 1}, identity=identity)


def expire_lease(job: Job | str) -> None:
    """Let the running attempt's lease run out, as if its worker had stalled past the TTL."""
    job_pk = job.pk if isinstance(job, Job) else Job.objects.get(job_id=job).pk
    with connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_attempt SET lease_expires_at = clock_timestamp() - interval '1 second'"
                       " WHERE job_id = %s AND execution_state = 'running'", [job_pk])


def latest_attempt(job_id: str) -> Attempt:
    return Attempt.objects.filter(job__job_id=job_id).order_by("-number").first()


def event_kinds(job_id: str) -> list[str]:
    return list(Job.objects.get(job_id=job_id).events.order_by("id").values_list("kind", flat=True))


def _persona(username: str, group: str | None, **extra) -> User:
    user = User.objects.create_user(username=username, password="pw-" + username, **extra)
    if group:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    return user


@pytest.fixture
def operator(db) -> User:
    return _persona("olga", "operators")


@pytest.fixture
def approver(db) -> User:
    return _persona("abe", "approvers")


@pytest.fixture
def auditor(db) -> User:
    return _persona("aud", "auditors")


@pytest.fixture
def admin_user(db) -> User:
    return _persona("root", None, is_staff=True, is_superuser=True)
