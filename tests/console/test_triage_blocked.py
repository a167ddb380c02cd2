"""Blocked work has a way out: blocked jobs are apart in the queue, say why in their row, and get
decisions of their own — re-check identity (the real check, against the sandbox's profiles), a
replay only once the binding matches, and cancel after an in-page "are you sure?"."""

import pytest

from ledger import runtime
from ledger.models import Job, LedgerEvent
from tests.conftest import latest_attempt, make_job
from tests.console.conftest import htmx, latest_version
from tests.reconciliation.helpers import assert_ledger_clean

pytestmark = pytest.mark.django_db

BINDING = {"profile": "p1", "account": "acme-social"}


def _profile(sandbox, account):
    status, _, body = sandbox.request("PUT", "/_admin/profiles/p1", {"account": account, "session": "active"})
    assert status == 200, body


def blocked_post(provider, job_id="post-1") -> Job:
    """A post whose worker found the profile logged into another account: blocked, nothing sent."""
    _profile(provider, "someone-else")
    make_job(job_id, action="social.publish_post", payload={"body": "Launch!"}, identity=BINDING)
    assert runtime.run_job(job_id, worker="w") == "blocked"
    return Job.objects.get(job_id=job_id)


def _decide(client, job_id, decision, note="profile checked", **extra):
    data = {"decision": decision, "version": latest_version(job_id), "note": note, **extra}
    return client.post(f"/jobs/{job_id}/decide/", data, **htmx())


def _events(job_id):
    return list(LedgerEvent.objects.filter(job__job_id=job_id).order_by("id").values_list("kind", flat=True))


def test_blocked_jobs_have_their_own_tab_and_say_why_in_the_row(client, operator, provider):
    blocked_post(provider)
    client.force_login(operator)
    blocked = client.get("/queue/?tab=blocked").content.decode()
    assert 'data-tab-count="blocked">1<' in blocked and 'data-tab-count="human">0<' in blocked
    assert 'data-job="post-1"' in blocked
    assert "identity mismatch: account expected &#x27;acme-social&#x27;, seen &#x27;someone-else&#x27;" in blocked
    assert "then re-check identity; or cancel the job (nothing was sent)" in blocked
    assert 'data-job="post-1"' not in client.get("/queue/?tab=human").content.decode()


def test_a_blocked_job_offers_re_check_and_cancel_but_no_replay_or_not_found(client, operator, provider):
    blocked_post(provider)
    client.force_login(operator)
    html = client.get("/jobs/post-1/").content.decode()
    for offered in ("recheck_identity", "escalate", "cancel_job"):
        assert f'value="{offered}"' in html
    for withheld in ("replay_blocked", "mark_not_found", "confirm_effect"):
        assert f'value="{withheld}"' not in html
    assert "data-nothing-sent" in html
    assert "Log into the profile named in the job&#x27;s identity binding" in html  # the action's check_by_hand


def test_re_check_while_it_still_mismatches_records_what_it_saw_and_still_offers_no_replay(client, operator, provider):
    blocked_post(provider)
    _profile(provider, "yet-another")
    client.force_login(operator)
    html = _decide(client, "post-1", "recheck_identity").content.decode()
    assert "Re-check identity: recorded." in html
    assert "seen &#x27;yet-another&#x27;" in html and 'value="replay_blocked"' not in html
    event = LedgerEvent.objects.filter(job__job_id="post-1").latest("id")
    assert (event.kind, event.actor, event.note) == ("operator_rechecked_identity", operator.username, "profile checked")
    assert event.evidence == {"binding": BINDING, "observed": {**BINDING, "account": "yet-another", "session": "active"},
                              "matches": False}
    attempt = latest_attempt("post-1")
    assert (attempt.execution_state, attempt.number) == ("blocked", 1)
    assert Job.objects.get(job_id="post-1").status == "blocked"
    assert_ledger_clean()


def test_once_the_binding_matches_a_replay_runs_with_the_same_key_and_posts_once(client, operator, provider):
    blocked_post(provider)
    _profile(provider, "acme-social")  # someone fixed the login
    client.force_login(operator)
    html = _decide(client, "post-1", "recheck_identity").content.decode()
    assert "the binding matches now" in html and 'value="replay_blocked"' in html
    html = _decide(client, "post-1", "replay_blocked", note="login fixed").content.decode()
    assert "Replay: recorded." in html
    first, second = Job.objects.get(job_id="post-1").attempts.order_by("number")
    assert (first.execution_state, first.side_effect_state) == ("failed", "not_attempted")
    assert second.execution_state == "not_started"
    assert _events("post-1")[-3:] == ["operator_rechecked_identity", "operator_replayed_blocked", "attempt_opened"]
    assert runtime.run_job("post-1", worker="w") == "succeeded"
    assert provider.effects(marker="social.publish_post:post-1")["count"] == 1
    assert_ledger_clean()


def test_a_replay_before_the_binding_matches_is_refused_says_why_and_changes_nothing(client, operator, provider):
    blocked_post(provider)
    client.force_login(operator)
    before = _events("post-1")
    html = _decide(client, "post-1", "replay_blocked").content.decode()
    assert "notice-error" in html and "the binding still does not match" in html
    assert "re-check identity first" in html and "Nothing changed." in html
    html = _decide(client, "post-1", "mark_not_found").content.decode()
    assert "a blocked attempt sent nothing, so there is nothing to find" in html
    assert _events("post-1") == before and latest_attempt("post-1").version == latest_version("post-1")


def test_re_check_is_refused_for_an_action_without_an_identity_check(client, operator):
    from ledger import services

    make_job("echo-1", identity={"account": "a"})
    lease = services.claim_job(job_id="echo-1", worker="w")
    with pytest.raises(services.IdentityMismatch):
        services.verify_identity(lease=lease, observed={"account": "b"})
    client.force_login(operator)
    before = _events("echo-1")
    html = _decide(client, "echo-1", "recheck_identity").content.decode()
    assert "has no identity check in this deployment" in html and "Nothing changed." in html
    assert _events("echo-1") == before


def test_cancel_asks_in_the_page_first_and_only_the_second_step_cancels(client, operator, provider):
    blocked_post(provider)
    client.force_login(operator)
    before = _events("post-1")
    html = _decide(client, "post-1", "cancel_job", note="campaign withdrawn").content.decode()
    assert "data-confirm" in html and "Cancel job: are you sure?" in html
    assert 'name="confirmed" value="on"' in html and 'value="campaign withdrawn"' in html
    assert "autofocus" in html
    assert _events("post-1") == before and Job.objects.get(job_id="post-1").status == "blocked"
    html = _decide(client, "post-1", "cancel_job", note="campaign withdrawn", confirmed="on").content.decode()
    assert "Cancel job: recorded." in html
    assert Job.objects.get(job_id="post-1").status == "cancelled"
    assert _events("post-1")[-1] == "operator_cancelled"


def test_cancel_without_javascript_asks_on_a_page_of_its_own(client, operator, provider):
    blocked_post(provider)
    client.force_login(operator)
    data = {"decision": "cancel_job", "version": latest_version("post-1"), "note": "withdrawn"}
    response = client.post("/jobs/post-1/decide/", data)
    assert response.status_code == 200 and b"Cancel job: are you sure?" in response.content
    assert Job.objects.get(job_id="post-1").status == "blocked"
    response = client.post("/jobs/post-1/decide/", {**data, "confirmed": "on"})
    assert response.status_code == 302
    page = client.get(response["Location"]).content.decode()
    assert "data-decision-result" in page and "Cancel job: recorded." in page
    assert Job.objects.get(job_id="post-1").status == "cancelled"
