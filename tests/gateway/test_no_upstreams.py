"""A gateway with no upstream declared (as `make run` starts one before any is) says why its tool
list is empty: in its first line, in /healthz and in the instructions an agent reads at initialize."""

from __future__ import annotations

import json
import urllib.request

import pytest

from api.tokens import worker_token_create
from gateway.reconcile import run_apart
from tests.conftest import token_issuer
from tests.gateway.conftest import Gateway, _with_client

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_it_says_why_tools_list_is_empty(tmp_path):
    empty = tmp_path / "actions.toml"
    empty.write_text('[actions."notes.write"]\nexecutor = "external"\nreversible = true\n')
    token = worker_token_create(name="agent", tenants=["acme"], actions=["*"], created_by=token_issuer()).token
    with Gateway(empty) as gateway:
        reason = f"no MCP upstream is declared, so tools/list is empty: declare [[mcp.upstreams]] in the actions file ({empty})"
        assert reason in gateway.output().splitlines()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{gateway.port}/healthz", timeout=30) as answer:  # nosec B310  # the test's own gateway
            health = json.load(answer)
        assert health["upstreams"] == [] and reason in health["reason"]

        async def listed(client):
            return client.instructions, [tool.name for tool in (await client.list_tools()).tools]

        instructions, tools = run_apart(_with_client, gateway.url, token, listed)
        assert tools == [] and reason in instructions
