"""What can go wrong talking to Reckon, each as its own type.

    ReckonError          Reckon refused (4xx, 5xx with Reckon's JSON error): `status`, `code`, `reason`
      UnexpectedAnswer   an answer that is not Reckon's API: a redirect, HTML, a body that is not the
                         documented JSON (a wrong base URL, plain HTTP to an HTTPS-only server, a proxy)
      AlreadySucceeded   effect() for a job whose effect is recorded: the block did not run again
      HeldUnknown        effect() for a job whose earlier attempt is unknown: held until reconciled
    ReckonUnavailable    Reckon could not be reached (transport.py)
"""

from __future__ import annotations

from typing import Any

JsonObject = dict[str, Any]  # a JSON object, decoded


class ReckonError(Exception):
    """A refusal from the API: `status`, `code` (e.g. stale_lease), `reason` for claims."""

    def __init__(self, status: int, body: JsonObject):
        error = body.get("error", {}) if isinstance(body, dict) else {}
        self.status = status
        self.code: str = error.get("code", "http_error")
        self.reason: str = error.get("reason") or ""
        self.fields: JsonObject = error.get("fields") or {}
        self.body = body
        super().__init__(f"{status} {self.code}: {error.get('message', body)}")


class UnexpectedAnswer(ReckonError):
    """An answer that is not one Reckon's API documents, so nothing can be concluded from it: the
    call neither succeeded nor was refused by Reckon. `url`, `status`, `content_type`, `location`
    (where a redirect points), `excerpt` (the start of the body).

    Typical causes: plain HTTP to a server that redirects to HTTPS (301: use the https URL), a
    base URL that points at something else (HTML), a proxy's error page. The client never follows
    a redirect: a POST sent again elsewhere is not a thing to do silently."""

    def __init__(self, method: str, url: str, status: int, headers: dict[str, str], body: bytes, why: str):
        self.url = url
        self.content_type = headers.get("content-type", "")
        self.location = headers.get("location", "")
        self.excerpt = body[:200].decode(errors="replace")
        where = f" to {self.location}" if self.location else ""
        message = f"{method} {url} answered {status}{where}: {why}"
        if 300 <= status < 400:
            message += " (the client follows no redirect: give the URL Reckon is served at, e.g. https://…)"
        super().__init__(status, {"error": {"code": "unexpected_answer", "message": message}})
        self.args = (message,)

    def __str__(self) -> str:
        return str(self.args[0])


class AlreadySucceeded(ReckonError):
    """`effect()` for a job whose side effect is already recorded as succeeded (by this agent
    before a restart, or by another): the block did not run. `result_ref` and `job` are what the
    ledger recorded; use them as the result."""

    def __init__(self, job: JsonObject):
        self.job = job
        attempts = [a for a in job.get("attempts") or [] if a.get("execution") == "succeeded"]
        self.result_ref: str = str(attempts[-1].get("result_ref", "")) if attempts else ""
        super().__init__(409, {"error": {
            "code": "claim_refused", "reason": "duplicate_delivery",
            "message": f"job {job.get('job_id')} already succeeded (result {self.result_ref!r}): not run again",
        }})


class HeldUnknown(ReckonError):
    """`effect()` for a job whose earlier attempt is unknown (it may or may not have happened): the
    job is held until a reconciler or a person settles it, and the block did not run. Do not
    perform the effect yourself: ask again later (`status` of `job` says where it stands)."""

    def __init__(self, job: JsonObject, reason: str = "previous_attempt_unknown", detail: str = ""):
        self.job = job
        message = detail or (
            f"job {job.get('job_id')} is {job.get('status')}: an earlier attempt is unknown, "
            "and the job is held until it is reconciled"
        )
        super().__init__(409, {"error": {"code": "claim_refused", "reason": reason, "message": message}})
