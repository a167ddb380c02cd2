"""The demo's reconcilers (sandbox/demo_actions.py): look an effect up at the sandbox's providers,
by key or by marker, and say what we saw.

Each takes the job and the attempt in question and returns a `Finding`. Only a lookup that
proves absence may say `not_found`, and it says why replay is safe; an error, a 5xx or a
timeout proves nothing and is `unavailable`. Every provider answer goes into the evidence.
"""

from __future__ import annotations

from dataclasses import replace
from urllib.parse import urlencode

from django.conf import settings

from ledger.models import Attempt, Job
from ledger.providers import NoAnswer, NotSent, call
from reconciliation.findings import REPORTED, Finding, not_asked, reported_evidence, sent_elsewhere
from reconciliation.models import CheckOutcome


class LookupFailed(Exception):
    """The provider gave no definite answer; the lookup proves nothing. `retry_in`: it was not
    really asked (rate limited, circuit open), so the look does not count (`not_asked`)."""

    def __init__(self, message: str, retry_in: float | None = None):
        super().__init__(message)
        self.retry_in = retry_in


def _lookup(base_url: str, path: str, collection: str, lookups: list, *, provider: str, **query) -> list[dict]:
    url = f"{base_url}{path}?{urlencode(query)}"
    try:
        reply = call("GET", url, provider=provider)
    except (NotSent, NoAnswer) as exc:
        lookups.append({"url": url, "error": str(exc)})
        raise LookupFailed(str(exc), not_asked(exc)) from exc
    if reply.status == 429:
        lookups.append({"url": url, "status": reply.status, "error": reply.error})
        raise LookupFailed(f"GET {url}: 429 {reply.error}", not_asked(None, 429, reply.retry_after))
    if not reply.ok or not isinstance(reply.body.get(collection), list):
        lookups.append({"url": url, "status": reply.status, "error": reply.error})
        raise LookupFailed(f"GET {url}: {reply.status} {reply.error}")
    records = reply.body[collection]
    lookups.append({"url": url, "status": reply.status, "found": records})
    return records


def _claimed_ref(attempt: Attempt, ref_field: str) -> str:
    """An object id the provider reported for this attempt (result_ref, or a 2xx in the evidence)."""
    if attempt.result_ref:
        return attempt.result_ref
    reported = getattr(attempt, REPORTED, None)
    if reported is None:
        reported = reported_evidence([attempt])[attempt.pk]
    for evidence in reported:
        status, body = evidence.get("status"), evidence.get("body")
        if isinstance(status, int) and 200 <= status < 300 and isinstance(body, dict) and body.get(ref_field):
            return str(body[ref_field])
    return ""


def _differences(record: dict, expected: dict) -> dict:
    return {
        name: {"expected": want, "provider": record.get(name)}
        for name, want in expected.items()
        if record.get(name) != want
    }


def _judge(
    job: Job,
    attempt: Attempt,
    records: list[dict],
    lookups: list,
    *,
    what: str,
    ref_field: str,
    expected: dict,
    absent_reason: str,
    extra_conflict=None,
) -> Finding:
    """The rules every reconciler shares, once the provider has answered definitely."""
    evidence = {"lookups": lookups, "marker": job.idempotency_key}
    if len(records) > 1:
        ids = [r.get(ref_field) for r in records]
        return Finding(CheckOutcome.CONFLICT, f"{len(records)} {what}s carry this job's marker: {ids}", evidence)
    if not records:
        claimed = _claimed_ref(attempt, ref_field)
        if claimed:
            return Finding(
                CheckOutcome.CONFLICT,
                f"the provider reported {what} {claimed} for this attempt, but no {what} carries the marker",
                {**evidence, "claimed": claimed},
            )
        return Finding(CheckOutcome.NOT_FOUND, absent_reason, evidence)
    record = records[0]
    differing = _differences(record, expected)
    if differing:
        return Finding(
            CheckOutcome.CONFLICT,
            f"{what} {record.get(ref_field)} exists for this job but differs from the payload: "
            + ", ".join(sorted(differing)),
            {**evidence, "differences": differing},
        )
    if extra_conflict is not None:
        conflict = extra_conflict(record)
        if conflict:
            return Finding(CheckOutcome.CONFLICT, conflict[0], {**evidence, **conflict[1]})
    ref = str(record.get(ref_field, ""))
    return Finding(CheckOutcome.CONFIRMED, f"{what} {ref} found at the provider", evidence, result_ref=ref)


def _unavailable(exc: LookupFailed, lookups: list) -> Finding:
    return Finding(CheckOutcome.UNAVAILABLE, f"lookup gave no definite answer: {exc}", {"lookups": lookups},
                   retry_in=exc.retry_in)


def _asking(asked: str, attempt: Attempt, look) -> Finding:
    """`look()` at the provider `asked` (a base URL from this process's settings), unless the
    attempt's effect was sent elsewhere; the finding says where it asked."""
    return sent_elsewhere(attempt, asked) or replace(look(asked), asked=asked)


def invoice(job: Job, attempt: Attempt) -> Finding:
    return _asking(settings.RECKON_BILLING_URL, attempt, lambda base: _invoice(job, attempt, base))


def _invoice(job: Job, attempt: Attempt, base: str) -> Finding:
    """By idempotency key first, then by marker: the provider may have forgotten its keys."""
    lookups: list = []
    try:
        by_key = _lookup(base, "/invoices", "invoices", lookups, provider="billing",
                         idempotency_key=job.idempotency_key)
        by_marker = _lookup(base, "/invoices", "invoices", lookups, provider="billing", marker=job.idempotency_key)
    except LookupFailed as exc:
        return _unavailable(exc, lookups)
    records = list({r["id"]: r for r in by_key + by_marker}.values())
    p = job.payload
    expected = {
        "customer": p.get("customer"),
        "amount_cents": p.get("amount_cents"),
        "currency": p.get("currency", "EUR"),
    }
    return _judge(
        job,
        attempt,
        records,
        lookups,
        what="invoice",
        ref_field="id",
        expected=expected,
        absent_reason=(
            "provider has no invoice for this key or marker; every create carries the marker in "
            "its metadata, so a replay with the same key cannot duplicate one"
        ),
    )


def mail(job: Job, attempt: Attempt) -> Finding:
    return _asking(settings.RECKON_MAIL_URL, attempt, lambda base: _mail(job, attempt, base))


def _mail(job: Job, attempt: Attempt, base: str) -> Finding:
    lookups: list = []
    try:
        records = _lookup(
            base, "/messages", "messages", lookups, provider="mail", marker=job.idempotency_key
        )
    except LookupFailed as exc:
        return _unavailable(exc, lookups)
    p = job.payload
    expected = {"to": p.get("to"), "subject": p.get("subject", ""), "body": p.get("body", "")}
    return _judge(
        job,
        attempt,
        records,
        lookups,
        what="message",
        ref_field="message_id",
        expected=expected,
        absent_reason=(
            "provider has no sent message with this marker header; every send carries it, "
            "so the message was never sent"
        ),
    )


def post(job: Job, attempt: Attempt) -> Finding:
    return _asking(settings.RECKON_PUBLISH_URL, attempt, lambda base: _post(job, attempt, base))


def _post(job: Job, attempt: Attempt, base: str) -> Finding:
    lookups: list = []
    try:
        records = _lookup(base, "/posts", "posts", lookups, provider="publish",
                          marker=job.idempotency_key)
    except LookupFailed as exc:
        return _unavailable(exc, lookups)

    def wrong_account(record: dict):
        binding = {k: job.identity[k] for k in ("account", "profile") if k in job.identity}
        differing = _differences(record, binding)
        if differing:
            return (
                f"post {record.get('post_id')} was made from "
                + ", ".join(f"{k} {d['provider']!r}" for k, d in differing.items())
                + ", not the job's identity binding",
                {"identity_differences": differing},
            )
        return None

    return _judge(
        job,
        attempt,
        records,
        lookups,
        what="post",
        ref_field="post_id",
        expected={"body": job.payload.get("body", "")},
        absent_reason=(
            "the publish target shows no post with this job's marker; every post carries it, "
            "so nothing was published"
        ),
        extra_conflict=wrong_account,
    )
