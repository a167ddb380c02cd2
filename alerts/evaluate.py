"""One evaluation pass: read each condition, record when one starts or clears (with or without a
channel: the console's alerts page shows it), and notify the channels when what they were last
told differs from what holds, unless a person silenced the condition. The condition's row is locked
while it is compared and notified, so several evaluators at once (the watchdog, the qcluster's
schedule, several hosts) send each message once; a message no channel took stays due, and the next
pass tries again."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from alerts.conditions import CHECKS, Reading
from alerts.models import AlertCondition, AlertEvent, AlertEventKind, AlertState
from alerts.notify import NotDelivered, absolute, send

TITLES = {
    AlertCondition.UNKNOWN_TOO_OLD: "Unknown work older than its bound",
    AlertCondition.APPROVAL_WAITING: "Approvals waiting longer than their bound",
    AlertCondition.GATE_CLOSED: "Dead-man gate closed: Reckon's own loops stopped",
    AlertCondition.RECONCILIATION_CONFLICT: "Reconciliation answered conflict",
    AlertCondition.BREAK_GLASS_GUESSING: "A break-glass account is being guessed",
    AlertCondition.LEDGER_RECOVERY: "The ledger lost history: under recovery",
}
EVALUATOR = "reckon"  # the actor of the history's fired / resolved entries


@dataclass(frozen=True)
class Notified:
    condition: str
    firing: bool
    channels: list[str]


def channels_configured() -> bool:
    return bool(settings.RECKON_ALERT_WEBHOOK_URL or settings.RECKON_ALERT_EMAILS)


def evaluate_alerts() -> list[Notified]:
    """Evaluate every condition; the notifications this pass sent."""
    notify = channels_configured()
    sent = []
    for check in CHECKS:
        notified = _evaluate(check(), notify=notify)
        if notified:
            sent.append(notified)
    return sent


def message(reading: Reading, *, firing_since=None) -> tuple[str, str]:
    """The subject and text of a notification: what holds, and each figure's page."""
    title = TITLES[reading.condition]
    links = "\n".join(f"{link.label.capitalize()} ({link.count}): {absolute(link.path)}" for link in reading.links)
    if reading.firing:
        return f"[Reckon] FIRING: {title}", f"{reading.summary}\n{links}"
    since = f" (firing since {firing_since:%Y-%m-%d %H:%M} UTC)" if firing_since else ""
    return f"[Reckon] RESOLVED: {title}", f"Resolved{since}. {reading.summary}\n{links}"


def _evaluate(reading: Reading, *, notify: bool) -> Notified | None:
    AlertState.objects.get_or_create(condition=reading.condition)
    with transaction.atomic():
        state = AlertState.objects.select_for_update().get(condition=reading.condition)
        now = timezone.now()
        changed = state.firing != reading.firing
        if changed:
            firing_since = state.changed_at if state.firing else None
            state.firing, state.summary, state.changed_at = reading.firing, reading.summary, now
            if not reading.firing:
                state.acknowledged_by, state.acknowledged_at = "", None
            AlertEvent.objects.create(condition=reading.condition, actor=EVALUATOR, note=reading.summary,
                                      kind=AlertEventKind.FIRED if reading.firing else AlertEventKind.RESOLVED)
        else:
            firing_since = _last_fired(reading.condition) if not reading.firing else None
        silenced = state.silenced_until is not None and state.silenced_until > now
        notified = None
        if notify and not silenced and state.told_firing != reading.firing:
            try:
                channels = send(*message(reading, firing_since=firing_since))
            except NotDelivered:
                pass  # logged by notify; still due, the next pass tries again
            else:
                state.told_firing, state.notified_at = reading.firing, now
                notified = Notified(reading.condition, reading.firing, channels)
        if changed or notified:
            state.save()
    return notified


def _last_fired(condition: str):
    fired = AlertEvent.objects.filter(condition=condition, kind=AlertEventKind.FIRED).order_by("-at").first()
    return fired.at if fired else None
