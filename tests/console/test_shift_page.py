"""My shift: what I decided, held and commented since I signed in, or in a range."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.services import comment_on_job, take_job
from reconciliation import decisions
from tests.console.conftest import latest_version, make_operator_job

pytestmark = pytest.mark.django_db


def test_it_lists_my_decisions_holds_and_comments_since_i_signed_in(client, operator, operator2):
    make_operator_job("vault-1")
    make_operator_job("vault-2")
    make_operator_job("vault-3")
    decisions.escalate(job_id="vault-3", version=latest_version("vault-3"), user=operator2, note="not mine")
    client.post("/accounts/login/", {"username": operator.username, "password": f"pw-{operator.username}"})
    decisions.confirm_effect(job_id="vault-1", version=latest_version("vault-1"), user=operator, note="seen in log")
    take_job(job_id="vault-2", holder=operator.username, note="asking the vault team")
    comment_on_job(job_id="vault-2", author=operator.username, actor_type="operator", text="ticket VLT-9")
    html = client.get("/shift/").content.decode()
    assert "since you signed in" in html
    assert 'data-shift-count="decided">1<' in html and "operator_confirmed_effect" in html and "seen in log" in html
    assert 'data-shift-count="held">1<' in html and "asking the vault team" in html
    assert 'data-shift-count="commented">1<' in html and "ticket VLT-9" in html
    assert "not mine" not in html  # a colleague's decision is theirs
    assert 'href="/jobs/vault-2/" class="job-id">vault-2</a> <span class="status' in html  # on it now


def test_a_range_replaces_the_sign_in_and_a_bad_one_is_ignored(client, operator):
    make_operator_job("vault-1")
    client.force_login(operator)
    decisions.escalate(job_id="vault-1", version=latest_version("vault-1"), user=operator, note="old")
    later = (timezone.now() + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M")
    html = client.get(f"/shift/?since={later}").content.decode()
    assert 'data-shift-count="decided">0<' in html
    html = client.get("/shift/?since=yesterday-ish").content.decode()
    assert 'data-shift-count="decided">1<' in html
