"""Every decision a person takes in the console, declared once: its name, label, help text,
keyboard key, who may take it, and whether it asks "are you sure?" first.

The services (`reconciliation.decisions`, `approvals.services`), the console's views, forms,
templates and keyboard-shortcut list, and the API read this registry; none spells a decision out
again. Whether a decision is allowed for a job in its state is the services' rule
(`decisions.allowed_decisions`), not this list's: `statuses` only says where the console offers it
(which queue tab shows it as a bulk decision).

It lives here, the lowest layer that needs it: the operators' decisions are this app's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledger.states import UNKNOWN_WORK, JobStatus

OPERATORS = "operators"
APPROVERS = "approvers"


@dataclass(frozen=True)
class Decision:
    name: str
    label: str
    help: str
    role: str
    key: str = ""  # pressed outside a text field on the page that offers it; "" for none
    when: str = ""  # the jobs it is for, as the shortcut list says it
    confirm: str = ""  # the second step's text ("are you sure?"); "" decides at once
    danger: bool = False  # shown as a destructive button
    bulk: bool = False  # offered on every selected job, or every job a queue filter matches
    statuses: tuple[str, ...] = ()  # the job statuses it is offered for (in bulk, on their tab)
    takes_payload: bool = False  # comes with a corrected payload
    # Says what someone saw (a provider's log line, a ticket): on many jobs at once it is required.
    takes_evidence: bool = False
    # In bulk, the second step's text when `confirm` is empty (what a wrong "yes" would cost).
    bulk_confirm: str = ""
    done: str = ""  # what it did, as the page says once it is recorded ("approved"); job decisions: "<label>: recorded"
    # The help text instead, for an irreversible action (a replay needs a second person).
    help_irreversible: str = ""

    @property
    def asks_in_bulk(self) -> str:
        """The question asked before it applies to every job a filter matches ("" asks nothing)."""
        return self.confirm or self.bulk_confirm

    def help_for(self, *, reversible: bool) -> str:
        return self.help if reversible or not self.help_irreversible else self.help_irreversible


SENT_MAYBE = (JobStatus.NEEDS_RECONCILIATION, JobStatus.NEEDS_OPERATOR, JobStatus.ESCALATED)
NEEDS_APPROVAL_FIRST = "This action is irreversible: an approver must approve the replay (four eyes) before anything runs again."

# The decisions on a job, in the order the job page offers them.
JOB_DECISIONS = (
    Decision(
        "recheck_identity", "Re-check identity", key="i", role=OPERATORS, when="blocked jobs", bulk=True,
        statuses=(JobStatus.BLOCKED,),
        help="Run the identity check again now; the job stays blocked and records what it saw.",
    ),
    Decision(
        "replay_blocked", "Replay", key="p", role=OPERATORS, when="blocked jobs", bulk=True,
        statuses=(JobStatus.BLOCKED,),
        help="The binding matches now and nothing was sent: run it again with the same key.",
        help_irreversible=f"The binding matches now and nothing was sent. {NEEDS_APPROVAL_FIRST}",
    ),
    Decision(
        "confirm_effect", "Confirm effect", key="c", role=OPERATORS, when="unknown jobs", statuses=SENT_MAYBE,
        bulk=True, takes_evidence=True,
        bulk_confirm="Each job succeeds and is never replayed: say only what the evidence shows for every one of them.",
        help="The effect happened: the job succeeds and is never replayed.",
    ),
    Decision(
        "mark_not_found", "Mark not found", key="n", role=OPERATORS, when="unknown jobs", statuses=SENT_MAYBE,
        bulk=True, takes_evidence=True,
        bulk_confirm="Each job is replayed with the same key (an irreversible one asks an approver first).",
        help="Nothing happened: the job is replayed with the same key.",
        help_irreversible=f"Nothing happened. {NEEDS_APPROVAL_FIRST}",
    ),
    Decision(
        "escalate", "Escalate", key="e", role=OPERATORS, when="unknown or blocked jobs",
        statuses=(*SENT_MAYBE, JobStatus.BLOCKED), bulk=True,
        help="Hand the job to someone with more context; nothing automatic happens.",
    ),
    Decision(
        "retry_reconciliation", "Retry reconciliation", key="r", role=OPERATORS, when="unknown jobs", bulk=True,
        statuses=SENT_MAYBE, help="Ask the provider again now, with a fresh round of checks.",
    ),
    Decision(
        "request_approval", "Ask for approval again", key="a", role=OPERATORS, when="jobs back from approval",
        statuses=(JobStatus.NEEDS_OPERATOR, JobStatus.ESCALATED),
        help="The attempt did nothing; a second person approves the replay (a new request).",
    ),
    Decision(
        "retry_failed", "Retry as is", key="t", role=OPERATORS, when="failed jobs", bulk=True,
        statuses=(JobStatus.FAILED,),
        help="Nothing was done: one more attempt with the same payload and the same key.",
        help_irreversible=f"Nothing was done: one more attempt with the same key. {NEEDS_APPROVAL_FIRST}",
    ),
    Decision(
        "retry_corrected", "Retry with this payload", key="m", role=OPERATORS, when="failed jobs",
        statuses=(JobStatus.FAILED,), takes_payload=True,
        help="Correct the payload below, then one more attempt with the same key; the change and your name go "
             "into the history.",
        help_irreversible="Correct the payload below; the change and your name go into the history. "
                          f"{NEEDS_APPROVAL_FIRST}",
    ),
    Decision(
        "close_failed", "Close", key="l", role=OPERATORS, when="failed jobs", bulk=True, danger=True,
        statuses=(JobStatus.FAILED,),
        help="The failure stands: no more attempts, and the job leaves the failed tab (it becomes cancelled).",
        confirm="No attempt will run again for this job; it leaves the failed tab for good.",
    ),
    Decision(
        "cancel_job", "Cancel job", key="x", role=OPERATORS, when="any unfinished job", bulk=True, danger=True,
        statuses=(*UNKNOWN_WORK, JobStatus.PENDING),
        help="No more attempts. An unknown attempt stays unknown on record.",
        confirm="No more attempts will run for this job, and it leaves the queue for good.",
    ),
)

# The decisions on an approval request (the approvals page).
APPROVAL_DECISIONS = (
    Decision("approve", "Approve replay", role=APPROVERS, done="approved",
             help="Four eyes, same payload: the next attempt runs with the same key."),
    Decision("reject", "Reject", role=APPROVERS, danger=True, done="rejected",
             help="No replay: the job is cancelled and its latest attempt stays as it is."),
)

REGISTRY = {decision.name: decision for decision in (*JOB_DECISIONS, *APPROVAL_DECISIONS)}


def job_decision(name: str) -> Decision:
    return REGISTRY[name]


def bulk_decisions(statuses=None) -> tuple[Decision, ...]:
    """The decisions offered on many jobs at once; with `statuses`, those for jobs in them."""
    return tuple(d for d in JOB_DECISIONS if d.bulk and (statuses is None or set(d.statuses) & set(statuses)))
