"""Programs of ours in child processes, and waiting on them: the one harness that `make run`'s
supervisor (sandbox/stack.py), the sandboxes' launchers (sandbox/testing.py), the chaos world,
the benchmark and the tests start and stop processes with.

A child runs in a session (process group) of its own, so a terminal's Ctrl-C reaches only its
parent, and stopping it reaches whatever it started (a qcluster's workers, gunicorn's): SIGTERM,
a bounded wait, then SIGKILL to the whole group. Its output goes to a log file of its choosing
(or nowhere). Nothing here imports Django or an app: every layer may use it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess  # nosec B404  # this module exists to run our own programs
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


def stop_like_ctrl_c() -> None:
    """From now on SIGTERM stops this process as Ctrl-C does (KeyboardInterrupt), so that the
    `finally` blocks of a command that started processes (the chaos world, the benchmark's) stop
    them: a terminated command leaves nothing running."""
    signal.signal(signal.SIGTERM, _interrupted)


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


class WaitTimeout(AssertionError, TimeoutError):
    """A bounded wait ran out: a failed assertion to a test, a TimeoutError to a tool."""


_POLL = threading.Event()  # never set: its wait() is the polling interval of a bounded wait


def wait_until(condition: Callable[[], object], *, timeout: float, interval: float = 0.05,
               what: str = "condition", tolerate: tuple[type[BaseException], ...] = (),
               on_error: Callable[[], object] | None = None) -> object:
    """Poll `condition` until it returns something truthy (and return that), or raise WaitTimeout
    after `timeout` seconds. Exceptions of the `tolerate` types count as "not yet" (after calling
    `on_error`, e.g. to drop database connections to a server that is restarting)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except tolerate:
            value = None
            if on_error is not None:
                on_error()
        if value:
            return value
        if time.monotonic() > deadline:
            raise WaitTimeout(f"timed out after {timeout:g} s waiting for {what}")
        _POLL.wait(interval)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` right now (another process may take it before ours binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def accepting(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


class ChildProcess:
    """One program of ours in a child process of its own session.

    `env` is added to this process's environment (or, with `inherit_env=False`, is the whole of
    it); the output goes to `log` (appended with `append=True`, else truncated; None: discarded).
    `process` is the `subprocess.Popen` while it runs, for tests that signal it themselves.
    """

    def __init__(self, argv: Sequence[str | os.PathLike], *, env: Mapping[str, str] | None = None,
                 inherit_env: bool = True, cwd: str | os.PathLike | None = None, log: Path | None = None,
                 append: bool = False):
        self.argv = [str(part) for part in argv]
        self.env = {**(os.environ if inherit_env else {}), **(env or {})}
        self.cwd = cwd
        self.log_path = Path(log) if log is not None else None
        self.append = append
        self.process: subprocess.Popen | None = None
        self._asked_to_stop = False

    def start(self) -> ChildProcess:
        self._asked_to_stop = False
        if self.log_path is None:
            self.process = self._popen(subprocess.DEVNULL)
        else:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "ab" if self.append else "wb") as log:
                self.process = self._popen(log)
        return self

    def _popen(self, out) -> subprocess.Popen:
        return subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,  # nosec B603  # our own programs, argv from our code; no shell
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError(f"{self.argv[0]} is not started")
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def output(self) -> str:
        """What the process wrote so far (its log), or "" when it has none."""
        if self.log_path is None:
            return ""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def output_tail(self, lines: int = 20) -> str:
        return "\n".join(self.output().splitlines()[-lines:]) or "(no output)"

    def terminate(self) -> None:
        """SIGTERM (once), without waiting (stop() waits): to ask several processes to stop at once."""
        if self.running() and not self._asked_to_stop:
            self._asked_to_stop = True
            self.process.terminate()

    def kill(self) -> None:
        """SIGKILL to the whole group at once, and reap the child."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM, up to `grace` seconds for the child to exit, then SIGKILL to whatever is left in
        its group; the child's exit code (None if it was never started)."""
        if self.process is None:
            return None
        self.terminate()
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        self.kill()
        return self.process.returncode

    def __enter__(self) -> ChildProcess:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
