"""A shift can be handed over: what the next person reads on the job page, the queue and the
approvals is unambiguous (issue 30, item 7)."""

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.utils import timezone

from approvals.models import ApprovalRequest
from console.access import fence_of
from console.selectors.job import job_record
from console.templatetags.console import stamp
from ledger import services
from ledger.moments import kept_time, shown_time
from reconciliation import decisions
from tests.conftest import make_job
from tests.console.conftest import latest_version, make_operator_job, make_unknown_job

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_one_time_format_with_the_date_when_not_today():
    now = datetime(2026, 12, 1, 14, 30, tzinfo=UTC)
    assert shown_time(datetime(2026, 12, 1, 14, 2, 7, 123456, tzinfo=UTC), now) == "14:02:07"
    assert shown_time(datetime(2026, 11, 30, 23, 59, 1, 5, tzinfo=UTC), now) == "2026-11-30 23:59:01"
    assert kept_time(datetime(2026, 12, 1, 14, 2, 7, 123456, tzinfo=UTC)) == "2026-12-01 14:02:07 UTC"
    yesterday = timezone.now() - timedelta(days=1)
    assert f">{shown_time(yesterday)} <" in stamp(yesterday) and shown_time(yesterday).startswith(
        timezone.localtime(yesterday).strftime("%Y-%m-%d "))
    assert decisions.when(now - timedelta(days=2), now) == "2026-11-29 14:30:00 (2 days ago)"


def test_notes_carry_no_raw_iso_times(approver, approver2):
    approver2.groups.add(Group.objects.get_or_create(name="operators")[0])
    make_operator_job("vault-1")
    decisions.mark_not_found(job_id="vault-1", version=latest_version("vault-1"), user=approver2, note="none")
    request = ApprovalRequest.objects.get()
    ApprovalRequest.objects.filter(pk=request.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    from approvals.services import expire_due_approvals

    assert expire_due_approvals() == 1
    event = request.job.events.get(kind="approval_expired")
    assert re.fullmatch(r"approval request expired at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC without a decision",
                        event.note), event.note


def test_a_finished_attempt_shows_no_lease_expiry(operator):
    make_job("done-1", action="billing.create_invoice", payload={"customer": "c", "amount_cents": 1, "currency": "EUR"})
    lease = services.claim_job(job_id="done-1", worker="w1")
    running = _client(operator).get("/jobs/done-1/").content.decode()
    assert re.search(r'data-lease-expires><time datetime=', running)  # a live lease says when it ends
    services.begin_side_effect(lease=lease)
    services.record_success(lease=lease, result_ref="in_1")
    page = _client(operator).get("/jobs/done-1/").content.decode()
    cell = re.search(r'<td data-label="Lease expires" data-lease-expires>(.*?)</td>', page).group(1)
    assert "<time" not in cell and "ago" not in cell and "no live lease" in cell


def test_the_reason_appears_once_and_the_queue_tabs_are_not_on_the_job_page(operator):
    job = make_unknown_job("inv-1")
    page = _client(operator).get("/jobs/inv-1/").content.decode()
    reason = job_record("inv-1", fence_of(operator)).triage.reason
    # Said once above the record (the attempts table and the timeline keep it as history).
    assert page[:page.index('<section id="attempts"')].count(f">{reason}<") == 1
    assert 'id="queue-counts"' not in page and "/queue/counts/" not in page
    assert 'href="/queue/?tab=reconciling" data-back-to-queue' in page and job.status == "needs_reconciliation"


def test_back_to_the_queue_from_a_blocked_job_goes_to_the_blocked_tab(operator):
    make_job("post-1", action="reckon.echo", identity={"account": "a"})
    lease = services.claim_job(job_id="post-1", worker="w1")
    with pytest.raises(services.IdentityMismatch):
        services.verify_identity(lease=lease, observed={"account": "b"})
    page = _client(operator).get("/jobs/post-1/").content.decode()
    assert 'href="/queue/?tab=blocked" data-back-to-queue' in page


def test_the_timeline_folds_earlier_attempts(operator):
    make_job("e-1", action="reckon.echo")
    lease = services.claim_job(job_id="e-1", worker="w1")
    services.record_failure(lease=lease, error="try again", retryable=True)
    page = _client(operator).get("/jobs/e-1/").content.decode()
    folded = re.search(r'<details class="earlier-attempts" data-earlier-events>(.*?)</details>\s*<ol', page, re.S)
    assert folded and "before attempt #2" in folded.group(1)
    assert 'data-kind="enqueued"' in folded.group(1) and 'data-kind="claimed"' in folded.group(1)
    after = page[folded.end():]
    assert 'data-kind="attempt_opened"' in after and 'data-kind="enqueued"' not in after


def test_a_single_attempt_is_not_folded(operator):
    make_job("e-2", action="reckon.echo")
    assert "data-earlier-events" not in _client(operator).get("/jobs/e-2/").content.decode()


def test_an_unknown_status_says_so_and_lists_nothing(operator):
    make_operator_job("vault-1")
    html = _client(operator).get("/queue/?tab=human&status=needs_coffee").content.decode()
    assert "There is no status “needs_coffee” in this tab, so no job is listed." in html
    assert 'data-job="vault-1"' not in html and "select-all" not in html
    html = _client(operator).get("/queue/?tab=human&status=needs_operator").content.decode()
    assert 'data-job="vault-1"' in html and "data-unknown-status" not in html


def test_a_bulk_decision_without_javascript_keeps_the_filter(operator):
    make_unknown_job("inv-1")
    query = "tab=reconciling&status=needs_reconciliation&q=inv"
    page = _client(operator).get(f"/queue/?{query}").content.decode()
    carried = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)" form="bulk-form">', page))
    assert carried == {"tab": "reconciling", "status": "needs_reconciliation", "q": "inv"}
    asked = _client(operator).post("/queue/bulk/", {
        **carried, "decision": "retry_reconciliation", "note": "provider back",
        "selected": f"{latest_version('inv-1')}:inv-1"}).content.decode()
    assert 'name="q" value="inv"' in asked  # the confirmation asked first carries the filter too
    response = _client(operator).post("/queue/bulk/", {
        **carried, "decision": "retry_reconciliation", "note": "provider back", "confirmed": "on",
        "selected": f"{latest_version('inv-1')}:inv-1"})
    assert response.status_code == 302 and response["Location"] == f"/queue/?{query}"


def test_favicon_is_served():
    response = Client().get("/favicon.ico")
    assert response.status_code == 200 and response["Content-Type"] == "image/x-icon"
    assert b"".join(response.streaming_content)[:4] == b"\x00\x00\x01\x00"


def test_approvers_see_how_many_requests_wait_for_them(approver, approver2, operator):
    approver2.groups.add(Group.objects.get_or_create(name="operators")[0])
    make_operator_job("vault-1")
    decisions.mark_not_found(job_id="vault-1", version=latest_version("vault-1"), user=approver2, note="none")
    badge = re.compile(r'<span class="badge" data-approvals-waiting>(\d+)<')
    assert badge.search(_client(approver).get("/queue/").content.decode()).group(1) == "1"
    assert not badge.search(_client(approver2).get("/queue/").content.decode())  # their own request
    assert not badge.search(_client(operator).get("/queue/").content.decode())  # not an approver


def test_an_approval_request_is_named_by_its_job(approver, approver2):
    approver2.groups.add(Group.objects.get_or_create(name="operators")[0])
    make_operator_job("vault-1")
    decisions.mark_not_found(job_id="vault-1", version=latest_version("vault-1"), user=approver2, note="none")
    request = ApprovalRequest.objects.get()
    html = _client(approver).get("/approvals/").content.decode()
    assert re.search(rf'<h3 id="approval-title-{request.pk}">Replay of <a href="/jobs/vault-1/">vault-1</a>', html)
