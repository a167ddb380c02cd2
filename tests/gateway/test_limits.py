"""What a tools/call may ask of the gateway (gateway/limits.py): arguments larger than the worker API's
body limit, and calls past the token's rate, are refused with an error result before anything is
stored or called; GET /mcp is answered 405 (a stateless server has nothing to stream), not held open."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid

import pytest
from django.conf import settings

from api.tokens import worker_token_create
from gateway.limits import RETRY_AFTER_META, CallRate
from ledger.models import Job, LedgerEvent
from tests.conftest import token_issuer
from tests.gateway.conftest import Gateway, call, text

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def token(name: str = "limited-agent") -> str:
    return worker_token_create(name=name, tenants=["acme"], actions=["*"], created_by=token_issuer()).token


def title() -> str:
    return f"limit-{uuid.uuid4().hex[:8]}"


def written() -> tuple[int, int]:
    return Job.objects.count(), LedgerEvent.objects.count()


def test_arguments_larger_than_the_limit_are_refused_before_anything_is_stored_or_called(gateway, upstream):
    agent, limit = token(), settings.RECKON_MCP_GATEWAY_MAX_ARGUMENTS_BYTES
    assert limit == settings.RECKON_API_MAX_BODY_BYTES  # the worker API's limit
    big, fits = title(), title()
    before = written()

    refused = call(gateway.url, agent, "notes_create_note", {"title": big, "body": "x" * limit})

    assert refused.is_error and "refused, nothing called nor stored" in text(refused)
    assert f"more than the {limit}" in text(refused) and "RECKON_MCP_GATEWAY_MAX_ARGUMENTS_BYTES" in text(refused)
    assert written() == before and upstream.notes(big) == 0
    # Read-only tools too: nothing reaches the upstream.
    assert call(gateway.url, agent, "notes_find_note", {"title": "x" * limit}).is_error
    # Just under the limit, a call runs.
    ran = call(gateway.url, agent, "notes_create_note", {"title": fits, "body": "x" * (limit - 100)})
    assert not ran.is_error and upstream.notes(fits) == 1


def test_calls_past_the_tokens_rate_are_refused_at_once_saying_when_to_call_again(actions_file, upstream):
    with Gateway(actions_file, log_name="mcp-gateway-limited",
                 env={"RECKON_MCP_GATEWAY_CALLS_PER_MINUTE": "3"}) as limited:
        agent, other = token(), token("other-agent")
        for _ in range(3):
            assert not call(limited.url, agent, "notes_create_note", {"title": title(), "body": "b"}).is_error
        before, name = written(), title()
        began = time.monotonic()

        refused = call(limited.url, agent, "notes_create_note", {"title": name, "body": "b"})

        took = time.monotonic() - began
        assert refused.is_error and "past its 3 tool calls a minute" in text(refused)
        # One call comes back every 20 s at 3 a minute: "call again in 20 s" or a little less.
        assert 0 < refused.meta[RETRY_AFTER_META] <= 20 and f"call again in {refused.meta[RETRY_AFTER_META]} s" in \
            text(refused)
        assert written() == before and upstream.notes(name) == 0  # nothing stored, nothing called
        assert took < 5  # answered at once, not held until the rate allows it
        # The limit is the token's: another token calls at once.
        assert not call(limited.url, other, "notes_create_note", {"title": title(), "body": "b"}).is_error


def test_a_bucket_refills_at_its_rate():
    rate = CallRate(60)  # one a second
    assert [rate.take("t", now=100.0) for _ in range(60)] == [0.0] * 60
    assert rate.take("t", now=100.0) == pytest.approx(1.0)
    assert rate.take("t", now=100.5) == pytest.approx(0.5)
    assert rate.take("t", now=101.0) == 0.0 and rate.take("t", now=101.0) > 0
    assert rate.take("another", now=101.0) == 0.0
    assert CallRate(0).take("t") == 0.0  # no limit


def test_get_is_answered_405_allow_post_not_an_endless_stream(gateway):
    request = urllib.request.Request(gateway.url, method="GET", headers={
        "Accept": "text/event-stream", "Authorization": f"Bearer {token()}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 405 and refused.value.headers["Allow"] == "POST"
    assert "stateless" in refused.value.read().decode()
