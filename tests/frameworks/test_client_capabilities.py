"""What each framework's MCP client declares to the gateway, measured on the wire (a recording hop,
tests/frameworks/recording_proxy.py, in front of the gateway): its protocol era and whether it can
take a URL-mode elicitation (an approval page to open) or the Tasks extension
(io.modelcontextprotocol/tasks). docs/agents/frameworks/index.md reports the same rows."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from agents import Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel

from examples.frameworks.openai_agents_agent import reckon_agent as openai_agent
from examples.frameworks.openai_agents_agent import reckon_server
from examples.frameworks.pydantic_ai_agent import reckon_agent as pydantic_agent
from tests.frameworks.conftest import in_fresh_thread, run_langgraph, run_vercel_ai
from tests.gateway.conftest import answers
from tests.processes import ROOT, ManagedProcess, free_port, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
set_tracing_disabled(True)

PAGE = ROOT / "docs" / "agents" / "frameworks" / "index.md"
TASKS = "io.modelcontextprotocol/tasks"


@pytest.fixture
def recorded(gateway, tmp_path):
    """The recording hop's URL, and a function that returns the messages it saw since the last call."""
    port, log = free_port(), tmp_path / "messages.jsonl"
    argv = [sys.executable, str(Path(__file__).with_name("recording_proxy.py")), "--target", gateway.url,
            "--port", str(port), "--log", str(log)]
    with ManagedProcess(argv, log_name="frameworks-recording-proxy"):
        wait_for(lambda: answers(f"http://127.0.0.1:{port}/healthz"), timeout=30, message="the recording hop")
        seen = 0

        def since() -> list[dict]:
            nonlocal seen
            lines = log.read_text().splitlines() if log.exists() else []
            new, seen = lines[seen:], len(lines)
            return [json.loads(line) for line in new]

        yield f"http://127.0.0.1:{port}/mcp", since


def declared(messages: list[dict]) -> str:
    """The page's row for a client: its first message's protocol era, and what its capabilities offer."""
    first = messages[0]
    if first["method"] == "initialize":
        era, capabilities = f"{first['params']['protocolVersion']} `initialize`", first["params"]["capabilities"]
    else:
        meta = first["params"]["_meta"]
        era = f"{meta['io.modelcontextprotocol/protocolVersion']} `server/discover`"
        capabilities = meta.get("io.modelcontextprotocol/clientCapabilities", {})
    url_mode = "url" in (capabilities.get("elicitation") or {})
    tasks = TASKS in (capabilities.get("extensions") or {}) or "tasks" in capabilities
    return f"| {era} | {'yes' if url_mode else 'no'} | {'yes' if tasks else 'no'} |"


def done(messages, info) -> ModelResponse:
    return ModelResponse(parts=[TextPart("done")])


async def elicited(context, message, response_type, params):
    return None


def test_each_frameworks_client_declares_what_the_page_says(recorded, token):
    url, since = recorded
    page = PAGE.read_text()

    in_fresh_thread(lambda: pydantic_agent(FunctionModel(done), url, token).run_sync("hello", deps="work"))
    rows = {"pydantic-ai": declared(since())}
    asking = MCPToolset(url, headers={"Authorization": f"Bearer {token}"}, elicitation_handler=elicited)
    # It declares elicitation, and says it will never be asked: a 2026-07-28 session holds no
    # connection for the server's request.
    with pytest.warns(UserWarning, match="`elicitation_handler` will never be called"):
        in_fresh_thread(lambda: Agent(FunctionModel(done), toolsets=[asking]).run_sync("hello"))
    rows["pydantic-ai with `elicitation_handler`"] = declared(since())

    async def openai_run():
        async with reckon_server(url, token) as server:
            await Runner.run(openai_agent(ScriptedModel([[assistant_message("done")]]), server), "hello")

    in_fresh_thread(lambda: asyncio.run(openai_run()))
    rows["OpenAI Agents SDK"] = declared(since())
    run_langgraph(url, token, "none")
    rows["LangGraph (langchain-mcp-adapters)"] = declared(since())
    run_vercel_ai(url, token, "none")
    rows["Vercel AI SDK (@ai-sdk/mcp)"] = declared(since())

    missing = [f"| {client} {row}" for client, row in rows.items() if f"| {client} {row}" not in page]
    assert missing == [], f"{PAGE.name} does not say what was measured:\n" + "\n".join(missing)
