"""Who called: a handshake-era client's clientInfo (from `initialize`) reaches its attempts on the
stateless gateway through the signed session id the gateway answered with; each call's protocol
version is on the attempt's closing event and in the gateway's log."""

import json
import urllib.request
import uuid

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import Implementation

from api.models import WorkerToken
from api.tokens import worker_token_create
from gateway.reconcile import run_apart
from ledger.models import Attempt, Job
from tests.conftest import token_issuer
from tests.processes import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def agent_token(name: str = "coder") -> str:
    return worker_token_create(name=name, tenants=["acme"], actions=["*"], created_by=token_issuer()).token


def call_as(url: str, worker_token: str, client: Implementation, mode: str, arguments: dict):
    async def work():
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {worker_token}"}) as http:
            async with Client(streamable_http_client(url, http_client=http), client_info=client, mode=mode) as agent:
                return agent.protocol_version, await agent.call_tool("notes_create_note", arguments)

    return run_apart(work)


def post(url: str, worker_token: str, message: dict, headers: dict | None = None):
    request = urllib.request.Request(url, data=json.dumps(message).encode(), method="POST", headers={
        "Authorization": f"Bearer {worker_token}", "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream", **(headers or {})})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.headers, json.loads(answer.read() or b"null")


def test_a_handshake_era_clients_name_is_on_its_attempts(gateway, upstream):
    name = f"note-{uuid.uuid4().hex[:8]}"

    version, result = call_as(gateway.url, agent_token(), Implementation(name="ts-agent", version="1.0.0"), "legacy",
                              {"title": name, "body": "x"})

    assert version == "2025-11-25" and not result.is_error
    attempt = Attempt.objects.get(job__action="mcp:notes.create_note")
    coder = WorkerToken.objects.get(name="coder")
    assert attempt.lease_owner == f"mcp:coder:ts-agent/1.0.0 (token {coder.prefix})"
    closing = attempt.job.events.get(kind="succeeded")
    assert closing.evidence["mcp"] == {"client": "ts-agent/1.0.0", "protocol_version": "2025-11-25"}
    wait_for(lambda: f"tools/call notes_create_note by {attempt.lease_owner} at protocol 2025-11-25: answered, job {attempt.job.job_id}"
             in gateway.output(), timeout=30, message="the call in the gateway's log")


def test_a_stateless_clients_name_and_version_come_with_each_call(gateway, upstream):
    name = f"note-{uuid.uuid4().hex[:8]}"

    version, result = call_as(gateway.url, agent_token(), Implementation(name="py-agent", version="2.0"), "auto",
                              {"title": name, "body": "x"})

    assert version == "2026-07-28" and not result.is_error
    attempt = Attempt.objects.get(job__action="mcp:notes.create_note")
    assert attempt.lease_owner.startswith("mcp:coder:py-agent/2.0 (token ")
    assert attempt.job.events.get(kind="succeeded").evidence["mcp"]["protocol_version"] == "2026-07-28"


def test_a_session_id_is_the_tokens_own_and_a_forged_one_names_no_client(gateway, upstream):
    first, second = agent_token("first"), agent_token("second")
    headers, _ = post(gateway.url, first, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "ts agent\n", "version": "1.0.0"}}})
    session = headers["Mcp-Session-Id"]
    assert session  # the signed clientInfo: nothing is stored

    def create(worker_token: str, title: str, session_id: str) -> None:
        _, answer = post(gateway.url, worker_token, {
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "notes_create_note", "arguments": {"title": title, "body": "x"}}},
            headers={"Mcp-Protocol-Version": "2025-11-25", "Mcp-Session-Id": session_id})
        assert not answer["result"]["isError"], answer

    create(first, "own-session", session)
    create(second, "borrowed-session", session)  # another token's id: not its client's name
    create(first, "forged-session", session[:-2] + ("AA" if not session.endswith("AA") else "BB"))

    owners = {job.payload["arguments"]["title"]: job.attempts.get().lease_owner
              for job in Job.objects.filter(action="mcp:notes.create_note")}
    assert owners["own-session"].startswith("mcp:first:ts-agent/1.0.0 (token ")  # control characters made -
    assert owners["borrowed-session"].startswith("mcp:second:client (token ")
    assert owners["forged-session"].startswith("mcp:first:client (token ")


def test_a_call_with_no_initialize_still_runs_as_client(gateway, upstream):
    _, answer = post(gateway.url, agent_token(), {
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "notes_create_note", "arguments": {"title": "no-handshake", "body": "x"}}})

    assert not answer["result"]["isError"] and "no-handshake" in json.dumps(answer["result"])
    assert Attempt.objects.get().lease_owner.startswith("mcp:coder:client (token ")
