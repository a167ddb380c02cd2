"""A webhook reconciler a team runs beside its own provider: Reckon asks, it looks, it answers.

    RECKON_WEBHOOK_SECRET=... PROVIDER_URL=http://127.0.0.1:8765 python examples/webhook_receiver.py 9000

It checks every request's signature with the Python client (`reckon_client.verify_webhook`),
then asks the provider whether a message carrying the job's marker exists (the sandbox's mail
contract: GET /messages?marker=...), and answers confirmed, or not_found with the reason a
replay is safe. When the provider cannot tell, it answers 503: Reckon counts that as
"unavailable" and asks again later. Standard library only, plus the client.
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

from reckon_client import WEBHOOK_SIGNATURE_HEADER, WebhookSignatureError, verify_webhook  # noqa: E402

SECRETS = [s for s in (os.environ.get("RECKON_WEBHOOK_SECRET", ""), os.environ.get("RECKON_WEBHOOK_SECRET_OLD", "")) if s]
PROVIDER = os.environ.get("PROVIDER_URL", "http://127.0.0.1:8765").rstrip("/")


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
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            verify_webhook(body, self.headers.get(WEBHOOK_SIGNATURE_HEADER, ""), SECRETS)
        except WebhookSignatureError as refused:
            return self._answer(401, {"error": str(refused)})
        return self._answer(*look_up(json.loads(body)))

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
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
