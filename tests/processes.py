"""Real processes for end-to-end tests: a django-q2 cluster on the test database, and waiting."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def wait_for(condition: Callable[[], object], *, timeout: float = 30.0, interval: float = 0.05,
             message: str = "condition") -> object:
    """Poll `condition` until it returns something truthy, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        _POLL.wait(interval)  # the polling interval of this bounded wait (the event is never set)


_POLL = threading.Event()


def database_url_of_tests() -> str:
    """The URL of the database this test process uses (pytest-django's test database)."""
    s = connection.settings_dict
    auth = quote(s["USER"], safe="") + (f":{quote(s['PASSWORD'], safe='')}" if s["PASSWORD"] else "")
    return f"postgresql://{auth}@{s['HOST']}:{s['PORT']}/{s['NAME']}"


class ManagedProcess:
    """A child process in its own process group, killed with its children on stop()."""

    def __init__(self, argv: list[str], *, env: dict | None = None, log_name: str = "process",
                 inherit_env: bool = True, cwd: Path = ROOT):
        self.argv = argv
        self.cwd = cwd
        self.env = {**(os.environ if inherit_env else {}), **(env or {})}
        self.log_path = Path(os.environ.get("RECKON_TEST_LOGS", "/tmp")) / f"reckon-{log_name}-{os.getpid()}.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> ManagedProcess:
        log = open(self.log_path, "w")
        self.process = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        return self

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, grace: float = 10.0) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()

    def __enter__(self) -> ManagedProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def qcluster(*, workers: int = 2, env: dict | None = None) -> ManagedProcess:
    """A real `manage.py qcluster` against the test database."""
    return ManagedProcess([sys.executable, str(ROOT / "manage.py"), "qcluster"],
                          env={"DATABASE_URL": database_url_of_tests(), "RECKON_Q_WORKERS": str(workers),
                               **(env or {})}, log_name="qcluster")


def production_env(**overrides: str | None) -> dict:
    """This process's environment as a production start has it: debug off, a strong secret key, a
    host of our own, plain HTTP allowed (a local test has no TLS proxy). None removes a variable."""
    env = {name: value for name, value in os.environ.items() if name != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env |= {"RECKON_DEBUG": "false", "RECKON_SECRET_KEY": secrets.token_urlsafe(50),
            "RECKON_ALLOWED_HOSTS": "127.0.0.1,localhost", "RECKON_SSL_REDIRECT": "false"}
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def manage(*args: str, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    """`manage.py ARGS` in a process of its own with exactly `env`; its output as text."""
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class WebServer(ManagedProcess):
    """gunicorn serving Reckon (threaded workers, as runstack runs it) on a port of its own."""

    def __init__(self, *, env: dict | None = None, workers: int = 1, threads: int = 4, port: int | None = None,
                 log_name: str = "gunicorn", inherit_env: bool = True):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__([sys.executable, "-m", "gunicorn", "config.wsgi:application", "--bind",
                          f"127.0.0.1:{self.port}", "--workers", str(workers), "--threads", str(threads),
                          "--graceful-timeout", "2", "--no-control-socket", "--error-logfile", "-"],
                         env=env, log_name=log_name, inherit_env=inherit_env)

    def start(self, timeout: float = 60.0) -> WebServer:
        super().start()
        wait_for(self._answers, timeout=timeout, interval=0.1, message=f"gunicorn on {self.url}")
        return self

    def _answers(self) -> bool:
        import urllib.request

        if self.process.poll() is not None:
            raise AssertionError(f"gunicorn exited:\n{self.output()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False
