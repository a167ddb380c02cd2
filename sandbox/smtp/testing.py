"""Run the SMTP sandbox as a real subprocess, for tests and tools.

    with SmtpSandboxProcess() as smtp:
        smtp.configure_faults(markers={"smtp.send_mail:job-1": "drop_after_data"})
        ...                                   # send to smtp.host:smtp.smtp_port
        smtp.messages(message_id="<...@reckon>")

The process gets two free ports (SMTP and the lookup API) and, unless ``db_path`` is given, a
temporary archive removed on ``stop()``. Start-up waits, with a bound, until ``GET /_health``
answers from this very process (its pid is in the answer).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

from sandbox.testing import CHECKOUT, SandboxError, SandboxResponse, call, free_port


class SmtpSandboxProcess:
    def __init__(self, db_path: str | Path | None = None, *, host: str = "127.0.0.1", rates: dict | None = None,
                 seed: int | None = None, startup_timeout: float = 15.0, stop_timeout: float = 5.0):
        self._tmpdir = None if db_path else Path(tempfile.mkdtemp(prefix="reckon-smtp-sandbox-"))
        self.db_path = Path(db_path) if db_path else self._tmpdir / "smtp.sqlite3"
        self.host, self.rates, self.seed = host, rates or {}, seed
        self.smtp_port: int | None = None
        self.http_port: int | None = None
        self.startup_timeout, self.stop_timeout = startup_timeout, stop_timeout
        self.log_path = self.db_path.with_suffix(".log")
        self.process: subprocess.Popen | None = None

    @property
    def lookup_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def settings(self) -> dict:
        """The settings that point `smtp.send_mail` and its reconciler at this process."""
        return {"RECKON_SMTP_HOST": self.host, "RECKON_SMTP_PORT": self.smtp_port,
                "RECKON_SMTP_LOOKUP_URL": self.lookup_url}

    @property
    def env(self) -> dict:
        """The same, for the environment of a worker process."""
        return {name: str(value) for name, value in self.settings.items()}

    def start(self) -> SmtpSandboxProcess:
        if self.process is not None and self.process.poll() is None:
            return self
        # A free port found by probing can be taken by someone else before the child binds it:
        # the last ports first (a restart keeps the addresses), then a few fresh pairs.
        pairs = [(self.smtp_port, self.http_port)] if self.smtp_port else []
        pairs += [(None, None)] * 3
        for smtp_port, http_port in pairs:
            self.smtp_port = smtp_port or free_port(self.host)
            self.http_port = http_port or free_port(self.host)
            if self._launch():
                return self
        raise SandboxError(f"the SMTP sandbox did not start:\n{self._log_tail()}")

    def _launch(self) -> bool:
        command = [sys.executable, "-m", "sandbox.smtp.server", "--host", self.host, "--port", str(self.smtp_port),
                   "--http-port", str(self.http_port), "--db", str(self.db_path)]
        for kind, rate in self.rates.items():
            command += [f"--{kind.replace('_', '-')}-rate", str(rate)]
        if self.seed is not None:
            command += ["--seed", str(self.seed)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")]))}
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, cwd=CHECKOUT, env=env, stdout=log,  # nosec B603  # the SMTP sandbox's own command line; no shell, no outside input
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._healthy():
                return True
            try:
                self.process.wait(timeout=0.05)  # returns at once if the child died (a port in use)
                return False
            except subprocess.TimeoutExpired:
                continue
        self.stop(cleanup=False)
        raise SandboxError(f"the SMTP sandbox did not answer /_health within {self.startup_timeout}s"
                           f" on {self.lookup_url}:\n{self._log_tail()}")

    def _healthy(self) -> bool:
        try:
            response = call(self.lookup_url, "GET", "/_health", timeout=1.0)
        except OSError:
            return False
        return response.status == 200 and response.json.get("pid") == self.process.pid

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, cleanup: bool = True) -> int | None:
        """SIGTERM, then SIGKILL after ``stop_timeout``; returns the exit code."""
        code = None
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(timeout=self.stop_timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=self.stop_timeout)
            code = self.process.returncode
            self.process = None
        if cleanup and self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
        return code

    def restart(self) -> SmtpSandboxProcess:
        """Stop and start again on the same archive (on the same ports if they are still free)."""
        self.stop(cleanup=False)
        return self.start()

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __enter__(self) -> SmtpSandboxProcess:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # -- the lookup API and the controls --------------------------------------------------

    def request(self, method: str, path: str, body: object = None, timeout: float = 10.0) -> SandboxResponse:
        return call(self.lookup_url, method, path, body, timeout=timeout)

    def reset(self) -> None:
        """An empty archive and the faults the process started with."""
        response = self.request("POST", "/_admin/reset")
        if response.status != 200:
            raise SandboxError(f"reset failed: {response.status} {response.json}")

    def configure_faults(self, *, rates: dict | None = None, markers: dict | None = None,
                         recipients: dict | None = None, seed: int | None = None) -> dict:
        """Replace the fault configuration (see `sandbox.smtp.faults`)."""
        body = {"rates": rates or {}, "markers": markers or {}, "recipients": recipients or {}}
        if seed is not None:
            body["seed"] = seed
        response = self.request("PUT", "/_admin/faults", body)
        if response.status != 200:
            raise SandboxError(f"configuring faults failed: {response.status} {response.json}")
        return response.json

    def messages(self, *, message_id: str | None = None, marker: str | None = None) -> list[dict]:
        query = urlencode({name: value for name, value in (("message_id", message_id), ("marker", marker))
                           if value is not None})
        response = self.request("GET", "/messages" + (f"?{query}" if query else ""))
        if response.status != 200:
            raise SandboxError(f"lookup failed: {response.status} {response.json}")
        return response.json["messages"]
