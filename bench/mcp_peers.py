"""The MCP gateway's peers in `bench --only mcp`: what any other gateway in front of the same
upstream costs, each a process of its own on a port (bench/mcp.py starts them):

- `passthrough`: a gateway written with the MCP SDK (the low-level `Server`, stateless Streamable
  HTTP with JSON answers, as Reckon's) forwarding every call over one held upstream session, with
  no journal: what any Python gateway costs, the floor Reckon's is measured against;
- `fastmcp`: FastMCP's proxy as its documentation gives it (`create_proxy(url)`: a new upstream
  session per request);
- `fastmcp-reused`: the same proxy over one connected client, the session reused for every
  request, as its maintainers advise when the speed matters.

    python -m bench.mcp_peers KIND UPSTREAM_URL PORT   (from the checkout; not as a file: bench/mcp.py
    would stand for the SDK)
"""

from __future__ import annotations

import argparse
from contextlib import asynccontextmanager

import anyio
import uvicorn

KINDS = ("passthrough", "fastmcp", "fastmcp-reused")


def passthrough_app(upstream_url: str):
    import mcp_types as types
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server import Server
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.routing import Mount

    held: dict[str, Client] = {}

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=(await held["upstream"].list_tools()).tools)

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        return await held["upstream"].call_tool(params.name, dict(params.arguments or {}))

    server = Server("passthrough", version="1", on_list_tools=list_tools, on_call_tool=call_tool)
    mcp_app = server.streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))

    @asynccontextmanager
    async def lifespan(app):
        async with server.session_manager.run(), Client(streamable_http_client(upstream_url)) as client:
            held["upstream"] = client
            yield

    return Starlette(routes=[Mount("/", app=mcp_app)], lifespan=lifespan)


async def _serve(app, port: int) -> None:
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()


async def main(kind: str, upstream_url: str, port: int) -> None:
    if kind == "passthrough":
        await _serve(passthrough_app(upstream_url), port)
        return
    from fastmcp import Client as FastMCPClient
    from fastmcp.server import create_proxy

    if kind == "fastmcp":
        await create_proxy(upstream_url).run_http_async(host="127.0.0.1", port=port, show_banner=False,
                                                        log_level="warning")
        return
    async with FastMCPClient(upstream_url) as client:
        await create_proxy(client).run_http_async(host="127.0.0.1", port=port, show_banner=False,
                                                  log_level="warning")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("upstream_url")
    parser.add_argument("port", type=int)
    options = parser.parse_args()
    anyio.run(main, options.kind, options.upstream_url, options.port)
