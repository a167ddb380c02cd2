"""Talking to an upstream MCP server as its client (the SDK's), over Streamable HTTP or stdio.

A tools/call to a Streamable HTTP upstream that speaks the stateless protocol (2026-07-28) is one
POST of one JSON-RPC request (`_post_tool_call`): the same request the SDK's client sends, without
its per-request tasks, streams and models, on a keep-alive connection of the upstream's own
(`Pipes`: the request written out whole, the answer read by httptools, the C HTTP parser the
gateway's server already uses). Measured in `bench --only mcp`: through the SDK's client a call
cost the gateway 7.0 ms of CPU, as one POST through httpx 4.2–4.4 ms, as one POST on a Pipe
less again (README "Performance"). Everything else goes through the SDK: the connection, its
protocol probe, tools/list, stdio, an older protocol, and a tool whose input schema asks for
`Mcp-Param-*` headers or whose call the upstream refused for its headers or redirected.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import select
import ssl
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import anyio
import anyio.abc
import httptools
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
# The keep-alive connections for the tools/call POSTs of each shared client's Streamable HTTP upstream.
_pipes: dict[str, Pipes] = {}
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
# Set by a call that found an upstream's shared client broken: its holder (`_hold`) closes it and
# connects again; with what broke it, for the log.
_broken: dict[str, anyio.Event] = {}
_broken_by: dict[str, str] = {}


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
            _broken.clear()
            with anyio.CancelScope(shield=True):  # the task group's cancel must not stop the closing
                for name in list(_pipes):
                    await _drop_pipes(name)


async def _hold(upstream: Upstream) -> None:
    """Connect, list the tools, and hold the client until a call finds it broken (`_break`); then
    connect again at once, and every RECONNECT_AFTER_S while the upstream refuses (calls connect per
    call meanwhile). The log says once when the upstream is lost, and once when it is back."""
    lost_at: float | None = None
    while True:
        client = pipes = None
        held = False
        broken = _broken[upstream.name] = anyio.Event()
        try:
            async with _connection(upstream) as (client, http):
                _shared[upstream.name] = client
                if http is not None:
                    pipes = _pipes[upstream.name] = Pipes(upstream.url, upstream.header_values())
                await list_tools(upstream)
                if lost_at is not None:
                    logger.info("MCP upstream %s: connected again after %.1f s; its calls share one connection again",
                                upstream.name, time.monotonic() - lost_at)
                    lost_at = None
                held = True
                await broken.wait()
                lost_at = time.monotonic()
                logger.warning("MCP upstream %s: lost (a call on its connection failed: %s); connecting again",
                               upstream.name, _broken_by.pop(upstream.name, "no reason given"))
        except Exception as exc:
            if lost_at is None:
                lost_at = time.monotonic()
                logger.warning("MCP upstream %s: lost (%s); connecting again every %g s, each call on its own meanwhile",
                               upstream.name, _described(exc), RECONNECT_AFTER_S)
        finally:
            if client is not None and _shared.get(upstream.name) is client:
                _shared.pop(upstream.name)
            if pipes is not None:
                if _pipes.get(upstream.name) is pipes:
                    _pipes.pop(upstream.name)
                with anyio.CancelScope(shield=True):
                    await pipes.aclose()
        if not held:  # the connection or its listing failed: the upstream is down, or not itself yet
            await anyio.sleep(RECONNECT_AFTER_S)


def _break(upstream_name: str, client: Client, exc: Exception) -> None:
    """A call found the shared client broken: later calls do not use it, and its holder connects again."""
    if _shared.get(upstream_name) is client:
        _shared.pop(upstream_name)
        _broken_by[upstream_name] = _described(exc)
        if upstream_name in _broken:
            _broken[upstream_name].set()


def _described(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _drop_pipes(upstream_name: str) -> None:
    pipes = _pipes.pop(upstream_name, None)
    if pipes is not None:
        await pipes.aclose()


@asynccontextmanager
async def client_for(upstream: Upstream) -> AsyncIterator[Client]:
    client = _shared.get(upstream.name)
    if client is None:
        async with connected(upstream) as client:
            yield client
        return
    try:
        yield client
    except Exception as exc:
        # A broken connection is not reused: its holder connects again (a cancel or a timeout,
        # which are not Exceptions here, leave it in place).
        _break(upstream.name, client, exc)
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
        pipes = _pipes.get(upstream.name) if _shared.get(upstream.name) is client else None
        result = None
        if pipes is not None and _postable(client, upstream.name, tool):
            result = await _post_tool_call(client, pipes, tool, arguments, meta)
        if result is None:
            result = await client.call_tool(tool, arguments, meta=meta)
    return as_json(result)


def _postable(client: Client, upstream_name: str, tool: str) -> bool:
    """May a call of `tool` be one plain POST: a stateless protocol, and a listed tool whose input
    schema mirrors no argument into a header (the SDK's client adds those)?"""
    return client.protocol_version in MODERN_PROTOCOL_VERSIONS and tool in _headerless.get(upstream_name, ())


async def _post_tool_call(client: Client, pipes: Pipes, tool: str, arguments: dict,
                          meta: dict | None) -> types.CallToolResult | None:
    """The tools/call as the SDK's client sends it at a stateless protocol version, in one POST; its
    result checked as the SDK's client checks it. None: the upstream refused the request for its
    headers, or redirected it, before running anything (the SDK's client then lists the tool again,
    follows the redirect, and sends it). A JSON-RPC error, or an answer that is not one, raises (an
    exception proves nothing either way)."""
    version = client.protocol_version
    request_id = next(_request_ids)
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {
        "name": tool, "arguments": arguments, "_meta": {
            **(meta or {}), types.PROTOCOL_VERSION_META_KEY: version,
            types.CLIENT_INFO_META_KEY: _CLIENT_INFO_JSON,
            types.CLIENT_CAPABILITIES_META_KEY: {}}}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               MCP_PROTOCOL_VERSION_HEADER: version, MCP_METHOD_HEADER: "tools/call", MCP_NAME_HEADER: tool}
    status, kind, content = await pipes.post(json.dumps(body, separators=(",", ":")).encode(), headers)
    if 300 <= status < 400:
        return None
    if kind.startswith("text/event-stream") and status == 200:
        message = _reply_in_events(content.decode(), request_id)
    elif kind.startswith("application/json"):
        message = json.loads(content)
    else:
        raise MCPError(types.INTERNAL_ERROR, f"the upstream answered HTTP {status} ({kind or 'no content type'})")
    if not isinstance(message, dict) or message.get("id") not in (request_id, None) or (
            status != 200 and "error" not in message):
        raise MCPError(types.INTERNAL_ERROR, f"the upstream's answer (HTTP {status}) is not the reply to this call")
    if "error" in message:
        error = types.ErrorData.model_validate(message["error"])
        if error.code == types.HEADER_MISMATCH:
            return None
        raise MCPError(error.code, error.message, error.data)
    result = types.CallToolResult.model_validate(message.get("result"))
    if not result.is_error:
        await client.session.validate_tool_result(tool, result)
    return result


def _reply_in_events(text: str, request_id: int) -> dict | None:
    """The JSON-RPC reply to `request_id` in a text/event-stream answer (its notifications are
    dropped, as the SDK's client drops them with no handler), or None if none came."""
    data: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            message, data = json.loads("\n".join(data)), []
            if isinstance(message, dict) and message.get("id") == request_id and ("result" in message or "error" in message):
                return message
    return None


class _Answer:
    """httptools' callbacks: one HTTP response, read whole."""

    def __init__(self):
        self.headers: dict[str, str] = {}
        self.body: list[bytes] = []
        self.complete = self.keep_alive = False
        self.parser = httptools.HttpResponseParser(self)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()  # (asked later, the parser has reset)


class Pipes:
    """Keep-alive HTTP/1.1 connections to one Streamable HTTP upstream, for its tools/call POSTs:
    one per call in flight, kept for the next call when the answer was read whole and the upstream
    keeps the connection. A connection idle for IDLE_S, or that the upstream closed meanwhile, is
    not used again (uvicorn, the SDK's server, closes idle ones after 5 s); one that was cancelled
    or broke mid-answer is closed."""

    IDLE_S = 2.0

    def __init__(self, url: str, headers: dict[str, str]):
        parts = urlsplit(url)
        self.tls = parts.scheme == "https"
        self.host, self.port = parts.hostname or "", parts.port or (443 if self.tls else 80)
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.head = _header_lines({"Host": parts.netloc.rpartition("@")[2], **headers})
        self.idle: list[tuple[anyio.abc.ByteStream, float]] = []
        self.closed = False

    async def post(self, body: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
        """The upstream's answer to a POST of `body`: its status, content type and content."""
        stream = await self._reusable() or await self._connect()
        kept = False
        try:
            await stream.send(f"POST {self.target} HTTP/1.1\r\n{self.head}{_header_lines(headers)}"
                              f"Content-Length: {len(body)}\r\n\r\n".encode("latin-1") + body)
            answer = _Answer()
            while not answer.complete:
                answer.parser.feed_data(await stream.receive())
            kept = answer.keep_alive
        finally:
            if kept and not self.closed:
                self.idle.append((stream, time.monotonic()))
            else:
                await anyio.aclose_forcefully(stream)
        return answer.parser.get_status_code(), answer.headers.get("content-type", "").lower(), b"".join(answer.body)

    async def _reusable(self) -> anyio.abc.ByteStream | None:
        while self.idle:
            stream, since = self.idle.pop()
            if time.monotonic() - since < self.IDLE_S and not _readable(stream):
                return stream
            await anyio.aclose_forcefully(stream)
        return None

    async def _connect(self) -> anyio.abc.ByteStream:
        if self.tls:
            return await anyio.connect_tcp(self.host, self.port, tls=True, ssl_context=ssl.create_default_context(),
                                           tls_standard_compatible=False)
        return await anyio.connect_tcp(self.host, self.port)

    async def aclose(self) -> None:
        self.closed = True
        while self.idle:
            await anyio.aclose_forcefully(self.idle.pop()[0])


def _header_lines(headers: dict[str, str]) -> str:
    if any(c in text for item in headers.items() for text in item for c in "\r\n"):
        raise ValueError("an HTTP header name or value holds a line break")
    return "".join(f"{name}: {value}\r\n" for name, value in headers.items())


def _readable(stream: anyio.abc.ByteStream) -> bool:
    """Whether an idle connection has something to read: the upstream closed it (or broke the
    protocol). Asked with poll() (select() refuses descriptors past 1024)."""
    sock = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)  # nosec B610  # anyio's typed attribute, not QuerySet.extra
    if sock is None:
        return True
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(0))


async def list_tools(upstream: Upstream) -> list:
    async with client_for(upstream) as client:
        tools = list((await client.list_tools()).tools)
    _listed[upstream.name] = {tool.name: tool for tool in tools}
    _headerless[upstream.name] = {tool.name for tool in tools if "x-mcp-header" not in json.dumps(tool.input_schema)}
    return tools


def listed_tool(upstream_name: str, tool: str):
    """The upstream's tool as it last listed it, or None (not listed yet, or not its tool)."""
    return _listed.get(upstream_name, {}).get(tool)
