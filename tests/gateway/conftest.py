"""A real upstream MCP server (tests/gateway/upstream_server.py) in its own process, the gateway
(`manage.py mcp_gateway`) in another, and the SDK's client calling the gateway."""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import Implementation

from gateway.config import load_upstreams
from gateway.reconcile import run_apart
from tests.processes import ROOT, ManagedProcess, database_url_of_tests, free_port, wait_for

UPSTREAM = ROOT / "examples" / "mcp_notes_server.py"
HELPDESK_SERVER = Path(__file__).with_name("helpdesk_server.py")  # an upstream of another shape

# The README's notes upstream, and the helpdesk's (tests/gateway/helpdesk_server.py), as declared.
NOTES = """
[[mcp.upstreams]]
name = "notes"
tenant = "acme"
url = "{url}"
timeout = 5

[mcp.upstreams.tools.create_note]
effect = "reversible"
timeout = 2
redact = ["api_key"]
reconcile = {{ tool = "find_note", arguments = {{ title = "title" }}, found = "result", match = {{ title = "title" }} }}

[mcp.upstreams.tools.find_note]
effect = "none"
"""
HELPDESK = """
[[mcp.upstreams]]
name = "helpdesk"
tenant = "acme"
url = "{url}"
timeout = 3

[mcp.upstreams.tools.open_ticket]
effect = "reversible"
key = "argument:ref"
reconcile = {{ tool = "find_tickets", arguments = {{ ref = "ref" }}, found = "tickets", match = {{ ref = "ref" }} }}

[mcp.upstreams.tools.find_tickets]
effect = "none"
"""

ACTIONS = NOTES + """

[mcp.upstreams.tools.delete_notes]
effect = "irreversible"

[[mcp.upstreams]]
name = "keyed"
tenant = "acme"
url = "{url}"

[mcp.upstreams.tools.create_note]
effect = "reversible"
key = "meta"

[[mcp.upstreams]]
name = "ledgerbook"
tenant = "acme"
url = "{url}"

[mcp.upstreams.tools.create_note]
effect = "irreversible"
approval = "replay"
timeout = 2
reconcile = {{ tool = "find_note", arguments = {{ title = "title" }}, found = "result", match = {{ title = "title" }} }}

[mcp.upstreams.tools.find_note]
effect = "none"

[[mcp.upstreams]]
name = "globex_notes"
tenant = "globex"
url = "{url}"

[mcp.upstreams.tools.create_note]
effect = "reversible"

[[mcp.upstreams]]
name = "local"
tenant = "acme"
command = ["{python}", "{script}", "--db", "{db}", "--stdio"]

[mcp.upstreams.tools.create_note]
effect = "reversible"
"""


@pytest.fixture(scope="package", autouse=True)
def _declarations_of_this_package_only():
    """The MCP tools these tests declare are actions of this process while they run, and only then."""
    from gateway import config
    from ledger import actions

    registered, declared = dict(actions._registry), dict(config._upstreams)
    yield
    actions._registry.clear()
    actions._registry.update(registered)
    config._upstreams.clear()
    config._upstreams.update(declared)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # it answers, if only to say no
    except OSError:
        return False


@dataclass
class Upstream:
    process: ManagedProcess
    url: str
    db: Path

    def restart(self) -> None:
        """SIGKILL it (a call in flight dies with it), then start it again on the same port and file."""
        self.kill()
        self.start_again()

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.process.wait()

    def start_again(self) -> None:
        self.process = ManagedProcess(self.process.argv, log_name="mcp-upstream-restarted").start()
        wait_for(lambda: answers(self.url), timeout=30, message="the restarted upstream")

    def notes(self, title: str) -> int:
        with sqlite3.connect(self.db) as connection:
            return connection.execute("SELECT count(*) FROM notes WHERE title = ?", (title,)).fetchone()[0]

    def receipts(self, title: str) -> int:
        """How many calls with `hold` set the upstream received for this title."""
        with sqlite3.connect(self.db) as connection:
            return connection.execute("SELECT count(*) FROM started WHERE title = ?", (title,)).fetchone()[0]

    def started(self, title: str) -> bool:
        return self.receipts(title) > 0

    def dropped(self, title: str) -> bool:
        with sqlite3.connect(self.db) as connection:
            return bool(connection.execute("SELECT count(*) FROM dropped WHERE title = ?", (title,)).fetchone()[0])

    def release(self, hold: str) -> None:
        self.db.with_name(f"{self.db.name}.release-{hold}").touch()

    def drop(self, hold: str) -> None:
        self.db.with_name(f"{self.db.name}.drop-{hold}").touch()


@pytest.fixture(scope="package")
def upstream(tmp_path_factory):
    folder = tmp_path_factory.mktemp("upstream")
    port = free_port()
    db = folder / "notes.sqlite3"
    process = ManagedProcess([sys.executable, str(UPSTREAM), "--db", str(db), "--port", str(port)],
                             log_name="mcp-upstream").start()
    url = f"http://127.0.0.1:{port}/mcp"
    wait_for(lambda: answers(url), timeout=30, message="the upstream MCP server")
    running = Upstream(process, url, db)
    yield running
    running.process.stop()  # the one running now: a test may have restarted it


@pytest.fixture(scope="package")
def actions_file(upstream, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gateway") / "actions.toml"
    path.write_text(ACTIONS.format(url=upstream.url, python=sys.executable, script=UPSTREAM, db=upstream.db))
    load_upstreams(path)  # this process (the reconciler, the console) knows the tools too
    return path


class Helpdesk:
    """tests/gateway/helpdesk_server.py in its own process: a helpdesk whose open_ticket is not idempotent."""

    def __init__(self, argv: list[str], db: Path, url: str):
        self.argv, self.db, self.url, self.process = argv, db, url, None

    def start(self) -> None:
        self.process = ManagedProcess(self.argv, log_name="mcp-helpdesk").start()
        wait_for(lambda: answers(self.url), timeout=30, message="the helpdesk MCP server")

    def stop(self) -> None:
        self.process.stop()

    def tickets(self, ref: str) -> int:
        with sqlite3.connect(self.db) as connection:
            return connection.execute("SELECT count(*) FROM tickets WHERE ref = ?", (ref,)).fetchone()[0]

    def open_by_hand(self, ref: str) -> None:
        with sqlite3.connect(self.db) as connection:
            connection.execute("INSERT INTO tickets (ref, subject) VALUES (?, 'by hand')", (ref,))


class Gateway(ManagedProcess):
    def __init__(self, actions_file: Path, log_name: str = "mcp-gateway", env: dict[str, str] | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        super().__init__([sys.executable, str(ROOT / "manage.py"), "mcp_gateway", "--port", str(self.port)],
                         env={"DATABASE_URL": database_url_of_tests(), "RECKON_ACTIONS_FILE": str(actions_file),
                              **(env or {})},
                         log_name=log_name)

    def start(self) -> Gateway:
        super().start()
        wait_for(lambda: self._up(), timeout=60, message="the MCP gateway")
        return self

    def _up(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"the gateway exited:\n{self.output()[-3000:]}")
        return answers(f"http://127.0.0.1:{self.port}/healthz")


@pytest.fixture(scope="package")
def gateway(actions_file, django_db_setup, django_db_blocker):
    with Gateway(actions_file) as running:
        yield running


async def _with_client(url: str, token: str, work, client_name: str = "test-agent"):
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
        async with Client(streamable_http_client(url, http_client=http),
                          client_info=Implementation(name=client_name, version="1.0")) as client:
            return await work(client)


def call(url: str, token: str, tool: str, arguments: dict, *, meta: dict | None = None):
    """One tools/call through the SDK's client; the CallToolResult."""
    return run_apart(_with_client, url, token, lambda client: client.call_tool(tool, arguments, meta=meta))


def list_tools(url: str, token: str) -> list[str]:
    async def names(client):
        return [tool.name for tool in (await client.list_tools()).tools]

    return run_apart(_with_client, url, token, names)


def text(result) -> str:
    return " ".join(part.text for part in result.content if part.type == "text")
