"""What the console's alerts page shows: each condition as it holds now for the person's tenants
(the same checks the watchdog notifies from, so each figure is the count of the page its link
opens), since when it fires, who acknowledged it, until when it is silenced, and the history."""

from __future__ import annotations

from dataclasses import dataclass

from django.utils import timezone

from alerts.conditions import CHECKS, Reading
from alerts.evaluate import TITLES, channels_configured, silence_text, silences_in_force
from alerts.models import AlertEvent, AlertState
from console.access import TenantFence

HISTORY_SHOWN = 30


@dataclass(frozen=True)
class AlertRow:
    reading: Reading
    title: str
    state: AlertState | None

    @property
    def condition(self) -> str:
        return self.reading.condition

    @property
    def firing_since(self):
        """When the watch saw it start (None: not yet seen by an evaluation pass)."""
        return self.state.changed_at if self.state and self.state.firing else None

    @property
    def silenced_until(self):
        until = self.state.silenced_until if self.state else None
        return until if until and until > timezone.now() else None

    @property
    def notifications(self) -> str:
        """What the channels were told of this alert, in words: 'sent', 'due' or why nothing goes."""
        if self.silenced_until:
            return "silenced"
        if not channels_configured():
            return "no_channel"
        if self.state and self.state.told_firing == self.reading.firing and self.state.notified_at:
            return "sent"
        return "due"


def alert_rows(fence: TenantFence) -> list[AlertRow]:
    states = {state.condition: state for state in AlertState.objects.all()}
    rows = []
    for check in CHECKS:
        reading = check(fence.tenants)
        rows.append(AlertRow(reading, TITLES[reading.condition], states.get(reading.condition)))
    return rows


def firing_titles() -> list[str]:
    """The titles of the conditions the last evaluation found firing (the overview's line)."""
    return [TITLES[state.condition] for state in AlertState.objects.filter(firing=True).order_by("condition")]


def silences() -> list[str]:
    """Each silence in force, in a sentence naming who set it, why and until when (the alerts page
    and the overview, where the next shift starts, say them)."""
    return [silence_text(state) for state in silences_in_force()]


def alert_history() -> list[AlertEvent]:
    """Every tenant's: the evaluation's notes count by tenant (for readers of every tenant only)."""
    return list(AlertEvent.objects.order_by("-at", "-id")[:HISTORY_SHOWN])
