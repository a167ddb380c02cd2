"""A real webhook receiver (a small HTTP server in a thread: not one of our parts) and the alert
channels pointed at it and at Django's in-memory mail outbox."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Receiver:
    def __init__(self):
        self.messages: list[dict] = []
        self.requests: list[str] = []  # "METHOD path" of every request, a redirected GET included
        self.status = 200
        self.redirect_to = ""  # set: answer 302 with this Location
        self.hold = threading.Event()  # cleared: each request waits for it before answering
        self.hold.set()
        self.arrived = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                receiver.requests.append(f"GET {self.path}")
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self):
                receiver.requests.append(f"POST {self.path}")
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.messages.append(body)
                receiver.arrived.set()
                receiver.hold.wait(timeout=10)
                self.send_response(302 if receiver.redirect_to else receiver.status)
                if receiver.redirect_to:
                    self.send_header("Location", receiver.redirect_to)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/reckon"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def texts(self) -> list[str]:
        return [message["text"] for message in self.messages]

    def close(self):
        self.hold.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook():
    receiver = Receiver()
    yield receiver
    receiver.close()


@pytest.fixture
def channels(webhook, settings):
    """Alerts go to the webhook receiver and to oncall@example.com (the locmem outbox in tests)."""
    settings.RECKON_ALERT_WEBHOOK_URL = webhook.url
    settings.RECKON_ALERT_EMAILS = ["oncall@example.com"]
    settings.RECKON_CONSOLE_URL = "https://reckon.example.com"
    return webhook
