"""Talking to an upstream MCP server as its client (the SDK's), over Streamable HTTP or stdio."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from gateway.config import META_KEY, Upstream

logger = logging.getLogger("reckon.gateway")
# One long-lived client per upstream in a gateway process (opened by `shared`): a call then costs
# one request to the upstream, not a connection, a protocol probe and a request.
_shared: dict[str, Client] = {}
RECONNECT_AFTER_S = 1.0
# Each upstream's tools as it last listed them (name -> Tool): the input schemas the SDK checks a
# call's Mcp-Param-* headers against (gateway.server.tool_input_schema). Filled when the shared
# client connects and on every listing, so a tools/call does not list the upstream's tools again.
_listed: dict[str, dict[str, object]] = {}


@asynccontextmanager
async def shared(upstreams: Iterable[Upstream]) -> AsyncIterator[None]:
    """Keep a client to each upstream for the life of the gateway, each in a task of its own: an
    upstream that dies takes only its own client down (calls in flight on it become unknown), and
    calls connect per call until it is connected again."""
    async with anyio.create_task_group() as holders:
        for upstream in upstreams:
            holders.start_soon(_hold, upstream)
        try:
            yield
        finally:
            holders.cancel_scope.cancel()
            _shared.clear()


async def _hold(upstream: Upstream) -> None:
    while True:
        client = None
        try:
            async with connected(upstream) as client:
                _shared[upstream.name] = client
                await list_tools(upstream)
                await anyio.sleep_forever()
        except Exception as exc:
            logger.warning("MCP upstream %s: connection lost or refused (%s); connecting per call meanwhile",
                           upstream.name, exc)
        finally:
            if client is not None and _shared.get(upstream.name) is client:
                _shared.pop(upstream.name)
        await anyio.sleep(RECONNECT_AFTER_S)


@asynccontextmanager
async def client_for(upstream: Upstream) -> AsyncIterator[Client]:
    client = _shared.get(upstream.name)
    if client is None:
        async with connected(upstream) as client:
            yield client
        return
    try:
        yield client
    except Exception:
        # A broken connection is not reused: later calls connect afresh (a cancel or a timeout,
        # which are not Exceptions here, leave it in place).
        if _shared.get(upstream.name) is client:
            _shared.pop(upstream.name)
        raise


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
    async with client_for(upstream) as client:
        result = await client.call_tool(tool, arguments, meta={META_KEY: key} if key else None)
    return as_json(result)


async def list_tools(upstream: Upstream) -> list:
    async with client_for(upstream) as client:
        tools = list((await client.list_tools()).tools)
    _listed[upstream.name] = {tool.name: tool for tool in tools}
    return tools


def listed_tool(upstream_name: str, tool: str):
    """The upstream's tool as it last listed it, or None (not listed yet, or not its tool)."""
    return _listed.get(upstream_name, {}).get(tool)
