"""One evaluation pass: read each condition, and notify only when one changes (firing, or
resolved). The condition's row is locked while it is compared and notified, so several hosts
evaluating at once send each message once; a message no channel took leaves the state as it was,
and the next pass tries again."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from alerts.conditions import CHECKS, Reading
from alerts.models import AlertCondition, AlertState
from alerts.notify import NotDelivered, absolute, send

TITLES = {
    AlertCondition.UNKNOWN_TOO_OLD: "Unknown work older than its bound",
    AlertCondition.APPROVAL_WAITING: "Approvals waiting longer than their bound",
    AlertCondition.GATE_CLOSED: "Dead-man gate closed",
    AlertCondition.RECONCILIATION_CONFLICT: "Reconciliation answered conflict",
}


@dataclass(frozen=True)
class Notified:
    condition: str
    firing: bool
    channels: list[str]


def channels_configured() -> bool:
    return bool(settings.RECKON_ALERT_WEBHOOK_URL or settings.RECKON_ALERT_EMAILS)


def evaluate_alerts() -> list[Notified]:
    """Evaluate every condition; the notifications this pass sent. Without a channel configured
    nothing is evaluated (a condition that fired unheard would never be told later)."""
    if not channels_configured():
        return []
    sent = []
    for check in CHECKS:
        try:
            notified = _evaluate(check())
        except NotDelivered:
            continue  # logged by notify; the next pass tries again
        if notified:
            sent.append(notified)
    return sent


def _evaluate(reading: Reading) -> Notified | None:
    AlertState.objects.get_or_create(condition=reading.condition)
    with transaction.atomic():
        state = AlertState.objects.select_for_update().get(condition=reading.condition)
        if state.firing == reading.firing:
            return None
        title = TITLES[reading.condition]
        if reading.firing:
            subject = f"[Reckon] FIRING: {title}"
            text = f"{reading.summary}\nQueue: {absolute(reading.path)}"
        else:
            subject = f"[Reckon] RESOLVED: {title}"
            text = f"Resolved (firing since {state.changed_at:%Y-%m-%d %H:%M} UTC). {reading.summary}\n" \
                   f"Queue: {absolute(reading.path)}"
        channels = send(subject, text)
        state.firing = reading.firing
        state.summary = reading.summary
        state.changed_at = state.notified_at = timezone.now()
        state.save()
    return Notified(reading.condition, reading.firing, channels)
