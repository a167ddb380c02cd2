"""The sandbox enforces rate limits: 429 with Retry-After above N requests/s, per path prefix or
for all others, set at start and changed live; internal routes are never limited."""

import pytest

from sandbox.testing import SandboxProcess


@pytest.fixture(scope="module")
def limited():
    with SandboxProcess(rate_limits={"/messages": 5}) as process:  # set on the command line
        yield process


def burst(sandbox, path: str, n: int) -> list:
    return [sandbox.request("GET", path) for _ in range(n)]


def test_above_the_limit_it_answers_429_with_retry_after_and_does_nothing(limited):
    limited.reset()
    answers = burst(limited, "/messages?marker=m", 12)
    statuses = [answer.status for answer in answers]
    # A bucket of 5/s holds two tokens: at least the first two go through, most of a quick burst does not.
    assert statuses[:2] == [200, 200] and statuses.count(429) >= 6, statuses
    refused = next(answer for answer in answers if answer.status == 429)
    assert int(refused.headers["Retry-After"]) >= 1
    assert "rate limit of 5 requests/s on /messages exceeded" in refused.json["error"]
    # Other prefixes and the internal routes are not limited.
    assert {answer.status for answer in burst(limited, "/invoices?marker=m", 12)} == {200}
    assert {answer.status for answer in burst(limited, "/_health", 12)} == {200}
    counts = limited.request("GET", "/_admin/rate_limits").json
    assert counts["limits"] == {"/messages": 5.0}
    assert counts["refused"]["/messages"] == statuses.count(429)
    assert counts["allowed"]["/messages"] == statuses.count(200)


def test_limits_change_live_and_lift(limited):
    limited.reset()
    limited.set_rate_limits({"*": 2})  # now everything but the internal routes
    assert 429 in [answer.status for answer in burst(limited, "/invoices?marker=m", 8)]
    assert 429 in [answer.status for answer in burst(limited, "/posts?marker=m", 8)]
    limited.set_rate_limits({})
    assert {answer.status for answer in burst(limited, "/messages?marker=m", 20)} == {200}
    limited.reset()  # back to the limits it started with
    assert limited.request("GET", "/_admin/rate_limits").json["limits"] == {"/messages": 5.0}


@pytest.mark.parametrize("body, message", [
    ({"limits": {"/_admin": 5}}, "internal routes are never limited"),
    ({"limits": {"messages": 5}}, "path prefix"),
    ({"limits": {"/messages": 0}}, "positive number"),
    ({"limits": {"/messages": True}}, "positive number"),
    ({"limits": {"/messages": 5}, "burst_s": 0}, "burst_s"),
    ({"limits": [5]}, "limits must be an object"),
    ({"rate": 5}, "unknown field"),
])
def test_a_bad_configuration_is_refused_and_changes_nothing(limited, body, message):
    limited.reset()
    answer = limited.request("PUT", "/_admin/rate_limits", body)
    assert answer.status == 400 and message in answer.json["error"], answer.json
    assert limited.request("GET", "/_admin/rate_limits").json["limits"] == {"/messages": 5.0}


def test_a_bad_command_line_limit_is_refused():
    from sandbox.server import main

    with pytest.raises(SystemExit):
        main(["--port", "0", "--rate-limit", "/messages"])
