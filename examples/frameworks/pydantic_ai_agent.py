"""A pydantic-ai agent pointed at Reckon's MCP gateway (docs/agents/frameworks/pydantic-ai.md shows
this file; tests/frameworks/test_pydantic_ai.py runs it)."""

from __future__ import annotations

from pydantic_ai import Agent, RunContext
from pydantic_ai.mcp import CallToolFunc, MCPToolset, ToolResult
from pydantic_ai.models import Model


async def send_idempotency_key(ctx: RunContext[str], call_tool: CallToolFunc, name: str,
                               arguments: dict) -> ToolResult:
    """Send the run's own key in `_meta`: one per piece of work (the deps), not the tool call's id,
    which is new each time the model calls again."""
    return await call_tool(name, arguments, metadata={"reckon/idempotency_key": f"{ctx.deps}:{name}"})


def reckon_toolset(url: str, token: str) -> MCPToolset:
    return MCPToolset(
        url,
        headers={"Authorization": f"Bearer {token}"},
        # Reckon's error answers are final for that call ("outcome unknown, not repeated", "awaiting
        # approval"): the model reads them as a failed result, not as a retry prompt counted against
        # the tool's budget (max_retries, 1 by default), whose second error ends the run.
        tool_error_behavior="failed",
        read_timeout=60,  # above the gateway's deadline for the slowest tool (10 s by default)
        process_tool_call=send_idempotency_key,
    )


def reckon_agent(model: Model | str, url: str, token: str) -> Agent[str, str]:
    return Agent(model, deps_type=str, toolsets=[reckon_toolset(url, token)])
