"""Talking to an upstream MCP server as its client (the SDK's), over Streamable HTTP or stdio.

A tools/call to a Streamable HTTP upstream that speaks the stateless protocol (2026-07-28) is one
POST of one JSON-RPC request on the shared client's connection (`_post_tool_call`): the same
request the SDK's client sends, without its per-request tasks, streams and models (measured in one
process against the notes server, on a loaded 2-core machine: 4.2–4.4 ms of CPU a call this way,
7.0–7.1 ms through the SDK's client). Everything else goes through the SDK: the
connection, its protocol probe, tools/list, stdio, an older protocol, and a tool whose input
schema asks for `Mcp-Param-*` headers or whose call the upstream refused for its headers.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_NAME_HEADER, MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from gateway.config import META_KEY, Upstream

logger = logging.getLogger("reckon.gateway")
# One long-lived client per upstream in a gateway process (opened by `shared`): a call then costs
# one request to the upstream, not a connection, a protocol probe and a request.
_shared: dict[str, Client] = {}
# The HTTP connection pool under each shared client of a Streamable HTTP upstream.
_http: dict[str, httpx2.AsyncClient] = {}
# Who the gateway is to its upstreams (the `clientInfo` of every request); it declares no client
# capabilities (no sampling, roots or elicitation callbacks).
CLIENT_INFO = types.Implementation(name="reckon-gateway", version="1")
_CLIENT_INFO_JSON = CLIENT_INFO.model_dump(mode="json", by_alias=True, exclude_none=True)
_request_ids = itertools.count(1)
RECONNECT_AFTER_S = 1.0
# Each upstream's tools as it last listed them (name -> Tool): the input schemas the SDK checks a
# call's Mcp-Param-* headers against (gateway.server.tool_input_schema). Filled when the shared
# client connects and on every listing, so a tools/call does not list the upstream's tools again.
_listed: dict[str, dict[str, object]] = {}
# Of those, the tools whose input schema mirrors no argument into an Mcp-Param-* header.
_headerless: dict[str, set[str]] = {}


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
            _http.clear()


async def _hold(upstream: Upstream) -> None:
    while True:
        client = None
        try:
            async with _connection(upstream) as (client, http):
                _shared[upstream.name] = client
                if http is not None:
                    _http[upstream.name] = http
                await list_tools(upstream)
                await anyio.sleep_forever()
        except Exception as exc:
            logger.warning("MCP upstream %s: connection lost or refused (%s); connecting per call meanwhile",
                           upstream.name, exc)
        finally:
            if client is not None and _shared.get(upstream.name) is client:
                _shared.pop(upstream.name)
                _http.pop(upstream.name, None)
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
            _http.pop(upstream.name, None)
        raise


@asynccontextmanager
async def connected(upstream: Upstream) -> AsyncIterator[Client]:
    async with _connection(upstream) as (client, _):
        yield client


@asynccontextmanager
async def _connection(upstream: Upstream) -> AsyncIterator[tuple[Client, httpx2.AsyncClient | None]]:
    """The SDK's client to `upstream`, and the HTTP client it posts with (None over stdio)."""
    if upstream.command:
        program, *args = upstream.command
        parameters = StdioServerParameters(command=program, args=args,
                                           env={"PATH": os.environ.get("PATH", ""), **upstream.env_values()})
        async with Client(parameters, client_info=CLIENT_INFO) as client:
            yield client, None
        return
    async with create_mcp_http_client(headers=upstream.header_values()) as http:
        async with Client(streamable_http_client(upstream.url, http_client=http), client_info=CLIENT_INFO) as client:
            yield client, http


def as_json(result) -> dict:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


async def call_tool(upstream: Upstream, tool: str, arguments: dict, *, key: str = "") -> dict:
    """The upstream's CallToolResult as JSON; the idempotency key travels in the call's _meta."""
    meta = {META_KEY: key} if key else None
    async with client_for(upstream) as client:
        http = _http.get(upstream.name) if _shared.get(upstream.name) is client else None
        result = None
        if http is not None and _postable(client, upstream.name, tool):
            result = await _post_tool_call(client, http, upstream.url, tool, arguments, meta)
        if result is None:
            result = await client.call_tool(tool, arguments, meta=meta)
    return as_json(result)


def _postable(client: Client, upstream_name: str, tool: str) -> bool:
    """May a call of `tool` be one plain POST: a stateless protocol, and a listed tool whose input
    schema mirrors no argument into a header (the SDK's client adds those)?"""
    return client.protocol_version in MODERN_PROTOCOL_VERSIONS and tool in _headerless.get(upstream_name, ())


@functools.lru_cache(maxsize=64)
def _parsed(url: str) -> httpx2.URL:
    return httpx2.URL(url)  # parsed once, not at every call


async def _post_tool_call(client: Client, http: httpx2.AsyncClient, url: str, tool: str, arguments: dict,
                          meta: dict | None) -> types.CallToolResult | None:
    """The tools/call as the SDK's client sends it at a stateless protocol version, in one POST; its
    result checked as the SDK's client checks it. None: the upstream refused the request for its
    headers before running anything (the SDK's client then lists the tool again and resends). A
    JSON-RPC error, or an answer that is not one, raises (an exception proves nothing either way)."""
    version = client.protocol_version
    request_id = next(_request_ids)
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {
        "name": tool, "arguments": arguments, "_meta": {
            **(meta or {}), types.PROTOCOL_VERSION_META_KEY: version,
            types.CLIENT_INFO_META_KEY: _CLIENT_INFO_JSON,
            types.CLIENT_CAPABILITIES_META_KEY: {}}}}
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json",
               MCP_PROTOCOL_VERSION_HEADER: version, MCP_METHOD_HEADER: "tools/call", MCP_NAME_HEADER: tool}
    async with http.stream("POST", _parsed(url), content=json.dumps(body, separators=(",", ":")).encode(),
                           headers=headers) as response:
        kind = response.headers.get("content-type", "").lower()
        if kind.startswith("text/event-stream") and response.status_code == 200:
            message = await _reply_in_events(response, request_id)
        elif kind.startswith("application/json"):
            message = json.loads(await response.aread())
        else:
            raise MCPError(types.INTERNAL_ERROR, f"the upstream answered HTTP {response.status_code} ({kind or 'no content type'})")
    if not isinstance(message, dict) or message.get("id") not in (request_id, None) or (
            response.status_code != 200 and "error" not in message):
        raise MCPError(types.INTERNAL_ERROR, f"the upstream's answer (HTTP {response.status_code}) is not the "
                                             "reply to this call")
    if "error" in message:
        error = types.ErrorData.model_validate(message["error"])
        if error.code == types.HEADER_MISMATCH:
            return None
        raise MCPError(error.code, error.message, error.data)
    result = types.CallToolResult.model_validate(message.get("result"))
    if not result.is_error:
        await client.session.validate_tool_result(tool, result)
    return result


async def _reply_in_events(response: httpx2.Response, request_id: int) -> dict | None:
    """The JSON-RPC reply to `request_id` in a text/event-stream answer (its notifications are
    dropped, as the SDK's client drops them with no handler), or None if none came."""
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            message, data = json.loads("\n".join(data)), []
            if isinstance(message, dict) and message.get("id") == request_id and ("result" in message or "error" in message):
                return message
    return None


async def list_tools(upstream: Upstream) -> list:
    async with client_for(upstream) as client:
        tools = list((await client.list_tools()).tools)
    _listed[upstream.name] = {tool.name: tool for tool in tools}
    _headerless[upstream.name] = {tool.name for tool in tools if "x-mcp-header" not in json.dumps(tool.input_schema)}
    return tools


def listed_tool(upstream_name: str, tool: str):
    """The upstream's tool as it last listed it, or None (not listed yet, or not its tool)."""
    return _listed.get(upstream_name, {}).get(tool)
