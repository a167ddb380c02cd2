"""The tool names the gateway lists are names the model APIs accept: OpenAI's function names and
Anthropic's tool names must match ^[a-zA-Z0-9_-]{1,64}$, and the frameworks pass an MCP tool's name
through unchanged; Claude Code puts mcp__<server>__ before it (docs/agents/frameworks/claude-code.md
names the server "reckon")."""

from __future__ import annotations

import re

import pytest

from tests.gateway.conftest import list_tools

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MODEL_API_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # OpenAI's and Anthropic's published pattern
CLAUDE_CODE_PREFIX = "mcp__reckon__"


def test_every_listed_name_fits_the_model_apis_pattern_even_after_claude_codes_prefix(gateway, token):
    names = list_tools(gateway.url, token)

    assert len(names) >= 5  # the upstreams' tools this package declares
    refused = [name for name in names if not MODEL_API_TOOL_NAME.fullmatch(CLAUDE_CODE_PREFIX + name)]
    assert refused == [], f"the model APIs refuse these tool names: {refused}"
    assert all(MODEL_API_TOOL_NAME.fullmatch(name) for name in names)
