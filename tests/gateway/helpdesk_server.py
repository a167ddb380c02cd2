"""A second upstream, shaped as a helpdesk rather than as the README's notes: `open_ticket` is not
idempotent (each call opens another ticket), and its look-ups answer in their own shapes: one wraps
its list in an object (`{"tickets": [...]}`), one answers in prose. Its own process:

    python tests/gateway/helpdesk_server.py --db helpdesk.sqlite3 --port 9200

`--down-file PATH`: while PATH exists, open_ticket answers an error before writing anything (the
helpdesk is down for writes), so a test can make a call that never happened.
"""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

parser = argparse.ArgumentParser()
parser.add_argument("--db", required=True)
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--down-file", default="")
options = parser.parse_args()
DB = Path(options.db)

server = MCPServer("helpdesk")
SLOW_S = 8.0


def database() -> sqlite3.Connection:
    connection = sqlite3.connect(DB, timeout=10, isolation_level=None)
    connection.execute("CREATE TABLE IF NOT EXISTS tickets (id INTEGER PRIMARY KEY, ref TEXT, subject TEXT)")
    return connection


def tickets(ref: str) -> list[dict]:
    with database() as connection:
        rows = connection.execute("SELECT id, ref, subject FROM tickets WHERE ref = ? ORDER BY id", (ref,)).fetchall()
    return [{"id": row[0], "ref": row[1], "subject": row[2]} for row in rows]


# Its own hints, true of the helpdesk itself (not idempotent) and generic (not destructive): the
# gateway lists what the actions file declares instead.
@server.tool(annotations=ToolAnnotations(title="Open a ticket", destructive_hint=False, idempotent_hint=False,
                                         open_world_hint=True), meta={"helpdesk/queue": "front"})
async def open_ticket(ref: str, subject: str) -> dict:
    """Open a ticket (not idempotent: every call opens one more). The subject "slow" hangs the
    answer for SLOW_S seconds after the ticket is written: the caller times out on a call that
    happened."""
    if options.down_file and Path(options.down_file).exists():
        raise ToolError("the helpdesk is down for maintenance")
    with database() as connection:
        ticket_id = connection.execute("INSERT INTO tickets (ref, subject) VALUES (?, ?)", (ref, subject)).lastrowid
    if subject == "slow":
        await anyio.sleep(SLOW_S)
    return {"id": ticket_id, "ref": ref}


@server.tool()
def find_tickets(ref: str) -> dict:
    """The tickets with this reference, as {"tickets": [...]}, empty or not."""
    return {"tickets": tickets(ref)}


@server.tool(structured_output=False)
def describe_tickets(ref: str) -> str:
    """The tickets with this reference, in a sentence."""
    found = tickets(ref)
    if not found:
        return "No tickets found"
    return f"Found {len(found)} ticket(s): " + ", ".join(f"#{t['id']} {t['subject']}" for t in found)


if __name__ == "__main__":
    database().close()
    server.run("streamable-http", host="127.0.0.1", port=options.port, stateless_http=True, json_response=True)
