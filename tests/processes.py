"""Real processes for end-to-end tests: a django-q2 cluster on the test database, and waiting."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from django.db import connection

from config.processes import ChildProcess, WaitTimeout, free_port, wait_until

__all__ = ["ROOT", "ChildProcess", "ManagedProcess", "WaitTimeout", "WebServer", "database_url_of_tests", "free_port",
           "manage", "production_env", "qcluster", "wait_for", "wait_until"]

ROOT = Path(__file__).resolve().parent.parent


def wait_for(condition: Callable[[], object], *, timeout: float = 30.0, interval: float = 0.05,
             message: str = "condition") -> object:
    """Poll `condition` until it returns something truthy, or fail after `timeout` seconds."""
    return wait_until(condition, timeout=timeout, interval=interval, what=message)


def database_url_of_tests() -> str:
    """The URL of the database this test process uses (pytest-django's test database)."""
    s = connection.settings_dict
    auth = quote(s["USER"], safe="") + (f":{quote(s['PASSWORD'], safe='')}" if s["PASSWORD"] else "")
    return f"postgresql://{auth}@{s['HOST']}:{s['PORT']}/{s['NAME']}"


class ManagedProcess(ChildProcess):
    """A child process in its own process group, killed with its children on stop(); its output in
    $RECKON_TEST_LOGS (or /tmp)/reckon-LOG_NAME-PID.log."""

    def __init__(self, argv: list[str], *, env: dict | None = None, log_name: str = "process",
                 inherit_env: bool = True, cwd: Path = ROOT):
        log = Path(os.environ.get("RECKON_TEST_LOGS", "/tmp")) / f"reckon-{log_name}-{os.getpid()}.log"
        super().__init__(argv, env=env, inherit_env=inherit_env, cwd=cwd, log=log)

    def start(self) -> ManagedProcess:
        super().start()
        return self

    def __enter__(self) -> ManagedProcess:
        return self.start()


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
