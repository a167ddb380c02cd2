"""`/metrics`: the ledger in Prometheus text format, each family one aggregate query.

Access with DEBUG off (production): the bearer token RECKON_METRICS_TOKEN *and* a client address
in RECKON_METRICS_ALLOW; with no token configured the endpoint stays closed (403 saying so) rather
than stopping the whole web process. With DEBUG on, either one opens it. The client address is the
one behind RECKON_TRUSTED_PROXIES (console.hardening.client_address). Reconciliation and approval
families appear once those apps have their tables.
"""

from __future__ import annotations

import hmac
import ipaddress

from django.apps import apps
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Count, Sum
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from api.models import WorkerToken
from console.hardening import client_address
from ledger.gate import LOOPS, gate_status
from ledger.models import Attempt, Job, LedgerEvent, PassRecord
from ledger.services.recovery import recovery_summary
from ledger.states import UNKNOWN_WORK, Delivery, EventKind, Execution, JobStatus, SideEffect

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

EVENT_COUNTERS = {
    EventKind.LATE_WRITE_REJECTED: (
        "reckon_late_writes_rejected_total",
        "Writes refused because their lease was stale.",
    ),
}
# Refusals a retry loop can repeat without end are counted on their row, not written each as an event.
JOB_COUNTERS = {
    "duplicate_deliveries": ("reckon_duplicate_deliveries_total", "Claims refused as duplicate deliveries."),
    "claims_refused": ("reckon_claims_refused_total",
                       "Other claims refused (previous attempt unknown or blocked, the gate, recovery)."),
}
LEASE_EXPIRY_KINDS = {EventKind.LEASE_EXPIRED_RECLAIMED: "reclaimed", EventKind.LEASE_EXPIRED_UNKNOWN: "unknown"}


def _token_given(request: HttpRequest) -> bool:
    token = settings.RECKON_METRICS_TOKEN
    scheme, _, given = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    return bool(token) and scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def _address_allowed(request: HttpRequest) -> bool:
    client = client_address(request)
    if client is None:
        return False
    address = ipaddress.ip_address(client)
    return any(address in ipaddress.ip_network(net) for net in settings.RECKON_METRICS_ALLOW)


def refusal(request: HttpRequest) -> str | None:
    """Why this request may not read the metrics, or None when it may."""
    if settings.DEBUG:
        if _token_given(request) or _address_allowed(request):
            return None
        return "metrics need the bearer token (RECKON_METRICS_TOKEN) or an address in RECKON_METRICS_ALLOW"
    if not settings.RECKON_METRICS_TOKEN:
        return "metrics are closed: RECKON_METRICS_TOKEN is not set, and RECKON_DEBUG=false requires it"
    if not _token_given(request):
        return "metrics need the bearer token: Authorization: Bearer <RECKON_METRICS_TOKEN>"
    if not _address_allowed(request):
        return "metrics are not served to this address (RECKON_METRICS_ALLOW)"
    return None


# No cookie-authenticated writes happen here: exempt from CSRF so that require_GET answers a POST
# with 405 instead of the CSRF failure page.
@csrf_exempt
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    reason = refusal(request)
    if reason:
        return HttpResponse(reason + "\n", status=403, content_type="text/plain; charset=utf-8")
    return HttpResponse(exposition(), content_type=CONTENT_TYPE)


class Exposition:
    def __init__(self):
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str, samples: list[tuple[dict, float]]) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for labels, value in samples:
            label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            self.lines.append(
                f"{name}{{{label_text}}} {_number(value)}" if labels else f"{name} {_number(value)}"
            )

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _grouped(queryset, field: str) -> dict[str, int]:
    return dict(queryset.order_by().values_list(field).annotate(n=Count("pk")))


def exposition() -> str:
    out = Exposition()
    jobs = Job.objects.counts_by_status()
    out.family(
        "reckon_jobs", "gauge", "Jobs by status.", [({"status": s}, jobs.get(s, 0)) for s in JobStatus.values]
    )
    for ledger, field, states in (
        ("delivery", "delivery_state", Delivery),
        ("execution", "execution_state", Execution),
        ("side_effect", "side_effect_state", SideEffect),
    ):
        counts = _grouped(Attempt.objects.all(), field)
        out.family(
            f"reckon_attempts_by_{ledger}",
            "gauge",
            f"Attempts by {ledger.replace('_', ' ')} state.",
            [({"state": s}, counts.get(s, 0)) for s in states.values],
        )

    depth, oldest, oldest_job = _unknown_work()
    out.family(
        "reckon_unknown_work_jobs", "gauge", "Jobs waiting on reconciliation or a human.", [({}, depth)]
    )
    out.family(
        "reckon_unknown_work_oldest_age_seconds",
        "gauge",
        "Seconds since the longest-waiting unknown-work job last changed (0 when none).",
        [({}, oldest)],
    )

    out.family(
        "reckon_unknown_work_oldest_job_age_seconds",
        "gauge",
        "Seconds since the oldest unknown-work job was created (0 when none): the overview's age, the alert's.",
        [({}, oldest_job)],
    )
    out.family(
        "reckon_dead_man_gate_open",
        "gauge",
        "1 while the dead-man gate is open, 0 while it holds irreversible side effects.",
        [({}, 1 if gate_status().open else 0)],
    )
    recovery = recovery_summary()
    out.family(
        "reckon_ledger_recovery_window_open",
        "gauge",
        "1 while a recovery window is open (the ledger lost history, or `recover` ran): every new key is looked "
        "up at its provider before its first side effect.",
        [({"cause": recovery["window"].cause if recovery["window"] else ""}, 1 if recovery["window"] else 0)],
    )
    out.family(
        "reckon_ledger_recovery_held_jobs",
        "gauge",
        "Unfinished jobs held for recovery until reconciliation has looked them up.",
        [({}, recovery["held"])],
    )
    passes = dict(PassRecord.objects.filter(name__in=LOOPS).values_list("name", "completed_at"))
    out.family(
        "reckon_loop_last_pass_timestamp_seconds",
        "gauge",
        "When each of Reckon's loops last completed a pass (Unix time; 0: never). time() minus it is how long "
        "the loop has been stopped, whatever the dead-man gate's bound.",
        [({"loop": name}, passes[name].timestamp() if passes.get(name) else 0) for name in LOOPS],
    )

    kinds = _grouped(LedgerEvent.objects.filter(kind__in=[*EVENT_COUNTERS, *LEASE_EXPIRY_KINDS]), "kind")
    for kind, (name, help_text) in EVENT_COUNTERS.items():
        out.family(name, "counter", help_text, [({}, kinds.get(kind, 0))])
    totals = Job.objects.aggregate(**{field: Sum(field) for field in JOB_COUNTERS})
    for field, (name, help_text) in JOB_COUNTERS.items():
        out.family(name, "counter", help_text, [({}, totals[field] or 0)])
    out.family(
        "reckon_api_answers_refused_total",
        "counter",
        "Pull-reconciliation answers refused (lease moved on, or not an agent's job), by worker token prefix.",
        _refused_answers(),
    )
    out.family(
        "reckon_lease_expiries_total",
        "counter",
        "Leases that expired, by what became of the attempt.",
        [({"outcome": outcome}, kinds.get(kind, 0)) for kind, outcome in LEASE_EXPIRY_KINDS.items()],
    )

    checks = _optional_grouped("reconciliation", "ReconciliationCheck", "outcome")
    if checks is not None:
        outcomes = sorted({"confirmed", "not_found", "conflict", "unavailable", *checks})
        out.family(
            "reckon_reconciliation_checks_total",
            "counter",
            "Reconciliation checks by outcome.",
            [({"outcome": o}, checks.get(o, 0)) for o in outcomes],
        )
    approvals = _optional_grouped("approvals", "ApprovalRequest", "status", status="pending")
    if approvals is not None:
        out.family(
            "reckon_approvals_pending",
            "gauge",
            "Approval requests awaiting a decision.",
            [({}, approvals.get("pending", 0))],
        )
        out.family(
            "reckon_approvals_oldest_pending_age_seconds",
            "gauge",
            "Seconds the oldest pending approval request has waited (0 when none).",
            [({}, _oldest_pending_approval_age())],
        )
    return out.text()


def _unknown_work() -> tuple[int, float, float]:
    """How many unknown-work jobs; seconds since the longest-waiting one last changed; since the
    oldest one was created."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), coalesce(extract(epoch FROM clock_timestamp() - min(updated_at)), 0),"
            " coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0)"
            f" FROM {Job._meta.db_table} WHERE status = ANY(%s)",  # nosec B608  # table name from the model; statuses bound
            [[s.value for s in UNKNOWN_WORK]],
        )
        depth, oldest, oldest_job = cursor.fetchone()
    return depth, max(0.0, round(float(oldest), 3)), max(0.0, round(float(oldest_job), 3))


def _refused_answers() -> list[tuple[dict, float]]:
    rows = WorkerToken.objects.filter(answers_refused__gt=0).order_by("prefix")
    return [({"token": prefix}, n) for prefix, n in rows.values_list("prefix", "answers_refused")]


def _oldest_pending_approval_age() -> float:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0)"
            " FROM approvals_approvalrequest WHERE status = 'pending'"
        )
        return max(0.0, round(float(cursor.fetchone()[0]), 3))


def _optional_grouped(app_label: str, model_name: str, field: str, **filters) -> dict[str, int] | None:
    """Counts from another app's model, or None while that model or its table does not exist."""
    if not apps.is_installed(app_label):
        return None
    try:
        model = apps.get_model(app_label, model_name)
    except LookupError:
        return None
    try:
        with transaction.atomic():  # a savepoint: a missing table must not poison the request
            return _grouped(model.objects.filter(**filters), field)
    except DatabaseError:
        return None
