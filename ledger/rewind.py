"""The ledger watch: noticing, with no command run and within seconds, that the database lost
history it had acknowledged (a restore from a backup, a point-in-time recovery, a failover to a
replica that had not received the last commits).

Every Reckon process remembers, outside the database, what it saw committed: the database's
system identifier and timeline, the newest ledger event (its id: the ledger's position), and the
jobs of the newest events with each one's position. The memory is a small JSON file per database
under RECKON_LEDGER_WATCH_DIR (written by atomic rename) and a file of touched jobs (appended to,
compacted now and then), shared by the processes of one host under a lock, written at most once
per RECKON_LEDGER_WATCH_INTERVAL_S per process; a process asks only for the events after the
position any process of the host last wrote. On
every new connection and every interval, a process compares: a newest event older than one it
saw, or another system identifier, means lost history. The ledger then enters recovery by itself
(ledger.services.recovery.enter_recovery): a recovery window opens (every new key is looked up
before its first side effect) and the jobs seen touched in the lost window that the ledger still
has are held until their provider has been asked. A new timeline with nothing lost (a clean
switchover) is only remembered.

Outside a rollback the cost is one small query per process per interval (and per new connection)
and a file write when the position moved.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import socket
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, connections

log = logging.getLogger(__name__)

# The position is the newest event id the database holds, or the newest an archive took away
# (archiving removes the oldest partitions; after it the table may even be empty).
OBSERVE_SQL = """
SELECT (SELECT system_identifier::text FROM pg_control_system()),
       (SELECT timeline_id FROM pg_control_checkpoint()),
       greatest((SELECT max(id) FROM ledger_ledgerevent),
                (SELECT max(last_event_id) FROM ledger_historycheckpoint), 0)
"""
# A database in the middle of a restore has its rows before its triggers (pg_restore creates them
# last): recovery waits until the ledger's own rules are back, or its events would go unchained.
MISSING_TRIGGERS_SQL = """
SELECT t.name FROM (VALUES ('ledger_ledgerevent', 'reckon_hash_chain'), ('ledger_ledgerevent', 'pgtrigger_append_only_'),
                           ('ledger_job', 'reckon_job_recovery_window')) AS t(tbl, name)
WHERE NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass(t.tbl)
                    AND starts_with(tgname, t.name) AND tgenabled <> 'D')
"""
# The jobs of the events since the last look (newest first, as many as are remembered).
TOUCHED_SQL = """
SELECT j.job_id, max(e.id) FROM ledger_ledgerevent e JOIN ledger_job j ON j.id = e.job_id
WHERE e.id > %s GROUP BY j.job_id ORDER BY 2 DESC LIMIT %s
"""


@dataclass
class Seen:
    """What the processes of this host saw committed in one database."""

    system_identifier: str | None = None
    timeline: int | None = None
    position: int = 0
    # job id -> newest event id seen of it: in a file of its own, appended to, read on detection
    touched: dict[str, int] = field(default_factory=dict)
    complete_above: int = 0  # `touched` holds every job of the events after this position

    @classmethod
    def read(cls, path: Path) -> Seen | None:
        try:
            return cls(**json.loads(path.read_text()))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as exc:  # a damaged file is said, and replaced by what is seen now
            log.error("ledger watch: %s is not a state file (%s); starting from what the database holds", path, exc)
            return None

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=path.name, suffix=".tmp",
                                         delete=False) as out:
            json.dump({**asdict(self), "touched": {}}, out, separators=(",", ":"))  # touched: its own file
        os.replace(out.name, path)


@dataclass(frozen=True)
class Rollback:
    """What a look found lost: what was remembered, what the database holds now."""

    remembered: Seen
    found: Seen
    touched: list[str] | None  # jobs seen touched in the lost window; None: it reaches beyond memory

    def evidence(self, path: Path) -> dict:
        return {
            "remembered": {"system_identifier": self.remembered.system_identifier,
                           "timeline": self.remembered.timeline, "position": self.remembered.position},
            "found": {"system_identifier": self.found.system_identifier, "timeline": self.found.timeline,
                      "position": self.found.position},
            "lost_events": max(0, self.remembered.position - self.found.position),
            "state_file": str(path), "host": socket.gethostname(), "pid": os.getpid(),
        }


def lost(remembered: Seen, found: Seen) -> bool:
    """Another system identifier, or a position behind the remembered one."""
    other_system = bool(remembered.system_identifier and found.system_identifier
                        and remembered.system_identifier != found.system_identifier)
    return other_system or found.position < remembered.position


def compare(remembered: Seen | None, found: Seen) -> Rollback | None:
    """Lost history, or None. Another system identifier is another database (or a restore of a
    physical backup into a new cluster); a position behind the remembered one is a lost tail."""
    if remembered is None or not lost(remembered, found):
        return None
    other_system = found.position >= remembered.position  # lost, yet not behind: another database
    floor = 0 if other_system else found.position
    touched = None if floor < remembered.complete_above else sorted(
        job_id for job_id, position in remembered.touched.items() if position > floor)
    return Rollback(remembered, found, touched)


class Watch:
    """One process's watch over one database connection alias."""

    def __init__(self, alias: str = "default"):
        self.alias = alias
        self.next_look = 0.0
        self.looking = threading.local()
        self.beat_pid: int | None = None  # the process whose heartbeat thread runs (a fork has none)
        self.lock = threading.Lock()  # one look at a time in this process (the file's lock is per process)
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        """A forked child (a django-q2 worker) may have been made while another thread held the lock
        or was looking: it starts with its own, free."""
        self.lock, self.looking = threading.Lock(), threading.local()

    @property
    def enabled(self) -> bool:
        return bool(settings.RECKON_LEDGER_WATCH and settings.RECKON_LEDGER_WATCH_DIR)

    def path(self) -> Path:
        db = connections[self.alias].settings_dict
        where = f"{db.get('HOST') or ''}:{db.get('PORT') or ''}/{db.get('NAME') or ''}"
        digest = hashlib.sha256(where.encode()).hexdigest()[:16]
        return Path(settings.RECKON_LEDGER_WATCH_DIR) / f"ledger-{digest}.json"

    def tick(self) -> Rollback | None:
        """A look, when the interval has passed since this process's last one (else nothing)."""
        if not self.enabled or time.monotonic() < self.next_look:
            return None
        return self.look()

    def keep_watching(self) -> None:
        """This process's heartbeat: a daemon thread that looks every interval, so that the last
        commits before a quiet spell are remembered too (a look only before each piece of work
        would miss what that work wrote). Started once per process, again after a fork."""
        if self.beat_pid == os.getpid() or not self.enabled:
            return
        self.beat_pid = os.getpid()
        threading.Thread(target=self._beat, name="reckon-ledger-watch", daemon=True).start()

    def _beat(self) -> None:
        while self.beat_pid == os.getpid():
            time.sleep(settings.RECKON_LEDGER_WATCH_INTERVAL_S)  # the watch's pacing, not synchronisation
            try:
                self.tick()
            except Exception:  # the heartbeat must go on: say what broke, and look again next time
                log.exception("ledger watch: a look failed")
            finally:
                connections[self.alias].close_if_unusable_or_obsolete()

    def look(self) -> Rollback | None:
        """Compare what the database holds with what this host remembers; enter recovery on a loss."""
        if getattr(self.looking, "now", False):
            return None  # the look's own queries (or recovery's) opened the connection
        self.looking.now = True
        self.next_look = time.monotonic() + settings.RECKON_LEDGER_WATCH_INTERVAL_S
        try:
            return self._look()
        except DatabaseError as exc:  # not migrated yet, or the database is going away: the next look
            log.debug("ledger watch: no look at the ledger (%s)", exc)
            if threading.current_thread().name == "reckon-ledger-watch":
                connections[self.alias].close()  # a broken connection is opened again next time
            return None
        finally:
            self.looking.now = False

    def _look(self) -> Rollback | None:
        path = self.path()
        path.parent.mkdir(parents=True, exist_ok=True)
        # A POSIX record lock, not flock: a forked child does not inherit it (with flock, a child
        # forked while its parent held the lock would hold it too, and wait on itself).
        with self.lock, open(path.with_suffix(".lock"), "a") as lock:
            fcntl.lockf(lock, fcntl.LOCK_EX)
            remembered = Seen.read(path)
            found = self._found(since=remembered.position if remembered else None)
            rollback = None
            if remembered is not None and lost(remembered, found):
                remembered.touched = read_touched(touched_path(path))  # read only when it matters
                rollback = compare(remembered, found)
                if self._restoring():
                    log.warning("ledger watch: the ledger is behind what was seen, and its triggers are not "
                                "all there yet (a restore in progress?): recovery on a later look")
                    return None
                self._enter_recovery(rollback, path)
                found = self._found(since=None)  # the recovery's own events: the new baseline
                touched_path(path).unlink(missing_ok=True)
            elif remembered is not None:
                found = self._remember(remembered, found, path)
            if found != remembered:
                found.write(path)
        return rollback

    def _remember(self, remembered: Seen, found: Seen, path: Path) -> Seen:
        """Append the jobs of the new events to the touched file (compacted to the newest
        RECKON_LEDGER_WATCH_JOBS when it grows past twice that); the position file's new state."""
        complete_above = (found.complete_above if found.complete_above > remembered.position
                          else remembered.complete_above)  # the look's query was cut at its limit
        log_path = touched_path(path)
        if found.touched:
            with open(log_path, "a") as out:
                out.writelines(f"{position}\t{job_id}\n" for job_id, position in found.touched.items())
            keep = settings.RECKON_LEDGER_WATCH_JOBS
            if log_path.stat().st_size > keep * 2 * 48:  # about twice `keep` lines
                kept = sorted(read_touched(log_path).items(), key=lambda item: item[1], reverse=True)[:keep]
                write_touched(log_path, dict(kept))
                if len(kept) == keep:
                    complete_above = max(complete_above, kept[-1][1] - 1)
        return Seen(found.system_identifier, found.timeline, found.position, {}, complete_above)

    def _restoring(self) -> bool:
        with connections[self.alias].cursor() as cursor:
            cursor.execute(MISSING_TRIGGERS_SQL)
            return bool(cursor.fetchall())

    def _found(self, *, since: int | None) -> Seen:
        keep = settings.RECKON_LEDGER_WATCH_JOBS
        with connections[self.alias].cursor() as cursor:
            cursor.execute(OBSERVE_SQL)
            system_identifier, timeline, position = cursor.fetchone()
            touched: dict[str, int] = {}
            complete_above = position
            if since is not None and position > since:
                cursor.execute(TOUCHED_SQL, [since, keep])
                touched = dict(cursor.fetchall())
                complete_above = since if len(touched) < keep else min(touched.values())
        return Seen(system_identifier, timeline, position, touched, complete_above)

    def _enter_recovery(self, rollback: Rollback, path: Path) -> None:
        from ledger.services.recovery import enter_recovery

        evidence = rollback.evidence(path)
        log.critical("ledger watch: the ledger lost history it had acknowledged (%s); entering recovery",
                     {k: evidence[k] for k in ("remembered", "found", "lost_events")})
        window = enter_recovery(actor=f"ledger watch on {evidence['host']} (pid {evidence['pid']})",
                                lost=evidence, touched=rollback.touched)
        log.critical("ledger watch: recovery window %s open until %s; %s job(s) held", window.pk,
                     window.ends_at.isoformat(), window.evidence.get("held"))


def touched_path(path: Path) -> Path:
    return path.with_suffix(".touched")


def read_touched(path: Path) -> dict[str, int]:
    """job id -> the newest event id seen of it, from the touched file's lines."""
    touched: dict[str, int] = {}
    try:
        with open(path) as lines:
            for line in lines:
                position, _, job_id = line.rstrip("\n").partition("\t")
                if job_id and position.isdigit():
                    touched[job_id] = max(int(position), touched.get(job_id, 0))
    except FileNotFoundError:
        pass
    return touched


def write_touched(path: Path, touched: dict[str, int]) -> None:
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=path.name, suffix=".tmp", delete=False) as out:
        out.writelines(f"{position}\t{job_id}\n" for job_id, position in touched.items())
    os.replace(out.name, path)


WATCH = Watch()


def on_new_connection(sender, connection, **kwargs) -> None:
    """connection_created: every new connection is a chance that the database is another one now
    (a failover, a restore while the process was away)."""
    if connection.alias == WATCH.alias and WATCH.enabled:
        WATCH.look()
        WATCH.keep_watching()


def tick() -> Rollback | None:
    """For the loops (a task run, the sweeper's and the reconciler's passes): a look when due."""
    WATCH.keep_watching()
    return WATCH.tick()
