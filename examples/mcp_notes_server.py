"""An MCP server to put behind the gateway (the README's example; the gateway's tests use it too),
written with the SDK: it owns a SQLite file and changes it (the side effect), and has a read-only
lookup tool. Run as a process of its own:

    python examples/mcp_notes_server.py --db notes.sqlite3 --port 9100   # Streamable HTTP
    python examples/mcp_notes_server.py --db notes.sqlite3 --stdio       # stdio
"""

from __future__ import annotations

import argparse
import sqlite3
import time
from pathlib import Path

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

parser = argparse.ArgumentParser()
parser.add_argument("--db", required=True)
parser.add_argument("--port", type=int, default=0)
parser.add_argument("--stdio", action="store_true")
options = parser.parse_args()
DB = Path(options.db)

server = MCPServer("notes")


def database() -> sqlite3.Connection:
    connection = sqlite3.connect(DB, timeout=10, isolation_level=None)
    connection.execute("CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, title TEXT, body TEXT)")
    connection.execute("CREATE TABLE IF NOT EXISTS started (title TEXT)")
    connection.execute("CREATE TABLE IF NOT EXISTS dropped (title TEXT)")
    return connection


async def released(hold: str, bound: float = 60.0) -> bool:
    """Wait for <db>.release-<hold> (True) or <db>.drop-<hold> (False, consumed); False after `bound`."""
    release, drop = (DB.with_name(f"{DB.name}.{what}-{hold}") for what in ("release", "drop"))
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if release.exists():
            return True
        if drop.exists():
            drop.unlink()
            return False
        await anyio.sleep(0.02)
    return False


@server.tool()
async def create_note(title: str, body: str, api_key: str = "", hold: str = "", stall: float = 0) -> dict:
    """Create a note (the side effect). `hold`: once the call is received, wait until the test
    releases it (then write) or drops it (then write nothing); `stall`: answer only that many
    seconds after writing."""
    if body == "refuse":
        raise ToolError("the notes service refuses an empty-minded body")
    if hold:
        with database() as connection:
            connection.execute("INSERT INTO started VALUES (?)", (title,))
        if not await released(hold):
            with database() as connection:
                connection.execute("INSERT INTO dropped VALUES (?)", (title,))
            raise ToolError("dropped before anything was written")
    with database() as connection:
        note_id = connection.execute("INSERT INTO notes (title, body) VALUES (?, ?)", (title, body)).lastrowid
    if stall:
        await anyio.sleep(stall)
    return {"id": note_id, "title": title}


@server.tool()
def find_note(title: str) -> list[dict]:
    """The notes with this title (read-only)."""
    with database() as connection:
        rows = connection.execute("SELECT id, title FROM notes WHERE title = ? ORDER BY id", (title,)).fetchall()
    return [{"id": row[0], "title": row[1]} for row in rows]


@server.tool()
def delete_notes(title: str) -> dict:
    """Delete every note with this title (cannot be undone)."""
    with database() as connection:
        deleted = connection.execute("DELETE FROM notes WHERE title = ?", (title,)).rowcount
    return {"deleted": deleted}


@server.tool()
def secret_tool() -> str:
    """A tool of the upstream that the gateway's configuration does not declare."""
    return "should never be reached through the gateway"


if __name__ == "__main__":
    database().close()
    if options.stdio:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=options.port, stateless_http=True, json_response=True)
