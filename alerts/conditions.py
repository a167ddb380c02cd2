"""The conditions Reckon alerts on, each read from the ledger (or the sign-in throttle) as it is now.

Each check returns a `Reading`: whether the condition holds, a sentence saying what (with the
figures), and the console pages that show exactly what each figure counts (`links`): a figure is
the count of the page its link opens, by the same query (tests/alerts/test_links.py opens them).
The ages are counted from the job's creation, as in the queue's age filter, to the second.

An alert goes to one channel for the whole deployment, so it names no job: it counts the jobs per
tenant, and the link shows each person the jobs of their own tenants (the console's fence). The
console's alerts page reads the same checks limited to the person's tenants (`tenants`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlencode

from axes.models import AccessAttempt
from django.conf import settings
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder
from django.db.models import Count, Exists, Min, OuterRef, QuerySet, Sum
from django.urls import reverse
from django.utils import timezone

from alerts.models import AlertCondition
from approvals.models import ApprovalRequest, ApprovalStatus
from ledger.gate import LOOPS, gate_status
from ledger.models import Job, LedgerEvent, LoopBeat
from ledger.services.recovery import ROLLBACK_DETECTED, current_window
from ledger.states import FINISHED_JOB, QUEUE_TABS, UNKNOWN_WORK, EventKind, JobStatus


@dataclass(frozen=True)
class Link:
    label: str  # what the figure counts: "need a person"
    count: int
    path: str


@dataclass(frozen=True)
class Reading:
    condition: AlertCondition
    firing: bool
    summary: str
    links: tuple[Link, ...]

    @property
    def path(self) -> str:
        """The first page to open (the first figure's)."""
        return self.links[0].path


def duration(seconds: float) -> str:
    """'3 h 5 min', '12 min', '40 s': how long, for a sentence."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    hours, minutes = divmod(seconds // 60, 60)
    if not hours:
        return f"{minutes} min"
    days, hours = divmod(hours, 24)
    text = f"{days} d {hours} h" if days else f"{hours} h"
    return text if days or not minutes else f"{text} {minutes} min"


def bound_text(seconds: float) -> str:
    """A configured bound, exactly: '1 min 30 s', '1 h', '0.5 s' (never rounded to a minute)."""
    whole, fraction = divmod(seconds, 1)
    hours, rest = divmod(int(whole), 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours} h"] if hours else []
    parts += [f"{minutes} min"] if minutes else []
    if secs or fraction or not parts:
        parts.append(f"{secs + fraction:g} s")
    return " ".join(parts)


def plural(count: int, one: str, many: str) -> str:
    """'1 escalated job needs', '3 escalated jobs need': the count and its words agreeing."""
    return f"{count} {one if count == 1 else many}"


# How many tenants an alert names; the others are counted together.
TENANTS_SHOWN = 5


def per_tenant(jobs: QuerySet, tenant_field: str = "tenant") -> str:
    """'acme 3, globex 1': how many of `jobs` each tenant has, the most first."""
    counts = list(jobs.order_by().values(tenant_field).annotate(n=Count("pk")).order_by("-n", tenant_field))
    shown = [f"{row[tenant_field]} {row['n']}" for row in counts[:TENANTS_SHOWN]]
    if len(counts) > TENANTS_SHOWN:
        rest = sum(row["n"] for row in counts[TENANTS_SHOWN:])
        shown.append(f"{rest} in {len(counts) - TENANTS_SHOWN} other tenants")
    return ", ".join(shown)


def queue_path(**filters) -> str:
    return reverse("queue") + "?" + urlencode(filters)


def _fenced(rows: QuerySet, tenants: frozenset[str] | None, tenant_field: str = "tenant") -> QuerySet:
    """`rows` of `tenants` only (None: every tenant), as the console's fence limits its pages."""
    return rows if tenants is None else rows.filter(**{f"{tenant_field}__in": sorted(tenants)})


# How an alert names the old unknown work of each queue tab (ledger.states.QUEUE_TABS, which the
# console's queue page shows) it counts and links to; the failed tab holds finished jobs.
UNKNOWN_PARTS = tuple((label, tab, QUEUE_TABS[tab][1]) for label, tab in (
    ("need a person", "human"), ("reconciling", "reconciling"), ("blocked, nothing sent", "blocked")))


def unknown_too_old(tenants: frozenset[str] | None = None) -> Reading:
    bound = settings.RECKON_ALERT_UNKNOWN_AGE_S
    cutoff = timezone.now() - timedelta(seconds=bound)
    condition = AlertCondition.UNKNOWN_TOO_OLD
    old = _fenced(Job.objects.filter(status__in=UNKNOWN_WORK, created_at__lt=cutoff), tenants)
    links = []
    for label, tab, statuses in UNKNOWN_PARTS:
        count = old.filter(status__in=statuses).count()
        if count:
            links.append(Link(label, count, queue_path(tab=tab, older_than_s=f"{bound:g}")))
    if not links:
        return Reading(condition, False, f"No unknown work is older than {bound_text(bound)}.",
                       (Link("need a person", 0, queue_path(tab="human", older_than_s=f"{bound:g}")),))
    oldest = old.order_by("created_at").values("tenant", "status", "created_at").first()
    total = sum(link.count for link in links)
    age = (timezone.now() - oldest["created_at"]).total_seconds()
    return Reading(
        condition, True,
        f"{plural(total, 'unknown job', 'unknown jobs')} older than {bound_text(bound)} ({per_tenant(old)}): "
        + ", ".join(f"{link.count} {link.label}" for link in links)
        + f"; the oldest ({oldest['tenant']}, {oldest['status']}) has waited {duration(age)}.",
        tuple(links),
    )


def approval_waiting(tenants: frozenset[str] | None = None) -> Reading:
    """Fires when the oldest pending request has waited past the bound; counts every pending one,
    as the approvals page lists them."""
    bound = settings.RECKON_ALERT_APPROVAL_WAIT_S
    pending = _fenced(ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING), tenants, "job__tenant")
    oldest = pending.order_by("created_at").values("job__tenant", "created_at").first()
    condition = AlertCondition.APPROVAL_WAITING
    path = reverse("approvals")
    age = (timezone.now() - oldest["created_at"]).total_seconds() if oldest else 0
    if oldest is None or age <= bound:
        return Reading(condition, False, f"No approval has waited longer than {bound_text(bound)}.",
                       (Link("pending", pending.count() if oldest else 0, path),))
    count = pending.count()
    return Reading(
        condition, True,
        f"{plural(count, 'approval request', 'approval requests')} pending ({per_tenant(pending, 'job__tenant')}); "
        f"the oldest ({oldest['job__tenant']}) has waited {duration(age)}, longer than {bound_text(bound)}.",
        (Link("pending", count, path),),
    )


def starting_up(gate) -> bool:
    """A fresh database whose loops have not completed their first pass yet, within the gate's
    bound of its creation: the gate holds irreversible work (safe), but nothing has stopped."""
    if any(gate.last_passes.get(name) for name in LOOPS):
        return False
    created = MigrationRecorder.Migration.objects.filter(app="ledger").aggregate(at=Min("applied"))["at"]
    return created is not None and timezone.now() - created <= timedelta(seconds=settings.RECKON_GATE_BOUND_S)


def gate_closed(tenants: frozenset[str] | None = None) -> Reading:
    gate = gate_status()
    # The held jobs are not in the queue (they wait for workers): the overview shows the gate.
    path = reverse("overview")
    held = _fenced(Job.objects.filter(gated_at__isnull=False), tenants).count()
    if gate.open:
        return Reading(AlertCondition.GATE_CLOSED, False, "The dead-man gate is open.", (Link("held", held, path),))
    if starting_up(gate):
        return Reading(AlertCondition.GATE_CLOSED, False,
                       "Reckon is starting: the sweeper and the reconciler have not completed their first pass yet "
                       f"(the database is new; the alert waits {bound_text(settings.RECKON_GATE_BOUND_S)} for them).",
                       (Link("held", held, path),))
    return Reading(
        AlertCondition.GATE_CLOSED, True,
        f"The dead-man gate is closed: {gate.reason}. {plural(held, 'job', 'jobs')} held.",
        (Link("held", held, path),),
    )


def reconciliation_conflict(tenants: frozenset[str] | None = None) -> Reading:
    """Fires while a job a provider's `conflict` answer escalated waits for a person; counts every
    escalated job, as the queue's escalated filter lists them."""
    escalated = _fenced(Job.objects.filter(status=JobStatus.ESCALATED), tenants)
    conflicted = escalated.filter(
        Exists(LedgerEvent.objects.filter(job=OuterRef("pk"), kind=EventKind.RECONCILED_CONFLICT))
    ).count()
    path = queue_path(tab="human", status=JobStatus.ESCALATED.value)
    count = escalated.count()
    if not conflicted:
        return Reading(AlertCondition.RECONCILIATION_CONFLICT, False,
                       "No job escalated by a reconciliation conflict is waiting.", (Link("escalated", count, path),))
    return Reading(
        AlertCondition.RECONCILIATION_CONFLICT, True,
        f"Reconciliation answered conflict: {plural(count, 'escalated job needs', 'escalated jobs need')} a person "
        f"({per_tenant(escalated)}; {conflicted} by a conflict).",
        (Link("escalated", count, path),),
    )


def break_glass_guessing(tenants: frozenset[str] | None = None) -> Reading:
    """Fires while a break-glass account has RECKON_LOGIN_FAILURE_LIMIT (AXES_FAILURE_LIMIT) or more failed sign-ins
    (wrong passwords and wrong TOTP codes, from every address) within the throttle's window: the
    one password door left with SSO only is being tried. It names accounts, not tenants."""
    limit, window = settings.AXES_FAILURE_LIMIT, settings.AXES_COOLOFF_TIME
    accounts = [name.casefold() for name in settings.RECKON_BREAK_GLASS_ACCOUNTS]
    failures = (AccessAttempt.objects.filter(username__in=accounts, attempt_time__gte=timezone.now() - window)
                .values("username").annotate(n=Sum("failures_since_start")).filter(n__gte=limit).order_by("-n", "username"))
    path = reverse("audit")
    if not failures:
        return Reading(AlertCondition.BREAK_GLASS_GUESSING, False,
                       f"No break-glass account has {limit} failed sign-ins within {bound_text(window.total_seconds())}.",
                       (Link("failed sign-ins", 0, path),))
    total = sum(row["n"] for row in failures)
    named = ", ".join(f"{row['username']} {row['n']}" for row in failures)
    return Reading(
        AlertCondition.BREAK_GLASS_GUESSING, True,
        f"Break-glass sign-in is being tried: {named} "
        f"failed sign-ins (wrong passwords and TOTP codes) within {bound_text(window.total_seconds())}; "
        "the account is locked out for a growing wait. If this is not your team, change its password.",
        (Link("failed sign-ins", total, path),),
    )


def ledger_recovery(tenants: frozenset[str] | None = None) -> Reading:
    """Fires while a recovery window is open (the ledger watch found lost history, or `recover`
    ran): the held jobs wait for a lookup, new keys are looked up first. Counts the held jobs, as
    the queue's reconciling tab lists them."""
    window = current_window()
    held = _fenced(Job.objects.filter(recovery_pending=True).exclude(status__in=FINISHED_JOB), tenants)
    # The held jobs wait for the reconciler, not in the queue: the overview shows the window.
    link = Link("held for a lookup", held.count(), reverse("overview"))
    if window is None:
        return Reading(AlertCondition.LEDGER_RECOVERY, False, "The ledger is not under recovery.", (link,))
    lost = window.evidence.get("lost_events")
    why = (f"the ledger lost history it had acknowledged ({lost} events gone, noticed by {window.opened_by})"
           if window.cause == ROLLBACK_DETECTED else f"`recover` ran ({window.opened_by})")
    return Reading(
        AlertCondition.LEDGER_RECOVERY, True,
        f"The ledger is under recovery: {why}. {plural(link.count, 'job is', 'jobs are')} held until looked up; "
        f"until {window.ends_at:%Y-%m-%d %H:%M} UTC every new key is looked up at its provider first.",
        (link,),
    )


def loop_stalled(tenants: frozenset[str] | None = None) -> Reading:
    """Fires while a running `reconcile --loop` or `sweep_leases --loop` process has not completed a
    pass within RECKON_ALERT_LOOP_STALL_S (stopped with SIGSTOP, stuck, or killed: a clean stop
    removes its row, ledger.loops). The gate cannot tell: the qcluster's passes keep it open."""
    bound = settings.RECKON_ALERT_LOOP_STALL_S
    path = reverse("overview")
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        now = cursor.fetchone()[0]
    stalled = list(LoopBeat.objects.filter(beat_at__lt=now - timedelta(seconds=bound)).order_by("beat_at"))
    if not stalled:
        return Reading(AlertCondition.LOOP_STALLED, False,
                       f"Every running reconciler and sweeper loop completed a pass within {bound_text(bound)}.",
                       (Link("stalled loops", 0, path),))
    named = "; ".join(f"the {beat.loop} loop ({beat.process}) has not completed a pass for "
                      f"{duration((now - beat.beat_at).total_seconds())}" for beat in stalled)
    return Reading(
        AlertCondition.LOOP_STALLED, True,
        f"{named} (bound {bound_text(bound)}): it is stopped, stuck or was killed. Unknown work waits longer for its "
        "look-up while the qcluster's once-a-minute pass stands in; restart the process.",
        (Link("stalled loops", len(stalled), path),),
    )


CHECKS = (unknown_too_old, approval_waiting, gate_closed, reconciliation_conflict, break_glass_guessing,
          ledger_recovery, loop_stalled)
