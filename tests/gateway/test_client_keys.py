"""A client's own key, under the spellings the ecosystem already sends in a call's _meta: Reckon's
`reckon/idempotency_key`, SEP-3182's `idempotencyKey`, and the reserved-prefix
`io.modelcontextprotocol/idempotency-key` (and `.../idempotencyKey`); one key, whichever the
spelling, is one call; two different keys at once are refused and nothing is called."""

import uuid

import pytest

from api.tokens import worker_token_create
from ledger.models import Job
from tests.conftest import token_issuer
from tests.gateway.conftest import call, text

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def acme_token() -> str:
    return worker_token_create(name="keys", tenants=["acme"], actions=["*"], created_by=token_issuer()).token


@pytest.mark.parametrize("spelling", ["idempotencyKey", "io.modelcontextprotocol/idempotency-key",
                                      "io.modelcontextprotocol/idempotencyKey"])
def test_a_key_under_another_spelling_is_the_same_call(gateway, upstream, spelling):
    token, name = acme_token(), f"note-{uuid.uuid4().hex[:8]}"
    key = f"order-{name}"
    arguments = {"title": name, "body": "x"}

    ran = call(gateway.url, token, "keyed_create_note", arguments, meta={spelling: key})
    again = call(gateway.url, token, "keyed_create_note", arguments, meta={"reckon/idempotency_key": key})
    both = call(gateway.url, token, "keyed_create_note", arguments, meta={spelling: key, "reckon/idempotency_key": key})

    assert not ran.is_error and "reckon/replay" not in ran.meta
    assert again.meta["reckon/replay"] is True and both.meta["reckon/replay"] is True
    assert upstream.notes(name) == 1
    [job] = Job.objects.filter(action="mcp:keyed.create_note")
    assert ran.meta["reckon/job"] == again.meta["reckon/job"] == job.job_id


def test_two_different_keys_at_once_are_refused_and_nothing_is_called(gateway, upstream):
    name = f"note-{uuid.uuid4().hex[:8]}"

    refused = call(gateway.url, acme_token(), "keyed_create_note", {"title": name, "body": "x"},
                   meta={"idempotencyKey": "order-1", "io.modelcontextprotocol/idempotency-key": "order-2"})

    assert refused.is_error and "two different idempotency keys" in text(refused)
    assert 'idempotencyKey = "order-1"' in text(refused) and "nothing called" in text(refused)
    assert upstream.notes(name) == 0 and not Job.objects.exists()


def test_a_tool_keyed_by_meta_names_the_spellings_it_takes(gateway, upstream):
    refused = call(gateway.url, acme_token(), "keyed_create_note", {"title": "no-key", "body": "x"},
                   meta={"idempotencyKey": ""})

    assert refused.is_error and "reckon/idempotency_key" in text(refused) and "idempotencyKey" in text(refused)
    assert not Job.objects.exists()
