"""The console's template filters: readable timestamps (the time itself and how long ago it was,
"12 min ago"), JSON, state changes, and the user's tenant fence."""

from __future__ import annotations

import json
from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.html import format_html

from alerts.models import AlertState
from approvals.models import ApprovalRequest, ApprovalStatus
from console.access import APPROVERS, TenantFence, fence_of, has_role
from ledger import moments
from ledger.moments import kept_time, shown_time

register = template.Library()


@register.filter
def tenant_fence(user) -> TenantFence:
    return fence_of(user)


@register.simple_tag
def approvals_waiting(user) -> int | None:
    """For an approver, the pending requests they may decide (not their own); None for others."""
    if not user.is_authenticated or not has_role(user, [APPROVERS]):
        return None
    pending = ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING).exclude(requested_by=user)
    return fence_of(user).apply(pending).count()


@register.simple_tag
def alerts_firing(user) -> int | None:
    """How many alerts the watch last found firing (the navigation's badge; the alerts page says
    which), for anyone who reads the console; None when signed out."""
    if not user.is_authenticated:
        return None
    return AlertState.objects.filter(firing=True).count()


@register.filter
def ago(value: datetime | None, now: datetime | None = None) -> str:
    return "" if value is None else moments.ago((now or timezone.now()) - value, short=True)


@register.filter
def stamp(value: datetime | None) -> str:
    """<time> with the full time in its title and attribute, shown as time (`ledger.moments`, the
    date when not today) and age."""
    if value is None:
        return "—"
    return format_html(
        '<time datetime="{}" title="{}">{} <span class="age">· {}</span></time>',
        value.isoformat(),
        kept_time(value),
        shown_time(value),
        ago(value),
    )


@register.filter
def as_json(value) -> str:
    """Evidence and states as compact, readable JSON (escaped by the template as usual)."""
    if value in (None, {}, []):
        return ""
    return json.dumps(value, indent=1, sort_keys=True, default=str)


@register.filter
def one_line_json(value) -> str:
    """A changed field's value on one line; nothing at all as a dash."""
    return "—" if value is None else json.dumps(value, sort_keys=True, default=str)


@register.filter
def state_change(before: dict, after: dict) -> list[tuple[str, str, str]]:
    """The fields that changed between two snapshots: (name, before, after)."""
    before, after = before or {}, after or {}
    return [
        (key, str(before.get(key, "—")), str(after.get(key, "—")))
        for key in ("job", "attempt", "delivery", "execution", "side_effect")
        if before.get(key) != after.get(key)
    ]
