"""A scratch world for failure injection: its own PostgreSQL cluster, sandbox and workers.

Everything is real and everything is ours to kill: the chaos run never touches the embedded
development database, so SIGKILLing PostgreSQL itself is safe.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import urllib.request
from pathlib import Path

from django.conf import settings
from django.db import connections

from chaos.ha import PatroniCluster
from config import processes
from config.database_url import database_from_url
from config.localdb import Cluster
from config.processes import free_port
from ledger.actions import declared_action, load_action_modules
from ledger.declarations import load_actions_file
from sandbox.testing import SandboxProcess

ROOT = Path(settings.BASE_DIR)

# Mail through the sandbox, as an external action: run by workers over HTTP, reconciled by marker.
EXTERNAL_ACTION = "chaos.external_mail"
EXTERNAL_ACTIONS = """
[actions."chaos.external_mail"]
executor = "external"
reversible = true
queryable = true
reconciler = "python:sandbox.reconcilers.mail"
lease_ttl = {lease_ttl}
"""


def wait_until(condition, *, timeout: float, interval: float = 0.05, what: str = "condition"):
    """config.processes.wait_until, through anything `condition` raises: the database may be
    restarting under us (the connections are dropped and opened again on the next try)."""
    return processes.wait_until(condition, timeout=timeout, interval=interval, what=what, tolerate=(Exception,),
                                on_error=connections.close_all)


class Worker(processes.ChildProcess):
    """A real process of ours (in its own process group), optionally armed: a `manage.py qcluster`
    unless `argv` says otherwise (the web server, an external worker); its log in the world's folder."""

    def __init__(self, world: World, name: str, env: dict, argv: list[str] | None = None):
        self.world, self.name = world, name
        super().__init__(argv or [sys.executable, str(ROOT / "manage.py"), "qcluster"], env={**world.env(), **env},
                         cwd=ROOT, log=world.workdir / f"{name}.log", append=True)
        self.log = self.log_path
        self.start()

    def stop(self, grace: float = 5.0) -> int | None:
        return super().stop(grace)


class World:
    # Short leases and a short django-q2 retry, so recovery happens in seconds, not minutes.
    LEASE_TTL = 2.0
    Q_TIMEOUT, Q_RETRY = 6, 8
    REDISPATCH_AFTER = 5.0

    def __init__(self, workdir: Path | None = None, *, prefix: str = "reckon-chaos-"):
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix=prefix))
        self.workdir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.workdir, 0o701)  # nosec B103  # postgres must pass through (x only) to its cluster folder
        self.cluster = Cluster(self.workdir / "pg", free_port())
        self.database = "reckon_chaos"
        self.sandbox = SandboxProcess(self.workdir / "sandbox.sqlite3")
        self.faults_dir = self.workdir / "faults"
        self.watch_dir = self.workdir / "watch"
        self.actions_file = self.workdir / "actions.toml"
        self.workers: list[Worker] = []

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> World:
        # The world's work is the demo's actions against the sandbox, here and in every worker,
        # and one external action (EXTERNAL_ACTION) that workers outside Reckon run over HTTP.
        load_action_modules([settings.RECKON_DEMO_ACTION_MODULE])
        self.actions_file.write_text(EXTERNAL_ACTIONS.format(lease_ttl=self.LEASE_TTL))
        if declared_action(EXTERNAL_ACTION) is None:
            load_actions_file(self.actions_file, required=True)
        self._start_database()
        self._point_django_here()
        from django.core.management import call_command

        call_command("migrate", interactive=False, verbosity=0)
        self.sandbox.start()
        for name in ("SANDBOX", "BILLING", "MAIL", "PUBLISH", "VAULT"):
            setattr(settings, f"RECKON_{name}_URL", self.sandbox.url)
        settings.RECKON_DISPATCH = True
        # Every process of this world watches its ledger (the one host's state files in one folder).
        settings.RECKON_LEDGER_WATCH, settings.RECKON_LEDGER_WATCH_DIR = True, str(self.watch_dir)
        settings.RECKON_REDISPATCH_AFTER_S = self.REDISPATCH_AFTER
        return self

    def _start_database(self) -> None:
        self.cluster.ensure(self.database)

    def _point_django_here(self) -> None:
        """This process's ORM talks to the scratch database from now on (nothing ran before)."""
        connections.close_all()
        connections["default"].settings_dict.update(self.cluster.settings(self.database))

    def database_url(self) -> str:
        return self.cluster.url(self.database)

    def env(self) -> dict:
        return {
            "DATABASE_URL": self.database_url(),
            "RECKON_ACTION_MODULES": ",".join(dict.fromkeys([*settings.RECKON_ACTION_MODULES,
                                                             settings.RECKON_DEMO_ACTION_MODULE])),
            **{f"RECKON_{n}_URL": self.sandbox.url for n in ("SANDBOX", "BILLING", "MAIL", "PUBLISH", "VAULT")},
            "RECKON_DEMO_LEASE_TTL": str(self.LEASE_TTL),
            "RECKON_PROVIDER_TIMEOUT": "3",
            "RECKON_Q_TIMEOUT": str(self.Q_TIMEOUT),
            "RECKON_Q_RETRY": str(self.Q_RETRY),
            "RECKON_FAULT_DIR": str(self.faults_dir),
            "RECKON_REDISPATCH_AFTER_S": str(self.REDISPATCH_AFTER),
            "RECKON_ACTIONS_FILE": str(self.actions_file),
            "RECKON_LEDGER_WATCH": "true",
            "RECKON_LEDGER_WATCH_DIR": str(self.watch_dir),
        }

    def worker(self, name: str, *, fault_point: str | None = None, jobs: str = "", workers: int = 1,
               env: dict | None = None) -> Worker:
        env = {"RECKON_Q_WORKERS": str(workers), **(env or {})}
        if fault_point:
            env |= {"RECKON_FAULT_POINT": fault_point, "RECKON_FAULT_JOBS": jobs}
        worker = Worker(self, name, env)
        self.workers.append(worker)
        return worker

    def web(self, name: str = "web", env: dict | None = None) -> str:
        """A gunicorn serving the API on this world's database; its base URL once it answers."""
        port = free_port()
        self.workers.append(Worker(self, name, env or {}, [
            sys.executable, "-m", "gunicorn", "config.wsgi:application", "--bind", f"127.0.0.1:{port}",
            "--workers", "1", "--threads", "4", "--graceful-timeout", "2", "--no-control-socket"]))
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: answers(f"{url}/healthz"), timeout=60, what="the web server to answer")
        return url

    def process(self, name: str, argv: list[str], env: dict | None = None) -> Worker:
        """Any other process of ours in this world (a management command's loop, a receiver)."""
        worker = Worker(self, name, env or {}, argv)
        self.workers.append(worker)
        return worker

    def external_worker(self, name: str, *, url: str, token: str, fault_point: str | None = None,
                        jobs: str = "", action: str = EXTERNAL_ACTION, kind: str = "mail", batch: int = 0) -> Worker:
        """A worker outside Reckon: it pulls `action`'s jobs over HTTP and sends them to the sandbox as
        mail or as charges (chaos/external_worker.py)."""
        env = {"RECKON_FAULT_POINT": fault_point, "RECKON_FAULT_JOBS": jobs} if fault_point else {}
        worker = Worker(self, name, env, [
            sys.executable, "-m", "chaos.external_worker", "--url", url, "--token", token,
            "--provider", self.sandbox.url, "--kind", kind, "--action", action, "--worker", name,
            *(["--batch", str(batch)] if batch else [])])
        self.workers.append(worker)
        return worker

    def stop_workers(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.workers.clear()

    def close(self, keep: bool = False) -> None:
        self.stop_workers()
        self.sandbox.stop()
        connections.close_all()
        self._stop_database()
        if not keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _stop_database(self) -> None:
        try:
            self.cluster.stop()
        except Exception:
            pid = self.cluster.postmaster_pid()
            if pid:
                os.kill(pid, signal.SIGKILL)

    # --- faults --------------------------------------------------------------------------

    def wait_for_fault(self, job_id: str, point: str, timeout: float = 30) -> int:
        """The pid of the worker that stopped itself at `point` for `job_id`."""
        record = self.faults_dir / f"{job_id}.{point}"
        pid = wait_until(lambda: record.exists() and record.read_text().strip(), timeout=timeout,
                         what=f"{job_id} to reach {point}")
        pid = int(pid)
        wait_until(lambda: _state(pid) == "T", timeout=5, what=f"worker {pid} to stop at {point}")
        return pid

    def kill_postgres(self) -> None:
        pid = self.cluster.postmaster_pid()
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: _state(pid) in (None, "Z"), timeout=10, what="postgres to die")
        connections.close_all()

    def restart_postgres(self) -> None:
        # A SIGKILLed postmaster leaves its pid file; pg_ctl start recovers from the WAL.
        wait_until(lambda: self._start_postgres(), timeout=30, what="postgres to restart")
        connections.close_all()

    def _start_postgres(self) -> bool:
        try:
            self.cluster.start()
            return True
        except Exception:
            return False


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:  # nosec B310  # our own server's http:// URL
            return answer.status == 200
    except OSError:
        return False


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    wait_until(lambda: _state(pid) in (None, "Z"), timeout=10, what=f"process {pid} to die")


class HaWorld(World):
    """The same world on highly available PostgreSQL: a Patroni cluster (chaos/ha.py) of `nodes`
    nodes, every process given the multi-host URL. Synchronous mode by default: Patroni promotes
    only the synchronous standby, so a failover loses no acknowledged commit."""

    def __init__(self, workdir: Path | None = None, *, nodes: int = 3, synchronous: bool = True):
        super().__init__(workdir, prefix="reckon-chaos-ha-")
        self.ha = PatroniCluster(self.workdir / "ha", nodes=nodes, database=self.database, synchronous=synchronous)

    def _start_database(self) -> None:
        self.ha.start()

    def _point_django_here(self) -> None:
        connections.close_all()
        database = database_from_url(self.ha.url())
        options = {**connections["default"].settings_dict.get("OPTIONS", {}), **database.pop("OPTIONS", {})}
        connections["default"].settings_dict.update({**database, "OPTIONS": options})

    def database_url(self) -> str:
        return self.ha.url()

    def _stop_database(self) -> None:
        self.ha.stop()

    def kill_postgres(self) -> None:
        raise NotImplementedError("an HA world kills its primary: world.ha.kill_primary()")
