"""What a reconciler says it saw at the provider (`Finding`), and what it may use to say it.

Every reconciler returns a Finding: Reckon's own (reconciliation/smtp.py, webhooks.py, the
agents' answers in pulling.py), the demo's (sandbox/), a team's own Python function, the MCP
gateway's. A reconciler runs in a lookup thread with no database connection, so what it needs
from the ledger is read beforehand (`prefetch_reported`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ledger import endpoints
from ledger.models import Attempt, LedgerEvent
from reconciliation.models import CheckOutcome


@dataclass(frozen=True)
class Finding:
    """What a reconciler saw at the provider."""

    outcome: str  # a CheckOutcome
    reason: str  # for not_found: why a replay is safe; otherwise what was seen
    evidence: dict = field(default_factory=dict)
    result_ref: str = ""
    # Set when the provider was not really asked (rate limited, circuit open): come back after
    # this many seconds; such a look does not count towards RECKON_RECONCILE_MAX_CHECKS.
    retry_in: float | None = None
    # Where the reconciler asked (the provider's endpoint or account, in the terms of
    # Attempt.sent_to; ledger.endpoints); "": it did not say.
    asked: str = ""


def not_asked(exc: Exception | None, reply_status: int | None = None,
              retry_after: float | None = None) -> float | None:
    """The seconds after which to look again when the provider was not really asked: its budget
    refused the call here (OverBudget, CircuitOpen) or it answered 429; otherwise None."""
    if reply_status == 429:
        return retry_after if retry_after is not None else 1.0
    return getattr(exc, "retry_in", None)


def sent_elsewhere(attempt: Attempt, asked: str) -> Finding | None:
    """Before asking `asked`: when the attempt's effect was sent somewhere else, the look could
    only find nothing, which proves nothing — `unavailable`, and the provider is not asked."""
    reason = endpoints.mismatch(asked=asked, sent_to=attempt.sent_to)
    if not reason:
        return None
    return Finding(CheckOutcome.UNAVAILABLE, f"{reason}: this reconciler cannot see that provider, so finding "
                   "nothing there proves nothing", {"asked": asked, "sent_to": attempt.sent_to}, asked=asked)


def where_it_was_sent(attempt: Attempt, finding: Finding) -> Finding:
    """A finding from a provider other than the one the effect was sent to (a reconciler that
    says where it asked: a webhook's `asked`, a function's Finding.asked) decides nothing alone.
    Absence there is `unavailable`, never `not_found`; a match there is a `conflict` for a person:
    the effect may exist twice, or the marker matched another deployment's job."""
    reason = endpoints.mismatch(asked=finding.asked, sent_to=attempt.sent_to)
    if not reason or finding.outcome not in (CheckOutcome.NOT_FOUND, CheckOutcome.CONFIRMED):
        return finding
    evidence = {**finding.evidence, "asked": finding.asked, "sent_to": attempt.sent_to,
                "answered": {"outcome": finding.outcome, "reason": finding.reason}}
    if finding.outcome == CheckOutcome.NOT_FOUND:
        return Finding(CheckOutcome.UNAVAILABLE, f"{reason}: nothing found there proves nothing", evidence,
                       asked=finding.asked)
    return Finding(CheckOutcome.CONFLICT, f"{reason}, yet it was found there: {finding.reason}; the effect may "
                   "exist twice, or another deployment's job carries the same marker", evidence,
                   result_ref=finding.result_ref, asked=finding.asked)


# The attribute `prefetch_reported` sets on an attempt: its events' provider answers.
REPORTED = "reported_evidence"


def reported_evidence(attempts: list[Attempt]) -> dict[int, list[dict]]:
    """What the provider reported to each attempt's worker (its events' evidence), in one query."""
    found = {attempt.pk: [] for attempt in attempts}
    rows = (
        LedgerEvent.objects.filter(attempt__in=[a.pk for a in attempts], evidence__has_key="status")
        .order_by("attempt_id", "id")
        .values_list("attempt_id", "evidence")
    )
    for attempt_id, evidence in rows:
        found[attempt_id].append(evidence)
    return found


def prefetch_reported(attempts: list[Attempt]) -> None:
    """Read, in one query, what the provider reported to each attempt's worker (its events'
    evidence), so that a reconciler can judge without touching the database: reconcilers run
    in lookup threads, and a lookup thread must not need a database connection."""
    by_pk = {a.pk: a for a in attempts if not a.result_ref}
    if by_pk:
        for attempt_id, reported in reported_evidence(list(by_pk.values())).items():
            setattr(by_pk[attempt_id], REPORTED, reported)
