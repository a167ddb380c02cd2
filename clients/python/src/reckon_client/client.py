"""The client: enqueue, claim (a job by id, or the next one in your scope), renew, record."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, cast
from urllib.parse import quote

from reckon_client.errors import AlreadySucceeded, HeldUnknown, JsonObject, ReckonError
from reckon_client.jobs import OnJob
from reckon_client.providers import Verdict
from reckon_client.reconciliations import Reconciliation
from reckon_client.transport import ReckonUnavailable, Transport, documented, json_body

log = logging.getLogger("reckon_client")

MAX_WAIT_SECONDS = 30  # what the server holds per request; next_lease asks again for longer waits
EARLY_BACKOFF = (0.25, 5.0)  # an empty answer that came early without Retry-After: pause, doubling
HELD_REASONS = ("previous_attempt_unknown", "under_recovery")  # claim refusals effect() reports as HeldUnknown


@dataclass(frozen=True)
class Reply:
    """A documented answer: its status, headers (lower-case names) and JSON object ({} for 204)."""

    status: int
    headers: dict[str, str]
    json: JsonObject


@dataclass(frozen=True)
class NothingClaimed:
    """Why `next_lease` returned None, as the server said it (`Client.nothing_claimed`).

    `reason`: `no_work` (nothing claimable in scope came within the wait), `dead_man_gate`
    (irreversible work in scope is held while the sweeper or the reconciler is not running:
    `message` says which), `cannot_wait` (this server could not hold the wait). `retry_after`:
    the seconds the server asked to wait before asking again (None: ask when you like).
    `requests`: how many claims the call sent."""

    reason: str
    message: str
    retry_after: float | None
    requests: int
    waited: float

    def __str__(self) -> str:
        again = f"; ask again in {self.retry_after:g} s" if self.retry_after is not None else ""
        return f"nothing claimed after {self.waited:.1f} s ({self.reason}{': ' + self.message if self.message else ''}{again})"


class Client:
    """A worker's connection to Reckon's API (`/api/v1`), with a token from
    `manage.py worker_token create`. Safe to share between threads.

    Every answer is checked against what the API documents: a refusal raises ReckonError, and
    an answer that is not the API's (a redirect to HTTPS, an HTML page, a body that is not the
    documented JSON) raises UnexpectedAnswer naming the URL and status: nothing succeeds by accident."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 10.0, retry_unsent_for: float = 10.0):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        # A lease's write that could not even connect (Reckon restarting) is sent again for this long.
        self.retry_unsent_for = retry_unsent_for
        self._transport = Transport(self.base_url + "/api/v1", timeout=timeout)
        self._last = threading.local()

    # -- plumbing -------------------------------------------------------------------------------

    def call(self, method: str, path: str, body: JsonObject | None = None, *, timeout: float | None = None,
             retry_unsent_for: float = 0.0, expect: tuple[int, ...] = (200, 201),
             headers: dict[str, str] | None = None) -> Reply:
        """One API call. An answer in `expect` is returned; a refusal (Reckon's JSON error) raises
        ReckonError, any other answer UnexpectedAnswer, a connection failure ReckonUnavailable."""
        headers = {**(headers or {}), "Authorization": f"Bearer {self.token}", "Accept": "application/json"}
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
        value = documented(method, self._transport.url(path), answer, expect)
        if answer.status >= 400:
            raise ReckonError(answer.status, value)
        return Reply(answer.status, answer.headers, value)

    def request(self, method: str, path: str, body: JsonObject | None = None) -> JsonObject:
        return self.call(method, path, body).json

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
                identity: JsonObject | None = None, idempotency_key: str | None = None) -> JsonObject:
        """Create the job, or get it back if it exists with the same work (idempotent on job_id).
        `idempotency_key` is sent as Idempotency-Key, and the request is then sent again while it
        could not connect: the same key and request answer the same job; the key with another
        request raises ReckonError 422 (idempotency_key_reused), and while the key's first request
        is being enqueued, 409 (idempotency_key_in_flight: ask again after its Retry-After)."""
        body: dict[str, Any] = {"job_id": job_id, "tenant": tenant, "action": action, "payload": payload}
        if identity:
            body["identity"] = identity
        if idempotency_key is None:
            return self.request("POST", "/jobs", body)
        return self.call("POST", "/jobs", body, headers={"Idempotency-Key": idempotency_key},
                         retry_unsent_for=self.retry_unsent_for).json

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
        waiting up to `wait_seconds` for one to arrive; None if none came, and then
        `nothing_claimed` says why (the server's reason, e.g. the dead-man gate holds the work).

        Without `actions`, only jobs of external actions are handed out. Reckon holds the wait
        (woken when work arrives); a server that cannot hold it says when to ask again
        (Retry-After), and this method asks again until `wait_seconds` have passed. An empty
        answer that comes early without saying when is followed by a pause (0.25 s, doubling to
        5 s), so a call waits about `wait_seconds` with a handful of requests, never a busy loop."""
        reply = self._claim_next(worker, {"worker": worker}, actions=actions, tenants=tenants,
                                 wait_seconds=wait_seconds)
        return None if reply is None else Lease(self, reply.json)

    def next_leases(self, worker: str, *, max: int, actions: Iterable[str] | None = None,  # noqa: A002 - the API's name
                    tenants: Iterable[str] | None = None, wait_seconds: float = 30.0) -> list[Lease]:
        """Claim up to `max` of the oldest claimable jobs in one request, each with its own lease and
        fencing token, oldest first; waits as `next_lease` does (an empty list if none came, and
        then `nothing_claimed` says why)."""
        reply = self._claim_next(worker, {"worker": worker, "max": max}, actions=actions, tenants=tenants,
                                 wait_seconds=wait_seconds)
        if reply is None:
            return []
        return [Lease(self, granted) for granted in (reply.json["leases"] if max > 1 else [reply.json])]

    def _claim_next(self, worker: str, body: dict[str, Any], *, actions: Iterable[str] | None,
                    tenants: Iterable[str] | None, wait_seconds: float) -> Reply | None:
        """POST /claims until a lease comes or `wait_seconds` have passed (see `next_lease`)."""
        if actions is not None:
            body["actions"] = list(actions)
        if tenants is not None:
            body["tenants"] = list(tenants)
        started = time.monotonic()
        deadline = started + max(wait_seconds, 0.0)
        requests, backoff = 0, EARLY_BACKOFF[0]
        while True:
            asked = math.ceil(min(max(deadline - time.monotonic(), 0.0), MAX_WAIT_SECONDS))  # never less than asked
            body["wait_seconds"] = asked
            sent = time.monotonic()
            reply = self.call("POST", "/claims", body, timeout=self.timeout + asked, expect=(201, 204))
            requests += 1
            if reply.status == 201:
                self._last.nothing = None
                return reply
            retry_after = _seconds(reply.headers.get("retry-after"))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if retry_after is not None:
                pause = retry_after  # the server said when: our turn then
            elif time.monotonic() - sent + 0.25 < asked:
                pause, backoff = backoff, min(backoff * 2, EARLY_BACKOFF[1])  # answered early, unasked
            else:
                continue  # the server held the wait as asked: ask again for the rest
            time.sleep(min(pause, remaining))
            if pause >= remaining:
                break
        nothing = NothingClaimed(
            reason=reply.headers.get("reckon-reason") or "no_work",
            message=reply.headers.get("reckon-detail", ""),
            retry_after=retry_after,
            requests=requests,
            waited=time.monotonic() - started,
        )
        self._last.nothing = nothing
        log.log(logging.INFO if nothing.reason == "no_work" else logging.WARNING, "%s: %s", worker, nothing)
        return None

    # -- batches: N leases per request ---------------------------------------------------------------

    def begin_all(self, leases: list[Lease], *, sent_to: str = "") -> list[Lease]:
        """Begin the side effects of `leases` in one request (one transaction at Reckon): the leases
        whose effect may now be sent, and only those. Each refused lease is left with `refused` set
        to why (its lease went stale, it expired, ...); the others are begun all the same."""
        if not leases:
            return []
        body: dict[str, Any] = {"leases": [lease._named() for lease in leases]}
        if sent_to:
            body["sent_to"] = sent_to
        answers = self.call("POST", "/leases/begin", body, retry_unsent_for=self.retry_unsent_for).json["results"]
        begun = []
        for lease, answer in zip(leases, answers, strict=True):
            if answer.get("error"):
                lease.refused = answer["error"]["message"]
                lease.outcome = "refused"
            else:
                lease.begun = True
                begun.append(lease)
        return begun

    def record_all(self, outcomes: list[tuple[Lease, Outcome]]) -> list[JsonObject]:
        """Record the outcome of each lease in one request (one transaction at Reckon); each answer
        in its place: the job's status and attempt, or `error` when that lease alone was refused."""
        if not outcomes:
            return []
        items = [{**lease._named(), **outcome.fields()} for lease, outcome in outcomes]
        answers = cast("list[JsonObject]", self.call("POST", "/leases/results", {"results": items},
                                                     retry_unsent_for=self.retry_unsent_for).json["results"])
        for (lease, outcome), answer in zip(outcomes, answers, strict=True):
            lease.outcome = "refused" if answer.get("error") else outcome.verdict
            if answer.get("error"):
                lease.refused = answer["error"]["message"]
        return answers

    def run_batch(self, worker: str, perform: Callable[[Lease], str | Outcome], *, max: int = 10,  # noqa: A002
                  actions: Iterable[str] | None = None, tenants: Iterable[str] | None = None, sent_to: str = "",
                  wait_seconds: float = 30.0) -> BatchReport:
        """One turn of a batched worker: claim up to `max` jobs, begin them all in one request, call
        `perform(lease)` for each begun one (its return: the result_ref of a success, or an Outcome;
        an exception: unknown, since the call may have reached the provider), then record every
        result in one request. The leases are renewed in the background while the batch runs."""
        leases = self.next_leases(worker, max=max, actions=actions, tenants=tenants, wait_seconds=wait_seconds)
        report = BatchReport(claimed=len(leases))
        if not leases:
            return report
        with _BatchRenewer(leases):
            begun = self.begin_all(leases, sent_to=sent_to)
            report.refused += len(leases) - len(begun)
            outcomes = []
            for lease in begun:
                try:
                    done = perform(lease)
                except Exception as exc:  # noqa: BLE001 - whatever broke, the call may have happened
                    done = Outcome.unknown(f"worker lost track after beginning the side effect "
                                           f"({type(exc).__name__}: {exc})"[:2000])
                outcomes.append((lease, done if isinstance(done, Outcome) else Outcome.succeeded(str(done))))
        for (lease, _), answer in zip(outcomes, self.record_all(outcomes), strict=True):
            if answer.get("error"):
                report.refused += 1
            elif lease.outcome:
                report.recorded[lease.outcome] = report.recorded.get(lease.outcome, 0) + 1
        return report

    def run_batches(self, worker: str, perform: Callable[[Lease], str | Outcome], *, max: int = 10,  # noqa: A002
                    stop: threading.Event, **options: Any) -> BatchReport:
        """`run_batch` again and again until `stop` is set: a batched worker's loop. Returns the totals."""
        total = BatchReport()
        while not stop.is_set():
            total.add(self.run_batch(worker, perform, max=max, **options))
        return total

    @property
    def nothing_claimed(self) -> NothingClaimed | None:
        """Why this thread's last `next_lease` returned None (None after it returned a lease)."""
        return getattr(self._last, "nothing", None)

    # -- pull-mode reconciliation -----------------------------------------------------------------

    def claim_reconciliation(self, agent: str, *, actions: Iterable[str] | None = None,
                             tenants: Iterable[str] | None = None) -> Reconciliation | None:
        """Claim the most overdue unknown attempt of actions declared `reconciler = "external"`
        in the token's scope, to look it up and answer (see `Reconciliation`); None when none is due."""
        body: dict[str, Any] = {"agent": agent}
        if actions is not None:
            body["actions"] = list(actions)
        if tenants is not None:
            body["tenants"] = list(tenants)
        reply = self.call("POST", "/reconciliations/claim", body, expect=(201, 204))
        return Reconciliation(self, agent, reply.json) if reply.status == 201 else None

    def next_reconciliation(self, agent: str, *, actions: Iterable[str] | None = None,
                            tenants: Iterable[str] | None = None, wait_seconds: float = 30.0) -> Reconciliation | None:
        """`claim_reconciliation`, asked again (after 0.5 s, doubling to 5 s) until one is due or
        `wait_seconds` have passed: the server answers at once, so the pause is the client's."""
        deadline, pause = time.monotonic() + max(wait_seconds, 0.0), 0.5
        while True:
            claimed = self.claim_reconciliation(agent, actions=actions, tenants=tenants)
            remaining = deadline - time.monotonic()
            if claimed is not None or remaining <= 0:
                return claimed
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, 5.0)

    def effect(self, action: str, job_id: str, payload: JsonObject, *, tenant: str, worker: str,
               identity: JsonObject | None = None) -> Deferred:
        """Run one side effect under the ledger, as a context manager:

            with client.effect("mail.send", "mail-42", {...}, tenant="acme", worker="w1") as lease:
                lease.result_ref = send(lease.payload, key=lease.idempotency_key)

        On entry: enqueue (or get the existing job), claim it, and begin the side effect. The
        block runs with the lease renewed in the background. A block that ends normally records
        success (with `lease.result_ref`), unless it recorded an outcome itself; an exception
        records `unknown` (the call may have reached the provider). With an `identity` binding
        the block must call `lease.verify_identity(observed)` and then `lease.begin()` itself.

        Safe to call again for the same job, e.g. by an agent restarted after a crash: the block
        does not run again, and entering raises what the ledger knows instead:
        `AlreadySucceeded` (its `result_ref` is the recorded result: use it) when the effect is
        recorded, `HeldUnknown` when an earlier attempt is unknown (it may have happened: the job
        is held until a reconciler or a person settles it; do not perform it yourself). Both are
        ReckonError (409 claim_refused); any other refusal (a live lease elsewhere, attempts
        exhausted) raises ReckonError as a claim does."""

        def start() -> Lease:
            job = self.enqueue(job_id, tenant=tenant, action=action, payload=payload, identity=identity)
            _raise_if_settled(job)
            try:
                lease = self.claim_lease(job_id, worker=worker)
            except ReckonError as refused:
                if refused.code == "claim_refused":
                    _raise_if_settled(self.job(job_id), refused)
                raise
            lease.success_on_exit = True
            lease.begin_on_enter = not identity
            return lease

        return Deferred(start)


@dataclass(frozen=True)
class Outcome:
    """What became of a lease's side effect, for `Client.record_all` and `run_batch`."""

    verdict: Literal["succeeded", "failed", "unknown"]
    result_ref: str = ""
    error: str = ""  # failed: why the provider refused; unknown: why you cannot tell
    retryable: bool = False
    evidence: JsonObject | None = None

    @classmethod
    def succeeded(cls, result_ref: str = "", evidence: JsonObject | None = None) -> Outcome:
        return cls("succeeded", result_ref=result_ref, evidence=evidence)

    @classmethod
    def failed(cls, error: str, *, retryable: bool = False, evidence: JsonObject | None = None) -> Outcome:
        return cls("failed", error=error, retryable=retryable, evidence=evidence)

    @classmethod
    def unknown(cls, reason: str, evidence: JsonObject | None = None) -> Outcome:
        return cls("unknown", error=reason, evidence=evidence)

    def fields(self) -> dict[str, Any]:
        """The result item's fields beside the lease (POST /leases/results)."""
        evidence = self.evidence or {}
        if self.verdict == "succeeded":
            return {"outcome": "succeeded", "result_ref": self.result_ref, "evidence": evidence}
        if self.verdict == "failed":
            return {"outcome": "failed", "error": self.error, "retryable": self.retryable, "evidence": evidence}
        return {"outcome": "unknown", "reason": self.error, "evidence": evidence}


@dataclass
class BatchReport:
    """What a batched worker's turn (or loop) did: jobs claimed, results recorded by outcome, and
    leases refused (stale or expired before their begin or result: the ledger says why)."""

    claimed: int = 0
    recorded: dict[str, int] = field(default_factory=dict)
    refused: int = 0

    def add(self, other: BatchReport) -> None:
        self.claimed += other.claimed
        self.refused += other.refused
        for verdict, count in other.recorded.items():
            self.recorded[verdict] = self.recorded.get(verdict, 0) + count


class _BatchRenewer(threading.Thread):
    """Renews every lease of a batch not yet settled, every third of the shortest lease, while the
    batch runs (a fast batch ends before the first renewal)."""

    def __init__(self, leases: list[Lease]):
        super().__init__(name="reckon-renew-batch", daemon=True)
        self.leases = leases
        self._stop_event = threading.Event()

    def __enter__(self) -> _BatchRenewer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop_event.set()
        self.join()

    def run(self) -> None:
        interval = max(min(lease.ttl_seconds for lease in self.leases) / 3, 0.05)
        try:
            while not self._stop_event.wait(interval):
                for lease in self.leases:
                    if lease.outcome is None and not lease.lost:
                        try:
                            lease.renew()
                        except ReckonError as refused:
                            if refused.status == 409:
                                lease.lost = str(refused)
                        except ReckonUnavailable:
                            pass
        finally:
            self.leases[0].client.close()  # this thread's connection


def _raise_if_settled(job: JsonObject, refused: ReckonError | None = None) -> None:
    """AlreadySucceeded or HeldUnknown for a job effect() must not run again."""
    if job.get("status") == "succeeded":
        raise AlreadySucceeded(job)
    if job.get("status") in ("needs_reconciliation", "needs_operator", "escalated"):
        raise HeldUnknown(job)
    if refused is not None and refused.reason in HELD_REASONS:
        raise HeldUnknown(job, refused.reason, str(refused))


class Lease(OnJob):
    """A claimed attempt: every write carries its owner and fencing token.

    As a context manager (`with lease:`) it renews itself in a background thread while the block
    runs, and never leaves the attempt unaccounted for: if the block raises (or ends without
    recording an outcome) after `begin()`, it records `unknown`, since the call may have happened;
    before `begin()`, a retryable failure (nothing can have happened).
    """

    def __init__(self, client: Client, granted: JsonObject):
        self.client = client
        self.job: JsonObject = granted["job"]
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
        self.refused: str = ""  # why a batch step refused this lease alone (Client.begin_all, record_all)
        self._renewer: _Renewer | None = None

    def _named(self) -> JsonObject:
        """The lease as a batch item names it."""
        return {"job_id": self.job_id, "owner": self.owner, "fencing_token": self.fencing_token}

    def _write(self, step: str, **fields: Any) -> JsonObject:
        body = {"owner": self.owner, "fencing_token": self.fencing_token, **fields}
        return self.client.call("POST", Client._job(self.job_id) + f"/lease/{step}", body,
                                retry_unsent_for=self.client.retry_unsent_for).json

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

    def record(self, verdict: Verdict, detail: str = "", *, result_ref: str = "",
               evidence: JsonObject | None = None) -> JsonObject:
        """Record what a provider's answer proves (`classify_status`, `classify_error`):
        success with `result_ref`, a retryable or a definitive failure, or unknown, with `detail`."""
        verdict = Verdict(verdict)
        if verdict is Verdict.SUCCEEDED:
            return self.succeeded(result_ref, evidence)
        if verdict is Verdict.UNKNOWN:
            return self.unknown(detail or "the provider's answer proves nothing", evidence)
        return self.failed(detail or "the provider refused", retryable=verdict is Verdict.RETRYABLE,
                           evidence=evidence)

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
