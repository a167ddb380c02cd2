"""A small client for Reckon's worker API (standard library only).

    client = Client("https://reckon.example.com", token="rk_...")
    client.enqueue("mail-42", tenant="acme", action="mail.send", payload={...})
    with client.claim("mail-42", worker="mailer-7") as lease:
        lease.begin()                      # only now may you touch the outside world
        message_id = send(lease.job["payload"], key=lease.idempotency_key)
        lease.succeeded(message_id)

If the body raises, the lease records what can honestly be said: `unknown` once the side
effect has begun (the call may have happened), a retryable failure before that.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from urllib.parse import quote


class ReckonError(Exception):
    """A refusal from the API: `status`, `code` (e.g. stale_lease), `reason` for claims."""

    def __init__(self, status: int, body: dict):
        error = body.get("error", {}) if isinstance(body, dict) else {}
        self.status = status
        self.code = error.get("code", "http_error")
        self.reason = error.get("reason", "")
        self.fields = error.get("fields", {})
        self.body = body
        super().__init__(f"{status} {self.code}: {error.get('message', body)}")


class Client:
    def __init__(self, base_url: str, token: str, *, timeout: float = 10.0):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def request(self, method: str, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.base_url}/api/v1{path}",
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as refused:
            raw = refused.read()
            try:
                decoded = json.loads(raw)
            except ValueError:
                decoded = {"error": {"message": raw[:500].decode(errors="replace")}}
            raise ReckonError(refused.code, decoded) from None

    @staticmethod
    def _job(job_id: str) -> str:
        return "/jobs/" + quote(job_id, safe="")

    def enqueue(
        self, job_id: str, *, tenant: str, action: str, payload: dict, identity: dict | None = None
    ) -> dict:
        body = {"job_id": job_id, "tenant": tenant, "action": action, "payload": payload}
        if identity:
            body["identity"] = identity
        return self.request("POST", "/jobs", body)

    def job(self, job_id: str) -> dict:
        return self.request("GET", self._job(job_id))

    def claim_lease(self, job_id: str, *, worker: str) -> Lease:
        """Claim without the context manager: you record the result yourself."""
        granted = self.request("POST", self._job(job_id) + "/claim", {"worker": worker})
        return Lease(self, granted)

    def claim(self, job_id: str, *, worker: str) -> _Claim:
        return _Claim(self, job_id, worker)


class Lease:
    def __init__(self, client: Client, granted: dict):
        self.client = client
        self.job = granted["job"]
        self.job_id = granted["job_id"]
        self.attempt = granted["attempt"]
        self.owner = granted["owner"]
        self.fencing_token = granted["fencing_token"]
        self.expires_at = granted["expires_at"]
        self.begun = False
        self.outcome: str | None = None

    @property
    def idempotency_key(self) -> str:
        return self.job["idempotency_key"]

    @property
    def payload(self) -> dict:
        return self.job["payload"]

    def _write(self, step: str, **fields) -> dict:
        body = {"owner": self.owner, "fencing_token": self.fencing_token, **fields}
        return self.client.request("POST", Client._job(self.job_id) + f"/lease/{step}", body)

    def renew(self) -> str:
        self.expires_at = self._write("renew")["expires_at"]
        return self.expires_at

    def verify_identity(self, observed: dict) -> dict:
        return self._write("identity", observed=observed)

    def begin(self) -> dict:
        answer = self._write("begin")
        self.begun = True
        return answer

    def succeeded(self, result_ref: str = "", evidence: dict | None = None) -> dict:
        answer = self._write("success", result_ref=result_ref, evidence=evidence or {})
        self.outcome = "succeeded"
        return answer

    def failed(self, error: str, *, retryable: bool = False, evidence: dict | None = None) -> dict:
        answer = self._write("failure", error=error, retryable=retryable, evidence=evidence or {})
        self.outcome = "failed"
        return answer

    def unknown(self, reason: str, evidence: dict | None = None) -> dict:
        answer = self._write("unknown", reason=reason, evidence=evidence or {})
        self.outcome = "unknown"
        return answer


class _Claim:
    """`with client.claim(...) as lease`: claims on entry, never leaves an attempt unaccounted."""

    def __init__(self, client: Client, job_id: str, worker: str):
        self.client, self.job_id, self.worker = client, job_id, worker
        self.lease: Lease | None = None

    def __enter__(self) -> Lease:
        self.lease = self.client.claim_lease(self.job_id, worker=self.worker)
        return self.lease

    def __exit__(self, exc_type, exc, tb) -> bool:
        lease = self.lease
        if lease.outcome is not None:
            return False
        if isinstance(exc, ReckonError) and exc.code in ("stale_lease", "identity_mismatch"):
            return False  # the ledger has already decided; another write would only be rejected
        what = f"{exc_type.__name__}: {exc}" if exc_type else "the worker ended without recording a result"
        try:
            if lease.begun:  # the call may have reached the provider: never claim it did not
                lease.unknown(f"worker lost track after beginning the side effect ({what})")
            else:
                lease.failed(f"worker stopped before the side effect ({what})", retryable=True)
        except (ReckonError, OSError):
            if exc_type is None:
                raise
        return False


# -- webhook reconcilers: checking that a request comes from Reckon ---------------------------------

WEBHOOK_SIGNATURE_HEADER = "Reckon-Signature"
WEBHOOK_TOLERANCE_S = 300


class WebhookSignatureError(ValueError):
    """A webhook request whose signature does not hold: answer 401 and do nothing."""


def sign_webhook(body: bytes, secrets: list[str], *, at: int | None = None) -> str:
    """The `Reckon-Signature` value for `body`: t=<unix time>, then one v1=<hex> per secret
    (HMAC-SHA256 over "<t>." + the exact body). Reckon signs with every configured secret, so a
    rotation can set the new and the old one and receivers verify with either."""
    import hashlib
    import hmac
    import time

    at = int(time.time()) if at is None else at
    signed = f"{at}.".encode() + body
    return ",".join([f"t={at}"] + [f"v1={hmac.new(s.encode(), signed, hashlib.sha256).hexdigest()}" for s in secrets])


def verify_webhook(body: bytes, header: str, secrets: list[str], *, tolerance: int = WEBHOOK_TOLERANCE_S,
                   now: float | None = None) -> None:
    """Raise WebhookSignatureError unless `header` signs the exact `body` with one of `secrets`
    (two during a rotation), at most `tolerance` seconds from now (an older request is a replay)."""
    import hashlib
    import hmac
    import time

    parts = [part.strip().partition("=") for part in (header or "").split(",")]
    stamps = [value for key, _, value in parts if key == "t"]
    signatures = [value for key, _, value in parts if key == "v1"]
    if len(stamps) != 1 or not stamps[0].isdigit() or not signatures:
        raise WebhookSignatureError(f"malformed {WEBHOOK_SIGNATURE_HEADER} header")
    at = int(stamps[0])
    now = time.time() if now is None else now
    if abs(now - at) > tolerance:
        raise WebhookSignatureError(f"signed {now - at:.0f} s ago: older than {tolerance} s (a replay?)")
    signed = f"{at}.".encode() + body
    expected = [hmac.new(s.encode(), signed, hashlib.sha256).hexdigest() for s in secrets if s]
    if not any(hmac.compare_digest(e, given) for e in expected for given in signatures):
        raise WebhookSignatureError("no signature matches a known secret")
