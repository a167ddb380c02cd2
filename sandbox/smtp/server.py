"""The SMTP sandbox process: a real SMTP server (aiosmtpd) and the lookup API of its archive.

    python -m sandbox.smtp.server --port 8025 --http-port 8026 --db .sandbox/smtp.sqlite3 \\
        --drop-after-data-rate 0.1 --seed 7

SMTP has no read path: a sender cannot ask a server what it accepted. A real deployment asks
its mail provider's message API (a search by Message-ID) or a journaling archive that receives a
copy of every accepted message; this process plays that part with a read-only HTTP endpoint over
its own archive, ``GET /messages?message_id=<id>`` (or ``?marker=``). ``/_health`` and
``/_admin/`` (faults, reset) are the sandbox's controls for tests and the demo. Messages are
archived before the ``250`` is sent (``sandbox.smtp.archive``); faults in ``sandbox.smtp.faults``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
from email import policy
from email.parser import BytesParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from aiosmtpd.controller import Controller

from sandbox.smtp.archive import MARKER_HEADER, Archive
from sandbox.smtp.faults import KINDS, FaultConfig, FaultError

DEFAULT_PORT = 8025
DEFAULT_HTTP_PORT = 8026
DEFAULT_DB = Path(__file__).resolve().parents[2] / ".sandbox" / "smtp.sqlite3"
MAX_BODY = 1024 * 1024
IDLE_TIMEOUT = 60  # seconds an idle SMTP client may hold its connection


def drop(server, fault: str) -> str:
    """Close the client's connection at once. The reply the hook returns is written to a closed
    transport and never reaches the client, which is the point."""
    print(f"smtp-sandbox smtp: {server.session.peer} connection dropped (fault {fault})", file=sys.stderr)
    server.transport.abort()
    return f"421 4.4.2 connection dropped (sandbox fault {fault})"


class MailHandler:
    """aiosmtpd's handler: the hooks of MAIL FROM, RCPT TO and DATA, with the faults applied."""

    def __init__(self, archive: Archive, faults: FaultConfig):
        self.archive, self.faults = archive, faults

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        envelope.fault = self.faults.draw()
        if envelope.fault == "tempfail_mail":
            return "451 4.3.0 try again later (sandbox fault tempfail_mail)"
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        fault = self.faults.for_recipient(address) or getattr(envelope, "fault", None)
        if fault == "reject_rcpt":
            return f"550 5.1.1 <{address}>: mailbox unavailable (sandbox fault reject_rcpt)"
        if fault == "drop_before_data":
            return drop(server, fault)
        envelope.fault = fault
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        message = BytesParser(policy=policy.default).parsebytes(envelope.original_content)
        fault = self.faults.for_marker(message.get(MARKER_HEADER)) or getattr(envelope, "fault", None)
        if fault == "drop_during_data":
            return drop(server, fault)
        record = self.archive.add(mail_from=envelope.mail_from, rcpt_tos=list(envelope.rcpt_tos),
                                  message=message, size=len(envelope.original_content))
        if fault == "drop_after_data":
            return drop(server, fault)
        return f"250 2.0.0 OK archived as {record['seq']}"


class SmtpController(Controller):
    """aiosmtpd's threaded controller on a socket bound here, in the caller's thread: a port in
    use fails at once with OSError (the stock controller waits out its ready timeout first)."""

    def __init__(self, handler: MailHandler, host: str, port: int, **smtp_options):
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             proto=socket.IPPROTO_TCP)[0]
        # With its protocol named, asyncio turns Nagle's algorithm off on each accepted connection
        # (it checks `proto`); without, a multi-line reply such as EHLO's waits 40 ms for an ACK.
        self._socket = socket.socket(family, kind, proto)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._socket.bind(address)
            self._socket.listen(128)
        except OSError:
            self._socket.close()
            raise
        super().__init__(handler, hostname=host, port=self._socket.getsockname()[1], **smtp_options)

    def _create_server(self):
        return self.loop.create_server(self._factory_invoker, sock=self._socket)


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class LookupHandler(BaseHTTPRequestHandler):
    server_version = "ReckonSmtpSandbox/1.0"
    timeout = 60  # an idle client cannot hold a thread forever

    def do_GET(self) -> None:
        self._handle("GET")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        sandbox: SmtpSandbox = self.server.sandbox
        url = urlsplit(self.path)
        routes = {
            "/_health": {"GET": lambda q, b: sandbox.health()},
            "/messages": {"GET": lambda q, b: {"messages": sandbox.archive.find(**_lookup_params(q))}},
            "/_admin/faults": {"GET": lambda q, b: sandbox.faults.as_dict(),
                               "PUT": lambda q, b: sandbox.faults.update(_json(b))},
            "/_admin/reset": {"POST": lambda q, b: sandbox.reset()},
        }
        try:
            if url.path not in routes:
                raise ApiError(404, f"no such endpoint: {url.path}")
            if method not in routes[url.path]:
                raise ApiError(405, f"{method} is not allowed on {url.path}; allowed: "
                                    + ", ".join(routes[url.path]))
            body = self._body()
            query = parse_qs(url.query, keep_blank_values=True)
            self._send(200, routes[url.path][method](query, body))
        except ApiError as exc:
            self._send(exc.status, {"error": exc.message})
        except FaultError as exc:
            self._send(400, {"error": str(exc)})

    def _body(self) -> bytes:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise ApiError(400, "invalid Content-Length header") from None
        if not 0 <= length <= MAX_BODY:
            raise ApiError(413, f"the request body must be at most {MAX_BODY} bytes")
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's signature
        sys.stderr.write(f"smtp-sandbox http: {format % args}\n")


def _lookup_params(query: dict) -> dict:
    unknown = sorted(set(query) - {"message_id", "marker"})
    if unknown:
        raise ApiError(400, f"unknown query parameter(s) {', '.join(unknown)}; allowed: message_id, marker")
    params = {}
    for name, values in query.items():
        if len(values) != 1 or not values[0].strip():
            raise ApiError(400, f"query parameter {name} must be given once and not be empty")
        params[name] = values[0].strip()
    return params


def _json(body: bytes) -> object:
    try:
        return json.loads(body.decode("utf-8")) if body.strip() else {}
    except (UnicodeDecodeError, ValueError) as exc:
        raise ApiError(400, f"the request body must be UTF-8 JSON: {exc}") from None


class LookupServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], sandbox: SmtpSandbox):
        self.sandbox = sandbox
        super().__init__(address, LookupHandler)


class SmtpSandbox:
    """One process: the SMTP server, its archive, its faults and the HTTP lookup API."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT, http_port: int = DEFAULT_HTTP_PORT,
                 db: str | Path = DEFAULT_DB, rates: dict | None = None, seed: int | None = None):
        self.archive = Archive(db)
        self.faults = FaultConfig(rates, seed)
        self.http = LookupServer((host, http_port), self)
        try:
            self.smtp = SmtpController(MailHandler(self.archive, self.faults), host, port,
                                       server_hostname="reckon-smtp-sandbox", timeout=IDLE_TIMEOUT)
        except OSError:
            self.http.server_close()
            raise

    @property
    def smtp_address(self) -> str:
        return f"{self.smtp.hostname}:{self.smtp.port}"

    @property
    def http_url(self) -> str:
        host, port = self.http.server_address[:2]
        return f"http://{host}:{port}"

    def health(self) -> dict:
        return {"status": "ok", "pid": os.getpid(), "smtp": self.smtp_address, "messages": self.archive.count()}

    def reset(self) -> dict:
        self.archive.reset()
        return {"faults": self.faults.reset()}

    def serve(self) -> None:
        """Serve until SIGINT or SIGTERM, then stop both servers. Call from the main thread."""
        stopping = threading.Event()

        def stop(signum, frame) -> None:
            if not stopping.is_set():
                stopping.set()
                threading.Thread(target=self.http.shutdown, daemon=True).start()

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        self.smtp.start()
        try:
            self.http.serve_forever(poll_interval=0.1)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.smtp.stop()
            self.http.server_close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `python -m sandbox.smtp.server` and of `manage.py smtp_sandbox`."""
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"SMTP port ({DEFAULT_PORT})")
    parser.add_argument("--http-port", type=int, default=DEFAULT_HTTP_PORT,
                        help=f"port of the lookup API ({DEFAULT_HTTP_PORT})")
    parser.add_argument("--db", default=str(DEFAULT_DB), help=f"the archive's SQLite file ({DEFAULT_DB})")
    for kind in KINDS:
        parser.add_argument(f"--{kind.replace('_', '-')}-rate", type=float, default=0.0, dest=kind, metavar="R",
                            help=f"share of transactions given the {kind} fault")
    parser.add_argument("--seed", type=int, default=None, help="seed of the fault draws")


def build(options: dict) -> SmtpSandbox:
    """The sandbox for parsed options (raises FaultError for bad rates, OSError for a port in use)."""
    rates = {kind: options[kind] for kind in KINDS if options[kind]}
    return SmtpSandbox(host=options["host"], port=options["port"], http_port=options["http_port"],
                       db=options["db"], rates=rates, seed=options["seed"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.smtp.server",
                                     description="Reckon's SMTP sandbox (a real SMTP server with faults).")
    add_arguments(parser)
    options = vars(parser.parse_args(argv))
    try:
        sandbox = build(options)
    except FaultError as exc:
        parser.error(str(exc))
    except OSError as exc:
        print(f"smtp sandbox: cannot listen on {options['host']}: {exc}", file=sys.stderr)
        return 2
    print(f"SMTP sandbox: SMTP on {sandbox.smtp_address}, lookup API on {sandbox.http_url} "
          f"(archive: {sandbox.archive.path})", flush=True)
    sandbox.serve()
    print("SMTP sandbox stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
