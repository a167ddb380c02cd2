"""A real highly available PostgreSQL on loopback: one etcd, two or three PostgreSQL 15 nodes run by
Patroni (Debian's `patroni` and `etcd-server`), every port free, everything in one folder.

What the HA tests (tests/ha/) and the chaos scenario `primary_failover` run Reckon against: the
URL lists every node (libpq multi-host, `target_session_attrs=read-write`), and `kill_primary()`
SIGKILLs the primary's Patroni and its PostgreSQL at once, as a host that dies would. Patroni
starts PostgreSQL in a session of its own (postmaster.py: `os.setsid()`), so both groups are killed.

Loopback only and `trust` authentication: a harness, not a deployment (docs/deploying/
high-availability.md shows one).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from config import processes
from config.localdb import find_bindir
from config.processes import ChildProcess, free_port

SCOPE = "reckon"
# Failover in seconds, not the defaults' half-minute: the leader key lives `TTL` s after its holder
# died; Patroni requires loop_wait + 2 * retry_timeout <= ttl.
TTL, LOOP_WAIT, RETRY_TIMEOUT = 8, 1, 3


class HaClusterError(RuntimeError):
    pass


def missing_programs() -> list[str]:
    """The Debian packages the harness needs that are not installed."""
    return [package for program, package in (("etcd", "etcd-server"), ("patroni", "patroni"))
            if shutil.which(program) is None]


@dataclass
class Node:
    name: str
    folder: Path
    port: int
    rest_port: int
    process: ChildProcess | None = None
    killed_at: float | None = field(default=None, repr=False)

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def role(self) -> str | None:
        """'primary' or 'replica' as this node's Patroni says, or None when it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.rest_port}/patroni", timeout=1) as answer:  # nosec B310  # our own Patroni on loopback
                state = json.load(answer)
        except (OSError, ValueError):
            return None
        if state.get("state") != "running":
            return None
        return "primary" if state.get("role") in ("master", "primary") else "replica"

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None


class PatroniCluster:
    """`nodes` PostgreSQL nodes under Patroni with one etcd, in `folder` (which it owns)."""

    def __init__(self, folder: Path, *, nodes: int = 3, database: str = "reckon", synchronous: bool = False,
                 maximum_lag_on_failover: int = 1048576):
        self.folder = Path(folder)
        self.synchronous = synchronous
        self.maximum_lag_on_failover = maximum_lag_on_failover
        self.database = database
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        self.etcd: ChildProcess | None = None
        self.nodes = [Node(f"pg{n}", self.folder / f"pg{n}", free_port(), free_port()) for n in range(nodes)]

    # --- the connection string -------------------------------------------------------------

    def hosts(self) -> str:
        return ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    def url(self, database: str | None = None, *, attrs: str = "read-write") -> str:
        """The libpq multi-host URL Reckon is given: every node, the first that takes writes wins."""
        return (f"postgresql://postgres@{self.hosts()}/{database or self.database}"
                f"?target_session_attrs={attrs}&connect_timeout=2")

    # --- lifecycle -------------------------------------------------------------------------

    def start(self, timeout: float = 120) -> PatroniCluster:
        if missing := missing_programs():
            raise HaClusterError(f"the HA harness needs Debian's {' and '.join(missing)} (apt-get install "
                                 f"{' '.join(missing)}; .ci/run installs them)")
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o701)  # nosec B103  # postgres must pass through (x only) to its node folders
        self.etcd = ChildProcess([
            "etcd", "--name", "etcd0", "--data-dir", self.folder / "etcd",
            "--listen-client-urls", f"http://127.0.0.1:{self.etcd_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{self.etcd_peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.etcd_peer_port}",
            "--initial-cluster", f"etcd0=http://127.0.0.1:{self.etcd_peer_port}",
            "--initial-cluster-token", f"reckon-{self.etcd_port}",
        ], log=self.folder / "etcd.log").start()
        processes.wait_until(lambda: processes.accepting(self.etcd_port), timeout=30, what="etcd to listen")
        # The first node bootstraps alone, so it is the primary; the others then clone it.
        self.start_node(self.nodes[0])
        self.wait_for_primary(timeout=timeout)
        for node in self.nodes[1:]:
            self.start_node(node)
        self.wait_for_replicas(len(self.nodes) - 1, timeout=timeout)
        self._create_database()
        return self

    def start_node(self, node: Node) -> None:
        owner = _postgres_ids()
        node.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(node.folder, 0o700)
        if owner:
            os.chown(node.folder, *owner)
        config = node.folder / "patroni.yml"
        config.write_text(json.dumps(self._config(node), indent=2))  # YAML is a superset of JSON
        if owner:
            os.chown(config, *owner)
        as_postgres = ["runuser", "-u", "postgres", "--"] if owner else []
        node.process = ChildProcess([*as_postgres, "patroni", config], log=self.folder / f"{node.name}.log",
                                    append=True).start()
        node.killed_at = None

    def _config(self, node: Node) -> dict:
        hba = ["local all all trust", "host all all 127.0.0.1/32 trust", "host replication all 127.0.0.1/32 trust"]
        return {
            "scope": SCOPE, "name": node.name,
            "log": {"level": "INFO"},
            "restapi": {"listen": f"127.0.0.1:{node.rest_port}", "connect_address": f"127.0.0.1:{node.rest_port}"},
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd_port}"]},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL, "loop_wait": LOOP_WAIT, "retry_timeout": RETRY_TIMEOUT,
                    "maximum_lag_on_failover": self.maximum_lag_on_failover,
                    # On: a commit waits for one standby, and only that standby is promoted.
                    "synchronous_mode": self.synchronous,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "remove_data_directory_on_diverged_timelines": True,
                        "parameters": {"wal_log_hints": "on", "max_connections": 200, "max_wal_senders": 10,
                                       "max_replication_slots": 10, "wal_keep_size": "256MB",
                                       "fsync": "off", "synchronous_commit": "on"},
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}],
                "pg_hba": hba,
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.port}", "connect_address": f"127.0.0.1:{node.port}",
                "data_dir": str(node.data), "bin_dir": str(find_bindir()),
                "pgpass": str(node.folder / "pgpass"),
                "authentication": {"superuser": {"username": "postgres"},
                                   "replication": {"username": "postgres"},
                                   "rewind": {"username": "postgres"}},
                "parameters": {"unix_socket_directories": str(node.folder)},
                "pg_hba": hba,
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
        }

    def stop(self) -> None:
        """Everything down: each node's Patroni and PostgreSQL, then etcd; the folder stays (logs)."""
        for node in self.nodes:
            self._kill_node(node)
        if self.etcd is not None:
            self.etcd.stop(grace=5)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    # --- what the cluster is doing ----------------------------------------------------------

    def primary(self) -> Node | None:
        primaries = [node for node in self.nodes if node.killed_at is None and node.role() == "primary"]
        return primaries[0] if len(primaries) == 1 else None

    def wait_for_primary(self, *, timeout: float, other_than: Node | None = None) -> Node:
        def found():
            self._check_alive()
            node = self.primary()
            return node if node is not None and node is not other_than and self._writable(node) else None

        return processes.wait_until(found, timeout=timeout, interval=0.2, what="a writable primary")

    def wait_for_replicas(self, count: int, *, timeout: float) -> None:
        def streaming() -> bool:
            self._check_alive()
            primary = self.primary()
            # By name: a replica's own clone (pg_basebackup's WAL stream) streams too.
            names = ",".join(f"'{node.name}'" for node in self.nodes)
            return primary is not None and self._sql(primary, (
                "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' "
                f"AND application_name IN ({names})"))[0][0] >= count  # nosec B608  # our own node names

        processes.wait_until(streaming, timeout=timeout, interval=0.2, tolerate=(OSError, ValueError, ImportError,
                                                                                 _psycopg_error()),
                             what=f"{count} replicas to stream")

    def _check_alive(self) -> None:
        for node in self.nodes:
            if node.killed_at is None and node.process is not None and not node.process.running():
                raise HaClusterError(f"{node.name}'s Patroni exited: {node.process.output_tail()}")

    # --- faults ----------------------------------------------------------------------------

    def kill_primary(self) -> Node:
        """SIGKILL the primary's Patroni and its PostgreSQL (every process of both); the node, with
        the monotonic time of the kill."""
        node = self.primary()
        if node is None:
            raise HaClusterError("no single primary to kill")
        self._kill_node(node)
        return node

    def restart(self, node: Node, *, timeout: float = 120) -> None:
        """Bring a killed node back: Patroni rewinds it (or clones it again) and it follows the new
        primary."""
        self.start_node(node)
        self.wait_for_replicas(sum(1 for n in self.nodes if n.killed_at is None) - 1, timeout=timeout)

    def pause_wal_receiver(self, node: Node) -> int:
        """SIGSTOP `node`'s WAL receiver: the replica falls behind (what it had received stays). For
        `failover_lost_tail`: with asynchronous replication, commits acknowledged from now on exist
        only on the primary (beyond what the sockets' buffers hold), and a failover to this node loses
        them. Returns the receiver's pid for `resume_wal_receiver`."""
        postmaster = node.postmaster_pid()
        receivers = [pid for pid in _children(postmaster or -1) if b"walreceiver" in _cmdline(pid)]
        if len(receivers) != 1:
            raise HaClusterError(f"{node.name} has {len(receivers)} WAL receivers, not one: is it a replica?")
        os.kill(receivers[0], signal.SIGSTOP)
        return receivers[0]

    def resume_wal_receiver(self, pid: int) -> None:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass

    def _kill_node(self, node: Node) -> None:
        postmaster = node.postmaster_pid()
        node.killed_at = time.monotonic()
        if node.process is not None:
            node.process.kill()
        if postmaster is not None:
            # The postmaster runs in a session of Patroni's helper; each of its children in one of
            # its own (PostgreSQL's setsid()): every one of them dies now, as on a host that died.
            doomed = [postmaster, *_children(postmaster)]
            try:
                os.killpg(os.getpgid(postmaster), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            for pid in doomed:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            processes.wait_until(lambda: not any(_alive(pid) for pid in doomed), timeout=10,
                                 what=f"{node.name}'s postgres to die")

    # --- SQL on one node -------------------------------------------------------------------

    def _writable(self, node: Node) -> bool:
        try:
            return self._sql(node, "SELECT NOT pg_is_in_recovery()")[0][0]
        except Exception:
            return False

    def _sql(self, node: Node, statement: str, database: str = "postgres", autocommit: bool = True) -> list:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=node.port, user="postgres", dbname=database,
                             connect_timeout=2, autocommit=autocommit) as conn:
            cursor = conn.execute(statement)  # nosec B608  # the harness's own statements
            return cursor.fetchall() if cursor.description else []

    def _create_database(self) -> None:
        primary = self.wait_for_primary(timeout=30)
        if not self._sql(primary, f"SELECT 1 FROM pg_database WHERE datname = '{self.database}'"):  # nosec B608  # our own name
            self._sql(primary, f'CREATE DATABASE "{self.database}"')


def _psycopg_error() -> type[Exception]:
    import psycopg

    return psycopg.Error


def _postgres_ids() -> tuple[int, int] | None:
    if os.geteuid() != 0:
        return None
    import pwd

    entry = pwd.getpwnam("postgres")
    return entry.pw_uid, entry.pw_gid


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == parent:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
