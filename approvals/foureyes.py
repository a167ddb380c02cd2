"""Who may not approve a job's replay: everyone whose hand is in the job's whole history, not only
the person who asked this time. A colleague's routine "ask again" after an expiry must not let the
person who caused the replay approve it.

Excluded are the requesters of every approval request of the job, the people who decided on it
(operators' and approvers' decisions; not comments, not holds), the author of the payload being
replayed, and the issuers of the worker tokens whose workers or agents wrote into its history,
each with their linked sign-in identities. People are matched by account and identity
(`identities_of`: `account:<pk>` of every account of the person, and provider subjects), never by
the name they go by now.

Events name people by username only, so a decision's author is the account that had the name
when it was made (approvals.identities.NameHistory: a rename is kept by a database trigger); each
approval request records the identities excluded when it was opened
(`excluded_identities`), and the next request of the job carries them forward, so a rename after
that cannot lift an exclusion. The database refuses a decision by an excluded account or identity
(the `approval_four_eyes_history` trigger, FOUR_EYES_HISTORY).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from approvals.identities import ACCOUNT, NameHistory, identities_of
from approvals.models import ApprovalRequest, ApprovalStatus
from ledger.hooks import Hook
from ledger.models import Job, LedgerEvent
from ledger.moments import kept_time
from ledger.states import ActorType, EventKind

# Who issued the worker token an actor's name is tagged with (a worker of the API, an agent of the
# MCP gateway): api.tokens.issuer_of, lent from the worker API's AppConfig.ready (this layer is below it).
token_issuer = Hook("the person who issued the worker token an actor's name is tagged with")

# A person's remark and "I'm on it" change nothing: they are no decision.
NOT_DECISIONS = (EventKind.JOB_COMMENTED, EventKind.JOB_TAKEN, EventKind.JOB_RELEASED)

# What a person's decision reads like after their name; the first ones name a person most plainly.
DID = {
    EventKind.OPERATOR_CORRECTED_PAYLOAD: "wrote the payload this replay would send",
    EventKind.OPERATOR_MARKED_NOT_FOUND: "marked this job not found",
    EventKind.RECONCILED_NOT_FOUND: "answered not found for this job",
    EventKind.OPERATOR_REPLAYED_BLOCKED: "replayed this job's blocked attempt",
    EventKind.OPERATOR_RETRIED_FAILED: "retried this failed job",
    EventKind.OPERATOR_RETRIED_RECONCILIATION: "sent this job back to reconciliation",
    EventKind.OPERATOR_ESCALATED: "escalated this job",
    EventKind.OPERATOR_RECHECKED_IDENTITY: "re-checked this job's identity",
    EventKind.APPROVAL_REQUESTED: "asked for approval of this job's replay",
    EventKind.APPROVAL_GRANTED: "approved a replay of this job",
    EventKind.APPROVAL_REJECTED: "rejected a replay of this job",
    EventKind.APPROVAL_WITHDRAWN: "withdrew an approval request of this job",
    EventKind.SIDE_EFFECT_STARTED: "began this job's side effect",
    EventKind.CLAIMED: "claimed this job",
    EventKind.ENQUEUED: "enqueued this job",
}
_FIRST = {kind: rank for rank, kind in enumerate(DID)}


@dataclass(frozen=True)
class Excluded:
    """One person who may not approve the job's replay, and why (their most telling step)."""

    name: str  # as the account is called now
    why: str
    at: datetime | None
    identities: frozenset[str]

    def reason(self) -> str:
        return f"{self.why} (at {kept_time(self.at)})" if self.at else self.why


def excluded_from_approving(job: Job, *, acting: str = "") -> list[Excluded]:
    """Everyone in `job`'s history who may not approve its replay, in the order they first acted.
    `acting` is the actor of a step not yet written (the batch opening a request): a token's
    name among them counts too."""
    people: dict[int, Excluded] = {}  # by account

    def add(user, why: str, at, rank: int = len(DID)) -> None:
        if user is None:
            return
        known = people.get(user.pk)
        if known is None:
            people[user.pk] = Excluded(user.get_username(), why, at, frozenset(identities_of(user)))
            ranks[user.pk] = rank
        elif rank < ranks[user.pk]:
            people[user.pk] = Excluded(known.name, why, at, known.identities)
            ranks[user.pk] = rank

    ranks: dict[int, int] = {}
    events = list(LedgerEvent.objects.filter(job=job).order_by("id").values_list("kind", "actor", "actor_type", "at"))
    deciders = {actor for kind, actor, actor_type, _ in events
                if actor_type in (ActorType.OPERATOR, ActorType.APPROVER) and kind not in NOT_DECISIONS}
    names = NameHistory(deciders)  # an event's actor is the account that had the name then
    issuers: dict[str, object] = {}
    for kind, actor, actor_type, at in events + ([("", acting, "", None)] if acting else []):
        if actor in deciders and actor_type in (ActorType.OPERATOR, ActorType.APPROVER) and kind not in NOT_DECISIONS:
            add(names.account(actor, at), DID.get(kind, f"decided on this job ({kind.replace('_', ' ')})"), at,
                _FIRST.get(kind, len(DID)))
        if actor not in issuers:
            issuers[actor] = token_issuer(actor)
        if issuers[actor] is not None:
            by_token = "an agent" if actor.startswith("mcp:") else "a worker"
            did = DID.get(kind, f"wrote this job's {kind.replace('_', ' ')}") if kind else "asked for this approval"
            add(issuers[actor], f"issued the worker token of {actor}, {by_token} that {did}", at,
                _FIRST.get(kind, len(DID)))

    for request in ApprovalRequest.objects.filter(job=job).select_related("requested_by", "decided_by").order_by("id"):
        add(request.requested_by, f"requested approval {request.pk} of this job's replay", request.created_at)
        if request.status in (ApprovalStatus.APPROVED, ApprovalStatus.REJECTED):
            add(request.decided_by, f"{request.status} approval request {request.pk} of this job",
                request.decided_at)
    excluded = list(people.values())
    # What earlier requests recorded when they were opened, for accounts since renamed or identities since unlinked.
    recorded = set().union(*(request_excluded for request_excluded in ApprovalRequest.objects.filter(job=job)
                             .values_list("excluded_identities", flat=True)))
    recorded -= set().union(*(person.identities for person in excluded))
    if recorded:
        excluded.append(Excluded("an account excluded before", "was excluded when an earlier approval request of "
                                 "this job was opened", None, frozenset(recorded)))
    return excluded


def excluded_identities(job: Job, *, acting: str = "", also=None) -> list[str]:
    """The accounts and identities `excluded_from_approving` names, with `also` (a user): what an
    approval request records, and the database holds its decision to."""
    keys = set(identities_of(also))
    for person in excluded_from_approving(job, acting=acting):
        keys |= person.identities
    return sorted(keys)


def why_excluded(job: Job, user) -> str | None:
    """Why `user` may not approve `job`'s replay ("olga marked this job not found (at …)"), or None."""
    mine = set(identities_of(user))
    for person in excluded_from_approving(job):
        same = sorted(mine & person.identities)
        if not same:
            continue
        if f"{ACCOUNT}{user.pk}" in person.identities:
            return f"{user.get_username()} {person.reason()}"
        return (f"{user.get_username()} is the same person as {person.name} (both accounts are "
                f"{', '.join(same)}), who {person.reason()}")
    return None
