"""Mail, publish target and vault; the effect summary."""

MAIL = {"to": "ada@example.com", "subject": "Receipt", "body": "Thanks"}


def send(sandbox, marker="mail.send:1", body=None):
    return sandbox.request("POST", "/messages", body or MAIL, {"X-Reckon-Marker": marker})


def test_every_mail_post_sends_a_new_message_even_an_identical_repeat(sandbox):
    first, second = send(sandbox), send(sandbox)
    assert first.status == second.status == 201
    assert first.json["message_id"] != second.json["message_id"]
    assert first.json["message_id"].endswith("@sandbox.local>")
    assert {k: first.json[k] for k in MAIL} == MAIL
    assert first.json["marker"] == "mail.send:1" and first.json["sent_at"]

    found = sandbox.request("GET", "/messages?marker=mail.send:1")
    assert found.status == 200
    assert [m["message_id"] for m in found.json["messages"]] == [
        first.json["message_id"], second.json["message_id"]]
    assert sandbox.request("GET", "/messages?marker=other").json == {"messages": []}

    assert sandbox.effects(marker="mail.send:1")["count"] == 2
    summary = sandbox.effects()
    assert summary["total"] == 2
    assert summary["by_marker"] == {"mail.send:1": 2}
    assert summary["duplicates"] == ["mail.send:1"]


def set_profile(sandbox, profile, account, session="active"):
    response = sandbox.request("PUT", f"/_admin/profiles/{profile}",
                               {"account": account, "session": session})
    assert response.status == 200, response.json
    return response.json


def post(sandbox, profile, marker="social.publish_post:1", body="Hello"):
    return sandbox.request("POST", "/posts", {"body": body, "marker": marker},
                           {"X-Profile": profile, "X-Reckon-Marker": marker})


def test_profile_is_observable_and_posts_carry_the_current_account(sandbox):
    assert set_profile(sandbox, "brand", "acme") == {
        "profile": "brand", "account": "acme", "session": "active"}
    assert sandbox.request("GET", "/profiles/brand").json["account"] == "acme"

    first = post(sandbox, "brand", marker="m-1")
    assert first.status == 201
    assert first.json["account"] == "acme" and first.json["profile"] == "brand"
    assert first.json["post_id"] and first.json["posted_at"]

    set_profile(sandbox, "brand", "someone-else")  # the profile was switched to another account
    second = post(sandbox, "brand", marker="m-2")
    assert second.json["account"] == "someone-else"

    posts = sandbox.request("GET", "/posts?marker=m-2").json["posts"]
    assert [(p["post_id"], p["account"], p["marker"]) for p in posts] == [
        (second.json["post_id"], "someone-else", "m-2")]
    assert sandbox.effects(marker="m-1")["count"] == 1


def test_expired_session_is_refused_with_401_and_no_effect(sandbox):
    set_profile(sandbox, "brand", "acme", session="expired")
    assert sandbox.request("GET", "/profiles/brand").json["session"] == "expired"
    refused = post(sandbox, "brand")
    assert refused.status == 401
    assert "expired" in refused.json["error"]
    assert sandbox.effects()["total"] == 0
    assert sandbox.request("GET", "/posts?marker=social.publish_post:1").json == {"posts": []}


def test_unknown_profile_is_404_for_observation_and_posting(sandbox):
    assert sandbox.request("GET", "/profiles/ghost").status == 404
    refused = post(sandbox, "ghost")
    assert refused.status == 404 and "ghost" in refused.json["error"]
    assert sandbox.effects()["total"] == 0


def test_vault_rotation_increments_and_cannot_be_queried(sandbox):
    headers = {"X-Reckon-Marker": "vault:1"}
    first = sandbox.request("POST", "/credentials/db-password/rotate", {}, headers)
    second = sandbox.request("POST", "/credentials/db-password/rotate", raw=b"", headers=headers)
    assert (first.status, second.status) == (200, 200)
    assert first.json["name"] == "db-password"
    assert (first.json["version"], second.json["version"]) == (1, 2)
    assert second.json["rotated_at"]
    other = sandbox.request("POST", "/credentials/api-token/rotate", {})
    assert other.json["version"] == 1

    for path in ("/credentials/db-password", "/credentials"):
        refused = sandbox.request("GET", path)
        assert refused.status == 405
        assert refused.json == {"error": "the vault cannot be queried"}
    assert sandbox.effects(marker="vault:1")["count"] == 2
