"""The tool names the gateway lists are names the model APIs accept: OpenAI's function names and
Anthropic's tool names must match ^[a-zA-Z0-9_-]{1,64}$, and the frameworks pass an MCP tool's name
through unchanged; Claude Code puts mcp__<server>__ before it. The server, its URL and its headers
are the .mcp.json of docs/agents/frameworks/claude-code.md, read as Claude Code reads it."""

from __future__ import annotations

import json
import os
import re

import pytest
from django.conf import settings
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from gateway.reconcile import run_apart
from tests.processes import ROOT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MODEL_API_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # OpenAI's and Anthropic's published pattern
PAGE = ROOT / "docs" / "agents" / "frameworks" / "claude-code.md"


def mcp_json() -> dict:
    (block,) = re.findall(r"<!-- check: mcp-json -->\n```json\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    return json.loads(block)


def expanded(value: str, environment: dict) -> str:
    """Claude Code's ${VAR} expansion in url and headers."""
    return re.sub(r"\$\{(\w+)\}", lambda match: environment[match.group(1)], value)


def listed_names(url: str, headers: dict) -> list[str]:
    async def names():
        async with create_mcp_http_client(headers=headers) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                return [tool.name for tool in (await client.list_tools()).tools]

    return run_apart(names)


def test_every_listed_name_fits_the_model_apis_pattern_even_after_claude_codes_prefix(gateway, token):
    [(server, entry)] = mcp_json()["mcpServers"].items()
    assert entry["type"] == "http" and entry["url"] == settings.RECKON_MCP_GATEWAY_URL  # where `make run` serves it
    environment = {**os.environ, "RECKON_MCP_TOKEN": token}
    headers = {name: expanded(value, environment) for name, value in entry["headers"].items()}

    names = listed_names(gateway.url, headers)  # this test's gateway, in place of make run's

    assert len(names) >= 5  # the upstreams' tools this package declares
    refused = [name for name in names if not MODEL_API_TOOL_NAME.fullmatch(f"mcp__{server}__{name}")]
    assert refused == [], f"the model APIs refuse these tool names after Claude Code's prefix: {refused}"
