"""The reason is in the row, the provider's answer is a sentence, and the page's numbers agree
with what it lists: what an operator reads without opening the history."""

import re

import pytest
from django.db import connection

from approvals import services as approvals
from ledger import services
from ledger.models import Job
from reconciliation import decisions
from reconciliation.passes import reconcile_job, reconcile_until_idle
from sandbox.testing import free_port
from tests.conftest import make_job
from tests.console.conftest import htmx, latest_version, make_operator_job, make_unknown_job
from tests.reconciliation.helpers import create_invoice

pytestmark = pytest.mark.django_db


def _row(html: str, job_id: str) -> str:
    match = re.search(rf'<tr data-job="{re.escape(job_id)}">(.*?)</tr>', html, re.S)
    assert match, f"no row for {job_id}"
    return match.group(1)


def test_each_kind_of_waiting_says_why_and_what_comes_next(client, operator, provider, settings):
    make_unknown_job("inv-down")  # the billing provider is down: backed off
    settings.RECKON_BILLING_URL = f"http://127.0.0.1:{free_port()}"
    reconcile_until_idle()
    make_operator_job("vault-1")  # cannot be queried
    make_operator_job("vault-2")
    decisions.escalate(job_id="vault-2", version=latest_version("vault-2"), user=operator, note="ask the vault team")
    make_operator_job("vault-3")
    decisions.mark_not_found(job_id="vault-3", version=latest_version("vault-3"), user=operator, note="no rotation")
    client.force_login(operator)

    reconciling = client.get("/queue/?tab=reconciling").content.decode()
    row = _row(reconciling, "inv-down")
    assert "billing gave no definite answer: lookup gave no definite answer" in row and "could not connect" in row
    assert "the reconciler asks again (check 1 of 8); back-off until" in row and "<time" in row

    human = client.get("/queue/?tab=human").content.decode()
    assert "vault.rotate_credential cannot be queried at its provider; connection dropped" in _row(human, "vault-1")
    assert "check by hand, then confirm the effect or mark it not found" in _row(human, "vault-1")
    assert "escalated by olga: ask the vault team" in _row(human, "vault-2")
    assert "waits for a second person" in _row(human, "vault-3")


def test_an_expired_approval_says_so_in_the_row_on_the_job_and_on_the_approvals_page(client, operator, provider):
    make_operator_job("vault-1")
    decisions.mark_not_found(job_id="vault-1", version=latest_version("vault-1"), user=operator, note="no rotation")
    with connection.cursor() as cursor:  # let the request's time run out
        cursor.execute("UPDATE approvals_approvalrequest SET expires_at = now() - interval '1 minute'")
    assert approvals.expire_due_approvals() == 1
    client.force_login(operator)
    row = _row(client.get("/queue/?tab=human").content.decode(), "vault-1")
    assert "the replay&#x27;s approval request expired at" in row
    assert "back to the operators: ask for approval again, escalate, or cancel" in row
    job_page = client.get("/jobs/vault-1/").content.decode()
    assert "data-approval-expired" in job_page and "expired" in job_page
    assert "without a decision: back to the operators, who may ask again" in job_page
    approvals_page = client.get("/approvals/").content.decode()
    assert "data-expired-count>1<" in approvals_page
    expired = re.search(r'<tr data-expired="\d+">(.*?)</tr>', approvals_page, re.S).group(1)
    assert "vault-1" in expired and "back with the operators" in expired and "<time" in expired
    assert 'value="request_approval"' in job_page and 'value="mark_not_found"' not in job_page  # and they may
    data = {"decision": "request_approval", "version": latest_version("vault-1"), "note": "approver was away"}
    assert "Ask for approval again: recorded." in client.post("/jobs/vault-1/decide/", data, **htmx()).content.decode()
    assert Job.objects.get(job_id="vault-1").status == "awaiting_approval"


def test_the_queue_stays_one_query_for_all_the_reasons(client, operator, django_assert_max_num_queries):
    for n in range(30):
        make_unknown_job(f"inv-{n}")
    for n in range(30):
        with pytest.raises(services.ClaimRefused):  # quiet events after the telling one
            services.claim_job(job_id=f"inv-{n}", worker="w2")
    client.force_login(operator)
    # session + user, roles, counts, one page of jobs, their latest attempts, their latest telling
    # events, their holds' reasons and last comments, how many jobs the filter matches ("Select all"),
    # and the navigation's count of firing alerts
    with django_assert_max_num_queries(10):
        html = client.get("/queue/?tab=reconciling&size=100").content.decode()
    assert html.count("connection dropped after the request was sent") == 30  # not the refusal


def test_the_reasons_query_is_an_index_lookup_per_job_not_a_scan_of_the_history(db):
    """On a tiny table the planner may pick either index (the pkey walked backwards, or
    event_job_id); at scale it takes event_job_id (bench: /queue/ at 1M attempts). What must never
    be possible is a plan that needs the whole history.

    The event table is partitioned by time (issue 28): the job's latest events are one index probe
    per partition, merged in id order (a Merge Append, whose "Sort Key" is the merge's order, not a
    sort) under the Limit. A Sort node or any other scan than an index scan of a partition fails."""
    from console.selectors.triage import LATEST_TELLING_EVENTS, QUIET_KINDS
    from ledger.partitions import partitions

    make_unknown_job("inv-1")
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # what the planner does on a large table
        cursor.execute("EXPLAIN " + LATEST_TELLING_EVENTS,
                       [[Job.objects.get(job_id="inv-1").pk], [k.value for k in QUIET_KINDS]])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    nodes = [line.strip().removeprefix("->").strip() for line in plan.splitlines() if "(cost=" in line]  # not their details
    assert not [node for node in nodes if re.match(r"(Incremental )?Sort\b|Seq Scan|Bitmap", node)], plan
    scans = [node for node in nodes if " on ledger_ledgerevent" in node]
    assert len(partitions()) > 1 and len(scans) == len(partitions()), plan  # every partition, each once
    assert all(re.match(r"Index (Only )?Scan( Backward)? using \S+ on ledger_ledgerevent", scan) for scan in scans), plan
    assert plan.count("Index Cond: (job_id = page.job_id)") == len(scans), plan  # a lookup by the job
    assert "Limit" in plan, plan


def test_the_job_header_counts_what_the_page_lists(client, operator, provider):
    make_unknown_job("inv-1")
    create_invoice(provider, "billing.create_invoice:inv-1", {"customer": "cus_1", "amount_cents": 1200, "currency": "EUR"})
    reconcile_job(job_id="inv-1")  # confirmed: the round's counter goes back to 0, the check stays listed
    job = Job.objects.get(job_id="inv-1")
    assert job.status == "succeeded" and job.check_count == 0
    client.force_login(operator)
    html = client.get("/jobs/inv-1/").content.decode()
    listed = html.count("<tr data-check>")
    assert listed == 1
    assert f"<dd data-check-count>{listed} (" in html and f"data-checks-listed>{listed}<" in html
    assert "<dd data-attempt-count>1</dd>" in html


def test_the_providers_answer_is_a_sentence_with_the_json_behind_a_toggle(client, operator, provider):
    make_unknown_job("inv-1")
    invoice = create_invoice(provider, "billing.create_invoice:inv-1",
                             {"customer": "cus_1", "amount_cents": 1200, "currency": "EUR"})
    reconcile_job(job_id="inv-1")
    client.force_login(operator)
    html = client.get("/jobs/inv-1/").content.decode()
    assert f'data-evidence-summary>billing: invoice {invoice["id"]} found by idempotency key<' in html
    assert "<details><summary>Raw answer (JSON)</summary><pre class=\"evidence\" tabindex=\"0\" role=\"region\"" in html
    assert 'title="sandbox.reconcilers.invoice" data-reconciler>billing.create_invoice lookup<' in html
    assert f"<summary>billing: invoice {invoice['id']} found by idempotency key</summary>" in html  # the timeline


def test_an_old_error_on_a_succeeded_attempt_is_grey_not_red(client, operator, provider):
    make_unknown_job("inv-1")
    decisions.confirm_effect(job_id="inv-1", version=latest_version("inv-1"), user=operator, note="seen it")
    client.force_login(operator)
    html = client.get("/jobs/inv-1/").content.decode()
    attempt = re.search(r'<tr data-attempt="1">(.*?)</tr>', html, re.S).group(1)
    assert '<span class="error-old" data-old-error>earlier: connection dropped' in attempt
    assert "error-text" not in attempt
    make_unknown_job("inv-2")
    still_unknown = re.search(r'<tr data-attempt="1">(.*?)</tr>', client.get("/jobs/inv-2/").content.decode(), re.S)
    assert '<span class="error-text">connection dropped' in still_unknown.group(1)


def test_the_decision_comes_first_and_after_it_focus_goes_to_the_result_and_the_next_job(client, operator):
    make_unknown_job("inv-1")
    make_unknown_job("inv-2")
    make_operator_job("vault-1")
    make_operator_job("vault-2")
    client.force_login(operator)
    html = client.get("/jobs/vault-1/").content.decode()
    main = html[html.index('<main id="content"'):]
    assert main.index('id="decision-panel"') < main.index('id="job-summary"') < main.index('id="timeline"')
    assert main.index('id="decision-note"') < main.index("<a ", main.index('id="job-summary"'))
    assert 'data-shortcut="c" aria-keyshortcuts="c"' in html and "data-shortcuts" in html
    data = {"decision": "confirm_effect", "version": latest_version("vault-1"), "note": "vault log shows it"}
    panel = client.post("/jobs/vault-1/decide/", data, **htmx()).content.decode()
    result = re.search(r'<div id="decision-result"[^>]*>(.*?)</div>', panel, re.S)
    assert 'tabindex="-1" autofocus' in panel[: panel.index(">", panel.index('id="decision-result"'))]
    assert "Confirm effect: recorded." in result.group(1)
    assert '<a href="/jobs/vault-2/?tab=human" data-next-job data-shortcut="]">Next job in the list →</a>' in result.group(1)


def test_the_runbook_and_how_to_check_by_hand_sit_beside_the_decision(client, operator):
    make_operator_job("vault-1")
    client.force_login(operator)
    html = client.get("/jobs/vault-1/").content.decode()
    panel = html[html.index('id="decision-panel"'):html.index("</section>", html.index('id="decision-panel"'))]
    assert "Open the vault&#x27;s audit log for the credential named in the payload" in panel
    assert '<a href="https://wiki.example.com/runbooks/vault-rotation" rel="noopener noreferrer" data-runbook>' in panel


def test_a_plain_job_without_a_guide_shows_none(client, operator):
    make_job("echo-1")
    client.force_login(operator)
    assert "data-guide" not in client.get("/jobs/echo-1/").content.decode()


def test_the_job_page_reads_the_latest_attempt_once_not_once_per_decision(
    client, operator, django_assert_max_num_queries
):
    make_operator_job("vault-1")
    make_operator_job("vault-2")
    client.force_login(operator)
    # session + user, roles, the job, attempts, events, checks, approvals, the chain check, the next job,
    # the navigation's count of firing alerts
    with django_assert_max_num_queries(11):
        html = client.get("/jobs/vault-1/").content.decode()
    assert 'value="confirm_effect"' in html and "data-decision-result" not in html  # no decision yet: no result block
