"""The client: enqueue, claim (a job by id, or the next one in your scope), renew, record."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, Literal
from urllib.parse import quote

from reckon_client.transport import Answer, JsonObject, ReckonUnavailable, Transport, decode, json_body

MAX_WAIT_SECONDS = 30  # what the server holds per request; next_lease asks again for longer waits


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


class Client:
    """A worker's connection to Reckon's API (`/api/v1`), with a token from
    `manage.py worker_token create`. Safe to share between threads."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 10.0, retry_unsent_for: float = 10.0):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        # A lease's write that could not even connect (Reckon restarting) is sent again for this long.
        self.retry_unsent_for = retry_unsent_for
        self._transport = Transport(self.base_url + "/api/v1", timeout=timeout)

    # -- plumbing -------------------------------------------------------------------------------

    def call(self, method: str, path: str, body: JsonObject | None = None, *, timeout: float | None = None,
             retry_unsent_for: float = 0.0) -> Answer:
        """One API call; a refusal (4xx, 5xx) raises ReckonError, a connection failure ReckonUnavailable."""
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        give_up, pause = time.monotonic() + retry_unsent_for, 0.1
        while True:
            try:
                answer = self._transport.send(method, path, json_body(body), headers, timeout=timeout)
                break
            except ReckonUnavailable as unavailable:
                if unavailable.sent or time.monotonic() + pause > give_up:
                    raise
                time.sleep(pause)  # nothing reached Reckon: wait for it to come back, then send again
                pause = min(pause * 2, 2.0)
        if answer.status >= 400:
            raise ReckonError(answer.status, decode(answer.body))
        return answer

    def request(self, method: str, path: str, body: JsonObject | None = None) -> JsonObject:
        return decode(self.call(method, path, body).body)

    def close(self) -> None:
        """Close this thread's connection."""
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _job(job_id: str) -> str:
        return "/jobs/" + quote(job_id, safe="")

    # -- jobs ----------------------------------------------------------------------------------------

    def enqueue(self, job_id: str, *, tenant: str, action: str, payload: JsonObject,
                identity: JsonObject | None = None) -> JsonObject:
        """Create the job, or get it back if it exists with the same work (idempotent on job_id)."""
        body: dict[str, Any] = {"job_id": job_id, "tenant": tenant, "action": action, "payload": payload}
        if identity:
            body["identity"] = identity
        return self.request("POST", "/jobs", body)

    def job(self, job_id: str) -> JsonObject:
        return self.request("GET", self._job(job_id))

    # -- leases --------------------------------------------------------------------------------------

    def claim_lease(self, job_id: str, *, worker: str) -> Lease:
        """Claim a job by id (409 claim_refused, with a `reason`, when it may not run now)."""
        return Lease(self, self.request("POST", self._job(job_id) + "/claim", {"worker": worker}))

    def claim(self, job_id: str, *, worker: str) -> Deferred:
        """`with client.claim(job_id, worker=...) as lease:` claims on entry; see `Lease`."""
        return Deferred(lambda: self.claim_lease(job_id, worker=worker))

    def next_lease(self, worker: str, *, actions: Iterable[str] | None = None,
                   tenants: Iterable[str] | None = None, wait_seconds: float = 30.0) -> Lease | None:
        """Claim the oldest claimable job in the token's scope (narrowed to `actions` and `tenants`),
        waiting up to `wait_seconds` for one to arrive; None if none came.

        Without `actions`, only jobs of external actions are handed out. Reckon holds the wait
        (woken when work arrives); a server that cannot hold it says when to ask again
        (Retry-After), and this method asks again until `wait_seconds` have passed."""
        body: dict[str, Any] = {"worker": worker}
        if actions is not None:
            body["actions"] = list(actions)
        if tenants is not None:
            body["tenants"] = list(tenants)
        deadline = time.monotonic() + max(wait_seconds, 0.0)
        while True:
            remaining = deadline - time.monotonic()
            body["wait_seconds"] = math.ceil(min(max(remaining, 0.0), MAX_WAIT_SECONDS))  # never less than asked
            answer = self.call("POST", "/claims", body, timeout=self.timeout + body["wait_seconds"])
            if answer.status == 201:
                return Lease(self, decode(answer.body))
            retry_after = _seconds(answer.headers.get("retry-after"))
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (retry_after is None and body["wait_seconds"] == 0):
                return None  # waited as long as asked (a longer wait is asked for again, 30 s at a time)
            if retry_after is not None:
                time.sleep(min(retry_after, remaining))  # the server could not hold the wait: our turn

    def effect(self, action: str, job_id: str, payload: JsonObject, *, tenant: str, worker: str,
               identity: JsonObject | None = None) -> Deferred:
        """Run one side effect under the ledger, as a context manager:

            with client.effect("mail.send", "mail-42", {...}, tenant="acme", worker="w1") as lease:
                lease.result_ref = send(lease.payload, key=lease.idempotency_key)

        On entry: enqueue (or get the existing job), claim it, and begin the side effect. The
        block runs with the lease renewed in the background. A block that ends normally records
        success (with `lease.result_ref`), unless it recorded an outcome itself; an exception
        records `unknown` (the call may have reached the provider). A job already finished, or
        whose previous attempt is unknown, is refused on entry (ReckonError 409 claim_refused)
        and the block does not run. With an `identity` binding the block must call
        `lease.verify_identity(observed)` and then `lease.begin()` itself."""

        def start() -> Lease:
            self.enqueue(job_id, tenant=tenant, action=action, payload=payload, identity=identity)
            lease = self.claim_lease(job_id, worker=worker)
            lease.success_on_exit = True
            lease.begin_on_enter = not identity
            return lease

        return Deferred(start)


class Lease:
    """A claimed attempt: every write carries its owner and fencing token.

    As a context manager (`with lease:`) it renews itself in a background thread while the block
    runs, and never leaves the attempt unaccounted for: if the block raises (or ends without
    recording an outcome) after `begin()`, it records `unknown`, since the call may have happened;
    before `begin()`, a retryable failure (nothing can have happened).
    """

    def __init__(self, client: Client, granted: JsonObject):
        self.client = client
        self.job: JsonObject = granted["job"]
        self.job_id: str = granted["job_id"]
        self.attempt: int = granted["attempt"]
        self.owner: str = granted["owner"]
        self.fencing_token: int = granted["fencing_token"]
        self.expires_at: str = granted["expires_at"]
        self.ttl_seconds: float = float(granted.get("ttl_seconds") or 30.0)
        self.begun = False
        self.outcome: str | None = None
        self.result_ref = ""  # what `effect()` records on a normal exit
        self.lost: str = ""  # why a renewal was refused: the lease is no longer ours
        self.renewals = 0
        self.success_on_exit = False
        self.begin_on_enter = False
        self._renewer: _Renewer | None = None

    @property
    def idempotency_key(self) -> str:
        return str(self.job["idempotency_key"])

    @property
    def payload(self) -> JsonObject:
        return dict(self.job["payload"])

    @property
    def action(self) -> str:
        return str(self.job["action"])

    @property
    def tenant(self) -> str:
        return str(self.job["tenant"])

    def _write(self, step: str, **fields: Any) -> JsonObject:
        body = {"owner": self.owner, "fencing_token": self.fencing_token, **fields}
        answer = self.client.call("POST", Client._job(self.job_id) + f"/lease/{step}", body,
                                  retry_unsent_for=self.client.retry_unsent_for)
        return decode(answer.body)

    def renew(self) -> str:
        self.expires_at = str(self._write("renew")["expires_at"])
        self.renewals += 1
        return self.expires_at

    def verify_identity(self, observed: JsonObject) -> JsonObject:
        return self._write("identity", observed=observed)

    def begin(self, sent_to: str = "") -> JsonObject:
        """Mark the side effect submitted: only after this may you touch the outside world.

        `sent_to`: where the effect is going (your provider's endpoint or account as this worker is
        configured, e.g. "https://billing.example/acct_123"), so that a reconciler asking another
        provider says it cannot tell instead of "not found"."""
        answer = self._write("begin", **({"sent_to": sent_to} if sent_to else {}))
        self.begun = True
        return answer

    def succeeded(self, result_ref: str = "", evidence: JsonObject | None = None) -> JsonObject:
        self.stop_renewing()
        answer = self._write("success", result_ref=result_ref, evidence=evidence or {})
        self.outcome = "succeeded"
        return answer

    def failed(self, error: str, *, retryable: bool = False, evidence: JsonObject | None = None) -> JsonObject:
        self.stop_renewing()
        answer = self._write("failure", error=error, retryable=retryable, evidence=evidence or {})
        self.outcome = "failed"
        return answer

    def unknown(self, reason: str, evidence: JsonObject | None = None) -> JsonObject:
        self.stop_renewing()
        answer = self._write("unknown", reason=reason, evidence=evidence or {})
        self.outcome = "unknown"
        return answer

    # -- renewal in the background ------------------------------------------------------------------

    def keep_renewing(self) -> None:
        """Renew every third of the lease's length until an outcome is recorded (or stop_renewing)."""
        if self._renewer is None and self.outcome is None:
            self._renewer = _Renewer(self)
            self._renewer.start()

    def stop_renewing(self) -> None:
        # Stopped (and any renewal in flight finished) before a result is written, so that no
        # renewal arrives after the result and is rejected as a late write.
        if self._renewer is not None:
            self._renewer.stop()
            self._renewer = None

    # -- as a context manager -----------------------------------------------------------------------

    def __enter__(self) -> Lease:
        self.keep_renewing()
        if self.begin_on_enter:
            try:
                self.begin()
            except BaseException:
                self.stop_renewing()  # the ledger decides what becomes of the attempt (refused, or it expires)
                raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        self.stop_renewing()
        if self.outcome is not None:
            return False
        if isinstance(exc, ReckonError) and exc.code in ("stale_lease", "identity_mismatch"):
            return False  # the ledger has already decided; another write would only be rejected
        if exc_type is None and self.success_on_exit and self.begun:
            self.succeeded(self.result_ref)
            return False
        what = f"{exc_type.__name__}: {exc}" if exc_type else "the worker ended without recording a result"
        try:
            if self.begun:  # the call may have reached the provider: never claim it did not
                self.unknown(f"worker lost track after beginning the side effect ({what})"[:2000])
            else:
                self.failed(f"worker stopped before the side effect ({what})"[:2000], retryable=True)
        except (ReckonError, OSError):
            if exc_type is None:
                raise
        return False


class Deferred:
    """A context manager that obtains its lease on entry (claim by id, or effect)."""

    def __init__(self, obtain: Callable[[], Lease]):
        self._obtain = obtain
        self.lease: Lease | None = None

    def __enter__(self) -> Lease:
        self.lease = self._obtain()
        return self.lease.__enter__()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        if self.lease is None:  # entering failed: there is no lease to account for
            return False
        return self.lease.__exit__(exc_type, exc, tb)


class _Renewer(threading.Thread):
    def __init__(self, lease: Lease):
        super().__init__(name=f"reckon-renew:{lease.job_id}", daemon=True)
        self.lease = lease
        self._stop_event = threading.Event()

    def run(self) -> None:
        interval = max(self.lease.ttl_seconds / 3, 0.05)
        try:
            while not self._stop_event.wait(interval):
                try:
                    self.lease.renew()
                except ReckonError as refused:
                    if refused.status == 409:  # taken over or finished: nothing left to keep alive
                        self.lease.lost = str(refused)
                        return
                except ReckonUnavailable:
                    pass  # try again at the next tick; the lease runs for two more
        finally:
            self.lease.client.close()  # this thread's connection

    def stop(self) -> None:
        self._stop_event.set()
        if threading.current_thread() is not self:
            self.join()


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        return None
