"""An OpenAI Agents SDK agent pointed at Reckon's MCP gateway (docs/agents/frameworks/openai-agents.md
shows this file; tests/frameworks/test_openai_agents.py runs it)."""

from __future__ import annotations

from agents import Agent, Model
from agents.mcp import MCPServerStreamableHttp, MCPToolMetaContext


def idempotency_key(context: MCPToolMetaContext) -> dict:
    """Send the run's own key in `_meta`: one per piece of work (the run's context), not per call."""
    return {"reckon/idempotency_key": f"{context.run_context.context}:{context.tool_name}"}


def reckon_server(url: str, token: str) -> MCPServerStreamableHttp:
    return MCPServerStreamableHttp(
        {"url": url, "headers": {"Authorization": f"Bearer {token}"}, "timeout": 60},
        name="reckon",
        # The SDK gives up after 5 s by default, and the model reads "An error occurred while running
        # the tool. Please try again." instead of the gateway's answer: wait past the gateway's
        # deadline for the slowest tool (10 s by default), which answers "outcome unknown" then.
        client_session_timeout_seconds=60,
        max_retry_attempts=0,  # the default; a retry of a lost call is the gateway's to answer
        tool_meta_resolver=idempotency_key,
    )


def reckon_agent(model: Model | str, server: MCPServerStreamableHttp) -> Agent:
    return Agent(name="reckon", instructions="Use the tools.", model=model, mcp_servers=[server])
