"""Actions declared in a TOML file: checked whole at start-up, snapshotted into each job."""

import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.core.management import call_command
from django_q.models import OrmQ

from approvals.models import ApprovalRequest
from ledger import services
from ledger.actions import Action, _registry, declared_action, reconciled_elsewhere, register
from ledger.checks import webhook_secrets_set
from ledger.declarations import DeclarationError, load_actions_file, webhook_secret_problems
from ledger.models import Job
from reconciliation import decisions
from tests.conftest import latest_attempt, make_job
from tests.processes import ROOT, free_port

pytestmark = pytest.mark.django_db

GOOD = """
[actions."test.charge"]
executor = "external"
reversible = false
queryable = true
reconciler = "python:sandbox.reconcilers.invoice"
max_attempts = 2
lease_ttl = 45
identity = ["account"]
runbook_url = "https://wiki.example.com/charges"

[actions."test.notify"]
executor = "python:ledger.actions._echo"
reversible = true
"""


@pytest.fixture
def declared(tmp_path):
    """Load a file, and forget what it declared afterwards."""
    loaded: list[str] = []

    def load(text: str):
        path = tmp_path / "actions.toml"
        path.write_text(text)
        actions = load_actions_file(path, required=True)
        loaded.extend(action.name for action in actions)
        return actions

    yield load
    for name in loaded:
        _registry.pop(name, None)


def test_a_file_declares_external_and_python_actions_with_their_policy(declared):
    charge, notify = declared(GOOD)
    assert (charge.external, charge.reversible, charge.queryable, charge.max_attempts) == (True, False, True, 2)
    assert charge.lease_ttl == timedelta(seconds=45) and charge.identity == ("account",)
    assert charge.reconciler == "sandbox.reconcilers.invoice"
    assert charge.runbook_url == "https://wiki.example.com/charges" and charge.source.endswith("actions.toml")
    assert not notify.external and notify.executor.__name__ == "_echo" and notify.reconciler is None
    assert declared_action("test.charge") is charge


def test_a_file_declares_the_answers_that_prove_nothing_was_done_and_the_backoff(declared):
    [vault] = declared("""
[actions."test.vault"]
executor = "python:ledger.actions._echo"
reversible = false
provider = "vault"
retry_backoff = 1.5
retry_backoff_max = 60
nothing_done = [{ status = [500, 503], says = "Nothing was done" }]
""")
    assert vault.provider == "vault" and (vault.retry_backoff.base_s, vault.retry_backoff.cap_s) == (1.5, 60.0)
    assert vault.proves_nothing_done(503, "service unavailable; nothing was done")
    assert vault.proves_nothing_done(500, "the work was rolled back; NOTHING WAS DONE")
    assert not vault.proves_nothing_done(502, "nothing was done")  # a status it did not declare
    assert not vault.proves_nothing_done(500, "internal error")  # the words it did not say
    # Exponential, jittered between half and all of it, capped, and the same for the same job and attempt.
    delays = [vault.retry_backoff.delay_after(n, seed="k") for n in range(1, 9)]
    for n, delay in enumerate(delays, start=1):
        ceiling = min(60.0, 1.5 * 2 ** (n - 1))
        assert ceiling / 2 <= delay <= ceiling
    assert delays == [vault.retry_backoff.delay_after(n, seed="k") for n in range(1, 9)]
    assert len({vault.retry_backoff.delay_after(1, seed=f"job-{n}") for n in range(20)}) == 20  # jobs spread


@pytest.mark.parametrize("table, message", [
    ('executor = "external"\nreversible = true\ncolour = "red"', "unknown key(s) colour"),
    ('executor = "external"', "reversible is required"),
    ('executor = "external"\nreversible = "yes"', "reversible must be bool, got str 'yes'"),
    ('executor = "external"\nreversible = true\nmax_attempts = true', "max_attempts must be int, got bool"),
    ('executor = "external"\nreversible = true\nmax_attempts = 0', "max_attempts must be at least 1"),
    ('executor = "external"\nreversible = true\nlease_ttl = -1', "lease_ttl must be a positive number"),
    ('executor = "celery"\nreversible = true', 'executor must be "external" or "python:dotted.path"'),
    ('executor = "python:no.such.module"\nreversible = true', "executor 'no.such.module' cannot be imported"),
    ('executor = "external"\nreversible = true\nqueryable = true', "queryable = true needs a reconciler"),
    ('executor = "external"\nreversible = true\nreconciler = "python:sandbox.reconcilers.mail"',
     "a reconciler is declared but queryable = false"),
    ('executor = "external"\nreversible = true\nqueryable = true\nreconciler = "external"\n'
     'reconciliation_lease = 0', "reconciliation_lease must be more than 0"),
    ('executor = "external"\nreversible = true\nreconciliation_lease = 30',
     "reconciliation_lease belongs to a pull-mode reconciler"),
    ('executor = "external"\nreversible = true\nqueryable = true\nreconciler = "carrier-pigeon"',
     'reconciler must be "python:dotted.path", "webhook", "external" or "none"'),
    ('executor = "external"\nreversible = true\nqueryable = true\nreconciler = "webhook"\n'
     'webhook_url = "https://h.example.com/r"', "a webhook reconciler needs webhook_secrets"),
    ('executor = "external"\nreversible = true\nqueryable = true\nreconciler = "webhook"\n'
     'webhook_url = "https://h.example.com/r"\nwebhook_secrets = ["HOME"]',
     "webhook_secrets: variable HOME holds fewer than 32 characters"),
    ('executor = "external"\nreversible = true\nqueryable = true\nreconciler = "webhook"\n'
     'webhook_url = "https://${NO_SUCH_HOST_VARIABLE}/r"\nwebhook_secrets = ["S"]',
     "webhook_url: ${NO_SUCH_HOST_VARIABLE} names the environment variable NO_SUCH_HOST_VARIABLE, which is not set"),
    ('executor = "external"\nreversible = true\nqueryable = true\nreconciler = "webhook"\n'
     'webhook_secrets = ["HOME"]', "a webhook reconciler needs webhook_url"),
    ('executor = "external"\nreversible = true\nwebhook_url = "https://h.example.com/r"',
     "webhook_url belong to a webhook reconciler; this one is 'none'"),
    ('executor = "external"\nreversible = false\nreplay = "automatic"',
     "an irreversible action cannot be replayed automatically"),
    ('executor = "external"\nreversible = true\nidentity = ["a", "a"]', "identity must be a list of distinct"),
    ('executor = "external"\nreversible = true\nrunbook_url = "javascript:alert(1)"',
     "runbook_url must be an http(s) URL"),
    ('executor = "external"\nreversible = true\nnothing_done = [{ status = [404], says = "gone" }]',
     "nothing_done: nothing_done statuses must be 5xx codes"),
    ('executor = "external"\nreversible = true\nnothing_done = [{ status = [503] }]',
     "each nothing_done entry is a table"),
    ('executor = "external"\nreversible = true\nnothing_done = [{ status = [503], says = " " }]',
     "nothing_done needs the words the answer says"),
    ('executor = "external"\nreversible = true\nretry_backoff = 10\nretry_backoff_max = 5',
     "retry_backoff and retry_backoff_max: retry backoff: 0 <= base (10 s) <= cap (5 s)"),
])
def test_a_bad_declaration_is_refused_naming_the_file_and_the_action(declared, table, message):
    with pytest.raises(DeclarationError) as refused:
        declared(f'[actions."test.bad"]\n{table}\n')
    assert "actions.toml: action 'test.bad': " in str(refused.value) and message in str(refused.value)
    assert declared_action("test.bad") is None  # nothing of a bad file is registered


def test_a_file_that_is_not_toml_or_names_an_action_twice_is_refused(declared, tmp_path):
    with pytest.raises(DeclarationError, match="not valid TOML"):
        declared("[actions.\n")
    with pytest.raises(DeclarationError, match="declared twice"):
        declared('[actions."reckon.echo"]\nexecutor = "external"\nreversible = true\n')
    with pytest.raises(DeclarationError, match="does not exist"):
        load_actions_file(tmp_path / "missing.toml", required=True)
    assert load_actions_file(tmp_path / "missing.toml", required=False) == []


def test_start_up_and_check_fail_with_the_message(tmp_path):
    path = tmp_path / "actions.toml"
    path.write_text('[actions."x.y"]\nexecutor = "external"\nreversible = false\nreplay = "automatic"\n')
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "RECKON_ACTIONS_FILE": str(path)}, timeout=60)
    assert done.returncode != 0
    assert done.stderr == (f"Reckon cannot start: {path}: action 'x.y': an irreversible action cannot be replayed "
                           "automatically: replay must be \"approval\"\n")  # one message, no traceback


@pytest.mark.parametrize("text, message", [
    ('[actions."x.y"]\nexecutor = "external"\nreversible = true\ncolour = "red"\n', "action 'x.y': unknown key(s) colour"),
    ('[actions."x.y"]\nexecutor = "external"\nreversible = tru\n', "not valid TOML: Invalid value (at line 3, column 14)"),
    ('[actions."x.y"]\nexecutor = "external"\nreversible = true\nqueryable = true\nreconciler = "webhook"\n'
     'webhook_url = "http://${RECKON_TEST_UNSET_HOST}/r"\nwebhook_secrets = ["RECKON_TEST_UNSET_SECRET"]\n',
     "action 'x.y': webhook_url: ${RECKON_TEST_UNSET_HOST} names the environment variable RECKON_TEST_UNSET_HOST, "
     "which is not set"),
])
@pytest.mark.parametrize("process", ["manage.py", "gunicorn"])
def test_a_bad_actions_file_stops_every_process_with_one_message(tmp_path, text, message, process):
    path = tmp_path / "actions.toml"
    path.write_text(text)
    argv = ([sys.executable, "manage.py", "migrate", "--check"] if process == "manage.py" else
            [sys.executable, "-m", "gunicorn", "config.wsgi:application", "--bind", f"127.0.0.1:{free_port()}",
             "--no-control-socket"])
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "RECKON_ACTIONS_FILE": str(path)})
    assert done.returncode != 0
    said = [line for line in done.stderr.splitlines() if line.startswith("Reckon cannot start")]
    assert len(said) == 1 and said[0].startswith(f"Reckon cannot start: {path}: {message}")
    assert "Traceback" not in done.stderr + done.stdout
    if process == "manage.py":
        assert done.stderr == said[0] + "\n"  # that one line, nothing else


def test_check_imports_every_declared_reconciler(tmp_path):
    env = {**os.environ, "RECKON_ACTION_MODULES": "tests.ledger.unimportable_reconciler_actions"}
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 1
    assert ("ledger.E001) module tests.ledger.unimportable_reconciler_actions: action 'example.lost': reconciler "
            "'myteam.reconcilers.lost' cannot be imported: No module named 'myteam'") in done.stderr
    assert "Traceback" not in done.stderr


def test_an_action_module_missing_a_dependency_is_named(tmp_path):
    (tmp_path / "team_actions.py").write_text("import no_such_dependency_of_the_team\n")
    env = {**os.environ, "RECKON_ACTION_MODULES": "team_actions", "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 1
    assert done.stderr == ("Reckon cannot start: RECKON_ACTION_MODULES names 'team_actions', which imports "
                           "'no_such_dependency_of_the_team': No module named 'no_such_dependency_of_the_team' "
                           "(is it installed in this environment?)\n")


WEBHOOK = """
[actions."test.hooked"]
executor = "external"
reversible = true
queryable = true
reconciler = "webhook"
webhook_url = "https://${RECKON_TEST_AGENTS_HOST}/reckon/reconcile"
webhook_secrets = ["RECKON_TEST_HOOK_SECRET"]
"""


def test_the_file_reads_variables_from_the_environment(declared, monkeypatch):
    monkeypatch.setenv("RECKON_TEST_AGENTS_HOST", "agents.internal:9000")
    (hooked,) = declared(WEBHOOK)
    assert hooked.reconciler.url == "https://agents.internal:9000/reckon/reconcile"


def test_only_a_process_that_signs_needs_the_webhook_secret(declared, monkeypatch, tmp_path):
    monkeypatch.setenv("RECKON_TEST_AGENTS_HOST", "agents.internal")
    monkeypatch.delenv("RECKON_TEST_HOOK_SECRET", raising=False)
    declared(WEBHOOK)  # loads: the web, the sweeper, the workers never sign
    assert "test.hooked" in reconciled_elsewhere()  # a pass here (a qcluster without it) leaves its jobs alone
    assert webhook_secret_problems() == [
        f"{tmp_path / 'actions.toml'}: action 'test.hooked': webhook_secrets: variable RECKON_TEST_HOOK_SECRET is not "
        "set (it holds the secret this process signs its webhook questions with; at least 32 characters)"]
    (told,) = [m for m in webhook_secrets_set() if "test.hooked" in m.msg]  # `check --deploy`: information
    assert told.id == "ledger.I001" and not told.is_serious()
    monkeypatch.setenv("RECKON_TEST_HOOK_SECRET", "s" * 32)
    assert webhook_secret_problems() == [] and "test.hooked" not in reconciled_elsewhere()

    # `reconcile`, which signs, refuses to start without it, saying which.
    path = tmp_path / "actions.toml"
    env = {**os.environ, "RECKON_ACTIONS_FILE": str(path), "RECKON_TEST_AGENTS_HOST": "agents.internal"}
    env.pop("RECKON_TEST_HOOK_SECRET")
    done = subprocess.run([sys.executable, "manage.py", "reconcile", "--once"], cwd=ROOT, capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 1
    assert done.stderr == (f"CommandError: {path}: action 'test.hooked': webhook_secrets: variable "
                           "RECKON_TEST_HOOK_SECRET is not set (it holds the secret this process signs its webhook "
                           "questions with; at least 32 characters)\n")
    listed = subprocess.run([sys.executable, "manage.py", "actions"], cwd=ROOT, capture_output=True, text=True,
                            env=env, timeout=60)
    assert listed.returncode == 0 and "test.hooked" in listed.stdout


def test_jobs_of_external_actions_never_reach_django_q2(declared, settings):
    declared(GOOD)
    settings.RECKON_DISPATCH = True
    make_job("c1", action="test.charge", identity={"account": "acct_1"})
    make_job("n1", action="test.notify")
    queued = [row.task["args"] for row in OrmQ.objects.all()]
    assert queued == [("n1",)]


def test_an_action_bound_to_identity_fields_refuses_a_job_without_them(declared):
    declared(GOOD)
    with pytest.raises(services.InvalidJob, match="binds each job to the identity fields account: identity lacks account"):
        make_job("c2", action="test.charge", identity={})
    assert not Job.objects.filter(job_id="c2").exists()


def test_a_job_keeps_the_policy_it_was_enqueued_with(declared, operator):
    declared(GOOD)
    make_job("c3", action="test.charge", identity={"account": "acct_1"})
    assert Job.objects.get(job_id="c3").policy == {"reversible": False, "queryable": True, "max_attempts": 2}
    lease = services.claim_job(job_id="c3", worker="ext-1")
    services.verify_identity(lease=lease, observed={"account": "acct_1"})
    services.begin_side_effect(lease=lease)
    services.record_unknown(lease=lease, reason="the agent crashed mid-call")
    # Someone edits the file: the action is now "reversible", with more attempts.
    register(Action(name="test.charge", reversible=True, queryable=True, max_attempts=5,
                    reconciler="sandbox.reconcilers.invoice", source=declared_action("test.charge").source))
    decisions.mark_not_found(job_id="c3", version=latest_attempt("c3").version, user=operator, note="none seen")
    assert Job.objects.get(job_id="c3").status == "awaiting_approval"  # still needs a second person
    assert ApprovalRequest.objects.filter(job__job_id="c3", status="pending").exists()


def test_the_actions_command_lists_where_each_action_was_declared(declared, capsys):
    declared(GOOD)
    call_command("actions")
    out = capsys.readouterr().out
    charge = next(line for line in out.splitlines() if line.startswith("test.charge"))
    assert "external (HTTP)" in charge and "no: replay needs approval" in charge and "actions.toml" in charge
    assert "reckon.echo" in out and "module ledger.actions" in out


def test_the_example_actions_file_declares_what_the_readme_says(monkeypatch):
    monkeypatch.setenv("CHARGES_WEBHOOK_SECRET", "c" * 40)
    try:
        charge, render = load_actions_file(ROOT / "examples" / "actions.toml", required=True)
        assert (charge.name, charge.external, charge.reversible, str(charge.reconciler)) == (
            "billing.charge", True, False, "webhook http://127.0.0.1:9000/reckon/reconcile")
        assert (render.name, render.external, render.reconciler) == ("reports.render", False, None)
    finally:
        _registry.pop("billing.charge", None)
        _registry.pop("reports.render", None)
