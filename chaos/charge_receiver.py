"""The webhook reconciler of the payments provider (sandbox /charges), as a team runs it beside
its provider: Reckon asks about an unknown attempt, it looks the job's key up, it answers.

    RECKON_WEBHOOK_SECRET=... python -m chaos.charge_receiver --port 9000 --provider http://127.0.0.1:8765

Every question's signature is checked with the Python client (`reckon_client.verify_webhook`, the
header named by `reckon_client.WEBHOOK_SIGNATURE_HEADER`; `WebhookSignatureError` -> 401). The
look-up is `GET /charges?idempotency_key=K`, which tells the truth even for a key the provider
answers 409 "in progress" to:

* a charge with the key           -> confirmed (result_ref: the charge's id);
* no charge, the key never seen   -> not_found: the provider keeps its keys for ever, so a replay
                                     with this key cannot charge twice;
* no charge, the key in progress  -> 503 (Reckon records `unavailable` and asks again later);
* the provider does not answer    -> 503.

`GET /_health` answers this process's pid, for a harness waiting on its start.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

from reckon_client import (
    WEBHOOK_SIGNATURE_HEADER,
    QuestionLog,
    WebhookSignatureError,
    sign_answer,
    verify_webhook,
)


def look_up(provider: str, question: dict) -> tuple[int, dict]:
    key = question["idempotency_key"]
    url = f"{provider}/charges?idempotency_key={quote(key, safe='')}"
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:  # nosec B310  # the provider's own http(s) URL
            truth = json.load(reply)
        charges, state = truth["charges"], truth["key_state"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return 503, {"error": f"the payments provider did not answer {url}: {type(exc).__name__}: {exc}"}
    evidence = {"lookup": url, "charges": charges, "key_state": state}
    if charges:
        return 200, {"outcome": "confirmed", "result_ref": str(charges[0]["id"]), "evidence": evidence,
                     "reason": f"charge {charges[0]['id']} carries key {key} (key {state})"}
    if state is None:
        return 200, {"outcome": "not_found", "evidence": evidence,
                     "reason": f"the provider has no charge with key {key} and has never seen the key; it keeps "
                               "keys for ever, so a replay with this key charges at most once"}
    return 503, {"error": f"key {key} is {state} at the provider with no charge yet: it cannot tell", **evidence}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/_health":
            return self._answer(200, {"ok": True, "pid": os.getpid()})
        return self._answer(404, {"error": "POST Reckon's questions here"})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            question = verify_webhook(body, self.headers.get(WEBHOOK_SIGNATURE_HEADER, ""), self.server.secrets,
                                      seen=self.server.seen)
            question["idempotency_key"]
        except WebhookSignatureError as refused:
            return self._answer(401, {"error": str(refused)})
        except (KeyError, TypeError):
            return self._answer(400, {"error": "the question must be Reckon's JSON with an idempotency_key"})
        status, answer = look_up(self.server.provider, question)
        print(f"{question.get('job_id')}: {answer.get('outcome', status)}", flush=True)
        return self._answer(status, answer, question_id=question.get("question_id"))

    def _answer(self, status: int, body: dict, question_id: str | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if question_id:  # the exact bytes sent, signed for the question asked
            self.send_header(WEBHOOK_SIGNATURE_HEADER, sign_answer(data, question_id, self.server.secrets))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--provider", required=True, help="the payments provider's URL")
    args = parser.parse_args(argv)
    secrets = [s for s in (os.environ.get("RECKON_WEBHOOK_SECRET", ""), os.environ.get("RECKON_WEBHOOK_SECRET_OLD", ""))
               if s]
    if not secrets:
        parser.error("set RECKON_WEBHOOK_SECRET (the secret the action's webhook_secrets names)")
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.secrets, server.provider, server.seen = secrets, args.provider.rstrip("/"), QuestionLog()
    print(f"payments webhook reconciler on http://127.0.0.1:{args.port}/, asking {server.provider}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
