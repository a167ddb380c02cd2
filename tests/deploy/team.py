"""A team's own programs beside an installed Reckon, run by the fresh environment's Python with
nothing but the installed `reckon_client` (tests/deploy/test_install.py copies this file out of
the checkout first):

    python team.py receiver PORT SECRET PROVIDER_DIR   # the webhook reconciler: verify, look, answer
    python team.py work URL TOKEN PROVIDER_DIR          # enqueue, run and crash, answer a pull look-up

The "provider" is a folder: an effect is a file named by the job's idempotency key.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from reckon_client import (
    WEBHOOK_SIGNATURE_HEADER,
    Client,
    QuestionLog,
    WebhookSignatureError,
    sign_answer,
    verify_webhook,
)


def receiver(port: int, secret: str, provider: Path) -> None:
    seen = QuestionLog()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                question = verify_webhook(body, self.headers.get(WEBHOOK_SIGNATURE_HEADER, ""), [secret], seen=seen)
            except WebhookSignatureError as refused:
                return self.answer(401, {"error": str(refused)})
            key, question_id = question["idempotency_key"], question["question_id"]
            if (provider / key).exists():
                return self.answer(200, {"outcome": "confirmed", "reason": "the provider holds the effect",
                                         "result_ref": f"file:{key}"}, question_id)
            return self.answer(200, {"outcome": "not_found", "reason": "the provider has no effect with this key"},
                               question_id)

        def answer(self, status: int, body: dict, question_id: str = "") -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            if question_id:  # Reckon takes only an answer signed for the question it asked
                self.send_header(WEBHOOK_SIGNATURE_HEADER, sign_answer(data, question_id, [secret]))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            print("receiver:", *args, flush=True)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"receiver on {port}", flush=True)
    server.serve_forever()


def work(url: str, token: str, provider: Path) -> None:
    client = Client(url, token)

    def crash_after_the_effect(job_id: str, action: str) -> None:
        """Claim, begin, perform the effect, then lose sight of it: the attempt is unknown."""
        client.enqueue(job_id, tenant="acme", action=action, payload={"amount": 5})
        lease = client.claim_lease(job_id, worker="team-worker")
        lease.begin()
        (provider / lease.idempotency_key).write_text("done once\n")
        lease.unknown("the connection to the provider dropped after the request left")

    crash_after_the_effect("charge-1", "team.charge")  # Reckon's reconciler asks the team's webhook
    crash_after_the_effect("note-1", "team.note")  # the team's agent is asked (pull mode)

    # The team's agent: claims the look-up over the API and answers it.
    claimed = client.request("POST", "/reconciliations/claim", {"agent": "team-agent", "actions": ["team.note"]})
    key = claimed["job"]["idempotency_key"]
    assert (provider / key).exists(), key
    client.request("POST", f"/reconciliations/{claimed['reconciliation_id']}/outcome", {
        "agent": "team-agent", "outcome": "confirmed", "reason": "the provider holds the effect",
        "evidence": {"file": key}, "result_ref": f"file:{key}"})

    # A claim-next worker.
    client.enqueue("mail-1", tenant="acme", action="team.mail", payload={"to": "a@acme.example"})
    lease = client.next_lease("team-mailer", actions=["team.mail"], wait_seconds=10)
    assert lease is not None and lease.job_id == "mail-1", lease
    with lease:
        lease.begin()
        (provider / lease.idempotency_key).write_text("sent once\n")
        lease.succeeded(f"file:{lease.idempotency_key}")
    print("team work done", flush=True)


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "receiver":
        receiver(int(args[0]), args[1], Path(args[2]))
    else:
        work(args[0], args[1], Path(args[2]))
