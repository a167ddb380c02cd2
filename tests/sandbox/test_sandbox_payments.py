"""The payments provider (/charges): Stripe-style idempotency keys, and a dropped request's key
answered 409 "in progress" for ever, although its charge exists."""

import http.client

import pytest

CHARGE = {"customer": "cus_1", "amount_cents": 1250, "currency": "eur"}


def charge(sandbox, key=None, body=CHARGE, fault=None):
    headers = {"Idempotency-Key": key, "X-Reckon-Marker": key} if key else {}
    if fault:
        headers["X-Sandbox-Fault"] = fault
    return sandbox.request("POST", "/charges", body, headers)


def lookup(sandbox, key):
    return sandbox.request("GET", f"/charges?idempotency_key={key}").json


def test_a_completed_key_replays_its_charge_and_refuses_another_body(sandbox):
    first = charge(sandbox, "k-1")
    assert first.status == 201 and first.json["idempotency_key"] == "k-1"
    again = charge(sandbox, "k-1")
    assert again.status == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json["id"] == first.json["id"]
    other = charge(sandbox, "k-1", {**CHARGE, "amount_cents": 99})
    assert other.status == 422 and first.json["id"] in other.json["error"]
    assert sandbox.effects(key="k-1")["count"] == 1
    assert lookup(sandbox, "k-1") == {"charges": [first.json], "key_state": "completed"}
    assert sandbox.request("GET", f"/charges/{first.json['id']}").json == first.json


def test_a_dropped_request_charges_once_and_its_key_answers_409_in_progress_for_ever(sandbox):
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        charge(sandbox, "k-drop", fault="drop_after_commit")
    for _ in range(3):  # the same request, as a client library's automatic retry sends it
        refused = charge(sandbox, "k-drop")
        assert (refused.status, refused.json) == (409, {"error": "in progress"})
    assert charge(sandbox, "k-drop", {**CHARGE, "amount_cents": 1}).status == 409
    assert sandbox.effects(key="k-drop")["count"] == 1  # it happened
    truth = lookup(sandbox, "k-drop")
    assert truth["key_state"] == "in_progress"
    assert [c["idempotency_key"] for c in truth["charges"]] == ["k-drop"]


def test_a_request_that_did_nothing_leaves_its_key_free(sandbox):
    assert charge(sandbox, "k-503", fault="error_5xx").status == 503
    assert charge(sandbox, "k-500", fault="fail_before_commit").status == 500
    assert lookup(sandbox, "k-503") == {"charges": [], "key_state": None}
    assert lookup(sandbox, "k-500") == {"charges": [], "key_state": None}
    assert charge(sandbox, "k-503").status == 201 and charge(sandbox, "k-500").status == 201
    assert sandbox.effects()["total"] == 2


def test_bad_charges_are_refused_with_a_reason_and_charge_nothing(sandbox):
    assert "amount_cents" in charge(sandbox, "k-bad", {**CHARGE, "amount_cents": 0}).json["error"]
    assert "currency" in charge(sandbox, "k-bad", {**CHARGE, "currency": "euro"}).json["error"]
    assert "unknown field" in charge(sandbox, "k-bad", {**CHARGE, "card": "4242"}).json["error"]
    assert sandbox.request("GET", "/charges/ch_missing").status == 404
    assert lookup(sandbox, "k-bad") == {"charges": [], "key_state": None}
    assert sandbox.effects()["total"] == 0


def test_without_a_key_every_request_is_a_new_charge(sandbox):
    assert charge(sandbox).status == 201 and charge(sandbox).status == 201
    assert sandbox.effects()["total"] == 2
