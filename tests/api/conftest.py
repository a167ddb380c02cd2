"""Fixtures for the worker API: tokens with a scope, and a JSON client that sends them."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from django.test import Client

from api import tokens
from ledger.actions import _registry
from ledger.declarations import load_actions_file
from ledger.models import Attempt, Job, LedgerEvent
from tests.conftest import token_issuer
from tests.processes import WebServer, database_url_of_tests


@dataclass
class Answer:
    status: int
    json: dict
    headers: dict


class ApiClient:
    def __init__(self, token: str | None = None):
        self.token = token
        self.django = Client()

    def call(
        self,
        method: str,
        path: str,
        body=None,
        *,
        token: str | None = "default",
        raw: bytes | None = None,
        headers: dict | None = None,
    ) -> Answer:
        token = self.token if token == "default" else token
        extra = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
        for name, value in (headers or {}).items():
            extra["HTTP_" + name.upper().replace("-", "_")] = value
        data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
        response = self.django.generic(method, path, data, content_type="application/json", **extra)
        decoded = json.loads(response.content) if response.content else {}
        return Answer(response.status_code, decoded, dict(response.headers))

    def get(self, path, **kw) -> Answer:
        return self.call("GET", path, **kw)

    def post(self, path, body=None, **kw) -> Answer:
        return self.call("POST", path, body, **kw)


def issue(tenants=("*",), actions=("*",), name: str = "worker") -> str:
    return tokens.worker_token_create(name=name, tenants=list(tenants), actions=list(actions),
                                      created_by=token_issuer()).token


@pytest.fixture
def token(db) -> str:
    """A token for every tenant and action."""
    return issue(name="all")


@pytest.fixture
def api(token) -> ApiClient:
    return ApiClient(token)


def lease_body(lease: dict, **extra) -> dict:
    return {"owner": lease["owner"], "fencing_token": lease["fencing_token"], **extra}


def ledger_state() -> tuple:
    """Everything a refused request must leave alone: every job and attempt row, as values."""
    return (
        list(Job.objects.order_by("pk").values()),
        list(Attempt.objects.order_by("pk").values()),
    )


def event_count() -> int:
    return LedgerEvent.objects.count()


# External actions for the tests of workers over HTTP: declared in an actions file that both
# this process and the gunicorn it starts read. ext.slow's lease is short, to be renewed;
# notes.write is the README's action, which examples/pull_worker.py runs.
EXTERNAL_ACTIONS = """
[actions."ext.alpha"]
executor = "external"
reversible = true

[actions."ext.beta"]
executor = "external"
reversible = true

[actions."ext.slow"]
executor = "external"
reversible = true
lease_ttl = 1

[actions."notes.write"]
executor = "external"
reversible = true
"""


@pytest.fixture(scope="module")
def external_actions(tmp_path_factory):
    """The actions file, declared in this process too (for enqueue_job) until the module ends."""
    path = tmp_path_factory.mktemp("actions") / "actions.toml"
    path.write_text(EXTERNAL_ACTIONS)
    declared = load_actions_file(path, required=True)
    yield path
    for action in declared:
        _registry.pop(action.name, None)


@pytest.fixture(scope="module")
def api_server(django_db_setup, external_actions):
    """A real gunicorn (threaded, as runstack runs it) on the test database, with the external
    actions declared. Its claims may wait (10 at a time); the fallback poll is slow (10 s), so
    a prompt wake-up can only come from the NOTIFY; DEBUG logging says when a claim waits."""
    env = {
        "DATABASE_URL": database_url_of_tests(),
        "RECKON_ACTIONS_FILE": str(external_actions),
        "RECKON_CLAIM_WAITS": "10",
        "RECKON_CLAIM_POLL_S": "10",
        "RECKON_LOG_LEVEL": "DEBUG",
    }
    with WebServer(env=env, threads=12, log_name="claims-gunicorn") as server:
        yield server
