"""Reckon as a deployment installs it: the wheel, a new virtual environment, no checkout, no Makefile.

The package is built (`pip wheel --no-deps`) from a copy of the sources and installed into a fresh
`python -m venv` (its dependencies from the package index, or pip's cache). Then, in an empty
folder and against a database of its own, each process runs exactly as its systemd unit in
deploy/systemd/ starts it (the unit's ExecStart, with the venv's path and a free port put in):
migrate, gunicorn, the qcluster, the sweeper and the reconciler. A team's own programs, run by the
fresh environment's Python with only the installed reckon_client, crash after an effect twice —
one action reconciled by the team's webhook (which checks Reckon's signature), one by the team's
agent pulling the look-up over the API — and run a claim-next worker; every job settles.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from tests.processes import ROOT, ManagedProcess, free_port, wait_for

pytestmark = pytest.mark.slow

UNITS = ROOT / "deploy" / "systemd"
UNIT_VENV = "/opt/reckon/venv"  # where the units expect the installation
# What is copied to build the wheel: the sources, without the environment, the tests or any state.
NOT_SOURCES = shutil.ignore_patterns(".git", ".venv", ".pgdata", ".run", ".sandbox", "__pycache__", "build",
                                     "*.egg-info", "tests", "outbox", "staticfiles", "test-artifacts", "node_modules")

ACTIONS = """
[actions."team.charge"]              # reconciled by the team's webhook
executor = "external"
reversible = true
queryable = true
reconciler = "webhook"
webhook_url = "http://127.0.0.1:${TEAM_RECEIVER_PORT}/reckon"
webhook_secrets = ["TEAM_WEBHOOK_SECRET"]
webhook_timeout = 2

[actions."team.note"]                # reconciled by the team's agents (pull mode)
executor = "external"
reversible = true
queryable = true
reconciler = "external"

[actions."team.mail"]                # run by a claim-next worker
executor = "external"
reversible = true
"""


def run(argv: list, *, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, **kwargs)
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="session")
def fresh_venv(tmp_path_factory) -> Path:
    """The wheel, built from the sources and installed into a new virtual environment."""
    work = tmp_path_factory.mktemp("install")
    shutil.copytree(ROOT, work / "src", ignore=NOT_SOURCES, symlinks=True)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", work / "dist", work / "src"])
    (wheel,) = (work / "dist").glob("reckon_ledger-*.whl")
    venv = work / "venv"
    # The new environment's own interpreter, installed into by this environment's pip (`--python`):
    # no pip of its own to bootstrap first, and no byte-compiling of every dependency up front (each
    # process compiles what it imports, as after any install).
    run([sys.executable, "-m", "venv", "--without-pip", venv])
    run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--quiet", "--no-compile", wheel])
    return venv


@pytest.fixture(scope="module")
def host(fresh_venv, django_db_setup, tmp_path_factory):
    """An empty working folder, a database of its own, the environment a unit's EnvironmentFile
    gives, the schema migrated and a worker token: a host about to start its units."""
    folder = tmp_path_factory.mktemp("host")
    (folder / "home").mkdir()
    (folder / "provider").mkdir()
    (folder / "team").mkdir()
    shutil.copy(Path(__file__).parent / "team.py", folder / "team" / "team.py")  # out of the checkout
    settings = connection.settings_dict
    name = f"reckon_install_{os.getpid()}"
    server = dict(host=settings["HOST"], port=settings["PORT"], user=settings["USER"], password=settings["PASSWORD"])
    with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    url = f"postgresql://{settings['USER']}:{settings['PASSWORD']}@{settings['HOST']}:{settings['PORT']}/{name}"
    (folder / "actions.toml").write_text(ACTIONS)
    env = {
        "PATH": f"{fresh_venv / 'bin'}:/usr/local/bin:/usr/bin:/bin", "HOME": str(folder / "home"), "LANG": "C.UTF-8",
        "DATABASE_URL": url, "RECKON_SECRET_KEY": secrets.token_urlsafe(50), "RECKON_ALLOWED_HOSTS": "127.0.0.1",
        "RECKON_SSL_REDIRECT": "false",  # no TLS proxy in front of a local test
        "RECKON_ACTIONS_FILE": str(folder / "actions.toml"),
        "TEAM_RECEIVER_PORT": str(free_port()), "TEAM_WEBHOOK_SECRET": secrets.token_urlsafe(32),
        "RECKON_SWEEP_INTERVAL": "0.5", "RECKON_RECONCILE_INTERVAL": "0.5",
    }
    reckon = fresh_venv / "bin" / "reckon"
    run([reckon, "migrate", "--no-input"], cwd=folder, env=env)
    # The team's three actions, all reversible: a token of those alone needs no person behind it.
    actions = [part for action in ("team.charge", "team.note", "team.mail") for part in ("--action", action)]
    token = run([reckon, "worker_token", "create", "--name", "team", "--tenant", "acme", *actions],
                cwd=folder, env=env).stdout.strip()
    yield {"folder": folder, "env": env, "venv": fresh_venv, "token": token, "database": dict(dbname=name, **server)}
    with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def unit(name: str) -> dict[str, str]:
    """The [Service] settings of deploy/systemd/NAME.service."""
    found, section = {}, None
    for line in (UNITS / f"{name}.service").read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            found[key] = value
    return found


def unit_process(name: str, host: dict, port: int | None = None) -> ManagedProcess:
    """The unit's ExecStart, as systemd would run it on this host: the installation at the fresh
    venv, the unit's working directory the host's folder."""
    service = unit(name)
    assert service["EnvironmentFile"] == "/etc/reckon/reckon.env" and service["WorkingDirectory"]
    argv = shlex.split(service["ExecStart"])
    assert argv[0].startswith(UNIT_VENV + "/bin/"), argv
    argv[0] = str(host["venv"]) + argv[0].removeprefix(UNIT_VENV)
    if "--bind" in argv:
        argv[argv.index("--bind") + 1] = f"127.0.0.1:{port}"
    env = {**host["env"], **dict(assignment.split("=", 1) for assignment in service["Environment"].split())}
    return ManagedProcess(argv, env=env, inherit_env=False, log_name=f"install-{name}", cwd=host["folder"])


def sql(host: dict, query: str, *params) -> list[tuple]:
    with psycopg.connect(**host["database"]) as db:
        return db.execute(query, params).fetchall()


def answers(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status
    except OSError:
        return None


@pytest.fixture(scope="module")
def units(host):
    """Every unit of deploy/systemd/ started, and the team's webhook receiver beside them."""
    port = free_port()
    started = datetime.now(UTC)
    processes = {name: unit_process(name, host, port) for name in
                 ("reckon-web", "reckon-qcluster", "reckon-sweeper", "reckon-reconciler", "reckon-watchdog")}
    receiver = ManagedProcess([host["venv"] / "bin" / "python", host["folder"] / "team" / "team.py", "receiver",
                               host["env"]["TEAM_RECEIVER_PORT"], host["env"]["TEAM_WEBHOOK_SECRET"],
                               host["folder"] / "provider"],
                              env=host["env"], inherit_env=False, log_name="install-receiver", cwd=host["folder"])
    try:
        for process in [*processes.values(), receiver]:
            process.start()
        yield {"processes": processes, "url": f"http://127.0.0.1:{port}", "started": started}
        for name, process in processes.items():  # each stops on systemd's SIGTERM, within its TimeoutStopSec
            process.process.send_signal(signal.SIGTERM)
            assert process.process.wait(timeout=float(unit(name)["TimeoutStopSec"])) is not None, name
    finally:
        for process in [*processes.values(), receiver]:
            process.stop()


def test_the_wheel_installs_everything_a_host_runs_with_no_checkout(host):
    where = run([host["venv"] / "bin" / "python", "-c",
                 "import sys, config, reckon_client; from config.paths import PROJECT_DIR; "
                 "print(config.__file__); print(reckon_client.__file__); print(sys.path); print(PROJECT_DIR)"],
                cwd=host["folder"], env=host["env"]).stdout.splitlines()
    site = str(host["venv"] / "lib")
    assert where[0].startswith(site) and where[1].startswith(site), where
    assert str(ROOT) not in where[2]
    assert where[3] == str(host["folder"])  # .env, actions.toml, staticfiles/: the working directory's
    assert (Path(where[0]).parent.parent / "console" / "templates" / "base.html").is_file()
    assert (Path(where[0]).parent.parent / "console" / "static" / "css" / "reckon.css").is_file()
    assert "team.charge" in run([host["venv"] / "bin" / "reckon", "actions"], cwd=host["folder"],
                                env=host["env"]).stdout


def test_each_unit_of_deploy_systemd_starts_its_process(host, units):
    url, processes = units["url"], units["processes"]

    def serving() -> bool:
        assert processes["reckon-web"].process.poll() is None, processes["reckon-web"].output()[-3000:]
        return answers(f"{url}/healthz") == 200

    wait_for(serving, timeout=60, interval=0.2, message="the web unit answering /healthz")
    with urllib.request.urlopen(f"{url}/accounts/login/", timeout=5) as login:
        page = login.read().decode()
    assert "<form" in page and "/static/css/reckon.css" in page  # the packaged templates...
    assert answers(f"{url}/static/css/reckon.css") == 200  # ...and static files, from the wheel

    # The loops each complete a pass (the dead-man gate's records) and say what they do.
    def passed(name: str) -> bool:
        return bool(sql(host, "SELECT 1 FROM ledger_passrecord WHERE name = %s AND completed_at > %s",
                        name, units["started"]))

    wait_for(lambda: passed("sweeper"), timeout=60, message="a sweeper pass")
    wait_for(lambda: passed("reconciler"), timeout=60, message="a reconciler pass")
    assert "sweeping expired leases every 0.5 s" in processes["reckon-sweeper"].output()
    assert "reconciling unknown work every 0.5 s" in processes["reckon-reconciler"].output()
    wait_for(lambda: "evaluating the alert conditions every" in processes["reckon-watchdog"].output(), timeout=60,
             message="the watchdog's loop")
    # The cluster runs Reckon's schedules: each due one runs and is set a minute ahead.
    wait_for(lambda: not sql(host, "SELECT name FROM django_q_schedule WHERE name LIKE 'reckon.%%' "
                                   "AND next_run < %s", units["started"]),
             timeout=90, interval=0.5, message="the qcluster running every schedule")
    for name, process in processes.items():
        assert process.process.poll() is None, f"{name} exited:\n{process.output()[-3000:]}"
        assert "Traceback" not in process.output(), process.output()[-3000:]


def test_a_webhook_reconciliation_a_pull_reconciliation_and_a_claim_next_worker_settle(host, units):
    wait_for(lambda: answers(f"{units['url']}/healthz") == 200, timeout=60, message="the web unit")
    run([host["venv"] / "bin" / "python", host["folder"] / "team" / "team.py", "work", units["url"], host["token"],
         host["folder"] / "provider"], cwd=host["folder"], env=host["env"], timeout=120)

    def settled() -> dict:
        statuses = dict(sql(host, "SELECT job_id, status FROM ledger_job"))
        return statuses if statuses == {"charge-1": "succeeded", "note-1": "succeeded", "mail-1": "succeeded"} else {}

    wait_for(settled, timeout=60, interval=0.2, message="every job succeeded")
    checks = sql(host, "SELECT j.job_id, c.outcome, c.reconciler, c.evidence FROM reconciliation_reconciliationcheck c "
                       "JOIN ledger_job j ON j.id = c.job_id ORDER BY c.id")
    webhook = [(outcome, reconciler) for job_id, outcome, reconciler, _ in checks if job_id == "charge-1"]
    assert webhook == [("confirmed", f"webhook http://127.0.0.1:{host['env']['TEAM_RECEIVER_PORT']}/reckon")]
    assert [outcome for job_id, outcome, *_ in checks if job_id == "note-1"] == ["confirmed"]
    # One effect each, none repeated: the provider holds exactly the three keys.
    assert sorted(p.name for p in (host["folder"] / "provider").iterdir()) == [
        "team.charge:charge-1", "team.mail:mail-1", "team.note:note-1"]
    assert json.dumps(checks[0][3])  # the check kept the webhook's request and answer
