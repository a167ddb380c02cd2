"""The gateway's per-call work: the SDK checks a tools/call's Mcp-Param-* headers against the input
schema the upstream listed when the gateway connected (gateway.server.tool_input_schema), instead of
running the gateway's whole tools/list, which asks every upstream, before each call; and a call to a
stateless Streamable HTTP upstream is one POST on the shared connection (gateway.upstream)."""

from __future__ import annotations

import json
import time
import uuid

import anyio
import anyio.abc
import mcp_types as types
import pytest

from gateway import server
from gateway import upstream as upstreams
from gateway.config import META_KEY, get_upstream
from gateway.reconcile import run_apart


def test_the_sdk_takes_input_schemas_from_the_gateways_listing_not_a_tools_list_per_call():
    assert server.build_server().get_tool_input_schema is server.tool_input_schema


def test_the_shared_client_lists_the_upstreams_tools_when_it_connects(actions_file):
    notes = get_upstream("notes")
    upstreams._listed.pop("notes", None)
    assert server.tool_input_schema("notes.create_note") is None  # not listed yet: the check is skipped

    async def connect_and_read():
        async with upstreams.shared([notes]):
            deadline = time.monotonic() + 30
            while server.tool_input_schema("notes.create_note") is None:  # bounded wait on the listing
                assert time.monotonic() < deadline, "the upstream's tools were never listed"
                await anyio.sleep(0.05)
            return server.tool_input_schema("notes.create_note")

    schema = run_apart(connect_and_read)  # in a thread of its own: Playwright's loop may hold this one
    assert set(schema["properties"]) >= {"title", "body"} and schema["required"] == ["title", "body"]
    assert server.tool_input_schema("notes.no_such_tool") is None
    assert server.tool_input_schema("nowhere.create_note") is None



def _connected_and_listed(notes):
    """Inside upstreams.shared([notes]): wait (bounded) until the shared client is connected and listed."""
    async def wait():
        deadline = time.monotonic() + 30
        while "notes" not in upstreams._pipes or "create_note" not in upstreams._listed.get("notes", {}):
            assert time.monotonic() < deadline, "the upstream's tools were never listed"
            await anyio.sleep(0.05)
    return wait()


def test_a_call_to_a_stateless_http_upstream_is_one_post_answered_as_the_sdks_client_answers(actions_file, upstream,
                                                                                             monkeypatch):
    notes = get_upstream("notes")
    posted = []
    post = upstreams._post_tool_call

    async def watched(*args):
        posted.append(args[2])  # the tool
        return await post(*args)

    monkeypatch.setattr(upstreams, "_post_tool_call", watched)
    title = f"lean-{uuid.uuid4().hex}"

    async def both_ways():
        async with upstreams.shared([notes]):
            await _connected_and_listed(notes)
            posted_result = await upstreams.call_tool(notes, "create_note", {"title": title, "body": "b"}, key="k-1")
            through_sdk = upstreams.as_json(await upstreams._shared["notes"].call_tool(
                "create_note", {"title": title, "body": "b"}, meta={META_KEY: "k-2"}))
            found = await upstreams.call_tool(notes, "find_note", {"title": title})
            return posted_result, through_sdk, found

    posted_result, through_sdk, found = run_apart(both_ways)
    assert posted == ["create_note", "find_note"]
    assert upstream.notes(title) == 2  # each call ran once, no more
    first, second = (json.loads(result["content"][0]["text"]) for result in (posted_result, through_sdk))
    assert first["title"] == second["title"] == title and second["id"] == first["id"] + 1
    # The same answer as the SDK's client gives, but for the note's id.
    assert {**posted_result, "content": None} == {**through_sdk, "content": None}
    # A read-only tool is posted too; its structured answer, checked against its output schema.
    assert found["structuredContent"]["result"] == [{"id": first["id"], "title": title},
                                                    {"id": second["id"], "title": title}]


def test_a_tool_whose_schema_asks_for_param_headers_or_an_older_protocol_goes_through_the_sdks_client(
        actions_file, upstream, monkeypatch):
    notes = get_upstream("notes")

    async def postable():
        async with upstreams.shared([notes]):
            await _connected_and_listed(notes)
            client, listed = upstreams._shared["notes"], upstreams._listed["notes"]["create_note"]
            plain = upstreams._postable(client, "notes", "create_note")
            headed = listed.model_copy(update={"input_schema": {
                **listed.input_schema, "properties": {**listed.input_schema["properties"], "title": {
                    "type": "string", "x-mcp-header": "Title"}}}})
            later_listing = [headed, *(tool for name, tool in upstreams._listed["notes"].items() if name != "create_note")]
            monkeypatch.setattr(client, "list_tools", _answering(later_listing))
            await upstreams.list_tools(notes)
            with_headers = upstreams._postable(client, "notes", "create_note")
            unlisted = upstreams._postable(client, "notes", "no_such_tool")
            monkeypatch.setattr(client, "list_tools", _answering([listed, *later_listing[1:]]))
            await upstreams.list_tools(notes)
            monkeypatch.setattr(type(client), "protocol_version", property(lambda self: "2025-11-25"))
            older = upstreams._postable(client, "notes", "create_note")
            return plain, with_headers, unlisted, older

    assert run_apart(postable) == (True, False, False, False)


def _answering(tools):
    """A stand-in for the client's list_tools that answers this listing (a schema the upstream may change to)."""
    async def list_tools():
        return types.ListToolsResult(tools=tools)
    return list_tools


PING = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
JSON = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def test_a_pipe_keeps_its_connection_for_the_next_post_and_never_reuses_one_the_upstream_closed(upstream):
    async def posts():
        pipes = upstreams.Pipes(upstream.url, {"X-Team": "billing"})
        try:
            answers, streams = [], []
            for _ in range(3):
                answers.append(await pipes.post(PING, JSON))
                streams.append(pipes.idle[-1][0])
            # The upstream closes the idle connection (as uvicorn does after its keep-alive timeout):
            # the next post sees it closed and opens another, never writing into the dead one.
            closed = streams[-1]
            closed.extra(anyio.abc.SocketAttribute.raw_socket).shutdown(2)
            answers.append(await pipes.post(PING, JSON))
            after_close = pipes.idle[-1][0]
            # One idle past IDLE_S is not reused either.
            pipes.idle[-1] = (after_close, time.monotonic() - pipes.IDLE_S - 1)
            answers.append(await pipes.post(PING, JSON))
            return answers, streams, closed, after_close, pipes.idle[-1][0]
        finally:
            await pipes.aclose()

    answers, streams, closed, after_close, after_idle = run_apart(posts)
    assert {(status, kind) for status, kind, _ in answers} == {(200, "application/json")}
    assert all(json.loads(body) == {"jsonrpc": "2.0", "id": 1, "result": {}} for _, _, body in answers)
    assert streams[0] is streams[1] is streams[2]  # one connection for the three
    assert after_close is not closed and after_idle is not after_close


def test_a_header_with_a_line_break_is_refused_before_anything_is_sent(upstream):
    with pytest.raises(ValueError, match="line break"):
        upstreams.Pipes(upstream.url, {"X-Team": "billing\r\nX-Injected: yes"})
