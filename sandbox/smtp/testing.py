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

import sys
import tempfile
from pathlib import Path
from urllib.parse import urlencode

from sandbox.testing import SandboxError, SandboxResponse, ServerProcess, call, free_port


class SmtpSandboxProcess(ServerProcess):
    what = "SMTP sandbox"

    def __init__(self, db_path: str | Path | None = None, *, host: str = "127.0.0.1", rates: dict | None = None,
                 seed: int | None = None, startup_timeout: float = 15.0, stop_timeout: float = 5.0):
        tmpdir = None if db_path else Path(tempfile.mkdtemp(prefix="reckon-smtp-sandbox-"))
        super().__init__(Path(db_path) if db_path else tmpdir / "smtp.sqlite3", tmpdir,
                         startup_timeout=startup_timeout, stop_timeout=stop_timeout)
        self.host, self.rates, self.seed = host, rates or {}, seed
        self.smtp_port: int | None = None
        self.http_port: int | None = None

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

    @property
    def health_url(self) -> str:
        return self.lookup_url

    def _command(self) -> list[str]:
        command = [sys.executable, "-m", "sandbox.smtp.server", "--host", self.host, "--port", str(self.smtp_port),
                   "--http-port", str(self.http_port), "--db", str(self.db_path)]
        for kind, rate in self.rates.items():
            command += [f"--{kind.replace('_', '-')}-rate", str(rate)]
        if self.seed is not None:
            command += ["--seed", str(self.seed)]
        return command

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
