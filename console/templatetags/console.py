"""The console's template filters: readable timestamps (the time itself and how long ago it was,
"12 min ago"), JSON, state changes, and the user's tenant fence."""

from __future__ import annotations

import json
from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.html import format_html

from console.access import TenantFence, fence_of
from ledger import moments

register = template.Library()


@register.filter
def tenant_fence(user) -> TenantFence:
    return fence_of(user)


@register.filter
def ago(value: datetime | None, now: datetime | None = None) -> str:
    return "" if value is None else moments.ago((now or timezone.now()) - value, short=True)


@register.filter
def stamp(value: datetime | None) -> str:
    """<time> with the full UTC time in its title and attribute, shown as time and age."""
    if value is None:
        return "—"
    local = timezone.localtime(value)
    same_day = local.date() == timezone.localtime().date()
    shown = local.strftime("%H:%M:%S") if same_day else local.strftime("%Y-%m-%d %H:%M")
    return format_html(
        '<time datetime="{}" title="{}">{} <span class="age">· {}</span></time>',
        value.isoformat(),
        local.strftime("%Y-%m-%d %H:%M:%S %Z"),
        shown,
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
