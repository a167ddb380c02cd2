"""An external worker for the chaos matrix: it speaks to Reckon only over HTTP (reckon_client), pulls
the jobs of one action and sends each as a mail to the sandbox provider, with the job's key as
Idempotency-Key and marker. Armed like a qcluster worker (RECKON_FAULT_POINT=during_call,
RECKON_FAULT_JOBS, RECKON_FAULT_DIR: ledger/faults.py), it stops itself with the request on the
wire, for the harness to SIGKILL.

    python -m chaos.external_worker --url URL --token rk_... --mail SANDBOX_URL --action NAME
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import threading
from urllib.parse import urlsplit

from reckon_client import Client, Lease, ReckonError, ReckonUnavailable

from ledger.faults import fault_point  # no Django: the fault points are plain Python


class NoAnswer(Exception):
    """The request was sent and no complete answer came back: the effect may have happened."""


def send_mail(lease: Lease, mail_url: str, timeout: float) -> None:
    parts = urlsplit(mail_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        try:
            connection.connect()
        except OSError as exc:  # nothing left this process
            lease.failed(f"mail provider unreachable: {exc}", retryable=True, evidence={"sent": False})
            return
        p = lease.payload
        body = {"to": p.get("to"), "subject": p.get("subject", ""), "body": p.get("body", "")}
        key = lease.idempotency_key
        try:
            connection.request("POST", "/messages", body=json.dumps(body), headers={
                "Content-Type": "application/json", "Idempotency-Key": key, "X-Reckon-Marker": key})
            fault_point("during_call", lease.job_id)
            response = connection.getresponse()
            answer = json.loads(response.read() or b"{}")
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise NoAnswer(f"{type(exc).__name__}: {exc}") from exc
    finally:
        connection.close()
    evidence = {"status": response.status, "body": answer}
    if 200 <= response.status < 300:
        lease.succeeded(str(answer.get("message_id", "")), evidence=evidence)
    elif 400 <= response.status < 500 and response.status != 429:
        lease.failed(f"{response.status}: {answer.get('error', answer)}", evidence=evidence)
    else:
        raise NoAnswer(f"{response.status} from the mail provider")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--mail", required=True)
    parser.add_argument("--action", required=True)
    parser.add_argument("--worker", default=f"chaos-external:{os.getpid()}")
    parser.add_argument("--timeout", type=float, default=3.0)
    args = parser.parse_args(argv)
    client, pause = Client(args.url, args.token), threading.Event()
    while True:
        try:
            lease = client.next_lease(args.worker, actions=[args.action], wait_seconds=5)
            if lease is None:
                continue
            with lease:  # renewed while the call runs; NoAnswer after begin records unknown
                lease.begin()
                send_mail(lease, args.mail, args.timeout)
            print(f"{lease.job_id}: {lease.outcome}", flush=True)
        except NoAnswer as lost:
            print(f"unknown: {lost}", flush=True)
        except (ReckonError, ReckonUnavailable) as refused:
            print(f"refused: {refused}", file=sys.stderr, flush=True)
            pause.wait(0.5)  # Reckon restarting, or this job's lease went stale: a short back-off


if __name__ == "__main__":
    sys.exit(main())
