"""The demo actions: four against the sandbox provider (or any provider with the same contract),
mail over SMTP against any SMTP server (the SMTP sandbox in the demo and the tests), and
`mail.external`, the sandbox's mail sent by external workers over HTTP.

Registered when this module is imported: demo mode (RECKON_DEMO=true) and the tests name it in
RECKON_ACTION_MODULES; a deployment names its own modules instead.

Every call carries the job's idempotency key and its marker (the same string), so the effect
can be found later by key or by marker. Classification is honest: 2xx -> Succeeded; a 4xx or
a connection refused before sending -> Failed (nothing happened); a timeout or a dropped response
-> Unknown (it may have happened); a 5xx -> Unknown, unless the action declares that answer as
proof that nothing was done (`nothing_done`: the vault's "503 ... nothing was done" and "500 ...
rolled back; nothing was done") -> Failed, retried. SMTP draws its own line (`ledger.smtp`).
"""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import quote

from django.conf import settings

from ledger import smtp
from ledger.actions import (
    Action,
    Failed,
    NothingDone,
    Outcome,
    Succeeded,
    Unknown,
    action,
    get_action,
    register,
)
from ledger.models import Job
from ledger.providers import NoAnswer, NotSent, Reply, call

MARKER_HEADER = "X-Reckon-Marker"
# Chaos runs shorten the leases (RECKON_DEMO_LEASE_TTL) so that recovery takes seconds.
LEASE_TTL = timedelta(seconds=settings.RECKON_DEMO_LEASE_TTL)


def _headers(job: Job) -> dict:
    return {"Idempotency-Key": job.idempotency_key, MARKER_HEADER: job.idempotency_key}


def _send(
    job: Job,
    method: str,
    url: str,
    body: dict | None,
    *,
    headers: dict | None = None,
    result_field: str = "id",
    provider: str,
) -> Outcome:
    try:
        reply = call(method, url, body=body, headers={**_headers(job), **(headers or {})}, fault_job=job.job_id,
                     provider=provider)
    except NotSent as exc:
        return Failed(error=str(exc), retryable=True, evidence={"sent": False}, retry_in=getattr(exc, "retry_in", None))
    except NoAnswer as exc:
        return Unknown(reason=str(exc), evidence={"sent": True})
    return classify(reply, result_field=result_field, declared=get_action(job.action))


def classify(reply: Reply, *, result_field: str, declared: Action | None = None) -> Outcome:
    evidence = {"status": reply.status, "body": reply.body}
    if reply.ok:
        return Succeeded(result_ref=str(reply.body.get(result_field, "")), evidence=evidence)
    if reply.status == 429:
        return Failed(error=f"429 rate limited: {reply.error}", retryable=True, evidence=evidence,
                      retry_in=reply.retry_after)
    if 400 <= reply.status < 500:
        return Failed(error=f"{reply.status}: {reply.error}", evidence=evidence)
    if declared is not None and declared.proves_nothing_done(reply.status, reply.error):
        return Failed(error=f"{reply.status}: {reply.error} (this answer proves nothing was done, as the action "
                            "declares)", retryable=True, evidence={**evidence, "nothing_done": True})
    return Unknown(reason=f"{reply.status} from provider: {reply.error}", evidence=evidence)


# The sandbox's answers that say the work was not done (sandbox/api.py): a 503 before any work, a
# 500 after the work was rolled back.
SANDBOX_NOTHING_DONE = (NothingDone((500, 503), "nothing was done"),)


def _provider_at(setting: str):
    """Where an action's calls go: the provider URL in this process's settings, read at each job."""
    return lambda job: getattr(settings, setting)


def smtp_server(job: Job) -> str:
    return smtp.endpoint(settings.RECKON_SMTP_HOST, settings.RECKON_SMTP_PORT)


@action("billing.create_invoice", queryable=True, lease_ttl=LEASE_TTL, reconciler="sandbox.reconcilers.invoice",
        sent_to=_provider_at("RECKON_BILLING_URL"), provider="billing")
def create_invoice(job: Job) -> Outcome:
    p = job.payload
    body = {
        "customer": p.get("customer"),
        "amount_cents": p.get("amount_cents"),
        "currency": p.get("currency", "EUR"),
        "description": p.get("description", ""),
        "metadata": {"reckon_marker": job.idempotency_key, "reckon_job": job.job_id},
    }
    return _send(job, "POST", f"{settings.RECKON_BILLING_URL}/invoices", body, provider="billing")


@action("mail.send", queryable=True, lease_ttl=LEASE_TTL, reconciler="sandbox.reconcilers.mail",
        sent_to=_provider_at("RECKON_MAIL_URL"), provider="mail")
def send_mail(job: Job) -> Outcome:
    p = job.payload
    body = {"to": p.get("to"), "subject": p.get("subject", ""), "body": p.get("body", "")}
    return _send(job, "POST", f"{settings.RECKON_MAIL_URL}/messages", body, result_field="message_id",
                 provider="mail")


# The same mail, sent by a worker of your own over HTTP (the README's "An external worker over
# HTTP", examples/http_worker.py): an external action is never queued to django-q2, so beside
# `make run` the stack's own workers leave its jobs to yours. Reconciled like mail.send, by marker.
register(Action("mail.external", executor=None, queryable=True, lease_ttl=LEASE_TTL,
                reconciler="sandbox.reconcilers.mail", source=f"module {__name__}"))


def observe_profile(job: Job) -> dict:
    """What the browser profile is logged into right now (raises if it cannot be read)."""
    profile = job.identity.get("profile", "")
    reply = call("GET", f"{settings.RECKON_PUBLISH_URL}/profiles/{quote(profile, safe='')}", provider="publish")
    if not reply.ok:
        raise RuntimeError(f"profile {profile!r}: {reply.status} {reply.error}")
    return {
        "profile": reply.body.get("profile"),
        "account": reply.body.get("account"),
        "session": reply.body.get("session"),
    }


@action("social.publish_post", queryable=True, lease_ttl=LEASE_TTL, reconciler="sandbox.reconcilers.post",
        observe_identity=observe_profile, sent_to=_provider_at("RECKON_PUBLISH_URL"), provider="publish",
        check_by_hand=(
            "Log into the profile named in the job's identity binding and check which account it shows; fix the "
            "login if it is not the bound account, then re-check identity and replay.\n"
            "In this demo the profiles live in the sandbox provider: log one into its bound account with\n"
            f"curl -X PUT {settings.RECKON_PUBLISH_URL}/_admin/profiles/PROFILE -H 'Content-Type: application/json' "
            "-d '{\"account\": \"ACCOUNT\"}'\n"
            "(PROFILE and ACCOUNT as the identity binding names them). Then, on the queue's Blocked tab, filter by "
            "this action, select every job matching the filter and re-check identity, then replay them the same way."
        ))
def publish_post(job: Job) -> Outcome:
    body = {"body": job.payload.get("body", ""), "marker": job.idempotency_key}
    return _send(
        job,
        "POST",
        f"{settings.RECKON_PUBLISH_URL}/posts",
        body,
        headers={"X-Profile": job.identity.get("profile", "")},
        result_field="post_id",
        provider="publish",
    )


@action("vault.rotate_credential", reversible=False, lease_ttl=LEASE_TTL, sent_to=_provider_at("RECKON_VAULT_URL"),
        provider="vault", nothing_done=SANDBOX_NOTHING_DONE,
        runbook_url="https://wiki.example.com/runbooks/vault-rotation",
        check_by_hand="Open the vault's audit log for the credential named in the payload: a rotation at the "
                      "attempt's time means the effect happened (confirm); none means mark not found.")
def rotate_credential(job: Job) -> Outcome:
    name = quote(str(job.payload.get("name", "")), safe="")
    return _send(
        job, "POST", f"{settings.RECKON_VAULT_URL}/credentials/{name}/rotate", {}, result_field="version",
        provider="vault",
    )


# Mail is not idempotent at an SMTP server: a resend is a second message. Replaying it is safe
# only because the reconciler proved, by its Message-ID, that the first never arrived.
@action("smtp.send_mail", reversible=True, queryable=True, lease_ttl=LEASE_TTL,
        reconciler="reconciliation.smtp.sent_message", sent_to=smtp_server)
def send_mail_over_smtp(job: Job) -> Outcome:
    p = job.payload
    try:
        message = smtp.compose(sender=settings.RECKON_SMTP_FROM, to=str(p.get("to", "")),
                               subject=str(p.get("subject", "")), body=str(p.get("body", "")),
                               marker=job.idempotency_key)
    except ValueError as exc:
        return Failed(error=f"the message cannot be sent as given: {exc}", evidence={"sent": False})
    message_id = str(message["Message-ID"])
    try:
        accepted = smtp.send(message, host=settings.RECKON_SMTP_HOST, port=settings.RECKON_SMTP_PORT,
                             timeout=settings.RECKON_PROVIDER_TIMEOUT)
    except NotSent as exc:
        return Failed(error=str(exc), retryable=True, evidence={"sent": False, "message_id": message_id})
    except smtp.Rejected as exc:
        return Failed(error=str(exc), retryable=exc.temporary,
                      evidence={"message_id": message_id, "stage": exc.stage, "code": exc.code, "reply": exc.reply})
    except NoAnswer as exc:
        return Unknown(reason=str(exc), evidence={"sent": True, "message_id": message_id})
    return Succeeded(result_ref=message_id, evidence={"message_id": message_id, "code": accepted.code,
                                                      "reply": accepted.reply})
