"""What people do about a firing alert, each with its entry in the alerts' history in the same
transaction: acknowledge it ("I'm on it"), or silence its notifications for a bounded time. A
silence belongs to the incident it is set for: it ends when the alert resolves (alerts.evaluate)
or at its time, whichever comes first, so it never hides the next incident."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from alerts.models import AlertCondition, AlertEvent, AlertEventKind, AlertState


class AlertRefused(Exception):
    """Nothing was changed; the message says why."""


def _locked_state(condition: str) -> AlertState:
    if condition not in AlertCondition.values:
        raise AlertRefused(f"there is no alert {condition!r}")
    AlertState.objects.get_or_create(condition=condition)
    return AlertState.objects.select_for_update().get(condition=condition)


def _note(note: str) -> str:
    note = note.strip()
    if not note:
        raise AlertRefused("a note is required: say why, for the history")
    return note


@transaction.atomic
def alert_acknowledge(*, condition: str, username: str, note: str) -> AlertState:
    note = _note(note)
    state = _locked_state(condition)
    if not state.firing:
        raise AlertRefused("this alert is not firing: there is nothing to acknowledge")
    state.acknowledged_by, state.acknowledged_at = username, timezone.now()
    state.save(update_fields=["acknowledged_by", "acknowledged_at"])
    AlertEvent.objects.create(condition=condition, kind=AlertEventKind.ACKNOWLEDGED, actor=username, note=note)
    return state


@transaction.atomic
def alert_silence(*, condition: str, username: str, note: str, hours: float) -> AlertState:
    """No notification for `condition` while this incident lasts, at most `hours` (at most
    RECKON_ALERT_SILENCE_MAX_H); when it resolves or the time is up, the channels hear what holds,
    if it is not what they were last told. Only a firing alert has an incident to silence."""
    note = _note(note)
    longest = settings.RECKON_ALERT_SILENCE_MAX_H
    if not 0 < hours <= longest:
        raise AlertRefused(f"a silence lasts more than 0 and at most {longest:g} h, not {hours:g} h")
    state = _locked_state(condition)
    if not state.firing:
        raise AlertRefused("this alert is not firing: a silence belongs to an incident, and there is none to silence")
    state.silenced_until = timezone.now() + timedelta(hours=hours)
    state.silenced_by, state.silence_note = username, note
    state.save(update_fields=["silenced_until", "silenced_by", "silence_note"])
    AlertEvent.objects.create(condition=condition, kind=AlertEventKind.SILENCED, actor=username, note=note,
                              silenced_until=state.silenced_until)
    return state
