"""An external worker speaking only HTTP: it sends mail jobs through a provider, under Reckon's API.

    export RECKON_URL=http://127.0.0.1:8000 RECKON_API_TOKEN=rk_...
    .venv/bin/python examples/http_worker.py --mail http://127.0.0.1:8765 mail-1 mail-2 ...
    .venv/bin/python examples/http_worker.py --mail http://127.0.0.1:8765            # pull mode
    .venv/bin/python examples/http_worker.py --mail ... -                          # ids on stdin

Its jobs are `mail.external`'s (`--action`), an external action: beside `make run` no django-q2
worker takes them, so what this worker reports is what it did. Given job ids, it claims each by
id and keeps polling those still pending (a retry was queued, or another worker holds a live
lease) until each is finished or waiting on a human; a job it was given that someone else
finished is reported as such ("finished elsewhere"), never as its own success. Without job ids
it pulls the next jobs of its action (`POST /api/v1/claims`, waiting for work) until `--idle`
seconds pass with nothing (then it says why) or `--max-jobs` are done.

For each job: claim, begin, send with the job's idempotency key and marker, and record what the
provider's answer proves (`reckon_client.post_effect`, with `classify_status` / `classify_error`):

    the connection was refused (nothing left this process)        retryable failure
    429 or 503 (the provider says it did nothing)                 retryable failure
    another 4xx (the request itself is wrong)                     failure
    2xx with the message id                                       success
    a dropped connection or a timeout after the request left,     unknown: the message may exist;
      409 "in progress" for the key, 500/502/504, a 2xx without     Reckon asks the provider before
      a readable body                                               any retry, never a blind resend

It prints one JSON line per job: {"job_id", "outcome", "verdict"?, "status", "note"?}.
Standard library only, besides the reckon_client package (`pip install ./clients/python`;
`make` installs it into .venv).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

from reckon_client import Client, Lease, ReckonError, UnexpectedAnswer, Verdict, post_effect

STILL_TO_RUN = ("pending", "running")
FINISHED = ("succeeded", "failed", "cancelled")


def send_mail(mail_url: str, lease: Lease, timeout: float) -> Verdict:
    """Send one message and record what the provider's answer proves; returns the verdict."""
    payload = lease.payload
    body = {"to": payload.get("to"), "subject": payload.get("subject", ""), "body": payload.get("body", "")}
    return post_effect(lease, f"{mail_url}/messages", body, result_field="message_id", provider="the mail provider",
                       timeout=timeout)


def run(lease: Lease, *, action: str, mail_url: str, timeout: float) -> tuple[str, str]:
    """One job under its lease: (what the ledger now says of the attempt, the verdict)."""
    with lease:
        if lease.action != action:
            lease.failed(f"this worker only runs {action}, not {lease.action}")
            return "failed", ""
        lease.begin()  # only now may we touch the outside world
        verdict = send_mail(mail_url, lease, timeout)
    return str(lease.outcome), verdict.value


def run_once(client: Client, job_id: str, *, worker: str, action: str, mail_url: str,
             timeout: float) -> tuple[str, str]:
    try:
        return run(client.claim_lease(job_id, worker=worker), action=action, mail_url=mail_url, timeout=timeout)
    except UnexpectedAnswer:
        raise
    except ReckonError as refused:  # the claim was refused, or the lease went stale under us
        return f"refused:{refused.reason or refused.code}", ""


def by_id(client: Client, args: argparse.Namespace, job_ids: list[str]) -> int:
    waiting, unseen, deliveries, ran_here = list(dict.fromkeys(job_ids)), [], 0, set()
    give_up = time.monotonic() + args.deadline
    while waiting and time.monotonic() < give_up:
        still = []
        for job_id in waiting:
            deliveries += 1
            outcome, verdict = run_once(client, job_id, worker=f"{args.worker}:{deliveries}", action=args.action,
                                        mail_url=args.mail, timeout=args.timeout)
            try:
                status = client.job(job_id)["status"]
            except UnexpectedAnswer:
                raise
            except ReckonError as refused:  # no such job, or not ours to see (404); bad token (401)
                print(json.dumps({"job_id": job_id, "outcome": outcome, "error": str(refused)}), flush=True)
                unseen.append(job_id)
                continue
            line = {"job_id": job_id, "outcome": outcome, "status": status}
            if verdict and verdict != outcome:
                line["verdict"] = verdict  # a failure that is retryable
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


def pulling(client: Client, args: argparse.Namespace) -> int:
    done = 0
    while args.max_jobs is None or done < args.max_jobs:
        lease = client.next_lease(args.worker, actions=[args.action], wait_seconds=args.idle)
        if lease is None:
            print(json.dumps({"idle": str(client.nothing_claimed), "reason": client.nothing_claimed.reason}),
                  flush=True)
            return 0
        try:
            outcome, verdict = run(lease, action=args.action, mail_url=args.mail, timeout=args.timeout)
        except UnexpectedAnswer:
            raise
        except ReckonError as refused:  # the lease went stale under us: the ledger has decided
            outcome, verdict = f"refused:{refused.reason or refused.code}", ""
        status = client.job(lease.job_id)["status"]
        line = {"job_id": lease.job_id, "outcome": outcome, "status": status}
        if verdict and verdict != outcome:
            line["verdict"] = verdict
        print(json.dumps(line), flush=True)
        done += 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", "--api", dest="url", default=os.environ.get("RECKON_URL", "http://127.0.0.1:8000"),
                        help="Reckon's base URL (RECKON_URL; default http://127.0.0.1:8000)")
    parser.add_argument("--token", default=os.environ.get("RECKON_API_TOKEN", ""),
                        help="a worker token (RECKON_API_TOKEN; manage.py worker_token create ...)")
    parser.add_argument("--mail", default=os.environ.get("RECKON_MAIL_URL", "http://127.0.0.1:8765"),
                        help="the mail provider's base URL (RECKON_MAIL_URL; default the sandbox's)")
    parser.add_argument("--action", default="mail.external", help="the action it runs (mail.external)")
    parser.add_argument("--worker", default=f"http-worker:{socket.gethostname()}:{os.getpid()}",
                        help="its name in the ledger")
    parser.add_argument("--deadline", type=float, default=60.0, help="with job ids: give up after this many seconds")
    parser.add_argument("--poll", type=float, default=0.2, help="with job ids: seconds between rounds over pending jobs")
    parser.add_argument("--idle", type=float, default=30.0, help="pull mode: stop after this many seconds without work")
    parser.add_argument("--max-jobs", type=int, help="pull mode: stop after this many jobs")
    parser.add_argument("--timeout", type=float, default=5.0, help="provider call timeout, in seconds")
    parser.add_argument("jobs", nargs="*", help='job ids, or "-" to read them from stdin; none: pull the next jobs')
    args = parser.parse_args(argv)
    if not args.token:
        parser.error("give --token or set RECKON_API_TOKEN")
    client = Client(args.url, args.token)
    try:
        if not args.jobs:
            return pulling(client, args)
        job_ids = [line.strip() for line in sys.stdin if line.strip()] if args.jobs == ["-"] else args.jobs
        return by_id(client, args, job_ids)
    except UnexpectedAnswer as lost:  # a redirect or an HTML page: the URL is wrong; say so and stop
        print(f"not Reckon's API: {lost}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
