"""The sandbox provider's durable store: one SQLite file in WAL mode.

Each request opens its own connection; every write runs in a ``BEGIN IMMEDIATE`` transaction,
so two concurrent requests with the same Idempotency-Key are serialised by SQLite's write lock
(and the key's primary key is a second line of defence). Every committed effect is also one
row in ``effects``, which is what tests count to prove "no duplicate effect".
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS invoices (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    customer TEXT NOT NULL,
    amount_cents INTEGER NOT NULL,
    currency TEXT NOT NULL,
    description TEXT,
    metadata TEXT NOT NULL,
    idempotency_key TEXT,
    marker TEXT,
    metadata_marker TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS invoices_marker ON invoices (marker);
CREATE INDEX IF NOT EXISTS invoices_metadata_marker ON invoices (metadata_marker);
CREATE TABLE IF NOT EXISTS idempotency_keys (
    key TEXT PRIMARY KEY,
    invoice_id TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL UNIQUE,
    to_address TEXT NOT NULL,
    subject TEXT NOT NULL,
    body TEXT NOT NULL,
    marker TEXT,
    sent_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_marker ON messages (marker);
CREATE TABLE IF NOT EXISTS profiles (
    profile TEXT PRIMARY KEY,
    account TEXT NOT NULL,
    session TEXT NOT NULL CHECK (session IN ('active', 'expired')),
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS posts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    post_id TEXT NOT NULL UNIQUE,
    profile TEXT NOT NULL,
    account TEXT NOT NULL,
    body TEXT NOT NULL,
    marker TEXT,
    posted_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS posts_marker ON posts (marker);
CREATE TABLE IF NOT EXISTS credentials (
    name TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    rotated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS effects (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    provider TEXT NOT NULL,
    kind TEXT NOT NULL,
    idempotency_key TEXT,
    marker TEXT,
    object_id TEXT NOT NULL,
    at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS effects_key ON effects (idempotency_key);
CREATE INDEX IF NOT EXISTS effects_marker ON effects (marker);
CREATE TABLE IF NOT EXISTS charges (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    customer TEXT NOT NULL,
    amount_cents INTEGER NOT NULL,
    currency TEXT NOT NULL,
    idempotency_key TEXT,
    marker TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS charges_key ON charges (idempotency_key);
CREATE INDEX IF NOT EXISTS charges_marker ON charges (marker);
CREATE TABLE IF NOT EXISTS charge_keys (
    key TEXT PRIMARY KEY,
    state TEXT NOT NULL CHECK (state IN ('in_progress', 'completed')),
    charge_id TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS settings (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""

TABLES = ("invoices", "idempotency_keys", "messages", "profiles", "posts", "credentials",
          "charges", "charge_keys", "effects", "settings")
IN_PROGRESS = "in progress"  # the payments provider's answer for a key whose request never finished


class RolledBack(Exception):
    """The transaction was rolled back on purpose (the ``fail_before_commit`` fault)."""


class Refused(Exception):
    """The provider refuses the request; nothing was written."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def request_hash(params: dict) -> str:
    canonical = json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class Store:
    def __init__(self, path: str | Path):
        self.path = Path(path).resolve()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = self._connect()
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.executescript(SCHEMA)
        finally:
            conn.close()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA busy_timeout = 30000")
        conn.execute("PRAGMA synchronous = FULL")
        return conn

    @contextmanager
    def reading(self):
        conn = self._connect()
        try:
            yield conn
        finally:
            conn.close()

    @contextmanager
    def writing(self, rollback: bool = False):
        """A ``BEGIN IMMEDIATE`` transaction; ``rollback=True`` undoes it and raises RolledBack."""
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            if rollback:
                conn.execute("ROLLBACK")
                raise RolledBack()
            conn.execute("COMMIT")
        finally:
            conn.close()

    @staticmethod
    def _effect(conn, provider, kind, key, marker, object_id, at) -> None:
        conn.execute(
            "INSERT INTO effects (provider, kind, idempotency_key, marker, object_id, at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (provider, kind, key, marker, object_id, at),
        )

    # -- billing -------------------------------------------------------------------------

    @staticmethod
    def _invoice(row) -> dict:
        return {
            "id": row["id"], "customer": row["customer"], "amount_cents": row["amount_cents"],
            "currency": row["currency"], "description": row["description"],
            "metadata": json.loads(row["metadata"]), "idempotency_key": row["idempotency_key"],
            "marker": row["marker"], "created_at": row["created_at"],
        }

    def create_invoice(self, params: dict, key: str | None, marker: str | None,
                       rollback: bool = False) -> tuple[dict, bool]:
        """Returns (invoice, replayed); Refused(422) when a key is reused with another body."""
        digest = request_hash(params)
        with self.writing(rollback) as conn:
            if key is not None and not self._forgets_keys(conn):
                known = conn.execute(
                    "SELECT invoice_id, request_hash FROM idempotency_keys WHERE key = ?", (key,)
                ).fetchone()
                if known is not None:
                    if known["request_hash"] != digest:
                        raise Refused(422, (
                            f"Idempotency-Key {key!r} was used with a different request body "
                            f"(it created invoice {known['invoice_id']}); send the same body "
                            "to replay it, or use a new key"))
                    row = conn.execute("SELECT * FROM invoices WHERE id = ?",
                                       (known["invoice_id"],)).fetchone()
                    return self._invoice(row), True
            invoice_id, at = new_id("inv"), now()
            metadata_marker = params["metadata"].get("reckon_marker")
            conn.execute(
                "INSERT INTO invoices (id, customer, amount_cents, currency, description, metadata,"
                " idempotency_key, marker, metadata_marker, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (invoice_id, params["customer"], params["amount_cents"], params["currency"],
                 params["description"], json.dumps(params["metadata"], sort_keys=True), key,
                 marker, metadata_marker, at),
            )
            if key is not None:
                # A forgotten key is learned again, bound to the new invoice (as Stripe does
                # once a key has expired).
                conn.execute(
                    "INSERT INTO idempotency_keys (key, invoice_id, request_hash, created_at)"
                    " VALUES (?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET"
                    " invoice_id = excluded.invoice_id, request_hash = excluded.request_hash,"
                    " created_at = excluded.created_at",
                    (key, invoice_id, digest, at),
                )
            self._effect(conn, "billing", "invoice.created", key, marker or metadata_marker,
                         invoice_id, at)
            row = conn.execute("SELECT * FROM invoices WHERE id = ?", (invoice_id,)).fetchone()
            return self._invoice(row), False

    def find_invoices(self, key: str | None = None, marker: str | None = None) -> list[dict]:
        where, args = [], []
        with self.reading() as conn:
            if key is not None:
                if self._forgets_keys(conn):
                    return []
                where.append("id IN (SELECT invoice_id FROM idempotency_keys WHERE key = ?)")
                args.append(key)
            if marker is not None:
                where.append("(marker = ? OR metadata_marker = ?)")
                args += [marker, marker]
            sql = "SELECT * FROM invoices"
            if where:
                sql += " WHERE " + " AND ".join(where)
            rows = conn.execute(sql + " ORDER BY seq", args).fetchall()
        return [self._invoice(row) for row in rows]

    def get_invoice(self, invoice_id: str) -> dict | None:
        with self.reading() as conn:
            row = conn.execute("SELECT * FROM invoices WHERE id = ?", (invoice_id,)).fetchone()
        return self._invoice(row) if row else None

    @staticmethod
    def _forgets_keys(conn) -> bool:
        row = conn.execute("SELECT value FROM settings WHERE name = 'forget_keys'").fetchone()
        return row is not None and row["value"] == "true"

    def forgets_keys(self) -> bool:
        with self.reading() as conn:
            return self._forgets_keys(conn)

    def set_forget_keys(self, forget: bool) -> None:
        with self.writing() as conn:
            conn.execute(
                "INSERT INTO settings (name, value) VALUES ('forget_keys', ?)"
                " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                ("true" if forget else "false",),
            )

    # -- mail ----------------------------------------------------------------------------

    @staticmethod
    def _message(row) -> dict:
        return {"message_id": row["message_id"], "to": row["to_address"],
                "subject": row["subject"], "body": row["body"], "marker": row["marker"],
                "sent_at": row["sent_at"]}

    def send_message(self, to: str, subject: str, body: str, key: str | None,
                     marker: str | None, rollback: bool = False) -> dict:
        message_id, at = f"<{secrets.token_hex(12)}@sandbox.local>", now()
        with self.writing(rollback) as conn:
            conn.execute(
                "INSERT INTO messages (message_id, to_address, subject, body, marker, sent_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (message_id, to, subject, body, marker, at),
            )
            self._effect(conn, "mail", "message.sent", key, marker, message_id, at)
            row = conn.execute("SELECT * FROM messages WHERE message_id = ?",
                               (message_id,)).fetchone()
            return self._message(row)

    def find_messages(self, marker: str | None = None) -> list[dict]:
        with self.reading() as conn:
            if marker is None:
                rows = conn.execute("SELECT * FROM messages ORDER BY seq").fetchall()
            else:
                rows = conn.execute("SELECT * FROM messages WHERE marker = ? ORDER BY seq",
                                    (marker,)).fetchall()
        return [self._message(row) for row in rows]

    # -- publish target ------------------------------------------------------------------

    @staticmethod
    def _profile(row) -> dict:
        return {"profile": row["profile"], "account": row["account"], "session": row["session"]}

    def get_profile(self, profile: str) -> dict | None:
        with self.reading() as conn:
            row = conn.execute("SELECT * FROM profiles WHERE profile = ?", (profile,)).fetchone()
        return self._profile(row) if row else None

    def set_profile(self, profile: str, account: str, session: str) -> dict:
        with self.writing() as conn:
            conn.execute(
                "INSERT INTO profiles (profile, account, session, updated_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (profile) DO UPDATE SET account = excluded.account,"
                " session = excluded.session, updated_at = excluded.updated_at",
                (profile, account, session, now()),
            )
            row = conn.execute("SELECT * FROM profiles WHERE profile = ?", (profile,)).fetchone()
            return self._profile(row)

    @staticmethod
    def _post(row) -> dict:
        return {"post_id": row["post_id"], "profile": row["profile"], "account": row["account"],
                "body": row["body"], "marker": row["marker"], "posted_at": row["posted_at"]}

    def publish_post(self, profile: str, body: str, marker: str | None, key: str | None,
                     effect_marker: str | None, rollback: bool = False) -> dict:
        post_id, at = new_id("post"), now()
        with self.writing(rollback) as conn:
            row = conn.execute("SELECT * FROM profiles WHERE profile = ?", (profile,)).fetchone()
            if row is None:
                raise Refused(404, f"unknown profile {profile!r}")
            if row["session"] != "active":
                raise Refused(401, f"the session of profile {profile!r} has expired; log in again")
            conn.execute(
                "INSERT INTO posts (post_id, profile, account, body, marker, posted_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (post_id, profile, row["account"], body, marker, at),
            )
            self._effect(conn, "publish", "post.published", key, effect_marker, post_id, at)
            row = conn.execute("SELECT * FROM posts WHERE post_id = ?", (post_id,)).fetchone()
            return self._post(row)

    def find_posts(self, marker: str | None = None) -> list[dict]:
        with self.reading() as conn:
            if marker is None:
                rows = conn.execute("SELECT * FROM posts ORDER BY seq").fetchall()
            else:
                rows = conn.execute("SELECT * FROM posts WHERE marker = ? ORDER BY seq",
                                    (marker,)).fetchall()
        return [self._post(row) for row in rows]

    # -- vault ---------------------------------------------------------------------------

    def rotate_credential(self, name: str, key: str | None, marker: str | None,
                          rollback: bool = False) -> dict:
        at = now()
        with self.writing(rollback) as conn:
            conn.execute(
                "INSERT INTO credentials (name, version, rotated_at) VALUES (?, 1, ?)"
                " ON CONFLICT (name) DO UPDATE SET version = version + 1,"
                " rotated_at = excluded.rotated_at",
                (name, at),
            )
            version = conn.execute("SELECT version FROM credentials WHERE name = ?",
                                   (name,)).fetchone()["version"]
            self._effect(conn, "vault", "credential.rotated", key, marker,
                         f"{name}@v{version}", at)
            return {"name": name, "version": version, "rotated_at": at}

    # -- payments (Stripe-style idempotency) ---------------------------------------------

    @staticmethod
    def _charge(row) -> dict:
        return {"id": row["id"], "customer": row["customer"], "amount_cents": row["amount_cents"],
                "currency": row["currency"], "idempotency_key": row["idempotency_key"],
                "marker": row["marker"], "created_at": row["created_at"]}

    def create_charge(self, params: dict, key: str | None, marker: str | None, *, rollback: bool = False,
                      unfinished: bool = False) -> tuple[dict, bool]:
        """Returns (charge, replayed). A key whose first request never finished (``unfinished``:
        its connection is about to be dropped) stays ``in_progress`` for ever, as the team's
        Express provider does: every later request with it is Refused(409, "in progress"), though
        the charge exists. A completed key replays its charge; another body is Refused(422)."""
        digest = request_hash(params)
        with self.writing(rollback) as conn:
            if key is not None:
                known = conn.execute("SELECT * FROM charge_keys WHERE key = ?", (key,)).fetchone()
                if known is not None:
                    if known["state"] == "in_progress":
                        raise Refused(409, IN_PROGRESS)
                    if known["request_hash"] != digest:
                        raise Refused(422, f"Idempotency-Key {key!r} was used with a different request body "
                                           f"(it created charge {known['charge_id']})")
                    row = conn.execute("SELECT * FROM charges WHERE id = ?", (known["charge_id"],)).fetchone()
                    return self._charge(row), True
            charge_id, at = new_id("ch"), now()
            conn.execute(
                "INSERT INTO charges (id, customer, amount_cents, currency, idempotency_key, marker, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (charge_id, params["customer"], params["amount_cents"], params["currency"], key, marker, at),
            )
            if key is not None:
                conn.execute(
                    "INSERT INTO charge_keys (key, state, charge_id, request_hash, created_at) VALUES (?, ?, ?, ?, ?)",
                    (key, "in_progress" if unfinished else "completed", charge_id, digest, at),
                )
            self._effect(conn, "payments", "charge.created", key, marker, charge_id, at)
            row = conn.execute("SELECT * FROM charges WHERE id = ?", (charge_id,)).fetchone()
            return self._charge(row), False

    def find_charges(self, key: str | None = None, marker: str | None = None) -> dict:
        """The truth behind a key: its charges and the key's state (None: never seen)."""
        where, args = [], []
        if key is not None:
            where.append("idempotency_key = ?")
            args.append(key)
        if marker is not None:
            where.append("marker = ?")
            args.append(marker)
        sql = "SELECT * FROM charges"
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self.reading() as conn:
            rows = conn.execute(sql + " ORDER BY seq", args).fetchall()
            state = None
            if key is not None:
                known = conn.execute("SELECT state FROM charge_keys WHERE key = ?", (key,)).fetchone()
                state = known["state"] if known else None
        return {"charges": [self._charge(row) for row in rows], "key_state": state}

    def get_charge(self, charge_id: str) -> dict | None:
        with self.reading() as conn:
            row = conn.execute("SELECT * FROM charges WHERE id = ?", (charge_id,)).fetchone()
        return self._charge(row) if row else None

    # -- effect accounting ---------------------------------------------------------------

    @staticmethod
    def _effect_row(row) -> dict:
        return {"id": row["seq"], "provider": row["provider"], "kind": row["kind"],
                "idempotency_key": row["idempotency_key"], "marker": row["marker"],
                "object_id": row["object_id"], "at": row["at"]}

    def effects(self, key: str | None = None, marker: str | None = None) -> list[dict]:
        where, args = [], []
        if key is not None:
            where.append("idempotency_key = ?")
            args.append(key)
        if marker is not None:
            where.append("marker = ?")
            args.append(marker)
        sql = "SELECT * FROM effects"
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self.reading() as conn:
            rows = conn.execute(sql + " ORDER BY seq", args).fetchall()
        return [self._effect_row(row) for row in rows]

    def effect_summary(self) -> dict:
        with self.reading() as conn:
            total = conn.execute("SELECT count(*) FROM effects").fetchone()[0]
            by_marker = dict(conn.execute(
                "SELECT marker, count(*) FROM effects WHERE marker IS NOT NULL"
                " GROUP BY marker ORDER BY marker").fetchall())
            by_key = dict(conn.execute(
                "SELECT idempotency_key, count(*) FROM effects WHERE idempotency_key IS NOT NULL"
                " GROUP BY idempotency_key ORDER BY idempotency_key").fetchall())
        return {
            "total": total,
            "by_marker": by_marker,
            "duplicates": [marker for marker, count in by_marker.items() if count > 1],
            "by_key": by_key,
            "duplicate_keys": [key for key, count in by_key.items() if count > 1],
        }

    def reset(self) -> None:
        with self.writing() as conn:
            for table in TABLES:
                conn.execute(f"DELETE FROM {table}")  # nosec B608  # fixed table names (TABLES)
