"""A webhook reconciler a team runs beside its own provider: Reckon asks, it looks, it answers.

    RECKON_WEBHOOK_SECRET=... PROVIDER_URL=http://127.0.0.1:8765 python examples/webhook_receiver.py 9000

It checks every question's signature with the Python client (`reckon_client.verify_webhook`),
remembering the question ids it has taken for the minute a signature is good (`QuestionLog`), so
a captured question replayed to it is refused (401) like a forged one. Then it asks the provider
whether a message carrying the job's marker exists (the sandbox's mail contract:
GET /messages?marker=...), and answers confirmed, or not_found with the reason a replay is safe,
signing the answer for that question (`reckon_client.sign_answer`): Reckon takes no answer that
is not. When the provider cannot tell, it answers 503: Reckon counts that as "unavailable" and
asks again later. One process: a receiver run as several keeps the taken ids in a store they
share. Standard library only, plus the client.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

# The client, from a checkout (`pip install ./clients/python` installs it for good).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "clients" / "python" / "src"))

from reckon_client import (  # noqa: E402
    WEBHOOK_SIGNATURE_HEADER,
    QuestionLog,
    WebhookSignatureError,
    sign_answer,
    verify_webhook,
)

SECRETS = [s for s in (os.environ.get("RECKON_WEBHOOK_SECRET", ""), os.environ.get("RECKON_WEBHOOK_SECRET_OLD", "")) if s]
PROVIDER = os.environ.get("PROVIDER_URL", "http://127.0.0.1:8765").rstrip("/")
SEEN = QuestionLog()  # the question ids taken, each kept while its signature is still good


def look_up(question: dict) -> tuple[int, dict]:
    url = f"{PROVIDER}/messages?marker={quote(question['marker'])}"
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:  # nosec B310  # the provider's own URL
            messages = json.load(reply).get("messages", [])
    except (OSError, ValueError) as exc:
        return 503, {"error": f"the provider did not answer: {exc}"}
    if messages:
        return 200, {"outcome": "confirmed", "reason": f"message {messages[0]['message_id']} carries the marker",
                     "result_ref": str(messages[0]["message_id"]), "evidence": {"messages": messages}}
    return 200, {"outcome": "not_found", "evidence": {"lookup": url},
                 "reason": f"the provider holds no message with marker {question['marker']}: it was never sent"}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        length = self.headers.get("Content-Length") or "0"
        if not length.isascii() or not length.isdigit() or int(length) > 1024 * 1024:
            return self._answer(400, {"error": "a Content-Length of at most 1 MiB is required"})
        body = self.rfile.read(int(length))
        try:
            question = verify_webhook(body, self.headers.get(WEBHOOK_SIGNATURE_HEADER), SECRETS, seen=SEEN)
        except WebhookSignatureError as refused:
            return self._answer(401, {"error": str(refused)})
        return self._answer(*look_up(question), question_id=question["question_id"])

    def _answer(self, status: int, body: dict, question_id: str | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if question_id is not None:  # the exact bytes sent, signed for the question asked
            self.send_header(WEBHOOK_SIGNATURE_HEADER, sign_answer(data, question_id, SECRETS))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    if not SECRETS:
        sys.exit("set RECKON_WEBHOOK_SECRET (the secret the action's webhook_secrets names)")
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9000
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"webhook reconciler on http://127.0.0.1:{port}/, asking {PROVIDER}", flush=True)
    server.serve_forever()
