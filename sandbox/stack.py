"""`make run`: one foreground process supervising the web server, workers and sweeper.

Each child runs in its own session so a terminal's Ctrl-C reaches only us; we then stop the
children in order (SIGTERM, a bounded wait, SIGKILL of whatever is left in their groups) and
leave nothing running. If any child dies on its own, the whole stack stops and says which.
"""

from __future__ import annotations

import signal
import subprocess  # nosec B404  # the stack's children are our own programs
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings

from config.processes import ChildProcess


@dataclass
class Child:
    name: str
    argv: list[str]
    child: ChildProcess | None = field(default=None, repr=False)

    @property
    def process(self) -> subprocess.Popen | None:
        return None if self.child is None else self.child.process


def stack_children(*, host: str, port: int, workers: int, demo: bool = True) -> list[Child]:
    manage = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]
    sandbox = urlsplit(settings.RECKON_SANDBOX_URL)
    smtp_lookup = urlsplit(settings.RECKON_SMTP_LOOKUP_URL)
    gateway = urlsplit(settings.RECKON_MCP_GATEWAY_URL)
    providers = [
        Child("sandbox", manage + ["sandbox", "--host", sandbox.hostname, "--port", str(sandbox.port or 80),
                                   "--db", str(Path(settings.BASE_DIR) / ".sandbox" / "demo.sqlite3")]),
        # One process serves SMTP and its lookup API, both on RECKON_SMTP_HOST.
        Child("smtp", manage + ["smtp_sandbox", "--host", settings.RECKON_SMTP_HOST,
                                "--port", str(settings.RECKON_SMTP_PORT), "--http-port", str(smtp_lookup.port or 80),
                                "--db", str(Path(settings.BASE_DIR) / ".sandbox" / "demo-smtp.sqlite3")]),
    ]
    workload = Child("workload", manage + ["simulate", "--jobs", "24", "--fault-rate", "0.25", "--mismatch-rate",
                                           "0.3", "--bad-address-every", "3", "--every", "45", "--smtp"])
    return (providers if demo else []) + [
        Child(
            "web",
            [
                sys.executable,
                "-m",
                "gunicorn",
                "config.wsgi:application",
                "--bind",
                f"{host}:{port}",
                "--workers",
                str(workers),
                "--threads",
                "4",
                "--graceful-timeout",
                "5",
                "--error-logfile",
                "-",
                # gunicorn 27 opens a control socket at one fixed path per user (~/.gunicorn/): a
                # second server (tests, another checkout) would take it over. We do not use it.
                "--no-control-socket",
            ],
        ),
        Child("qcluster", manage + ["qcluster"]),
        Child("sweeper", manage + ["sweep_leases", "--loop"]),
        Child("reconciler", manage + ["reconcile", "--loop"]),
        # Evaluates the alerts in a process of its own: it still runs when the loops above stop.
        Child("watchdog", manage + ["watchdog", "--loop"]),
        Child("gateway", manage + ["mcp_gateway", "--host", gateway.hostname, "--port", str(gateway.port or 80)]),
    ] + ([workload] if demo else [])


class Stack:
    def __init__(self, children: list[Child], *, out=sys.stdout):
        self.children = children
        self.out = out
        self._stopping = False

    def start(self) -> None:
        logs = Path(settings.BASE_DIR) / ".run" / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        for child in self.children:
            child.child = ChildProcess(child.argv, cwd=settings.BASE_DIR, log=logs / f"{child.name}.log",
                                       append=True).start()
            self.out.write(f"started {child.name:<9} pid {child.process.pid:<7} log .run/logs/{child.name}.log\n")
        self.out.flush()

    def wait(self) -> int:
        """Block until a signal asks us to stop, or a child dies; then stop everything."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._request_stop)
        died = None
        while not self._stopping and died is None:
            died = next((c for c in self.children if c.process.poll() is not None), None)
            time.sleep(0.2)  # supervision pacing, not synchronisation
        if died is not None:
            self.out.write(f"{died.name} exited with code {died.process.returncode} (see .run/logs/{died.name}.log);"
                           " stopping the stack\n")
        self.stop()
        return 1 if died is not None else 0

    def _request_stop(self, signum, frame) -> None:
        self._stopping = True

    def stop(self, grace: float = 10.0) -> None:
        started = [child for child in self.children if child.child is not None]
        for child in reversed(started):  # all asked at once, then each given what is left of `grace`
            child.child.terminate()
        deadline = time.monotonic() + grace
        for child in started:  # anything left in the child's group (qcluster's workers, gunicorn's) goes too
            child.child.stop(grace=max(0.1, deadline - time.monotonic()))
            self.out.write(f"stopped {child.name}\n")
        self.out.flush()
