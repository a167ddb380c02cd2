"""Enqueueing: a job and its first attempt, idempotent on the caller's job id."""

from __future__ import annotations

import json
from contextlib import contextmanager

from django.db import IntegrityError, transaction
from django.db.models import Q

from ledger import tombstones
from ledger.actions import get_action
from ledger.identifiers import InvalidIdentifier, validate_job_id
from ledger.models import Job, JobTombstone
from ledger.services.errors import InvalidJob, JobArchived, JobConflict
from ledger.services.transitions import Batch
from ledger.snapshots import snapshot
from ledger.states import ActorType, EventKind


def idempotency_key_for(*, action: str, job_id: str) -> str:
    return f"{action}:{job_id}"


def enqueue_job(
    *,
    job_id: str,
    tenant: str,
    action: str,
    payload,
    identity=None,
    actor: str = "system",
    actor_type: str = ActorType.SYSTEM,
    dispatch: bool = True,
) -> Job:
    """Create a job and its first attempt; idempotent on `job_id`. The job returned says whether
    this call created it (`created_now`): of many concurrent identical enqueues, exactly one did.
    `dispatch=False`: the caller claims the job itself at once (the MCP gateway), so no worker is
    handed it or woken for it."""
    job_id, tenant, declared, payload, identity = checked_job(job_id=job_id, tenant=tenant, action=action,
                                                              payload=payload, identity=identity)
    key = idempotency_key_for(action=action, job_id=job_id)
    try:
        with refused_if_archived(job_id=job_id, key=key), transaction.atomic():
            job = Job.objects.create(
                job_id=job_id,
                tenant=tenant,
                action=action,
                payload=payload,
                identity=identity,
                policy=declared.policy.as_json(),
                idempotency_key=key,
            )
            with Batch() as batch:
                attempt = batch.open_attempt(job, 1)
                batch.record_event(job, attempt, actor_type=actor_type, actor=actor, kind=EventKind.ENQUEUED,
                                   before={}, after=snapshot(job, attempt))
                if dispatch:
                    batch.dispatch_run(job)
            job.created_now = True
            return job
    except IntegrityError:
        pass  # the job exists (perhaps created concurrently): compare and return it
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(job_id=job_id).first()
        if job is None:
            # Gone since the insert found it: a retention pass held its row and archived it (an
            # insert that came later waits for the pass, and the trigger refuses it). Or the key
            # (action:job_id) is another job's.
            tombstone = tombstone_of(job_id=job_id, key=key)
            if tombstone is not None:
                raise JobArchived(tombstone)
            raise JobConflict(f"job {job_id!r}: its idempotency key {key!r} is another job's; choose another id")
        differing = [
            name
            for name, value in (
                ("tenant", tenant),
                ("action", action),
                ("payload", payload),
                ("identity", identity),
            )
            if getattr(job, name) != value
        ]
        if differing:
            raise JobConflict(
                f"job {job_id!r} already exists with a different "
                f"{', '.join(differing)}; a job id may be reused only for the same work"
            )
        with Batch() as batch:
            batch.record_unchanged(job, None, actor_type=actor_type, actor=actor, kind=EventKind.ENQUEUE_REPEATED,
                                   note="the same job was enqueued again; the existing job is returned")
    job.created_now = False
    return job


@contextmanager
def refused_if_archived(*, job_id: str, key: str):
    """The job table's refusal of an archived id or key (its trigger, ledger.tombstones) as JobArchived,
    naming the tombstone; any other integrity error as it was. Outside the transaction (or savepoint)
    that the refusal aborted, so that the tombstone can be read."""
    try:
        yield
    except IntegrityError as refused:
        if getattr(refused.__cause__, "sqlstate", None) != tombstones.SQLSTATE:
            raise
        tombstone = tombstone_of(job_id=job_id, key=key)
        if tombstone is None:  # a tombstone is never removed: this cannot be, and must not pass unseen
            raise
        raise JobArchived(tombstone) from None


def tombstone_of(*, job_id: str, key: str) -> JobTombstone | None:
    """The tombstone a job with this id and key would match (the trigger's rule), its id's first."""
    given = {"job_id": job_id, "idempotency_key": key}
    matching = Q(*(Q(**{name: given[name]}) for name in tombstones.MATCHED_ON), _connector=Q.OR)
    found = JobTombstone.objects.select_related("checkpoint").filter(matching)
    return min(found, key=lambda tombstone: tombstone.job_id != job_id, default=None)


def checked_job(*, job_id: str, tenant: str, action: str, payload, identity):
    """A new job's fields as the ledger keeps them, with its declared action; InvalidJob (or
    UnknownAction) says what is wrong, before anything is written."""
    job_id, tenant = clean_text("job_id", job_id, 200), clean_text("tenant", tenant, 100)
    try:
        validate_job_id(job_id)
    except InvalidIdentifier as exc:
        raise InvalidJob(str(exc)) from None
    declared = get_action(action)  # raises UnknownAction with the list of known ones
    payload = json_object("payload", payload)
    identity = json_object("identity", identity or {})
    missing = [name for name in declared.identity if name not in identity]
    if missing:
        raise InvalidJob(f"action {action} binds each job to the identity fields {', '.join(declared.identity)}: "
                         f"identity lacks {', '.join(missing)}")
    return job_id, tenant, declared, payload, identity


def clean_text(name: str, value, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidJob(f"{name} must be a non-empty string")
    value = value.strip()
    if len(value) > limit:
        raise InvalidJob(f"{name} is longer than {limit} characters")
    return value


def json_object(name: str, value) -> dict:
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise InvalidJob(f"{name} is not valid JSON: {exc}") from None
    try:
        value = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidJob(f"{name} must be JSON-serialisable: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidJob(f"{name} must be a JSON object, got {type(value).__name__}")
    return value
