"""The gateway's per-call work: the SDK checks a tools/call's Mcp-Param-* headers against the input
schema the upstream listed when the gateway connected (gateway.server.tool_input_schema), instead of
running the gateway's whole tools/list, which asks every upstream, before each call."""

from __future__ import annotations

import time

import anyio

from gateway import server
from gateway import upstream as upstreams
from gateway.config import get_upstream
from tests.gateway.conftest import _run


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

    schema = _run(connect_and_read)  # in a thread of its own: Playwright's loop may hold this one
    assert set(schema["properties"]) >= {"title", "body"} and schema["required"] == ["title", "body"]
    assert server.tool_input_schema("notes.no_such_tool") is None
    assert server.tool_input_schema("nowhere.create_note") is None

