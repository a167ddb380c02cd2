"""The gateway: an MCP server (Streamable HTTP, stateless) in front of the declared upstreams.

`tools/list` shows the declared tools the caller's worker token may call, each under its listed
name (`<upstream>_<tool>` unless declared otherwise: names model APIs accept, gateway/config.py)
with Reckon's policy in its hints and `_meta`; `tools/call` takes that name or Reckon's own
`<upstream>.<tool>`, passes a read-only tool through and journals every other one (gateway/calls.py).
Being stateless, any gateway process can serve any request: what a call must remember lives in the
ledger.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

import anyio
import mcp_types as types
from django.conf import settings
from mcp.server import Server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from api.tokens import agent_name, authenticate
from gateway import calls, handshakes, limits
from gateway import upstream as upstreams
from gateway.config import ToolPolicy, get_upstream, policy_named
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


def _client(ctx) -> str:
    """The MCP client's clientInfo as `name/version`: from this request's `_meta` (2026-07-28), or
    from the session id the gateway gave its `initialize` (gateway/handshakes.py); else `client`."""
    params = ctx.session.client_params
    if params and params.client_info:
        label = handshakes.client_label(params.client_info.name, params.client_info.version)
        if label:
            return label
    return ctx.request.scope.get(handshakes.CLIENT_SCOPE_KEY) or "client"


def _agent(ctx) -> str:
    """The attempt's worker: the token's name and the MCP client's clientInfo, then the token's
    prefix, so that every event of the call names the token, whose issuer stands behind it."""
    return agent_name(_token(ctx), _client(ctx))


def _policy(name: str) -> ToolPolicy:
    policy = policy_named(name)
    if policy is not None:
        return policy
    upstream_name, dot, tool = name.partition(".")
    if dot and get_upstream(upstream_name) is not None:
        raise LookupError(f"tool {tool!r} of upstream {upstream_name} is not declared, so it is refused: {CONFIG_HINT}")
    raise LookupError(f"no declared tool is listed as {name!r}: call a tool by the name tools/list gives it "
                      f"(an undeclared tool is refused: {CONFIG_HINT})")


async def list_tools(ctx, params) -> types.ListToolsResult:
    token = _token(ctx)
    listed = []
    for upstream in declared_upstreams():
        allowed = {name: policy for name, policy in upstream.tools.items()
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
                listed.append(as_listed(tool, allowed[tool.name]))
    return types.ListToolsResult(tools=listed)


# A client's timeout for a call should outlast the gateway's own deadline for the upstream's answer
# by this much (the journal's writes, a slow database): then the agent reads Reckon's answer, its
# job and its link, never the client's "the tool timed out".
CLIENT_TIMEOUT_MARGIN_S = 5


def as_listed(tool: types.Tool, policy: ToolPolicy) -> types.Tool:
    """The upstream's tool as the gateway lists it: under its listed name, with hints that state
    Reckon's policy, not the upstream's own (a tool the actions file declares irreversible is
    destructive, whatever its server says), and the policy itself in its `_meta`."""
    upstream_hints = tool.annotations.model_dump(exclude_none=True) if tool.annotations else {}
    if policy.journaled:
        # A call with the same key is answered from the ledger, never run twice: idempotent as far as
        # the same arguments make the same key (a key from _meta: the same arguments with another key
        # are another call).
        stated = {"read_only_hint": False, "destructive_hint": policy.effect == "irreversible",
                  "idempotent_hint": policy.key != "meta"}
    else:  # declared read-only: passed through
        stated = {"read_only_hint": True, "destructive_hint": False, "idempotent_hint": True}
    kept = {key: upstream_hints[key] for key in ("title", "open_world_hint") if key in upstream_hints}
    meta = {**(tool.meta or {}), "reckon/effect": policy.effect, "reckon/timeout_s": policy.timeout,
            "reckon/client_timeout_s": policy.timeout + CLIENT_TIMEOUT_MARGIN_S}
    if policy.journaled:
        meta["reckon/key"] = policy.key
        meta["reckon/action"] = policy.action
    if policy.effect == "irreversible":
        meta["reckon/approval"] = policy.approval
    return tool.model_copy(update={"name": policy.listed_name, "meta": meta,
                                   "annotations": types.ToolAnnotations(**kept, **stated)})


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    result = await _call_tool(ctx, params)
    meta = result.meta or {}
    outcome = meta.get("reckon/status") or ("replayed" if meta.get("reckon/replay") else "answered")
    logger.info("tools/call %s by %s at protocol %s: %s%s%s", params.name, _agent(ctx), ctx.protocol_version, outcome,
                " (an error)" if result.is_error else "", f", job {meta['reckon/job']}" if "reckon/job" in meta else "")
    return result


async def _call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    token, agent = _token(ctx), _agent(ctx)
    caller = {"client": _client(ctx), "protocol_version": ctx.protocol_version}
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
            f"token {token.name!r} may not call {policy.listed_name} (tenant {upstream.tenant}, action {policy.action})"))
    if not policy.journaled:  # read-only: passed through, not journaled
        try:
            with anyio.fail_after(policy.timeout):
                return types.CallToolResult.model_validate(
                    await upstreams.call_tool(upstream, policy.tool, arguments))
        except Exception as exc:
            return _result(calls.Answer.saying(f"{policy.listed_name} did not answer: {type(exc).__name__}: {exc}"))
    try:
        opened = await in_thread(lambda: calls.open_call(token=token, policy=policy, arguments=arguments,
                                                         meta=meta, agent=agent, caller=caller))
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
    """The input schema of the tool a call names (either name) as its upstream last listed it, for
    the SDK's check of a call's Mcp-Param-* headers. Without it the SDK runs this server's whole
    tools/list (which asks every upstream) before each tools/call: measured, that was a third of a
    call's time in the gateway. None (the upstream has not listed it yet: it is listed when the gateway connects)
    skips that check, as the SDK does when a listing fails; the call itself is still checked
    against the token and the tool's declared policy."""
    policy = policy_named(name)
    listed = upstreams.listed_tool(policy.upstream, policy.tool) if policy is not None else None
    return None if listed is None else listed.input_schema


def no_upstreams_reason() -> str | None:
    """Why tools/list is empty for everyone, said where an agent and a person read it (the server's
    instructions at initialize, the command's first line, /healthz); None when upstreams are declared."""
    if declared_upstreams():
        return None
    return (f"no MCP upstream is declared, so tools/list is empty: declare [[mcp.upstreams]] in the actions file "
            f"({settings.RECKON_ACTIONS_FILE}) and start the gateway again")


def build_server() -> Server:
    return Server("reckon-gateway", version="1", instructions=no_upstreams_reason(), on_list_tools=list_tools,
                  on_call_tool=call_tool, get_tool_input_schema=tool_input_schema)


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
        names = [u.name for u in declared_upstreams()]
        return JSONResponse({"ok": True, "upstreams": names} | ({} if names else {"reason": no_upstreams_reason()}))

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
                             Mount("/", app=BearerTokens(handshakes.Handshakes(mcp_app)))], lifespan=lifespan)
