"""The harness for `failover_lost_tail` (issue 41 item 2 detects it; that is the other half): with
asynchronous replication and the replica's WAL receiver paused, commits the primary acknowledged
are not on the replica; the primary is SIGKILLed, Patroni promotes the replica (its lag is within
`maximum_lag_on_failover`), and the acknowledged tail is gone. This proves the harness loses a tail
for real, so a detector can be tested against it."""

import psycopg
import pytest

from tests.ha.conftest import start_patroni

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def asynchronous():
    # A lag bound above what the test writes: Patroni promotes the replica that fell behind.
    yield from start_patroni(2, maximum_lag_on_failover=512 * 1024 * 1024)


def _connect(cluster):
    return psycopg.connect(cluster.url().replace("connect_timeout=2", "connect_timeout=5"), autocommit=True)


def test_a_failover_to_a_replica_kept_behind_loses_acknowledged_commits(asynchronous):
    cluster = asynchronous
    with _connect(cluster) as conn:
        conn.execute("CREATE TABLE tail_probe (n int PRIMARY KEY, filler text)")
        conn.execute("INSERT INTO tail_probe SELECT n, '' FROM generate_series(1, 10) AS n")
    cluster.wait_for_replicas(1, timeout=60)
    primary = cluster.primary()
    replica = next(node for node in cluster.nodes if node is not primary)
    receiver = cluster.pause_wal_receiver(replica)
    try:
        with _connect(cluster) as conn:
            # More WAL than loopback's socket buffers hold, then the rows that must be lost.
            conn.execute("INSERT INTO tail_probe SELECT n, repeat('x', 1000) FROM generate_series(11, 40000) AS n")
            conn.execute("INSERT INTO tail_probe VALUES (100001, 'acknowledged'), (100002, 'acknowledged')")
            acknowledged = conn.execute("SELECT count(*) FROM tail_probe").fetchone()[0]
        cluster.kill_primary()
    finally:
        cluster.resume_wal_receiver(receiver)
    promoted = cluster.wait_for_primary(timeout=120, other_than=primary)
    assert promoted is replica
    with _connect(cluster) as conn:
        kept = conn.execute("SELECT count(*) FROM tail_probe").fetchone()[0]
        markers = conn.execute("SELECT count(*) FROM tail_probe WHERE n > 100000").fetchone()[0]
    assert acknowledged == 40002
    assert markers == 0 and 10 <= kept < acknowledged, (kept, acknowledged)
