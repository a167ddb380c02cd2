"""`make run`'s supervisor: serves a logged-in `/`, and Ctrl-C leaves nothing running."""

import http.cookiejar
import os
import re
import signal
import socket
import sys
import urllib.parse
import urllib.request

import pytest

from tests.processes import ROOT, ManagedProcess, database_url_of_tests, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _descendants(root: int) -> set[int]:
    """Every process below `root` (children, grandchildren: qcluster's and gunicorn's workers)."""
    parents = {}
    for entry in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def test_runstack_serves_a_logged_in_overview_and_stops_every_child_on_ctrl_c():
    port = _free_port()
    stack = ManagedProcess([sys.executable, str(ROOT / "manage.py"), "runstack", "--port", str(port),
                            "--web-workers", "1"],
                           env={"DATABASE_URL": database_url_of_tests(),
                                "RECKON_SANDBOX_URL": f"http://127.0.0.1:{_free_port()}"},
                           log_name="runstack")
    stack.start()
    try:
        base = f"http://127.0.0.1:{port}"

        def healthy():
            try:
                return urllib.request.urlopen(f"{base}/healthz", timeout=2).status == 200
            except OSError:
                return False

        wait_for(healthy, timeout=60, message="the web server")
        wait_for(lambda: "Demo logins" in stack.output(), timeout=10, message="the printed logins")
        assert re.search(r"operator\s+operator-demo-pw\s+operators", stack.output())
        # web master + its worker, qcluster + its workers, sweeper
        def whole_stack():
            found = _descendants(stack.pid)
            return found if len(found) >= 5 else None

        children = wait_for(whole_stack, timeout=20, message="the stack's processes")

        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        login_page = opener.open(f"{base}/accounts/login/").read().decode()
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login_page).group(1)
        form = urllib.parse.urlencode({"username": "operator", "password": "operator-demo-pw",
                                       "csrfmiddlewaretoken": token}).encode()
        opener.open(urllib.request.Request(f"{base}/accounts/login/", data=form,
                                           headers={"Referer": f"{base}/accounts/login/"}))
        overview = opener.open(f"{base}/").read().decode()
        assert "Jobs by status" in overview and "operator" in overview

        stack.process.send_signal(signal.SIGINT)
        assert stack.process.wait(timeout=30) == 0
        wait_for(lambda: not any(_alive(pid) for pid in children), timeout=15,
                 message="every child to exit")
        for name in ("stopped web", "stopped qcluster", "stopped sweeper", "stopped sandbox", "stopped workload"):
            assert name in stack.output()
    finally:
        stack.stop()
