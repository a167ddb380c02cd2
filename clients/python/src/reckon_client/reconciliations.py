"""Pull-mode reconciliation: an agent looks up what happened to an unknown attempt, and answers.

    while True:
        look_up = client.next_reconciliation("notes-agent", actions=["notes.write"], wait_seconds=30)
        if look_up is None:
            continue
        with look_up:                             # an exception in the block answers `unavailable`
            found = provider.find(key=look_up.idempotency_key)
            if found:
                look_up.confirmed(found.id, evidence={"found": found.id})
            else:
                look_up.not_found("the provider has nothing with this key", evidence={"searched": "..."})

Answer with what the provider proves: `confirmed` (the effect happened; its reference),
`not_found` (it did not, and why you know: Reckon may then replay it with the same key),
`conflict` (something else is there: a person decides), `unavailable` (the provider could not
tell: Reckon asks again later). An answer after the reconciliation lease moved on (another agent
took the job, or it was settled) is refused: ReckonError 409 answer_refused, nothing changed.
"""

from __future__ import annotations

from enum import Enum
from types import TracebackType
from typing import TYPE_CHECKING, Literal

from reckon_client.errors import JsonObject
from reckon_client.jobs import OnJob

if TYPE_CHECKING:
    from reckon_client.client import Client


class Finding(str, Enum):  # noqa: UP042  (StrEnum is 3.11; the client supports 3.10)
    """What a look-up proves about the unknown attempt."""

    CONFIRMED = "confirmed"  # the effect happened
    NOT_FOUND = "not_found"  # it did not (say why): a replay with the same key is safe
    CONFLICT = "conflict"  # something else is there: a person decides
    UNAVAILABLE = "unavailable"  # the provider could not tell: asked again later


class Reconciliation(OnJob):
    """One claimed look-up (`Client.next_reconciliation`): the job, its unknown attempt, what the
    worker recorded (`evidence_so_far`), and the lease to answer under (`lease_expires_at`).

    As a context manager it never leaves the look-up unanswered: an exception in the block
    (the provider could not be asked) answers `unavailable` with the exception, then propagates."""

    def __init__(self, client: Client, agent: str, claimed: JsonObject):
        self.client = client
        self.agent = agent
        self.reconciliation_id: str = claimed["reconciliation_id"]
        self.lease_expires_at: str = claimed["lease_expires_at"]
        self.job: JsonObject = claimed["job"]
        self.attempt: JsonObject = claimed["attempt"]
        self.evidence_so_far: JsonObject = claimed.get("evidence_so_far") or {}
        self.applied: JsonObject | None = None  # Reckon's answer to ours: what the ledger did

    def answer(self, finding: Finding | str, *, reason: str = "", evidence: JsonObject | None = None,
               result_ref: str = "") -> JsonObject:
        """Send the finding; returns what the ledger did (`applied`: succeeded, replayed,
        awaiting_approval, escalated, retry in N s, needs_operator)."""
        body = {"agent": self.agent, "outcome": Finding(finding).value, "reason": reason[:2000],
                "evidence": evidence or {}, "result_ref": result_ref}
        path = f"/reconciliations/{self.reconciliation_id}/outcome"
        self.applied = self.client.call("POST", path, body).json
        return self.applied

    def confirmed(self, result_ref: str = "", *, reason: str = "", evidence: JsonObject | None = None) -> JsonObject:
        return self.answer(Finding.CONFIRMED, reason=reason, evidence=evidence, result_ref=result_ref)

    def not_found(self, reason: str, *, evidence: JsonObject | None = None) -> JsonObject:
        """The effect did not happen; `reason` says how you know (required: Reckon may replay)."""
        return self.answer(Finding.NOT_FOUND, reason=reason, evidence=evidence)

    def conflict(self, reason: str, *, evidence: JsonObject | None = None) -> JsonObject:
        return self.answer(Finding.CONFLICT, reason=reason, evidence=evidence)

    def unavailable(self, reason: str, *, evidence: JsonObject | None = None) -> JsonObject:
        return self.answer(Finding.UNAVAILABLE, reason=reason, evidence=evidence)

    def __enter__(self) -> Reconciliation:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        if self.applied is None and exc is not None:
            self.unavailable(f"the look-up failed: {type(exc).__name__}: {exc}")
        return False
