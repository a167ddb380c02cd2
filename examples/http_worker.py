"""An external worker speaking only HTTP: it runs mail jobs through Reckon's API.

    python examples/http_worker.py --api http://127.0.0.1:8000 --token rk_... \\
        --mail http://127.0.0.1:8765 mail-1 mail-2 ...      (or job ids on stdin with "-")

Its jobs are `mail.external`'s (`--action`), an external action: beside `make run` no django-q2
worker takes them, so what this worker reports is what it did. A job it was given that someone
else finished is reported as such ("finished elsewhere"), never as its own success.
For each job it is told about: claim, begin, send with the job's idempotency key and marker,
record what it can prove. It keeps polling jobs that are still pending (a retry was queued,
or another worker holds a live lease) until each is finished or waiting on a human.
Standard library only, besides the reckon_client package (`pip install ./clients/python`;
`make` installs it into .venv).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import sys
import time
from urllib.parse import urlsplit

from reckon_client import Client, Lease, ReckonError

STILL_TO_RUN = ("pending", "running")
FINISHED = ("succeeded", "failed", "cancelled")


class ProviderSaidNothing(Exception):
    """The request was sent but no complete answer came back: the effect may have happened."""


def send_mail(mail_url: str, lease: Lease, timeout: float) -> None:
    """Send one message and record the outcome; raising leaves the context manager to say unknown."""
    parts = urlsplit(mail_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        try:
            connection.connect()
        except OSError as exc:  # nothing left this process: safe to try again
            lease.failed(f"mail provider unreachable: {exc}", retryable=True, evidence={"sent": False})
            return
        payload = lease.payload
        body = {
            "to": payload.get("to"),
            "subject": payload.get("subject", ""),
            "body": payload.get("body", ""),
        }
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": lease.idempotency_key,
            "X-Reckon-Marker": lease.idempotency_key,
        }
        try:
            connection.request("POST", "/messages", body=json.dumps(body), headers=headers)
            response = connection.getresponse()
            answer = json.loads(response.read() or b"{}")
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise ProviderSaidNothing(f"{type(exc).__name__}: {exc}") from exc
    finally:
        connection.close()
    evidence = {"status": response.status, "body": answer}
    if 200 <= response.status < 300:
        lease.succeeded(str(answer.get("message_id", "")), evidence=evidence)
    elif response.status == 429:
        lease.failed(f"{response.status}: rate limited", retryable=True, evidence=evidence)
    elif 400 <= response.status < 500:
        lease.failed(f"{response.status}: {answer.get('error', answer)}", evidence=evidence)
    else:
        raise ProviderSaidNothing(f"{response.status} from the mail provider")


def run_once(client: Client, job_id: str, *, worker: str, action: str, mail_url: str, timeout: float) -> str:
    try:
        with client.claim(job_id, worker=worker) as lease:
            if lease.job["action"] != action:
                lease.failed(f"this worker only runs {action}, not {lease.job['action']}")
                return "failed"
            lease.begin()
            send_mail(mail_url, lease, timeout)
            return lease.outcome
    except ReckonError as refused:
        return f"refused:{refused.reason or refused.code}"
    except ProviderSaidNothing:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", required=True, help="Reckon's base URL")
    parser.add_argument("--token", default=os.environ.get("RECKON_API_TOKEN", ""))
    parser.add_argument("--mail", required=True, help="the mail provider's base URL")
    parser.add_argument("--action", default="mail.external", help="the action it runs (mail.external)")
    parser.add_argument("--worker", default=f"http-worker:{socket.gethostname()}:{os.getpid()}")
    parser.add_argument("--deadline", type=float, default=60.0, help="give up after this many seconds")
    parser.add_argument("--poll", type=float, default=0.2, help="seconds between rounds over pending jobs")
    parser.add_argument("--timeout", type=float, default=5.0, help="provider call timeout")
    parser.add_argument("jobs", nargs="+", help='job ids, or "-" to read them from stdin')
    args = parser.parse_args(argv)
    if not args.token:
        parser.error("give --token or set RECKON_API_TOKEN")
    job_ids = [line.strip() for line in sys.stdin if line.strip()] if args.jobs == ["-"] else args.jobs

    client = Client(args.api, args.token)
    waiting, unseen, deliveries, ran_here = list(dict.fromkeys(job_ids)), [], 0, set()
    give_up = time.monotonic() + args.deadline
    while waiting and time.monotonic() < give_up:
        still = []
        for job_id in waiting:
            deliveries += 1
            outcome = run_once(
                client, job_id, worker=f"{args.worker}:{deliveries}", action=args.action, mail_url=args.mail,
                timeout=args.timeout,
            )
            try:
                status = client.job(job_id)["status"]
            except ReckonError as refused:  # no such job, or not ours to see (404); bad token (401)
                print(json.dumps({"job_id": job_id, "outcome": outcome, "error": str(refused)}), flush=True)
                unseen.append(job_id)
                continue
            line = {"job_id": job_id, "outcome": outcome, "status": status}
            if outcome.startswith("refused:") and status in FINISHED and job_id not in ran_here:
                line["note"] = "finished elsewhere: nothing ran here"
            elif not outcome.startswith("refused:"):
                ran_here.add(job_id)
            print(json.dumps(line), flush=True)
            if status in STILL_TO_RUN:
                still.append(job_id)
        waiting = still
        if waiting:
            time.sleep(args.poll)  # polling pace for jobs another worker holds
    if waiting:
        print(json.dumps({"gave_up_on": waiting}), flush=True)
    return 1 if waiting or unseen else 0


if __name__ == "__main__":
    sys.exit(main())
