"""`make run`'s supervisor: serves a logged-in `/`, and Ctrl-C leaves nothing running."""

import http.cookiejar
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.parse
import urllib.request

import pytest
from django.contrib.auth.models import User

from config.localdb import Cluster
from sandbox.demo_users import DEMO_USERS
from sandbox.stack import stack_children
from tests.processes import ROOT, ManagedProcess, database_url_of_tests, production_env, wait_for

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


def _healthy(base: str) -> bool:
    try:
        return urllib.request.urlopen(f"{base}/healthz", timeout=2).status == 200
    except OSError:
        return False


@pytest.fixture
def scratch_cluster(scratch_folder):
    """Where runstack makes an embedded cluster of its own."""
    cluster = Cluster(scratch_folder / "pg", _free_port())
    yield cluster
    if cluster.running():
        cluster.stop()


def test_runstack_serves_a_logged_in_overview_and_stops_every_child_and_its_database_on_ctrl_c(scratch_cluster):
    port, gateway_port = _free_port(), _free_port()
    stack = ManagedProcess([sys.executable, str(ROOT / "manage.py"), "runstack", "--port", str(port),
                            "--web-workers", "1"],
                           env={"RECKON_DEBUG": "true", "RECKON_PGDATA_DIR": str(scratch_cluster.folder),
                                "RECKON_PG_PORT": str(scratch_cluster.port),
                                "RECKON_SANDBOX_URL": f"http://127.0.0.1:{_free_port()}",
                                "RECKON_SMTP_PORT": str(_free_port()),
                                "RECKON_SMTP_LOOKUP_URL": f"http://127.0.0.1:{_free_port()}",
                                "RECKON_MCP_GATEWAY_URL": f"http://127.0.0.1:{gateway_port}/mcp"},
                           log_name="runstack")
    stack.env.pop("DATABASE_URL", None)  # the embedded cluster, which runstack starts itself
    stack.start()
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _healthy(base), timeout=120, message="the web server")
        wait_for(lambda: "Demo logins" in stack.output(), timeout=10, message="the printed logins")
        assert re.search(r"operator\s+operator-demo-pw\s+operators", stack.output())
        postmaster = scratch_cluster.postmaster_pid()
        assert postmaster is not None
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
        wait_for(lambda: _healthy(f"http://127.0.0.1:{gateway_port}"), timeout=60, message="the MCP gateway")

        stack.process.send_signal(signal.SIGINT)
        assert stack.process.wait(timeout=60) == 0
        wait_for(lambda: not any(_alive(pid) for pid in children), timeout=15,
                 message="every child to exit")
        for name in ("stopped web", "stopped qcluster", "stopped sweeper", "stopped watchdog", "stopped sandbox",
                     "stopped smtp",
                     "stopped workload", "stopped gateway", "stopped the embedded PostgreSQL"):
            assert name in stack.output()
        assert not _alive(postmaster) and not scratch_cluster.running()
    finally:
        stack.stop()


def test_runstack_without_the_demo_serves_in_production_mode_with_no_demo_user():
    port = _free_port()
    stack = ManagedProcess([sys.executable, str(ROOT / "manage.py"), "runstack", "--no-demo", "--port", str(port),
                            "--web-workers", "1"], log_name="runstack-no-demo")
    stack.env = production_env(DATABASE_URL=database_url_of_tests(),
                               RECKON_MCP_GATEWAY_URL=f"http://127.0.0.1:{_free_port()}/mcp")
    stack.start()
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _healthy(base), timeout=120, message="the web server")
        assert "Demo logins" not in stack.output()
        assert not User.objects.filter(username__in=[u[0] for u in DEMO_USERS]).exists()
        login = urllib.request.urlopen(f"{base}/accounts/login/", timeout=5)
        assert "Secure" in login.headers["Set-Cookie"]  # the production configuration: debug off
        stack.process.send_signal(signal.SIGINT)
        assert stack.process.wait(timeout=60) == 0
        assert "stopped web" in stack.output() and "stopped sandbox" not in stack.output()
        assert "stopped smtp" not in stack.output()
    finally:
        stack.stop()


def test_the_web_server_runs_without_a_control_socket():
    web = next(child for child in stack_children(host="127.0.0.1", port=_free_port(), workers=1, demo=False)
               if child.name == "web")
    assert "--no-control-socket" in web.argv
    # and this gunicorn knows the option: it checks the whole command line and loads the app
    checked = subprocess.run(web.argv + ["--check-config"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_ctrl_c_leaves_the_embedded_database_running_while_another_process_uses_it(scratch_cluster):
    """`make test` beside `make run`: the test session is a user of the cluster `make run` started,
    so Ctrl-C stops the stack and leaves the database running, naming who uses it."""
    port = _free_port()
    env = {"RECKON_DEBUG": "true", "RECKON_PGDATA_DIR": str(scratch_cluster.folder),
           "RECKON_PG_PORT": str(scratch_cluster.port),
           "RECKON_MCP_GATEWAY_URL": f"http://127.0.0.1:{_free_port()}/mcp"}
    stack = ManagedProcess([sys.executable, str(ROOT / "manage.py"), "runstack", "--no-demo", "--port", str(port),
                            "--web-workers", "1"], env=env, log_name="runstack-shared-db")
    stack.env.pop("DATABASE_URL", None)
    stack.start()
    user = None
    try:
        wait_for(lambda: _healthy(f"http://127.0.0.1:{port}"), timeout=120, message="the web server")
        user_env = {**stack.env}
        user = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "shell", "-c",
             "from django.db import connection; connection.ensure_connection(); print('connected', flush=True); "
             "import sys; sys.stdin.read(); connection.cursor().execute('SELECT 1'); print('still connected')"],
            cwd=ROOT, env=user_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        wait_for(lambda: user.stdout.readline().strip() == "connected", timeout=60, message="the other process")

        stack.process.send_signal(signal.SIGINT)
        assert stack.process.wait(timeout=60) == 0
        assert "stopped web" in stack.output()
        assert f"left the embedded PostgreSQL running: process {user.pid} (python" in stack.output()
        assert "stopped the embedded PostgreSQL" not in stack.output()
        assert scratch_cluster.running()
        out, _ = user.communicate("", timeout=60)  # its database is still there: its next query works
        assert "still connected" in out and user.returncode == 0
    finally:
        if user is not None and user.poll() is None:
            user.kill()
        stack.stop()
