"""The gateway: an MCP server (Streamable HTTP, stateless) in front of the declared upstreams.

`tools/list` shows the declared tools the caller's worker token may call, named
`<upstream>.<tool>`; `tools/call` passes a read-only tool through and journals every other one
(gateway/calls.py). Being stateless, any gateway process can serve any request: what a call
must remember lives in the ledger.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from api.tokens import agent_name, authenticate
from gateway import calls, limits
from gateway import upstream as upstreams
from gateway.config import ToolPolicy, get_upstream
from gateway.config import upstreams as declared_upstreams
from gateway.renewal import in_thread, while_renewed
from ledger.availability import RETRY_AFTER_S, database_unavailable

logger = logging.getLogger("reckon.gateway")
CONFIG_HINT = "declare it in the actions file (RECKON_ACTIONS_FILE) under [mcp.upstreams.tools.<tool>]"


# What the agent is told when the ledger's database has no primary (a failover): per step, what is
# known. Before the upstream was called nothing happened; after, the effect may have happened and
# the ledger will find out (the lease runs out: unknown, then the gateway's reconciler looks).
LEDGER_AWAY_BEFORE = ("the ledger's database is unavailable (a failover or a restart): the tool was not called. "
                      "Call it again with the same arguments in a few seconds.")
LEDGER_AWAY_AFTER = ("the tool answered, but the ledger's database became unavailable before the answer was "
                     "recorded: the outcome is unknown to Reckon until it is looked up. Call again with the same "
                     "arguments: the same call is answered from the ledger, never run twice blind.")


def _token(ctx):
    return ctx.request.scope["reckon.worker_token"]


def _agent(ctx) -> str:
    """The attempt's worker: the token's name and the MCP client's clientInfo, then the token's
    prefix, so that every event of the call names the token, whose issuer stands behind it."""
    params = ctx.session.client_params
    client = f"{params.client_info.name}/{params.client_info.version}" if params and params.client_info else "client"
    return agent_name(_token(ctx), client)


def _policy(name: str) -> ToolPolicy:
    upstream_name, _, tool = name.partition(".")
    upstream = get_upstream(upstream_name)
    if upstream is None:
        raise LookupError(f"no MCP upstream {upstream_name!r} is declared; tools are called as <upstream>.<tool>")
    policy = upstream.tools.get(tool)
    if policy is None:
        raise LookupError(f"tool {tool!r} of upstream {upstream_name} is not declared, so it is refused: {CONFIG_HINT}")
    return policy


async def list_tools(ctx, params) -> types.ListToolsResult:
    token = _token(ctx)
    listed = []
    for upstream in declared_upstreams():
        allowed = {name for name, policy in upstream.tools.items()
                   if token.allows(tenant=upstream.tenant, action=policy.action)}
        if not allowed:
            continue
        try:
            with anyio.fail_after(10):
                tools = await upstreams.list_tools(upstream)
        except Exception as exc:  # one upstream down hides only its own tools
            logger.warning("MCP upstream %s did not list its tools: %s", upstream.name, exc)
            continue
        for tool in tools:
            if tool.name in allowed:
                listed.append(tool.model_copy(update={"name": f"{upstream.name}.{tool.name}"}))
    return types.ListToolsResult(tools=listed)


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    token, agent = _token(ctx), _agent(ctx)
    arguments = dict(params.arguments or {})
    meta = dict(params.meta or {}) if params.meta else {}
    refused = limits.refusal(token, arguments)
    if refused is not None:
        return _result(calls.Answer.saying(refused[0], **refused[1]))
    try:
        policy = _policy(params.name)
    except LookupError as exc:
        return _result(calls.Answer.saying(str(exc)))
    upstream = get_upstream(policy.upstream)
    if not token.allows(tenant=upstream.tenant, action=policy.action):
        return _result(calls.Answer.saying(
            f"token {token.name!r} may not call {policy.name} (tenant {upstream.tenant}, action {policy.action})"))
    if not policy.journaled:  # read-only: passed through, not journaled
        try:
            with anyio.fail_after(policy.timeout):
                return types.CallToolResult.model_validate(
                    await upstreams.call_tool(upstream, policy.tool, arguments))
        except Exception as exc:
            return _result(calls.Answer.saying(f"{policy.name} did not answer: {type(exc).__name__}: {exc}"))
    try:
        opened = await in_thread(lambda: calls.open_call(token=token, policy=policy, arguments=arguments,
                                                         meta=meta, agent=agent))
    except calls.Refused as exc:
        return _result(calls.Answer.saying(str(exc), job=exc.job))
    except Exception as exc:
        if database_unavailable(exc):
            return _result(calls.Answer.saying(LEDGER_AWAY_BEFORE))
        raise
    if isinstance(opened, calls.Answer):
        return _result(opened)
    try:
        with anyio.fail_after(policy.timeout):
            result = await while_renewed(opened, lambda: upstreams.call_tool(upstream, policy.tool, arguments,
                                                                             key=opened.idempotency_key))
    except TimeoutError:
        return _result(await _lose(opened, f"{policy.name} did not answer within {policy.timeout:g} s"))
    except anyio.get_cancelled_exc_class():
        await _lose(opened, f"the call to {policy.name} was cancelled (the client went away) before it answered")
        raise
    except Exception as exc:  # a dropped connection proves nothing either
        return _result(await _lose(opened, f"{policy.name}: no answer: {type(exc).__name__}: {exc}"))
    try:
        return _result(await in_thread(lambda: calls.close_call(opened, result)))
    except Exception as exc:
        if database_unavailable(exc):
            return _result(calls.Answer.saying(LEDGER_AWAY_AFTER, **{"reckon/job": opened.job_id}))
        raise


async def _lose(opened: calls.Go, reason: str) -> calls.Answer:
    with anyio.CancelScope(shield=True):  # recorded even when the request is being cancelled
        try:
            return await in_thread(lambda: calls.lose_call(opened, reason))
        except Exception as exc:
            if database_unavailable(exc):  # not recorded: the lease runs out and says unknown
                return calls.Answer.saying(LEDGER_AWAY_AFTER, **{"reckon/job": opened.job_id})
            raise


def _result(answer: calls.Answer) -> types.CallToolResult:
    return types.CallToolResult.model_validate({
        "content": answer.content, "isError": answer.is_error,
        **({"structuredContent": answer.structured} if answer.structured is not None else {}),
        "_meta": answer.meta or None,
    })


def tool_input_schema(name: str) -> dict | None:
    """The input schema of `<upstream>.<tool>` as the upstream last listed it, for the SDK's check of
    a call's Mcp-Param-* headers. Without it the SDK runs this server's whole tools/list (which
    asks every upstream) before each tools/call: measured, that was a third of a call's time in
    the gateway. None (the upstream has not listed it yet: it is listed when the gateway connects)
    skips that check, as the SDK does when a listing fails; the call itself is still checked
    against the token and the tool's declared policy."""
    upstream_name, _, tool = name.partition(".")
    listed = upstreams.listed_tool(upstream_name, tool)
    return None if listed is None else listed.input_schema


def build_server() -> Server:
    return Server("reckon-gateway", version="1", on_list_tools=list_tools, on_call_tool=call_tool,
                  get_tool_input_schema=tool_input_schema)


class BearerTokens:
    """Only requests with an active worker token (Bearer) reach the MCP server."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
        try:
            token = await in_thread(lambda: authenticate(headers.get("authorization", "")))
        except Exception as exc:
            if not database_unavailable(exc):
                raise
            response = JSONResponse({"error": "the ledger's database is unavailable (a failover or a restart): "
                                              "ask again after Retry-After"},
                                    status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})
            return await response(scope, receive, send)
        if token is None:
            response = JSONResponse({"error": "a worker token is required: Authorization: Bearer rk_…"},
                                    status_code=401, headers={"WWW-Authenticate": "Bearer"})
            return await response(scope, receive, send)
        scope["reckon.worker_token"] = token
        return await self.app(scope, receive, send)


def build_app(*, allowed_hosts: list[str]) -> Starlette:
    server = build_server()
    mcp_app = server.streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, json_response=True,
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=allowed_hosts,
            allowed_origins=[f"http://{host}" for host in allowed_hosts] + [f"https://{host}" for host in allowed_hosts],
        ),
    )

    async def healthz(request):
        return JSONResponse({"ok": True, "upstreams": [u.name for u in declared_upstreams()]})

    async def no_stream(request):
        # Stateless: there is nothing to stream, and no session to end. The MCP spec lets a server
        # that offers no SSE stream answer GET with 405 (the SDK's would hold an empty stream open).
        return JSONResponse({"error": "this MCP server is stateless and offers no SSE stream: POST each request"},
                            status_code=405, headers={"Allow": "POST"})

    @asynccontextmanager
    async def lifespan(app):
        async with server.session_manager.run(), upstreams.shared(declared_upstreams()):
            yield

    return Starlette(routes=[Route("/healthz", healthz), Route("/mcp", no_stream, methods=["GET", "DELETE"]),
                             Mount("/", app=BearerTokens(mcp_app))], lifespan=lifespan)
