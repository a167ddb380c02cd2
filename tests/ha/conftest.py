"""One Patroni cluster per test module (chaos/ha.py): one etcd, PostgreSQL 15 nodes, free ports."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from chaos.ha import PatroniCluster
from tests.processes import manage


def start_patroni(nodes: int, *, synchronous: bool = False, **patroni):
    """A started cluster with Reckon's schema migrated on it (a generator: the fixture's body)."""
    folder = Path(tempfile.mkdtemp(prefix="reckon-ha-test-"))
    os.chmod(folder, 0o701)  # postgres passes through to its node folders
    cluster = PatroniCluster(folder / "ha", nodes=nodes, synchronous=synchronous, **patroni)
    try:
        cluster.start()
        done = manage("migrate", "--no-input", env=reckon_env(cluster), timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        yield cluster
    finally:
        cluster.remove()
        shutil.rmtree(folder, ignore_errors=True)


def reckon_env(cluster: PatroniCluster, **extra: str) -> dict:
    """This process's environment for a Reckon process on the cluster (the multi-host URL)."""
    env = {name: value for name, value in os.environ.items() if name != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    return {**env, "RECKON_DEBUG": "true", "DATABASE_URL": cluster.url(), **extra}


@pytest.fixture(scope="module")
def patroni():
    yield from start_patroni(2)
