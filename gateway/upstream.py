"""Talking to an upstream MCP server as its client (the SDK's), over Streamable HTTP or stdio."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from gateway.config import META_KEY, Upstream


@asynccontextmanager
async def connected(upstream: Upstream) -> AsyncIterator[Client]:
    if upstream.command:
        program, *args = upstream.command
        parameters = StdioServerParameters(command=program, args=args,
                                           env={"PATH": os.environ.get("PATH", ""), **upstream.env_values()})
        async with Client(parameters) as client:
            yield client
        return
    async with create_mcp_http_client(headers=upstream.header_values()) as http:
        async with Client(streamable_http_client(upstream.url, http_client=http)) as client:
            yield client


def as_json(result) -> dict:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


async def call_tool(upstream: Upstream, tool: str, arguments: dict, *, key: str = "") -> dict:
    """The upstream's CallToolResult as JSON; the idempotency key travels in the call's _meta."""
    async with connected(upstream) as client:
        result = await client.call_tool(tool, arguments, meta={META_KEY: key} if key else None)
    return as_json(result)


async def list_tools(upstream: Upstream) -> list:
    async with connected(upstream) as client:
        return list((await client.list_tools()).tools)
