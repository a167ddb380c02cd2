"""Every state has a way out: "failed N" on the overview opens the queue's failed tab, a failed
job offers its decisions (retry as is, retry with a corrected payload, close) with the panel saying
what happened, and blocked jobs are re-checked and replayed in bulk on a filter once the binding
is fixed."""

import re

import pytest
from django.test import Client

from console.models import BulkRun
from ledger import runtime, services
from ledger.models import Job, LedgerEvent
from reconciliation.registry import REGISTRY
from tests.conftest import latest_attempt, make_job
from tests.console.conftest import htmx, latest_version
from tests.console.test_triage_blocked import BINDING, blocked_post
from tests.reconciliation.helpers import assert_ledger_clean

pytestmark = pytest.mark.django_db


def failed_job(job_id="f1", tenant="acme") -> Job:
    make_job(job_id, tenant=tenant, payload={"to": "ann@@example", "fail": "400: malformed address"})
    assert runtime.run_job(job_id, worker="w") == "failed"
    return Job.objects.get(job_id=job_id)


def _decide(client, job_id, decision, note="address mistyped", **extra):
    data = {"decision": decision, "version": latest_version(job_id), "note": note, **extra}
    return client.post(f"/jobs/{job_id}/decide/", data, **htmx())


def test_the_overview_links_failed_jobs_to_the_failed_tab_which_lists_them(client, operator):
    failed_job()
    client.force_login(operator)
    overview = client.get("/").content.decode()
    assert re.search(r'data-status="failed"><a href="/queue/\?tab=failed" data-failed-link[^>]*>1</a>', overview)
    tab = client.get("/queue/?tab=failed").content.decode()
    assert 'data-tab-count="failed">1<' in tab and 'data-job="f1"' in tab
    assert "failed: 400: malformed address" in tab  # the row says why
    for name in ("retry_failed", "close_failed"):  # the failed tab's bulk decisions, from the registry
        assert f'name="decision" value="{name}"' in tab
    assert 'value="retry_reconciliation"' not in tab and 'value="retry_corrected"' not in tab
    assert 'data-job="f1"' not in client.get("/queue/?tab=human").content.decode()


def test_a_failed_job_offers_its_decisions_and_no_longer_contradicts_itself(client, operator):
    failed_job()
    client.force_login(operator)
    html = client.get("/jobs/f1/").content.decode()
    assert "No decision is open" not in html and "no attempt may run again" not in html
    assert "Why a replay is safe" not in html
    for name in ("retry_failed", "retry_corrected", "close_failed"):
        decision = REGISTRY[name]
        assert f'value="{name}" data-shortcut="{decision.key}"' in html and decision.label in html
    assert 'name="payload"' in html and "ann@@example" in html  # the payload to correct, as it is now
    assert "retry it as is or with a corrected payload, or close it" in html


def test_retry_with_a_corrected_payload_from_the_job_page(client, operator):
    failed_job()
    client.force_login(operator)
    html = _decide(client, "f1", "retry_corrected", payload='{"to": "ann@example.com"}').content.decode()
    assert "Retry with this payload: recorded." in html
    assert Job.objects.get(job_id="f1").payload == {"to": "ann@example.com"}
    assert "operator_corrected_payload" in html  # the timeline, swapped in with the decision
    assert_ledger_clean()


def test_a_bad_payload_edit_is_explained_kept_in_the_form_and_changes_nothing(client, operator):
    failed_job()
    events = LedgerEvent.objects.count()
    client.force_login(operator)
    html = _decide(client, "f1", "retry_corrected", payload='{"to": ann@example.com}').content.decode()
    assert "notice-error" in html and "is not valid JSON" in html and "Nothing changed." in html
    assert "{&quot;to&quot;: ann@example.com}" in html  # kept, to fix rather than type again
    assert LedgerEvent.objects.count() == events and latest_attempt("f1").number == 1


def test_close_asks_first_then_closes(client, operator):
    failed_job()
    client.force_login(operator)
    html = _decide(client, "f1", "close_failed", note="customer cancelled").content.decode()
    assert "Close: are you sure?" in html and REGISTRY["close_failed"].confirm in html
    assert Job.objects.get(job_id="f1").status == "failed"
    _decide(client, "f1", "close_failed", note="customer cancelled", confirmed="on")
    assert Job.objects.get(job_id="f1").status == "cancelled"


def test_only_operators_decide_on_failed_jobs(client, auditor, approver):
    failed_job()
    for user in (auditor, approver):
        client.force_login(user)
        assert _decide(client, "f1", "retry_failed").status_code == 403
    assert Job.objects.get(job_id="f1").status == "failed" and latest_attempt("f1").number == 1


def test_the_shortcut_list_is_the_registry(client, operator):
    failed_job()
    client.force_login(operator)
    html = client.get("/jobs/f1/").content.decode()
    listed = re.findall(r'data-shortcut-for="(\w+)"><dt><kbd>(.)</kbd>', html)
    assert listed == [(d.name, d.key) for d in REGISTRY.values() if d.key]


def test_blocked_jobs_are_re_checked_then_replayed_in_bulk_on_a_filter(operator, provider):
    for n in range(3):
        blocked_post(provider, f"post-{n}")
    make_job("other", identity={"account": "a"})  # blocked too, another action: the filter leaves it alone
    with pytest.raises(services.IdentityMismatch):
        services.verify_identity(lease=services.claim_job(job_id="other", worker="w"), observed={"account": "b"})
    client = Client()
    client.force_login(operator)
    tab = client.get("/queue/?tab=blocked").content.decode()
    for name in ("recheck_identity", "replay_blocked", "cancel_job"):
        assert f'name="decision" value="{name}"' in tab
    status, _, body = provider.request("PUT", "/_admin/profiles/p1", {"account": BINDING["account"]})
    assert status == 200, body  # someone fixed the login

    def every_match(decision):
        data = {"scope": "filter", "decision": decision, "note": "profile p1 logged in again", "tab": "blocked",
                "action": "social.publish_post"}
        client.post("/queue/bulk/", data, **htmx())
        run = BulkRun.objects.latest("id")
        client.post(f"/queue/bulk-runs/{run.pk}/step/", **htmx())
        run.refresh_from_db()
        return run

    rechecked = every_match("recheck_identity")
    assert (rechecked.total, rechecked.succeeded, rechecked.refused, rechecked.finished) == (3, 3, 0, True)
    replayed = every_match("replay_blocked")
    assert (replayed.total, replayed.succeeded, replayed.refused) == (3, 3, 0)
    for n in range(3):
        assert Job.objects.get(job_id=f"post-{n}").status == "pending"
        assert runtime.run_job(f"post-{n}", worker="w") == "succeeded"
        assert provider.effects(marker=f"social.publish_post:post-{n}")["count"] == 1
    assert Job.objects.get(job_id="other").status == "blocked"
    assert_ledger_clean()
