"""The sandbox provider: a real HTTP server process with its own SQLite store.

    python -m sandbox.server --port 8765 --db .sandbox/sandbox.sqlite3 --fault-rate 0.1 --seed 7

Standard library only. The routes and the HTTP contract are in ``sandbox.api``; the store in
``sandbox.store``; fault injection in ``sandbox.faults``. This module reads requests, writes
responses, drops connections for ``drop_after_commit`` and shuts down cleanly on SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import threading
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from sandbox.api import App, Request, Response
from sandbox.faults import FaultConfig, FaultError, Latency
from sandbox.ratelimit import RateLimits, parse_cli
from sandbox.store import Store

DEFAULT_PORT = 8765
DEFAULT_DB = Path(__file__).resolve().parent.parent / ".sandbox" / "sandbox.sqlite3"
MAX_BODY = 1024 * 1024
DRAIN_SECONDS = 5.0


class Handler(BaseHTTPRequestHandler):
    server_version = "ReckonSandbox/1.0"
    timeout = 60  # an idle client cannot hold a thread forever

    def __getattr__(self, name: str):
        # Every method (do_GET, do_POST, do_PURGE...) goes through the router, which answers
        # 405 for a method an endpoint does not support (rather than http.server's 501).
        if name.startswith("do_"):
            return self._handle
        raise AttributeError(name)

    def _handle(self) -> None:
        if self.headers.get("Transfer-Encoding"):
            return self._send(Response(411, {"error": "send a Content-Length; chunked bodies are"
                                                      " not supported"}), close=True)
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if length < 0:
                raise ValueError
        except ValueError:
            return self._send(Response(400, {"error": "invalid Content-Length header"}), close=True)
        if length > MAX_BODY:
            return self._send(Response(413, {"error": f"request body over {MAX_BODY} bytes"}),
                              close=True)
        body = self.rfile.read(length) if length else b""
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            response = self.server.app.handle(Request(self.command, self.path, headers, body))
        except Exception as exc:  # a bug or an unusable store: say so, keep serving
            traceback.print_exc()
            response = Response(500, {"error": f"internal error: {type(exc).__name__}: {exc}"})
        if response.drop:
            self._drop()
        else:
            self._send(response)

    def _send(self, response: Response, close: bool = False) -> None:
        data = json.dumps(response.payload).encode()
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in response.headers.items():
                self.send_header(name, value)
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _drop(self) -> None:
        """drop_after_commit: the effect is committed; close the socket without a response."""
        self.close_connection = True
        self.log_message('"%s" committed; response dropped (drop_after_commit)', self.requestline)
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def send_error(self, code: int, message: str | None = None, explain: str | None = None):
        """Protocol-level errors (bad request line, unsupported method...) as JSON too."""
        self.log_error("code %d, message %s", code, message)
        text = message or explain or HTTPStatus(code).phrase
        self._send(Response(code, {"error": text}), close=True)


class SandboxServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default listen backlog of 5 resets bursts of clients

    def __init__(self, address: tuple[str, int], app: App):
        self.app = app
        self._inflight = 0
        self._idle = threading.Condition()
        super().__init__(address, Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def process_request_thread(self, request, client_address) -> None:
        with self._idle:
            self._inflight += 1
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._idle:
                self._inflight -= 1
                self._idle.notify_all()

    def server_close(self) -> None:
        """Stop accepting, then give in-flight requests a bounded time to finish."""
        super().server_close()
        with self._idle:
            self._idle.wait_for(lambda: self._inflight == 0, timeout=DRAIN_SECONDS)


def build_server(host: str = "127.0.0.1", port: int = DEFAULT_PORT, db: str | Path = DEFAULT_DB,
                 fault_rate: float = 0.0, seed: int | None = None, latency_ms: float = 0.0,
                 rate_limits: dict | None = None) -> SandboxServer:
    """Open the store and bind the port (raises FaultError or OSError)."""
    faults = FaultConfig.from_rate(fault_rate, seed)
    return SandboxServer((host, port), App(Store(db), faults, Latency(latency_ms), RateLimits(rate_limits)))


def serve(server: SandboxServer) -> None:
    """Serve until SIGINT or SIGTERM, then close cleanly. Call from the main thread."""
    stopping = threading.Event()

    def stop(signum, frame) -> None:
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.server",
                                     description="Reckon's sandbox provider (an external system).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--db", default=str(DEFAULT_DB), help="SQLite file of the provider")
    parser.add_argument("--fault-rate", type=float, default=0.0,
                        help="probability of a fault per effect (split over the three kinds)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the fault draws")
    parser.add_argument("--latency-ms", type=float, default=0.0,
                        help="the provider's round trip: every lookup and effect waits this long")
    parser.add_argument("--rate-limit", action="append", default=[], metavar="PREFIX=N",
                        help="answer 429 above N requests/s on a path prefix (or '*': all others);"
                             " repeatable")
    args = parser.parse_args(argv)
    try:
        server = build_server(args.host, args.port, args.db, args.fault_rate, args.seed, args.latency_ms,
                              parse_cli(args.rate_limit))
    except FaultError as exc:
        parser.error(str(exc))
    except OSError as exc:
        print(f"sandbox: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    print(f"Sandbox provider listening on {server.url} (store: {server.app.store.path})",
          flush=True)
    serve(server)
    print("Sandbox provider stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
