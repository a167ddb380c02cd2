"""The SMTP sandbox's archive: every message the server accepted, in one SQLite file (WAL).

A message is written before the server answers 250, in its own transaction, so the archive
shows exactly what the server took responsibility for. Message-IDs are not unique here: a
message sent twice is two rows, which is what tests count to prove "never resent".
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT,
    marker TEXT,
    mail_from TEXT NOT NULL,
    rcpt_tos TEXT NOT NULL,
    subject TEXT,
    headers TEXT NOT NULL,
    body TEXT NOT NULL,
    size INTEGER NOT NULL,
    received_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_message_id ON messages (message_id);
CREATE INDEX IF NOT EXISTS messages_marker ON messages (marker);
"""

MARKER_HEADER = "X-Reckon-Marker"


def text_body(message: EmailMessage) -> str:
    """The plain-text body as the recipient reads it (decoded, newline line ends), or the raw payload."""
    text = None
    try:
        part = message.get_body(preferencelist=("plain",))
        if part is not None:
            text = part.get_content()
    except (LookupError, ValueError):  # an unknown charset or a broken encoding
        pass
    if text is None:
        payload = message.get_payload(decode=True)
        text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else str(message.get_payload())
    return text.replace("\r\n", "\n")


def _header(message: EmailMessage, name: str) -> str | None:
    value = message.get(name)
    return None if value is None else str(value).strip()


class Archive:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        # One connection per call: the SMTP loop and the HTTP threads each use their own.
        conn = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        conn.row_factory = sqlite3.Row
        return conn

    def add(self, *, mail_from: str, rcpt_tos: list[str], message: EmailMessage, size: int) -> dict:
        """Archive one accepted message (committed when this returns)."""
        row = (
            _header(message, "Message-ID"),
            _header(message, MARKER_HEADER),
            mail_from,
            json.dumps(rcpt_tos),
            _header(message, "Subject"),
            json.dumps([[name, str(value)] for name, value in message.items()]),
            text_body(message),
            size,
            datetime.now(UTC).isoformat(timespec="microseconds"),
        )
        with closing(self._connect()) as conn:
            seq = conn.execute(
                "INSERT INTO messages (message_id, marker, mail_from, rcpt_tos, subject, headers, body, size,"
                " received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row).lastrowid
            return self._record(conn.execute("SELECT * FROM messages WHERE seq = ?", (seq,)).fetchone())

    @staticmethod
    def _record(row: sqlite3.Row) -> dict:
        return {"seq": row["seq"], "message_id": row["message_id"], "marker": row["marker"],
                "from": row["mail_from"], "to": json.loads(row["rcpt_tos"]), "subject": row["subject"],
                "headers": json.loads(row["headers"]), "body": row["body"], "size": row["size"],
                "received_at": row["received_at"]}

    def find(self, *, message_id: str | None = None, marker: str | None = None) -> list[dict]:
        """The archived messages with this Message-ID and/or marker (all of them without either)."""
        with closing(self._connect()) as conn:
            rows = conn.execute("SELECT * FROM messages WHERE (?1 IS NULL OR message_id = ?1)"
                                " AND (?2 IS NULL OR marker = ?2) ORDER BY seq", (message_id, marker)).fetchall()
        return [self._record(row) for row in rows]

    def count(self) -> int:
        with closing(self._connect()) as conn:
            return conn.execute("SELECT count(*) FROM messages").fetchone()[0]

    def reset(self) -> None:
        with closing(self._connect()) as conn:
            conn.execute("DELETE FROM messages")
