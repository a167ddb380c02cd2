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
    AlertCondition.LOOP_STALLED: "A reconciler or sweeper loop stalled",
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


def silences_in_force(now=None) -> list[AlertState]:
    """The silences that hold now, the soonest to end first (each message and page names them)."""
    now = now or timezone.now()
    return list(AlertState.objects.filter(silenced_until__gt=now).order_by("silenced_until", "condition"))


def silence_text(state: AlertState) -> str:
    """'Dead-man gate closed: ... until 2026-12-03 18:00 UTC or until it resolves (olga: "on it")'."""
    by = f" ({state.silenced_by}: \"{state.silence_note}\")" if state.silenced_by else ""
    return (f"{TITLES[state.condition]} is silenced until {state.silenced_until:%Y-%m-%d %H:%M} UTC "
            f"or until it resolves, whichever comes first{by}")


def message(reading: Reading, *, firing_since=None, silences: list[AlertState] = ()) -> tuple[str, str]:
    """The subject and text of a notification: what holds, each figure's page, and what is
    silenced until when (so no one is surprised by an alert that stays quiet)."""
    title = TITLES[reading.condition]
    links = "\n".join(f"{link.label.capitalize()} ({link.count}): {absolute(link.path)}" for link in reading.links)
    silenced = "".join(f"\nSilenced: {silence_text(state)}." for state in silences
                       if state.condition != reading.condition)
    if reading.firing:
        return f"[Reckon] FIRING: {title}", f"{reading.summary}\n{links}{silenced}"
    since = f" (firing since {firing_since:%Y-%m-%d %H:%M} UTC)" if firing_since else ""
    return f"[Reckon] RESOLVED: {title}", f"Resolved{since}. {reading.summary}\n{links}{silenced}"


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
        ended = _end_silence(state, now, resolved=changed and not reading.firing)
        silenced = state.silenced_until is not None
        notified = None
        if notify and not silenced and state.told_firing != reading.firing:
            try:
                channels = send(*message(reading, firing_since=firing_since, silences=silences_in_force(now)))
            except NotDelivered:
                pass  # logged by notify; still due, the next pass tries again
            else:
                state.told_firing, state.notified_at = reading.firing, now
                notified = Notified(reading.condition, reading.firing, channels)
        if changed or notified or ended:
            state.save()
    return notified


def _end_silence(state: AlertState, now, *, resolved: bool) -> bool:
    """A silence ends with the incident it was set for, or at its time: whichever comes first.
    Recorded in the history; True when one ended."""
    if state.silenced_until is None or not (resolved or state.silenced_until <= now):
        return False
    why = "the alert resolved" if resolved and state.silenced_until > now else "its time was up"
    AlertEvent.objects.create(condition=state.condition, kind=AlertEventKind.SILENCE_ENDED, actor=EVALUATOR,
                              note=f"the silence set by {state.silenced_by or 'someone'} ended: {why}",
                              silenced_until=state.silenced_until)
    state.silenced_until, state.silenced_by, state.silence_note = None, "", ""
    return True


def _last_fired(condition: str):
    fired = AlertEvent.objects.filter(condition=condition, kind=AlertEventKind.FIRED).order_by("-at").first()
    return fired.at if fired else None
