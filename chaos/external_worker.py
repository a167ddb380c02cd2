"""An external worker for the chaos matrix: it speaks to Reckon only over HTTP (reckon_client), pulls
the jobs of one action and runs each against a sandbox provider, with the job's key as
Idempotency-Key and marker:

* `--kind mail` (the default) sends the job as a mail (POST /messages). Armed like a qcluster
  worker (RECKON_FAULT_POINT=during_call, RECKON_FAULT_JOBS, RECKON_FAULT_DIR: ledger/faults.py),
  it stops itself with the request on the wire, for the harness to SIGKILL.
* `--batch N` runs the mail worker in batches (reckon_client's batch steps: claim up to N jobs in one
  request, begin them all in one, send each, record every result in one). Armed with
  RECKON_FAULT_POINT=before_call it stops after the claim, before the batch's begin; with
  after_provider_success, after every mail of the batch was accepted, before the results are recorded.
* `--kind charge` creates a charge at the payments provider (POST /charges), which has
  Stripe-style keys and answers 409 "in progress" for ever to a key whose request was dropped.
  It classifies the provider's answers as issue 24 asks (see `create_charge`).

    python -m chaos.external_worker --url URL --token rk_... --provider SANDBOX_URL --action NAME [--kind charge] [--batch N]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import threading
from urllib.parse import urlsplit

from reckon_client import (
    Client,
    Lease,
    Outcome,
    ReckonError,
    ReckonUnavailable,
    Verdict,
    classify_error,
    classify_status,
    post_effect,
)

from ledger.faults import fault_point  # no Django: the fault points are plain Python


class NoAnswer(Exception):
    """The request was sent and no complete answer came back: the effect may have happened."""


def send_mail(lease: Lease, mail_url: str, timeout: float) -> None:
    """The example worker's send (examples/http_worker.py, reckon_client.post_effect), with the
    fault point armed while the request is on the wire."""
    p = lease.payload
    body = {"to": p.get("to"), "subject": p.get("subject", ""), "body": p.get("body", "")}
    post_effect(lease, f"{mail_url}/messages", body, result_field="message_id", provider="the mail provider",
                timeout=timeout, on_sent=lambda: fault_point("during_call", lease.job_id))


# What the payments provider says about a key whose earlier request never finished.
IN_PROGRESS = "in progress"
# Answers that prove the provider did nothing with this request: it may be sent again.
NOTHING_DONE = (429, 503)


def _post_charge(connection: http.client.HTTPConnection, lease: Lease) -> tuple[int, dict]:
    """One POST /charges; NoAnswer if the request left and no complete answer came back."""
    p = lease.payload
    body = {"customer": p.get("customer"), "amount_cents": p.get("amount_cents"), "currency": p.get("currency")}
    key = lease.idempotency_key
    try:
        connection.request("POST", "/charges", body=json.dumps(body), headers={
            "Content-Type": "application/json", "Idempotency-Key": key, "X-Reckon-Marker": key})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise NoAnswer(f"{type(exc).__name__}: {exc}") from exc
    finally:
        connection.close()


def create_charge(lease: Lease, provider_url: str, timeout: float) -> str:
    """Charge once under the lease and record what the provider's answer proves; returns a word for the log.

    - 2xx: the charge exists -> succeeded.
    - connection refused, or 429/503 (the provider says it did nothing) -> retryable failure.
    - another 4xx (the provider refused the request) -> failed, not retried.
    - a dropped connection after the request left: the provider may have acted. As Stripe's own
      clients do, send the same request once more with the same key. Only a 2xx proves the charge;
      anything else -- above all 409 "in progress", which this provider answers for ever after a
      drop -- is unknown: never a failure (a replay would charge twice or meet 409 for ever), never
      a success (no charge was shown). Reckon's webhook reconciler then asks the provider.
    - 409 "in progress" on a first request, any other 5xx -> unknown for the same reason."""
    parts = urlsplit(provider_url)

    def connect() -> http.client.HTTPConnection | str:
        """A connection, or why there is none (then nothing left this process)."""
        connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
        try:
            connection.connect()
        except OSError as exc:
            connection.close()
            return f"{type(exc).__name__}: {exc}"
        return connection

    connection = connect()
    if isinstance(connection, str):
        lease.failed(f"payments provider unreachable: {connection}", retryable=True, evidence={"sent": False})
        return "failed (unreachable)"
    dropped = ""
    try:
        status, answer = _post_charge(connection, lease)
    except NoAnswer as lost:
        dropped = str(lost)
        connection = connect()
        if isinstance(connection, str):  # nothing was resent, but the first request may have landed
            lease.unknown(f"the charge request was dropped ({dropped}) and the provider is now unreachable "
                          f"({connection})", evidence={"dropped": dropped})
            return "unknown (dropped)"
        status, answer = _post_charge(connection, lease)  # a second NoAnswer: unknown, in main
    evidence = {"provider_status": status, "provider_answer": answer, "after_drop": bool(dropped)}
    if 200 <= status < 300:
        lease.succeeded(str(answer.get("id", "")), evidence=evidence)
        return "succeeded"
    error = answer.get("error", answer) if isinstance(answer, dict) else answer
    if dropped or status == 409 or (status >= 500 and status not in NOTHING_DONE):
        why = f"after a dropped connection ({dropped}) " if dropped else ""
        lease.unknown(f"the payments provider answered {status} {error!r} {why}for key {lease.idempotency_key}: "
                      "the charge may exist", evidence=evidence)
        return "unknown (409 in progress)" if status == 409 and error == IN_PROGRESS else f"unknown ({status})"
    lease.failed(f"{status}: {error}", retryable=status in NOTHING_DONE, evidence=evidence)
    return f"failed ({status})"


def mail_outcome(lease: Lease, mail_url: str, timeout: float) -> Outcome:
    """Send the lease's mail (the job's key as Idempotency-Key and marker) and say what the answer
    proves, for a batch to record with the others: the same verdicts as post_effect."""
    p = lease.payload
    body = json.dumps({"to": p.get("to"), "subject": p.get("subject", ""), "body": p.get("body", "")})
    parts = urlsplit(mail_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    key = lease.idempotency_key
    sent = False
    try:
        connection.connect()
        connection.request("POST", "/messages", body=body, headers={
            "Content-Type": "application/json", "Idempotency-Key": key, "X-Reckon-Marker": key})
        sent = True
        response = connection.getresponse()
        answer = json.loads(response.read() or b"{}")
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if classify_error(exc, request_sent=sent) is Verdict.RETRYABLE:
            return Outcome.failed(f"the mail provider unreachable: {exc}", retryable=True, evidence={"sent": False})
        return Outcome.unknown(f"no answer from the mail provider after sending: {type(exc).__name__}: {exc}")
    finally:
        connection.close()
    verdict = classify_status(response.status)
    if verdict is Verdict.SUCCEEDED and answer.get("message_id"):
        return Outcome.succeeded(str(answer["message_id"]), evidence={"status": response.status})
    if verdict in (Verdict.RETRYABLE, Verdict.FAILED):
        return Outcome.failed(f"{response.status} from the mail provider: {answer}"[:2000],
                              retryable=verdict is Verdict.RETRYABLE)
    return Outcome.unknown(f"{response.status} from the mail provider: {answer}"[:2000])


def run_batch(client: Client, args) -> None:
    """One batch: claim up to N, begin them all, send each, record every result; the fault points
    between the steps (claimed, not begun; sent, not recorded) fire for the batch's first job."""
    leases = client.next_leases(args.worker, max=args.batch, actions=[args.action], wait_seconds=5)
    if not leases:
        return
    fault_point("before_call", leases[0].job_id)
    begun = client.begin_all(leases)
    outcomes = [(lease, mail_outcome(lease, args.provider, args.timeout)) for lease in begun]
    if begun:
        fault_point("after_provider_success", begun[0].job_id)
    client.record_all(outcomes)
    for lease in leases:
        print(f"{lease.job_id}: {lease.outcome}{' (' + lease.refused + ')' if lease.refused else ''}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--provider", required=True, help="the sandbox provider's URL")
    parser.add_argument("--kind", choices=("mail", "charge"), default="mail")
    parser.add_argument("--action", required=True)
    parser.add_argument("--worker", default=f"chaos-external:{os.getpid()}")
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--batch", type=int, default=0, help="run mail jobs in batches of up to N")
    args = parser.parse_args(argv)
    client, pause = Client(args.url, args.token), threading.Event()
    while True:
        try:
            if args.batch:
                run_batch(client, args)
                continue
            lease = client.next_lease(args.worker, actions=[args.action], wait_seconds=5)
            if lease is None:
                continue
            with lease:  # renewed while the call runs; NoAnswer after begin records unknown
                lease.begin()
                if args.kind == "charge":
                    said = create_charge(lease, args.provider, args.timeout)
                else:
                    send_mail(lease, args.provider, args.timeout)
                    said = str(lease.outcome)
            print(f"{lease.job_id}: {said}", flush=True)
        except NoAnswer as lost:
            print(f"unknown: {lost}", flush=True)
        except (ReckonError, ReckonUnavailable) as refused:
            print(f"refused: {refused}", file=sys.stderr, flush=True)
            pause.wait(0.5)  # Reckon restarting, or this job's lease went stale: a short back-off


if __name__ == "__main__":
    sys.exit(main())
