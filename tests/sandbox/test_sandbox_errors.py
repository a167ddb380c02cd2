"""Malformed requests get a clear 4xx and create nothing."""

import pytest

INVOICE = {"customer": "cus_1", "amount_cents": 500, "currency": "usd"}


@pytest.mark.parametrize(("raw", "message"), [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "JSON object"),
    (b"", "not valid JSON"),
    (b"\xff\xfe", "UTF-8"),
    (b'{"customer": "c", "amount_cents": NaN, "currency": "usd"}', "not valid JSON"),
])
def test_malformed_bodies(sandbox, raw, message):
    response = sandbox.request("POST", "/invoices", raw=raw, headers={"Idempotency-Key": "k"})
    assert response.status == 400
    assert message in response.json["error"]
    assert sandbox.effects()["total"] == 0


@pytest.mark.parametrize(("change", "message"), [
    ({"amount_cents": -5}, "positive"),
    ({"amount_cents": 0}, "positive"),
    ({"amount_cents": "5"}, "integer"),
    ({"amount_cents": 5.0}, "integer"),
    ({"amount_cents": True}, "integer"),
    ({"customer": ""}, "customer must not be empty"),
    ({"customer": 7}, "customer must be a string"),
    ({"currency": "euro"}, "3-letter"),
    ({"metadata": {"a": 1}}, "metadata"),
    ({"metadata": ["a"]}, "metadata"),
    ({"description": 3}, "description"),
    ({"colour": "red"}, "unknown field(s) colour"),
    ({"customer": None}, "customer must be a string"),
])
def test_invalid_invoice_fields(sandbox, change, message):
    response = sandbox.request("POST", "/invoices", {**INVOICE, **change},
                               {"Idempotency-Key": "k-invalid"})
    assert response.status == 400
    assert message in response.json["error"]
    assert sandbox.effects()["total"] == 0
    # The refused request did not consume the key.
    valid = sandbox.request("POST", "/invoices", INVOICE, {"Idempotency-Key": "k-invalid"})
    assert valid.status == 201


def test_missing_invoice_field(sandbox):
    response = sandbox.request("POST", "/invoices", {"customer": "c", "currency": "usd"})
    assert response.status == 400
    assert response.json["error"] == "missing required field(s): amount_cents"


@pytest.mark.parametrize(("path", "body", "headers", "message"), [
    ("/messages", {"to": "", "subject": "s", "body": "b"}, {}, "to must not be empty"),
    ("/messages", {"to": "nobody", "subject": "s", "body": "b"}, {}, "e-mail address"),
    ("/messages", {"to": "a@b.c", "body": "b"}, {}, "missing required field(s): subject"),
    ("/posts", {"body": "hi", "marker": "m"}, {}, "X-Profile"),
    ("/posts", {"body": "", "marker": "m"}, {"X-Profile": "p"}, "body must not be empty"),
    ("/posts", {"body": "hi", "marker": 3}, {"X-Profile": "p"}, "marker must be a string"),
    ("/credentials/x/rotate", {"force": True}, {}, "unknown field(s) force"),
    ("/invoices", INVOICE, {"Idempotency-Key": ""}, "Idempotency-Key"),
])
def test_invalid_fields_on_other_providers(sandbox, path, body, headers, message):
    sandbox.request("PUT", "/_admin/profiles/p", {"account": "acme"})
    response = sandbox.request("POST", path, body, headers)
    assert response.status == 400
    assert message in response.json["error"]
    assert sandbox.effects()["total"] == 0


def test_unknown_path_and_wrong_method(sandbox):
    missing = sandbox.request("GET", "/refunds")
    assert missing.status == 404 and "/refunds" in missing.json["error"]
    wrong = sandbox.request("DELETE", "/invoices")
    assert wrong.status == 405
    assert wrong.headers["Allow"] == "GET, POST"
    assert "DELETE" in wrong.json["error"]
    assert sandbox.request("PATCH", "/messages", {}).status == 405
    assert sandbox.request("PURGE", "/posts").status == 405  # even methods http.server lacks


@pytest.mark.parametrize("query", ["?key=k", "?marker=", "?marker=a&marker=b"])
def test_bad_lookup_queries_are_refused_rather_than_listing_everything(sandbox, query):
    response = sandbox.request("GET", "/invoices" + query)
    assert response.status == 400 and response.json["error"]


@pytest.mark.parametrize(("path", "body"), [
    ("/_admin/profiles/p", {"account": "acme", "session": "sleeping"}),
    ("/_admin/profiles/p", {"account": ""}),
    ("/_admin/profiles/p", {"session": "active"}),
    ("/_admin/forget_keys", {"forget": "yes"}),
    ("/_admin/forget_keys", {}),
])
def test_invalid_admin_requests(sandbox, path, body):
    response = sandbox.request("PUT", path, body)
    assert response.status == 400 and response.json["error"]
    assert sandbox.request("GET", "/profiles/p").status == 404
    assert sandbox.request("GET", "/_admin/forget_keys").json == {"forget": False}
