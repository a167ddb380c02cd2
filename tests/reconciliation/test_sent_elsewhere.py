"""The reconciler asks the provider the effect went to: a look anywhere else proves nothing.

A worker and a reconciler configured with different providers (staging against production, a
migrated provider, `smtp_bench` beside `make run`) must never turn "not there" into not_found and
send the effect a second time. The attempt records where its effect was sent; a reconciler that
would ask elsewhere answers unavailable, and says both.
"""

import pytest

from ledger import runtime
from ledger.actions import Action, _registry, register
from ledger.models import Job, LedgerEvent
from reconciliation.findings import Finding
from reconciliation.models import CheckOutcome, ReconciliationCheck
from reconciliation.passes import reconcile_job
from sandbox.demo_actions import create_invoice
from tests.conftest import event_kinds, latest_attempt, make_job
from tests.reconciliation.helpers import INVOICE, assert_ledger_clean, unknown_job

pytestmark = pytest.mark.django_db

INVOICE_ACTION = "billing.create_invoice"
ELSEWHERE = "https://billing.staging.example/acct_123"


def test_an_attempt_sent_to_one_provider_and_looked_up_at_another_is_unavailable_and_not_replayed(provider):
    job = unknown_job("inv-a", INVOICE_ACTION, INVOICE, sent_to=ELSEWHERE)
    assert latest_attempt("inv-a").sent_to == ELSEWHERE

    decision = reconcile_job(job_id="inv-a")

    assert decision.outcome == CheckOutcome.UNAVAILABLE
    check = ReconciliationCheck.objects.get(job=job)
    reason = f"asked {provider.url} but the effect was sent to {ELSEWHERE}"
    assert check.outcome == "unavailable" and check.error.startswith(reason)
    assert check.asked == provider.url
    assert "lookups" not in check.evidence  # the other provider was not even asked
    # Nothing replayed: the one attempt is still unknown, and the job waits for its next look.
    assert job.attempts.count() == 1
    assert latest_attempt("inv-a").states == {"delivery": "acknowledged", "execution": "unknown",
                                              "side_effect": "ambiguous"}
    assert Job.objects.get(job_id="inv-a").status == "needs_reconciliation"
    assert "reconciled_not_found" not in event_kinds("inv-a")
    event = LedgerEvent.objects.get(job=job, kind="reconciliation_unavailable")
    assert event.note.startswith(reason)
    assert (event.evidence["asked"], event.evidence["sent_to"]) == (provider.url, ELSEWHERE)
    assert provider.request("GET", "/invoices?marker=billing.create_invoice:inv-a").json["invoices"] == []
    assert_ledger_clean()


def test_an_attempt_looked_up_where_it_was_sent_is_not_found_and_replayed_as_before(provider):
    job = unknown_job("inv-b", INVOICE_ACTION, INVOICE, sent_to=provider.url + "/")  # the same provider

    decision = reconcile_job(job_id="inv-b")

    assert (decision.outcome, decision.applied) == ("not_found", "replayed")
    check = ReconciliationCheck.objects.get(job=job)
    assert (check.outcome, check.asked) == ("not_found", provider.url)
    assert job.attempts.count() == 2


def test_an_attempt_that_did_not_say_where_it_was_sent_is_looked_up_as_before(provider):
    job = unknown_job("inv-c", INVOICE_ACTION, INVOICE)
    assert latest_attempt("inv-c").sent_to == ""
    assert reconcile_job(job_id="inv-c").outcome == "not_found"
    assert ReconciliationCheck.objects.get(job=job).asked == provider.url


def test_the_worker_loop_records_where_an_in_process_action_sent_its_effect(provider):
    make_job("inv-d", action=INVOICE_ACTION, payload=INVOICE)
    assert runtime.run_job("inv-d") == "succeeded"
    attempt = latest_attempt("inv-d")
    assert attempt.sent_to == provider.url
    started = LedgerEvent.objects.get(job__job_id="inv-d", kind="side_effect_started")
    assert started.evidence == {"idempotency_key": "billing.create_invoice:inv-d", "sent_to": provider.url}


def reports_elsewhere(job, attempt):
    """A team's reconciler that says where it asked: another account than the attempt's."""
    outcome = job.payload["answer"]
    return Finding(outcome, f"{outcome} at the other account", {"seen": True},
                   result_ref="inv_9" if outcome == "confirmed" else "", asked="https://billing.example/acct_other")


@pytest.fixture
def elsewhere_action():
    register(Action(name="test.billing_elsewhere", executor=create_invoice, queryable=True,
                    reconciler="tests.reconciliation.test_sent_elsewhere.reports_elsewhere"))
    yield "test.billing_elsewhere"
    _registry.pop("test.billing_elsewhere")


def test_a_reconciler_reporting_absence_at_another_provider_is_unavailable(provider, elsewhere_action):
    job = unknown_job("else-1", elsewhere_action, {**INVOICE, "answer": "not_found"},
                      sent_to="https://billing.example/acct_123")
    assert reconcile_job(job_id="else-1").outcome == "unavailable"
    check = ReconciliationCheck.objects.get(job=job)
    assert check.error.startswith("asked https://billing.example/acct_other but the effect was sent to "
                                  "https://billing.example/acct_123")
    assert check.evidence["answered"] == {"outcome": "not_found", "reason": "not_found at the other account"}
    assert job.attempts.count() == 1 and latest_attempt("else-1").execution_state == "unknown"


def test_a_reconciler_finding_the_effect_at_another_provider_hands_it_to_a_person(provider, elsewhere_action):
    job = unknown_job("else-2", elsewhere_action, {**INVOICE, "answer": "confirmed"},
                      sent_to="https://billing.example/acct_123")
    assert reconcile_job(job_id="else-2").outcome == "conflict"
    assert Job.objects.get(job_id="else-2").status == "escalated"
    note = LedgerEvent.objects.get(job=job, kind="reconciled_conflict").note
    assert "may exist twice" in note and "acct_other" in note
    assert job.attempts.count() == 1


# -- smtp_bench beside `make run`: two real SMTP servers, one ledger ------------------------------

SMTP_ACTION = "smtp.send_mail"


def test_mail_a_bench_sent_through_its_own_smtp_server_is_never_resent_through_the_stacks(smtp_sandbox):
    """The bench's worker sends through its own SMTP sandbox, whose connection drops after DATA;
    the stack's reconciler (configured with the stack's server and archive) must not find
    "nothing" in its archive and resend the mail through its server."""
    from django.test import override_settings

    from ledger.smtp import endpoint, message_id_for
    from sandbox.smtp.testing import SmtpSandboxProcess

    stack = smtp_sandbox  # this process's settings point at it: the stack's reconciler
    job_ids = [f"bench-{n}" for n in range(3)]
    with SmtpSandboxProcess() as bench:
        bench.configure_faults(markers={f"{SMTP_ACTION}:{job_id}": "drop_after_data" for job_id in job_ids})
        with override_settings(**bench.settings):  # the bench's worker loop
            for job_id in job_ids:
                make_job(job_id, action=SMTP_ACTION, payload={"to": "ann@example.com", "subject": "Receipt",
                                                              "body": "Thanks."})
                assert runtime.run_job(job_id) == "unknown"
        bench_server = endpoint(bench.host, bench.smtp_port)
        assert {latest_attempt(job_id).sent_to for job_id in job_ids} == {bench_server}

        stack_server = endpoint(stack.host, stack.smtp_port)
        for job_id in job_ids:  # the stack's reconciler gets there first
            assert reconcile_job(job_id=job_id).outcome == "unavailable"
            check = ReconciliationCheck.objects.get(job__job_id=job_id)
            assert check.error.startswith(f"asked {stack_server} but the effect was sent to {bench_server}")
            assert runtime.run_job(job_id).startswith("refused:")  # still unknown: no retry
        assert stack.messages() == []  # nothing resent through the stack's server

        with override_settings(**bench.settings):  # the bench's own reconciler
            assert [reconcile_job(job_id=job_id).outcome for job_id in job_ids] == ["confirmed"] * 3
        for job_id in job_ids:
            assert len(bench.messages(message_id=message_id_for(f"{SMTP_ACTION}:{job_id}"))) == 1
            assert Job.objects.get(job_id=job_id).status == "succeeded"
            assert Job.objects.get(job_id=job_id).attempts.count() == 1
    assert stack.messages() == []
    assert_ledger_clean()


# -- a webhook reconciler: told where the effect was sent, it may say where it asked ---------------


@pytest.fixture
def webhook(monkeypatch, tmp_path, provider):
    """A receiver (a real HTTP server in a thread) that answers what `answer` says, and an action
    reconciled by it."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from reckon_client import WEBHOOK_SIGNATURE_HEADER, sign_answer

    from ledger.declarations import load_actions_file

    SECRET = "s" * 40  # noqa: N806 - a constant of this fixture

    state = {"questions": [], "answer": {}}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            question = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state["questions"].append(question)
            data = json.dumps(state["answer"]).encode()
            self.send_response(200)
            self.send_header(WEBHOOK_SIGNATURE_HEADER, sign_answer(data, question["question_id"], [SECRET]))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("TEST_SENT_TO_WEBHOOK_SECRET", SECRET)
    path = tmp_path / "actions.toml"
    path.write_text(f"""
[actions."hook.sent_to"]
executor = "external"
reversible = true
queryable = true
reconciler = "webhook"
webhook_url = "http://127.0.0.1:{server.server_port}/reckon"
webhook_secrets = ["TEST_SENT_TO_WEBHOOK_SECRET"]
webhook_timeout = 2
""")
    load_actions_file(path, required=True)
    yield state
    server.shutdown()
    server.server_close()
    _registry.pop("hook.sent_to")


def test_a_webhook_is_told_where_the_effect_was_sent_and_its_absence_elsewhere_proves_nothing(webhook):
    webhook["answer"] = {"outcome": "not_found", "reason": "no charge with this key",
                         "asked": "https://api.stripe.example/acct_prod"}
    job = unknown_job("hook-1", "hook.sent_to", INVOICE, sent_to="https://api.stripe.example/acct_staging")
    decision = reconcile_job(job_id="hook-1")
    [question] = webhook["questions"]
    assert question["attempt"]["sent_to"] == "https://api.stripe.example/acct_staging"
    assert decision.outcome == "unavailable"
    check = ReconciliationCheck.objects.get(job=job)
    assert check.asked == "https://api.stripe.example/acct_prod"
    assert check.error.startswith("asked https://api.stripe.example/acct_prod but the effect was sent to "
                                  "https://api.stripe.example/acct_staging")
    assert job.attempts.count() == 1

    webhook["answer"]["asked"] = "https://api.stripe.example/acct_staging"  # the receiver looked in the right place
    job = unknown_job("hook-2", "hook.sent_to", INVOICE, sent_to="https://api.stripe.example/acct_staging")
    assert reconcile_job(job_id="hook-2").applied == "replayed"
