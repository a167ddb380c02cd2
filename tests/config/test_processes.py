"""The one harness that starts and stops our processes (config/processes.py): a child in a session
of its own, its output in its log, stopped with SIGTERM, a bounded wait, then SIGKILL to its group."""

import os
import signal
import sys
import time

import pytest

from config.processes import ChildProcess, WaitTimeout, accepting, free_port, wait_until

# A parent that ignores SIGTERM and starts a grandchild (in its group) that ignores it too.
STUBBORN = """
import os, signal, subprocess, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); signal.pause()"])
print("grandchild", child.pid, flush=True)
signal.pause()  # until killed: an ignored SIGTERM does not wake it
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_child_that_ignores_sigterm_is_killed_with_its_group_after_the_grace(tmp_path):
    child = ChildProcess([sys.executable, "-c", STUBBORN], log=tmp_path / "stubborn.log").start()
    line = wait_until(lambda: child.output().strip(), timeout=30, what="the grandchild's pid")
    grandchild = int(line.split()[1])
    assert os.getpgid(child.pid) == child.pid != os.getpgid(0)  # a session (and group) of its own
    assert os.getpgid(grandchild) == child.pid
    started = time.monotonic()
    code = child.stop(grace=0.5)
    assert 0.5 <= time.monotonic() - started < 10
    assert code == -signal.SIGKILL and not child.running()
    wait_until(lambda: not _alive(grandchild), timeout=10, what="the grandchild to die")


def test_a_child_that_stops_on_sigterm_is_not_killed_and_says_how_it_ended(tmp_path):
    program = "import signal, sys\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(3))\nprint('up', flush=True)\nsignal.pause()"
    with ChildProcess([sys.executable, "-c", program], log=tmp_path / "polite.log") as child:
        wait_until(lambda: "up" in child.output(), timeout=30, what="the child to start")
        assert child.running() and child.returncode is None
        assert child.stop(grace=30) == 3
    assert child.output_tail() == "up"


def test_the_environment_is_added_to_ours_or_replaces_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_PROBE_VALUE", "inherited")
    show = "import os; seen = dict(os.environ); print(seen.get('HARNESS_PROBE_VALUE'), seen.get('EXTRA'))"
    added = ChildProcess([sys.executable, "-c", show], env={"EXTRA": "x"}, log=tmp_path / "added.log").start()
    alone = ChildProcess([sys.executable, "-c", show], env={"EXTRA": "y"}, inherit_env=False,
                         log=tmp_path / "alone.log").start()
    assert added.process.wait(timeout=30) == alone.process.wait(timeout=30) == 0
    assert added.output().split() == ["inherited", "x"]
    assert alone.output().split() == ["None", "y"]


def test_a_bounded_wait_returns_what_it_waited_for_or_fails_saying_what():
    calls = []
    assert wait_until(lambda: calls.append(1) or len(calls) >= 3 and "ready", timeout=10, interval=0.01) == "ready"
    with pytest.raises(WaitTimeout, match="timed out after 0.2 s waiting for nothing"):
        wait_until(lambda: False, timeout=0.2, interval=0.01, what="nothing")
    assert issubclass(WaitTimeout, AssertionError) and issubclass(WaitTimeout, TimeoutError)


def test_a_bounded_wait_can_ride_out_errors_it_is_told_to_tolerate():
    dropped, tries = [], iter([ConnectionError, ConnectionError, "up"])

    def flaky():
        value = next(tries)
        if value is ConnectionError:
            raise ConnectionError("restarting")
        return value

    assert wait_until(flaky, timeout=10, interval=0.01, tolerate=(ConnectionError,),
                      on_error=lambda: dropped.append(1)) == "up"
    assert dropped == [1, 1]
    with pytest.raises(ZeroDivisionError):
        wait_until(lambda: 1 / 0, timeout=10, tolerate=(ConnectionError,))


def test_a_free_port_is_free_until_something_listens_on_it():
    import socket

    port = free_port()
    assert not accepting(port)
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
        server.listen()
        assert accepting(port)
