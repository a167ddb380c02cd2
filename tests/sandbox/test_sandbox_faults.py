"""Fault injection, per request (X-Sandbox-Fault) and per configuration (PUT /_admin/faults)."""

import http.client
import time

import pytest

INVOICE = {"customer": "cus_1", "amount_cents": 500, "currency": "usd"}
MAIL = {"to": "ada@example.com", "subject": "s", "body": "b"}


def create(sandbox, key, fault=None):
    headers = {"Idempotency-Key": key, "X-Reckon-Marker": key}
    if fault:
        headers["X-Sandbox-Fault"] = fault
    return sandbox.request("POST", "/invoices", INVOICE, headers)


def test_error_5xx_answers_503_and_nothing_happens(sandbox):
    response = create(sandbox, "k-503", fault="error_5xx")
    assert response.status == 503
    assert "nothing was done" in response.json["error"]
    assert sandbox.effects(key="k-503")["count"] == 0
    assert sandbox.request("GET", "/invoices?idempotency_key=k-503").json == {"invoices": []}
    assert create(sandbox, "k-503").status == 201  # the key was not consumed


def test_fail_before_commit_rolls_back_and_answers_500(sandbox):
    response = create(sandbox, "k-500", fault="fail_before_commit")
    assert response.status == 500
    assert "rolled back" in response.json["error"]
    assert sandbox.effects()["total"] == 0
    assert sandbox.request("GET", "/invoices?idempotency_key=k-500").json == {"invoices": []}
    mail = sandbox.request("POST", "/messages", MAIL, {"X-Sandbox-Fault": "fail_before_commit"})
    assert mail.status == 500
    assert sandbox.request("GET", "/messages").json == {"messages": []}
    rotate = sandbox.request("POST", "/credentials/c/rotate", {},
                             {"X-Sandbox-Fault": "fail_before_commit"})
    assert rotate.status == 500
    assert sandbox.request("POST", "/credentials/c/rotate", {}).json["version"] == 1


def test_drop_after_commit_commits_the_effect_but_the_client_gets_no_response(sandbox):
    started = time.monotonic()
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        create(sandbox, "k-drop", fault="drop_after_commit")
    assert time.monotonic() - started < 5  # a reset/EOF, not a client timeout

    effects = sandbox.effects(key="k-drop")
    assert effects["count"] == 1  # it happened, although the client cannot know
    invoices = sandbox.request("GET", "/invoices?idempotency_key=k-drop").json["invoices"]
    assert [i["id"] for i in invoices] == [effects["effects"][0]["object_id"]]

    replay = create(sandbox, "k-drop")  # a retry with the same key is answered, not repeated
    assert replay.status == 200 and replay.headers["Idempotent-Replayed"] == "true"
    assert sandbox.effects(key="k-drop")["count"] == 1

    with pytest.raises((ConnectionError, http.client.HTTPException)):
        sandbox.request("POST", "/messages", MAIL,
                        {"X-Reckon-Marker": "m-drop", "X-Sandbox-Fault": "drop_after_commit"})
    assert sandbox.effects(marker="m-drop")["count"] == 1


def test_latency_delays_the_answer(sandbox):
    started = time.monotonic()
    response = create(sandbox, "k-slow", fault="latency=0.3")
    assert response.status == 201
    assert time.monotonic() - started >= 0.3
    assert response.headers["X-Sandbox-Fault-Injected"].startswith("latency=")


def test_faults_combine_in_one_header_and_apply_to_lookups_too(sandbox):
    response = create(sandbox, "k-combo", fault="latency=0.05, error_5xx")
    assert response.status == 503
    lookup = sandbox.request("GET", "/invoices?idempotency_key=x", headers={
        "X-Sandbox-Fault": "error_5xx"})
    assert lookup.status == 503  # a reconciler can be shown an unavailable provider


@pytest.mark.parametrize("header", ["bogus", "latency", "latency=abc", "latency=-1",
                                    "error_5xx=1", "error_5xx,explode"])
def test_unknown_or_malformed_fault_is_a_400_and_creates_nothing(sandbox, header):
    response = create(sandbox, "k-bad-fault", fault=header)
    assert response.status == 400
    assert "X-Sandbox-Fault" in response.json["error"]
    assert sandbox.effects()["total"] == 0


def outcome(sandbox, index):
    try:
        response = sandbox.request("POST", "/messages", MAIL, {"X-Reckon-Marker": f"m-{index}"})
    except (ConnectionError, http.client.HTTPException):
        return "dropped"
    return response.status


def test_configured_rates_with_a_seed_inject_every_kind_reproducibly(sandbox):
    config = {"rates": {"error_5xx": 0.2, "fail_before_commit": 0.2, "drop_after_commit": 0.2},
              "latency": {"min": 0.0, "max": 0.01}, "seed": 42}
    applied = sandbox.request("PUT", "/_admin/faults", config)
    assert applied.status == 200
    assert sandbox.request("GET", "/_admin/faults").json == applied.json == config

    outcomes = [outcome(sandbox, i) for i in range(40)]
    assert {201, 500, 503, "dropped"} == set(outcomes)
    committed = [f"m-{i}" for i, result in enumerate(outcomes) if result in (201, "dropped")]
    assert sorted(sandbox.effects()["by_marker"]) == sorted(committed)

    # Lookups, admin and accounting endpoints are never faulted by the configuration.
    for _ in range(10):
        assert sandbox.request("GET", "/messages?marker=m-0").status == 200
        assert sandbox.request("GET", "/_effects").status == 200

    sandbox.reset()  # back to no faults; the same seed gives the same sequence
    assert sandbox.request("GET", "/_admin/faults").json["rates"]["error_5xx"] == 0
    sandbox.request("PUT", "/_admin/faults", config)
    assert [outcome(sandbox, i) for i in range(40)] == outcomes


@pytest.mark.parametrize("config", [
    {"rates": {"error_5xx": 1.5}},
    {"rates": {"error_5xx": -0.1}},
    {"rates": {"error_5xx": "0.1"}},
    {"rates": {"error_5xx": 0.5, "fail_before_commit": 0.4, "drop_after_commit": 0.3}},
    {"rates": {"explode": 0.1}},
    {"latency": {"min": 1, "max": 0.5}},
    {"latency": {"min": -1}},
    {"seed": "x"},
    {"surprise": 1},
    [],
])
def test_invalid_fault_configuration_is_refused(sandbox, config):
    before = sandbox.request("GET", "/_admin/faults").json
    response = sandbox.request("PUT", "/_admin/faults", config)
    assert response.status == 400 and response.json["error"]
    assert sandbox.request("GET", "/_admin/faults").json == before
