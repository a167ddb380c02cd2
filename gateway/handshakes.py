"""Who calls, on a stateless gateway: a handshake-era client (protocol 2025-11-25 and before) names
itself once, in `initialize`, and the gateway keeps no session to remember it by. So the answer to
`initialize` carries an `Mcp-Session-Id` that is the client's `clientInfo`, signed (with the worker
token's prefix, under a key derived from RECKON_SECRET_KEY): the client sends it back on every
request, as the protocol asks, and any gateway process reads the name from it. Nothing is stored.
A 2026-07-28 client names itself in every request's `_meta`, and the SDK reads that itself.

An id that does not verify (another token's, forged, from before a key rotation) is ignored: the
call goes on, and its attempts read `client` as before.
"""

from __future__ import annotations

import json
import re

from django.core import signing

from api.models import WorkerToken

SESSION_HEADER = b"mcp-session-id"
PROTOCOL_HEADER = b"mcp-protocol-version"
SALT = "reckon: MCP gateway session ids"
CLIENT_SCOPE_KEY = "reckon.client_info"
# An initialize request is small; a body larger than this is not read here (and is no initialize).
MAX_INITIALIZE_BYTES = 64 * 1024
NAME_LENGTH, VERSION_LENGTH = 100, 50
UNPRINTABLE = re.compile(r"[^\x21-\x7e]+")  # a client's name in actor names: no spaces, no control characters


def client_label(name: object, version: object) -> str | None:
    """`name/version` as the attempt's worker name carries it; None for no usable name."""
    if not isinstance(name, str) or not UNPRINTABLE.sub("-", name).strip("-"):
        return None
    label = UNPRINTABLE.sub("-", name).strip("-")[:NAME_LENGTH]
    if isinstance(version, str) and UNPRINTABLE.sub("-", version).strip("-"):
        label += "/" + UNPRINTABLE.sub("-", version).strip("-")[:VERSION_LENGTH]
    return label


def session_id_for(token: WorkerToken, label: str) -> str:
    return signing.dumps({"t": token.prefix, "c": label}, salt=SALT, compress=True)


def client_in(session_id: str, token: WorkerToken) -> str | None:
    """The client label a session id this gateway gave `token` carries; None for any other id."""
    try:
        signed = signing.loads(session_id, salt=SALT)
    except signing.BadSignature:
        return None
    if not isinstance(signed, dict) or signed.get("t") != token.prefix or not isinstance(signed.get("c"), str):
        return None
    return signed["c"]


def _initialize_client(body: bytes) -> str | None:
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("method") != "initialize":
        return None
    params = message.get("params")
    info = params.get("clientInfo") if isinstance(params, dict) else None
    return client_label(info.get("name"), info.get("version")) if isinstance(info, dict) else None


class Handshakes:
    """ASGI middleware inside BearerTokens: puts the client's label, from a session id this gateway
    signed, in the request's scope; and answers an `initialize` with such a session id."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        token = scope["reckon.worker_token"]
        if SESSION_HEADER in headers:
            label = client_in(headers[SESSION_HEADER].decode("latin-1"), token)
            if label is not None:
                scope[CLIENT_SCOPE_KEY] = label
            return await self.app(scope, receive, send)
        length = headers.get(b"content-length", b"")
        if PROTOCOL_HEADER in headers or not length.isdigit() or int(length) > MAX_INITIALIZE_BYTES:
            return await self.app(scope, receive, send)  # (an initialize is sent before any version is agreed)
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before its request was whole
            body += message.get("body", b"")
            more = message.get("more_body", False)
        label = _initialize_client(body)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        async def with_session(message):
            if label is not None and message["type"] == "http.response.start" and message["status"] == 200:
                message = {**message, "headers": [*message.get("headers", []),
                                                  (SESSION_HEADER, session_id_for(token, label).encode("latin-1"))]}
            await send(message)

        return await self.app(scope, replay, with_session)
