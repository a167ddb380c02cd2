"""Filters that turn what a provider answered into a sentence a person reads at a glance."""

from __future__ import annotations

from django import template

from console.selectors import triage

register = template.Library()


@register.filter
def check_summary(check, action: str) -> str:
    """One reconciliation check of a job of `action`: "billing: invoice in_123 found by idempotency key"."""
    return triage.evidence_summary(action, check.outcome, check.evidence)


@register.filter
def reconciler_label(check, action: str) -> str:
    return triage.reconciler_label(action, check.reconciler)


@register.filter
def evidence_title(event, action: str) -> str:
    """The summary line of an event's evidence: the provider's answer when the event carries one."""
    if event.evidence.get("reason") and event.evidence.get("lookups") is not None:
        return triage.evidence_summary(action, event.kind, event.evidence)
    return "Evidence"
