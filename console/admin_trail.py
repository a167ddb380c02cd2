"""The admin trail: what a change made in /admin/ did, as a diff of two snapshots."""

from __future__ import annotations

import json
from datetime import datetime

from django.core.serializers.json import DjangoJSONEncoder

from console.models import AdminAuditEntry

# Recorded as changed, never by value: a password hash is a credential.
SECRET_FIELDS = frozenset({"password"})


def snapshot(obj) -> dict:
    """The object's fields as JSON values; related objects by name, many-to-many sorted."""
    values = {}
    for field in obj._meta.concrete_fields:
        if field.primary_key:
            continue
        value = getattr(obj, field.name)
        if isinstance(value, datetime):
            # To the second: the admin's date widgets drop microseconds, which is no change to record.
            value = value.replace(microsecond=0)
        values[field.name] = str(value) if field.is_relation and value is not None else value
    for field in obj._meta.many_to_many:
        values[field.name] = sorted(str(related) for related in getattr(obj, field.name).all()) if obj.pk else []
    return json.loads(json.dumps(values, cls=DjangoJSONEncoder))


def diff(before: dict, after: dict) -> dict:
    changes = {}
    for name in sorted(before.keys() | after.keys()):
        old, new = before.get(name), after.get(name)
        if old != new:
            changes[name] = {"secret": True} if name in SECRET_FIELDS else {"before": old, "after": new}  # nosec B105  # records that a secret changed, never its value
    return changes


def record_change(user, action: str, obj, before: dict, after: dict, *, pk=None) -> AdminAuditEntry | None:
    """One entry for one object (`pk`: its key, for an object already deleted); a save that
    changed nothing leaves no entry."""
    changes = diff(before, after)
    if not changes and action == AdminAuditEntry.CHANGED:
        return None
    return AdminAuditEntry.objects.create(
        actor=user.get_username(),
        actor_pk=user.pk,
        action=action,
        object_type=obj._meta.label_lower,
        object_pk=str(obj.pk if pk is None else pk),
        object_repr=str(obj)[:200],
        changes=changes,
    )
