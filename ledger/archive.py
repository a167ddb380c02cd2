"""The history archive format: one gzip file of JSON lines per partition that left the database.

    {"type": "header", "format": "reckon-history-archive", "version": 1, "partition": ..., 
     "range_start": ..., "range_end": ..., "anchors": {job pk: hash}}
    {"type": "event", "id": ..., "job_pk": ..., "job": "<job id>", "attempt_id": ..., "at": "<ISO time>",
     "epoch": "<extract(epoch from at)::text>", "actor_type": ..., "actor": ..., "kind": ...,
     "before": "<jsonb text>", "after": "<jsonb text>", "note": ..., "evidence": "<jsonb text>",
     "prev_hash": ..., "hash": ...}                                  (every event, by id)
    {"type": "job", "row": {...}, "attempts": [{...}], "related": {"<table>": [{...}]}}
                                       (each job whose whole history is in this file, as it was)
    {"type": "trailer", "events": n, "jobs": n, "first_event_id": ..., "last_event_id": ...,
     "first_hash": ..., "last_hash": ..., "carried": {job pk: hash}, "lines_sha256": ...,
     "seal": "<HMAC-SHA256 of the trailer's other fields>"}                  (version 2 on)

An event's fields are kept in the text form its hash was computed over (ledger.models.CHAIN_HASH:
sha256 of the fields joined by U+001F), so the chain is recomputed from the file alone: each
job's first event here follows `anchors` (its last hash in an earlier archive) or starts a chain
(""), each next one follows the previous, and every hash is the recomputed one. `carried` is
each job's last hash here whose history goes on after this file; `lines_sha256` is the sha256 of
every line before the trailer. The checkpoint table (ledger.models.HistoryCheckpoint) holds the
trailer's figures and the sha256 of the whole file, so a file can be checked against it.

The chain leaves out each event's `at` (its `epoch` is chained: the two must name one moment) and
the job records; `lines_sha256` covers them, and from version 2 on the trailer is sealed with an
HMAC under a key derived from the secret key (RECKON_SECRET_KEY, or one of its fallbacks), so a
file altered and given a recomputed trailer does not verify even alone. Version 1 files (written
before sealing) still verify and restore, with the status "unsealed, written before sealing":
alone, their own hashes are all that speaks for them (anyone can recompute those); against the
checkpoint, the file's sha256 covers every byte.
"""

from __future__ import annotations

import gzip
import hashlib
import hmac
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.utils.crypto import salted_hmac

FORMAT = "reckon-history-archive"
VERSION = 2  # 2: the trailer is sealed
UNSEALED_VERSION = 1  # written before sealing: still read
SEAL_SALT = "reckon.ledger.archive.seal"  # the seal's key: the secret key, salted for this use only
SEALED = "sealed"
UNSEALED = "unsealed, written before sealing"
SEPARATOR = "\x1f"
CHAINED_FIELDS = ("prev_hash", "job_pk", "attempt_id", "epoch", "actor_type", "actor", "kind", "before", "after",
                  "note", "evidence")


class ArchiveInvalid(Exception):
    """The archive file does not verify: what was found, where."""


def event_hash(event: dict) -> str:
    """The hash the database computed for this event (ledger.models.CHAIN_HASH), from its fields."""
    values = ["" if event[name] is None else str(event[name]) for name in CHAINED_FIELDS]
    return hashlib.sha256(SEPARATOR.join(values).encode()).hexdigest()


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _same_moment(at: str, epoch: str) -> bool:
    """Whether the event's `at` (not chained) is the moment its `epoch` (chained) names."""
    try:
        microseconds = Decimal(epoch) * 1_000_000
        moment = _time(at)
    except (InvalidOperation, ValueError, TypeError):
        return False
    return moment.tzinfo is not None and (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) \
        == microseconds


def seal(trailer: dict, *, secret: str | None = None) -> str:
    """The HMAC of the trailer's fields but the seal, under a key derived from the secret key."""
    fields = {name: value for name, value in trailer.items() if name != "seal"}
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
    return salted_hmac(SEAL_SALT, text, secret=secret or settings.SECRET_KEY, algorithm="sha256").hexdigest()


def _sealed_by_us(trailer: dict) -> bool:
    found = trailer.get("seal")
    return isinstance(found, str) and any(
        hmac.compare_digest(found, seal(trailer, secret=key))
        for key in [settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS])


def line(record: dict) -> bytes:
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str) + "\n").encode()


def file_sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class Verified:
    """What an archive holds, once every hash in it was recomputed."""

    header: dict
    trailer: dict
    events: int = 0
    jobs: list[dict] = field(default_factory=list)
    against_checkpoint: bool = False  # set by the check against the checkpoint table

    @property
    def sealed(self) -> bool:
        return self.header.get("version") != UNSEALED_VERSION

    @property
    def status(self) -> str:
        """What speaks for the file: its seal or not, and the checkpoint or not."""
        checked = "verified against its checkpoint" if self.against_checkpoint else \
            "verified against the file alone (not against its checkpoint)"
        return f"{SEALED if self.sealed else UNSEALED}, {checked}"


def read(path):
    """Each record of an archive file, in order."""
    with gzip.open(path, "rb") as stream:
        for raw in stream:
            yield raw, json.loads(raw)


def verify(path, *, keep_jobs: bool = False) -> Verified:
    """Recompute every hash and chain link of the file; raise ArchiveInvalid at the first fault."""
    digest = hashlib.sha256()
    header = trailer = None
    last_hash: dict[str, str] = {}
    verified = None
    first = last = None
    names: dict[str, str] = {}  # job pk -> its job id, as its events name it
    jobs_seen: set[str] = set()
    for number, (raw, record) in enumerate(read(path), start=1):
        kind = record.get("type")
        if trailer is not None:
            raise ArchiveInvalid(f"line {number}: a record after the trailer")
        if kind == "header":
            if number != 1 or record.get("format") != FORMAT or record.get("version") not in (UNSEALED_VERSION,
                                                                                                 VERSION):
                raise ArchiveInvalid(f"line {number}: not a {FORMAT} version {UNSEALED_VERSION} or {VERSION} header")
            header = record
            verified = Verified(header=header, trailer={})
            last_hash = {str(job): value for job, value in (header.get("anchors") or {}).items()}
        elif header is None:
            raise ArchiveInvalid("line 1: the file does not start with a header")
        elif kind == "event":
            job = str(record["job_pk"])
            expected = last_hash.get(job, "")
            if record["prev_hash"] != expected:
                raise ArchiveInvalid(f"line {number}: event {record['id']} of job {record['job']} follows "
                                     f"{record['prev_hash'] or 'nothing'}, its chain says {expected or 'nothing'}")
            if event_hash(record) != record["hash"]:
                raise ArchiveInvalid(f"line {number}: event {record['id']} of job {record['job']} does not "
                                     "hash to its recorded hash (altered)")
            if not _same_moment(record["at"], record["epoch"]):
                raise ArchiveInvalid(f"line {number}: event {record['id']} of job {record['job']} is dated "
                                     f"{record['at']}, its chained time {record['epoch']} says otherwise (moved)")
            if not _time(header["range_start"]) <= _time(record["at"]) < _time(header["range_end"]):
                raise ArchiveInvalid(f"line {number}: event {record['id']} lies outside the file's period")
            if last is not None and not record["id"] > last["id"]:
                raise ArchiveInvalid(f"line {number}: event {record['id']} follows event {last['id']}: the file "
                                     "holds its events by id (reordered)")
            names[job] = record["job"]
            last_hash[job] = record["hash"]
            first = first or record
            last = record
            verified.events += 1
        elif kind == "job":
            pk = str((record.get("row") or {}).get("id"))
            if pk not in names or names[pk] != record["row"].get("job_id") or pk in jobs_seen:
                raise ArchiveInvalid(f"line {number}: a job record ({record['row'].get('job_id')!r}) of no job whose "
                                     "events the file holds, or twice")
            jobs_seen.add(pk)
            if keep_jobs:
                verified.jobs.append(record)
        elif kind == "trailer":
            trailer = record
            continue
        else:
            raise ArchiveInvalid(f"line {number}: unknown record type {kind!r}")
        digest.update(raw)
    if trailer is None:
        raise ArchiveInvalid("the file ends without a trailer (cut short)")
    expected = {
        "events": verified.events,
        "first_event_id": first["id"] if first else None,
        "last_event_id": last["id"] if last else None,
        "first_hash": first["hash"] if first else "",
        "last_hash": last["hash"] if last else "",
        "lines_sha256": digest.hexdigest(),
    }
    for name, value in expected.items():
        if trailer.get(name) != value:
            raise ArchiveInvalid(f"the trailer's {name} is {trailer.get(name)!r}; the file holds {value!r}")
    for job, value in (trailer.get("carried") or {}).items():
        if last_hash.get(str(job)) != value:
            raise ArchiveInvalid(f"the trailer carries job {job} on from {value}, the file ends it at "
                                 f"{last_hash.get(str(job), 'nothing')}")
    if verified.sealed and not _sealed_by_us(trailer):
        raise ArchiveInvalid("the trailer's seal does not match under this deployment's secret key (or its "
                             "fallbacks): the file was altered and re-sealed, or sealed elsewhere")
    if set(trailer.get("carried") or {}) & jobs_seen:
        raise ArchiveInvalid("the trailer carries on a job whose record the file holds as finished")
    verified.trailer = trailer
    return verified
