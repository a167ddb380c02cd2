"""Billing: Stripe-like idempotency, lookups by key and marker, forgotten keys."""

import threading

INVOICE = {"customer": "cus_1", "amount_cents": 1250, "currency": "eur",
           "description": "April", "metadata": {"reckon_marker": "job-1"}}


def create(sandbox, key, body=None, marker=None, **headers):
    if key is not None:
        headers["Idempotency-Key"] = key
    if marker is not None:
        headers["X-Reckon-Marker"] = marker
    return sandbox.request("POST", "/invoices", body or INVOICE, headers)


def test_create_then_replay_returns_the_same_invoice_and_one_effect(sandbox):
    first = create(sandbox, "billing.create_invoice:1", marker="billing.create_invoice:1")
    assert first.status == 201
    invoice = first.json
    assert invoice["id"].startswith("inv_")
    assert {k: invoice[k] for k in INVOICE} == INVOICE
    assert invoice["idempotency_key"] == "billing.create_invoice:1"
    assert invoice["marker"] == "billing.create_invoice:1"
    assert invoice["created_at"]
    assert first.headers.get("Idempotent-Replayed") is None

    replay = create(sandbox, "billing.create_invoice:1", marker="billing.create_invoice:1")
    assert replay.status == 200
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json == invoice

    effects = sandbox.effects(key="billing.create_invoice:1")
    assert effects["count"] == 1
    assert effects["effects"][0]["object_id"] == invoice["id"]
    assert effects["effects"][0]["kind"] == "invoice.created"
    assert sandbox.request("GET", f"/invoices/{invoice['id']}").json == invoice


def test_same_key_with_a_different_body_is_refused_and_creates_nothing(sandbox):
    assert create(sandbox, "k-conflict").status == 201
    other = create(sandbox, "k-conflict", body={**INVOICE, "amount_cents": 9999})
    assert other.status == 422
    assert "Idempotency-Key" in other.json["error"]
    assert "was used with a different request body" in other.json["error"]
    assert sandbox.effects(key="k-conflict")["count"] == 1
    assert sandbox.effects()["total"] == 1
    invoices = sandbox.request("GET", "/invoices?idempotency_key=k-conflict").json["invoices"]
    assert [i["amount_cents"] for i in invoices] == [1250]


def test_twenty_concurrent_posts_with_one_key_create_one_invoice(sandbox):
    barrier = threading.Barrier(20)
    results, errors = [], []

    def post():
        try:
            barrier.wait(timeout=10)
            response = create(sandbox, "k-race", marker="k-race")
            results.append((response.status, response.json["id"]))
        except Exception as exc:  # reported below, never swallowed
            errors.append(exc)

    threads = [threading.Thread(target=post) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors
    assert sorted(status for status, _ in results) == [200] * 19 + [201]
    assert len({invoice_id for _, invoice_id in results}) == 1
    assert sandbox.effects(key="k-race")["count"] == 1
    assert len(sandbox.request("GET", "/invoices").json["invoices"]) == 1


def test_lookup_by_key_by_marker_header_and_by_metadata_marker(sandbox):
    by_header = create(sandbox, "k-a", body={**INVOICE, "metadata": {}}, marker="m-header").json
    tagged = {**INVOICE, "metadata": {"reckon_marker": "m-meta"}}
    by_metadata = create(sandbox, "k-b", body=tagged).json
    create(sandbox, None, body={**INVOICE, "metadata": {}})

    def lookup(query):
        response = sandbox.request("GET", f"/invoices?{query}")
        assert response.status == 200
        return [invoice["id"] for invoice in response.json["invoices"]]

    assert lookup("idempotency_key=k-a") == [by_header["id"]]
    assert lookup("idempotency_key=unknown") == []
    assert lookup("marker=m-header") == [by_header["id"]]
    assert lookup("marker=m-meta") == [by_metadata["id"]]
    assert lookup("marker=nobody") == []
    assert sandbox.effects(marker="m-meta")["count"] == 1  # the metadata marker tags the effect
    missing = sandbox.request("GET", "/invoices/inv_doesnotexist")
    assert missing.status == 404 and "inv_doesnotexist" in missing.json["error"]


def test_forget_keys_hides_keys_but_markers_still_work(sandbox):
    invoice = create(sandbox, "k-old", body=INVOICE).json  # metadata marker job-1
    assert sandbox.request("PUT", "/_admin/forget_keys", {"forget": True}).json == {"forget": True}
    assert sandbox.request("GET", "/_admin/forget_keys").json == {"forget": True}

    assert sandbox.request("GET", "/invoices?idempotency_key=k-old").json == {"invoices": []}
    by_marker = sandbox.request("GET", "/invoices?marker=job-1").json["invoices"]
    assert [i["id"] for i in by_marker] == [invoice["id"]]

    # A provider that forgot the key creates a second invoice for a replay: the duplicate that
    # reconciliation by marker exists to prevent, visible from outside.
    again = create(sandbox, "k-old", body=INVOICE)
    assert again.status == 201 and again.json["id"] != invoice["id"]
    summary = sandbox.effects()
    assert summary["duplicates"] == ["job-1"]
    assert summary["duplicate_keys"] == ["k-old"]

    sandbox.request("PUT", "/_admin/forget_keys", {"forget": False})
    remembered = sandbox.request("GET", "/invoices?idempotency_key=k-old").json["invoices"]
    assert [i["id"] for i in remembered] == [again.json["id"]]
