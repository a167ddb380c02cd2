"""Agent frameworks' own loops through the gateway: the notes upstream (examples/mcp_notes_server.py)
in its own process, the gateway (`manage.py mcp_gateway`) in another, and the framework's real
package driving the calls with its own test model (no LLM)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from api.tokens import worker_token_create
from gateway.config import load_upstreams
from ledger.models import Job
from tests.conftest import token_issuer
from tests.gateway.conftest import UPSTREAM, Gateway, Upstream, answers, list_tools
from tests.processes import ROOT, ManagedProcess, free_port, wait_for

# notes: a reversible tool the gateway gives 2 s (a held call becomes unknown quickly); keyed: its
# key only from the call's _meta; slow: 6 s, past the OpenAI Agents SDK's default 5 s client
# timeout; payments: irreversible, so its first call waits for a person's approval.
ACTIONS = """
[[mcp.upstreams]]
name = "notes"
tenant = "acme"
url = "{url}"

[mcp.upstreams.tools.create_note]
effect = "reversible"
timeout = 2
reconcile = {{ tool = "find_note", arguments = {{ title = "title" }}, found = "result", match = {{ title = "title" }} }}

[mcp.upstreams.tools.find_note]
effect = "none"

[[mcp.upstreams]]
name = "keyed"
tenant = "acme"
url = "{url}"

[mcp.upstreams.tools.create_note]
effect = "reversible"
key = "meta"

[[mcp.upstreams]]
name = "slow"
tenant = "acme"
url = "{url}"

[mcp.upstreams.tools.create_note]
effect = "reversible"
timeout = 6

[[mcp.upstreams]]
name = "payments"
tenant = "acme"
url = "{url}"

[mcp.upstreams.tools.create_note]
effect = "irreversible"
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


@pytest.fixture(scope="package")
def upstream(tmp_path_factory):
    folder = tmp_path_factory.mktemp("upstream")
    port, db = free_port(), folder / "notes.sqlite3"
    process = ManagedProcess([sys.executable, str(UPSTREAM), "--db", str(db), "--port", str(port)],
                             log_name="frameworks-upstream").start()
    url = f"http://127.0.0.1:{port}/mcp"
    wait_for(lambda: answers(url), timeout=30, message="the upstream MCP server")
    running = Upstream(process, url, db)
    yield running
    running.process.stop()


@pytest.fixture(scope="package")
def actions_file(upstream, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("frameworks") / "actions.toml"
    path.write_text(ACTIONS.format(url=upstream.url))
    load_upstreams(path)
    return path


@pytest.fixture(scope="package")
def gateway(actions_file, django_db_setup, django_db_blocker):
    with Gateway(actions_file, log_name="frameworks-gateway") as running:
        yield running


@pytest.fixture
def token(db) -> str:
    return worker_token_create(name="agent", tenants=["acme"], actions=["*"], created_by=token_issuer()).token


@pytest.fixture
def title() -> str:
    return f"note-{uuid.uuid4().hex[:8]}"


def job_of(title: str) -> Job:
    """The job of the call whose arguments carry this title."""
    return Job.objects.get(payload__arguments__title=title)


def listed_name(url: str, token: str, upstream: str, tool: str) -> str:
    """The name tools/list gives an upstream's tool, whatever the gateway's naming rule joins them with."""
    [name] = [name for name in list_tools(url, token)
              if name.startswith(upstream) and name.endswith(tool) and len(name) == len(upstream) + 1 + len(tool)]
    return name


LANGGRAPH = Path(__file__).with_name("langgraph")  # its driver and its requirements
LANGGRAPH_VENV = ROOT / ".venv-langgraph"  # its environment (the Makefile's LANGGRAPH_VENV), outside tests/
LANGGRAPH_PYTHON = LANGGRAPH_VENV / "bin" / "python"


def run_langgraph(url: str, token: str, tool: str, *calls: dict) -> dict:
    """The agent's run, in LangGraph's environment: its output, the tools its model was given and what
    the model was told of each call."""
    assert LANGGRAPH_PYTHON.exists(), f"LangGraph's environment is missing: make {LANGGRAPH_VENV.name}/.installed"
    # Its bytecode cached, whatever this machine's environment says (the Makefile's note): langchain's
    # modules compiled on every run cost seconds each time.
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run([str(LANGGRAPH_PYTHON), str(LANGGRAPH / "drive.py"), url, token, tool, json.dumps(calls)],
                          capture_output=True, text=True, timeout=180, check=False, env=environment)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


VERCEL_AI = ROOT / "examples" / "frameworks" / "vercel-ai"
VERCEL_AI_DRIVE = Path(__file__).with_name("vercel_drive.mjs")


def run_vercel_ai(url: str, token: str, tool: str, *calls: dict) -> dict:
    """The agent's run under Node: its output, the tools its model was given and what it was told."""
    assert (VERCEL_AI / "node_modules" / ".package-lock.json").exists(), f"make {VERCEL_AI / 'node_modules' / '.package-lock.json'}"
    done = subprocess.run([shutil.which("node"), str(VERCEL_AI_DRIVE), url, token, tool, json.dumps(calls)],
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def in_fresh_thread(work):
    """`work()` on a thread of its own, its result or its exception: an agent's run starts its own
    event loop (asyncio.run, run_sync), which cannot start on a thread whose loop already runs, as
    the main thread's does in a pytest worker that ran the browser tests (Playwright's sync API
    keeps its loop there)."""
    import threading

    outcome = {}

    def target():
        try:
            outcome["result"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="agent-run")
    thread.start()
    thread.join(timeout=600)
    if thread.is_alive():
        raise TimeoutError("the agent's run did not end within 600 s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]

