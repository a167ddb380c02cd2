"""Run the sandbox provider as a real subprocess, for tests and tools.

    with SandboxProcess() as sandbox:
        status, headers, body = sandbox.request("POST", "/messages", {...})

The process gets a free port and (unless ``db_path`` is given) a temporary SQLite file that is
removed on ``stop()``. Start-up waits, with a bound, until ``GET /_health`` answers from this
very process (its pid is in the answer).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess  # nosec B404  # waits on our own server's child process
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

from config.processes import ChildProcess, free_port

CHECKOUT = Path(__file__).resolve().parent.parent


class SandboxError(RuntimeError):
    """The sandbox process could not be started."""


@dataclass
class SandboxResponse:
    status: int
    headers: http.client.HTTPMessage
    json: dict

    def __iter__(self):  # status, headers, body = sandbox.request(...)
        return iter((self.status, self.headers, self.json))


def call(url: str, method: str, path: str, body: object = None, headers: dict | None = None,
         timeout: float = 10.0, raw: bytes | None = None) -> SandboxResponse:
    """One HTTP request on a fresh connection. A dropped response raises (ConnectionError or
    http.client.RemoteDisconnected), as it would in a real client."""
    host_port = url.split("://", 1)[-1].rstrip("/")
    connection = http.client.HTTPConnection(host_port, timeout=timeout)
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        connection.request(method, path, body=data, headers=all_headers)
        response = connection.getresponse()
        payload = response.read()
        return SandboxResponse(response.status, response.headers,
                               json.loads(payload) if payload else {})
    finally:
        connection.close()


class ServerProcess:
    """A server of ours in a child process: launched with a bounded wait until its `/_health`
    answers from this very process (its pid is in the answer), stopped with SIGTERM then SIGKILL.
    Subclasses say what to run (`_command`), where its health answers (`health_url`), and what it is."""

    what = "server"

    def __init__(self, db_path: Path, tmpdir: Path | None, *, startup_timeout: float, stop_timeout: float):
        self._tmpdir, self.db_path = tmpdir, db_path
        self.startup_timeout, self.stop_timeout = startup_timeout, stop_timeout
        self.log_path = self.db_path.with_suffix(".log")
        self.child: ChildProcess | None = None

    @property
    def process(self) -> subprocess.Popen | None:
        """The running child (None once stopped)."""
        return None if self.child is None else self.child.process

    @property
    def health_url(self) -> str:
        raise NotImplementedError

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _launch(self) -> bool:
        """Start the child; True once it is healthy, False if it died (a port taken meanwhile)."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")]))}
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        self.child = ChildProcess(self._command(), env=env, cwd=CHECKOUT, log=self.log_path, append=True).start()
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._healthy():
                return True
            try:
                self.process.wait(timeout=0.05)  # returns at once if the child died
                return False
            except subprocess.TimeoutExpired:
                continue
        self.stop(cleanup=False)
        raise SandboxError(f"the {self.what} did not answer /_health within {self.startup_timeout}s"
                           f" on {self.health_url}:\n{self._log_tail()}")

    def _healthy(self) -> bool:
        try:
            response = call(self.health_url, "GET", "/_health", timeout=1.0)
        except OSError:
            return False
        return response.status == 200 and response.json.get("pid") == self.process.pid

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, cleanup: bool = True) -> int | None:
        """SIGTERM, then SIGKILL after ``stop_timeout``; returns the exit code."""
        code = None
        if self.child is not None:
            code = self.child.stop(grace=self.stop_timeout)
            self.child = None
        if cleanup and self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
        return code

    def restart(self):
        """Stop and start again on the same store (on the same ports if they are still free)."""
        self.stop(cleanup=False)
        return self.start()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


class SandboxProcess(ServerProcess):
    what = "sandbox"

    def __init__(self, db_path: str | Path | None = None, *, host: str = "127.0.0.1",
                 port: int | None = None, fault_rate: float = 0.0, seed: int | None = None,
                 latency_ms: float = 0.0, rate_limits: dict | None = None, startup_timeout: float = 15.0,
                 stop_timeout: float = 5.0):
        tmpdir = None if db_path else Path(tempfile.mkdtemp(prefix="reckon-sandbox-"))
        super().__init__(Path(db_path) if db_path else tmpdir / "sandbox.sqlite3", tmpdir,
                         startup_timeout=startup_timeout, stop_timeout=stop_timeout)
        self.host, self.port, self._fixed_port = host, port, port is not None
        self.fault_rate, self.seed, self.latency_ms = fault_rate, seed, latency_ms
        self.rate_limits = dict(rate_limits or {})

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        if self.process is None:
            raise SandboxError("the sandbox is not running")
        return self.process.pid

    def start(self) -> SandboxProcess:
        if self.process is not None and self.process.poll() is None:
            return self
        # Reuse the last port first (restart keeps the URL); a free port found by probing can be
        # taken by someone else before the child binds it, so try a few when not fixed.
        ports = [self.port] if self.port else []
        if not self._fixed_port:
            ports += [None, None, None]
        for port in ports:
            self.port = port or free_port(self.host)
            if self._launch():
                return self
        raise SandboxError(f"the sandbox did not start on {self.url}:\n{self._log_tail()}")

    @property
    def health_url(self) -> str:
        return self.url

    def _command(self) -> list[str]:
        command = [sys.executable, "-m", "sandbox.server", "--host", self.host, "--port", str(self.port),
                   "--db", str(self.db_path), "--fault-rate", str(self.fault_rate),
                   "--latency-ms", str(self.latency_ms)]
        if self.seed is not None:
            command += ["--seed", str(self.seed)]
        for prefix, rate in self.rate_limits.items():
            command += ["--rate-limit", f"{prefix}={rate}"]
        return command

    # -- client helpers --------------------------------------------------------------------

    def request(self, method: str, path: str, body: object = None, headers: dict | None = None,
                timeout: float = 10.0, raw: bytes | None = None) -> SandboxResponse:
        return call(self.url, method, path, body, headers, timeout, raw)

    def reset(self) -> None:
        response = self.request("POST", "/_admin/reset")
        if response.status != 200:
            raise SandboxError(f"reset failed: {response.status} {response.json}")

    def set_latency(self, ms: float) -> None:
        """The provider's round trip from now on (PUT /_admin/latency)."""
        response = self.request("PUT", "/_admin/latency", {"ms": ms})
        if response.status != 200:
            raise SandboxError(f"setting the latency failed: {response.status} {response.json}")

    def set_rate_limits(self, limits: dict, burst_s: float | None = None) -> dict:
        """Change the limits live (``PUT /_admin/rate_limits``); {} lifts them all."""
        body = {"limits": limits, **({"burst_s": burst_s} if burst_s is not None else {})}
        response = self.request("PUT", "/_admin/rate_limits", body)
        if response.status != 200:
            raise SandboxError(f"setting rate limits failed: {response.status} {response.json}")
        return response.json

    def effects(self, key: str | None = None, marker: str | None = None) -> dict:
        query = urlencode({name: value for name, value in (("key", key), ("marker", marker))
                           if value is not None})
        return self.request("GET", "/_effects" + (f"?{query}" if query else "")).json
