"""The peers section at tiny size: each system really records its effects, and a figure is only
taken from effects its database holds."""

from __future__ import annotations

import time

import psycopg
import pytest
from django.db import connection

from bench import peers
from ledger.models import Job

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# What each system's effects leave in its own tables, counted here independently of bench/peers.py.
LANDED = {
    "agent-once": "SELECT count(*) FROM once_effects WHERE starts_with(key, %s) AND status = 'done'",
    "effect-ledger": "SELECT count(*) FROM operations WHERE starts_with(scope, %s) AND state = 'completed'",
    "procrastinate": "SELECT count(*) FROM procrastinate_jobs WHERE starts_with(queue_name, %s) "
                     "AND status = 'succeeded'",
    "pgqueuer (batches of 10)": "SELECT count(*) FROM pgqueuer_log WHERE starts_with(entrypoint, %s) "
                                "AND status = 'successful'",
}


@pytest.fixture
def site():
    """A peers' database of its own beside the test database, their schemas installed by their code."""
    name = f"{connection.settings_dict['NAME']}_peers"
    site = peers.Site(peers_database=name)
    with psycopg.connect(site.dsn("postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    peers.install_peers(site)
    yield site
    with psycopg.connect(site.dsn("postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def landed(site: peers.Site, system: str, tag: str) -> int:
    with psycopg.connect(site.dsn(site.peers_database)) as conn:
        return conn.execute(LANDED[system], [f"{tag}-"]).fetchone()[0]


def test_each_peer_records_every_effect_it_reports_in_its_own_tables(site):
    for system in peers.PEERS:
        tag = f"t{peers._slug(system.name)}"
        figures = peers.measure(site, system, processes=2, seconds=0.3, tag=tag)
        assert figures["effects"] == landed(site, system.name, tag) > 0, system.name
        assert figures["effects_per_s"] > 0 and figures["commits_per_effect"] > 0, (system.name, figures)
        assert figures["wal_bytes_per_effect"] > 0, (system.name, figures)
    with psycopg.connect(site.dsn(site.peers_database)) as conn:  # the queues left nothing behind
        assert conn.execute("SELECT count(*) FROM pgqueuer").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM procrastinate_jobs WHERE status <> 'succeeded'").fetchone()[0] == 0


def test_each_reckon_variant_records_its_effects_in_the_ledger(site):
    for system in peers.RECKON_VARIANTS:
        tag = f"t{peers._slug(system.name)}"
        figures = peers.measure(site, system, processes=2, seconds=0.3, tag=tag)
        succeeded = Job.objects.filter(job_id__startswith=f"{tag}-", status="succeeded")
        assert figures["effects"] == succeeded.count() > 0, system.name
        # three synchronous steps at least: claim, begin side effect, record success; per job, or
        # per batch of up to peers.BATCH jobs, whose effects then share them
        if "batched" in system.name:
            assert 3 / peers.BATCH <= figures["commits_per_effect"] < 3, (system.name, figures)
        else:
            assert figures["commits_per_effect"] >= 3, (system.name, figures)


def _failing_agent_once_worker(dsn: str, prefix: str, seconds: float, queue) -> None:
    """agent-once's loop whose every call fails: it reports effects, none is recorded done."""
    from once import Once
    from once.postgres import PostgresStore

    def refused(n: int) -> str:
        raise ValueError("the provider refused")

    once = Once(store=PostgresStore(dsn, create=False))
    done, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            once.execute(refused, key=f"{prefix}-{done}", n=done)
        except ValueError:
            pass
        done += 1
    queue.put((done, time.monotonic() - started))


def test_a_peer_whose_effects_did_not_land_gives_no_figure(site):
    agent_once = next(system for system in peers.PEERS if system.name == "agent-once")
    failing = peers.System("agent-once", agent_once.database, agent_once.plan, _failing_agent_once_worker,
                           agent_once.recorded)
    with pytest.raises(peers.EffectsNotRecorded, match=r"agent-once in 1 process: \d+ effects reported, 0 recorded"):
        peers.measure(site, failing, processes=1, seconds=0.2, tag="tfail")
    assert landed(site, "agent-once", "tfail") == 0
