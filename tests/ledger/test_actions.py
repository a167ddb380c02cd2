"""The action registry is generic: a deployment's modules register its actions; the demo is one of them."""

import json

import pytest
from django.core.exceptions import ImproperlyConfigured

from ledger import runtime
from ledger.actions import Succeeded, _registry, action, get_action, load_action_modules
from ledger.models import Job
from tests.conftest import make_job
from tests.processes import database_url_of_tests, manage, production_env

# What a freshly started process has registered, and whether anything imported the demo.
REGISTRY = ["shell", "-c", "import json, sys; from ledger.actions import registered_actions; "
            "print(json.dumps({'actions': [a.name for a in registered_actions()], "
            "'demo_imported': 'sandbox.demo_actions' in sys.modules}))"]
DEMO = {"billing.create_invoice", "mail.send", "social.publish_post", "vault.rotate_credential", "smtp.send_mail",
        "mail.external"}


def _registry_of_a_process(**env) -> dict:
    run = manage(*REGISTRY, env=production_env(**env))
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.django_db
def test_a_process_registers_the_modules_it_is_configured_with_and_nothing_of_the_demo_otherwise():
    url = database_url_of_tests()
    plain = _registry_of_a_process(DATABASE_URL=url, RECKON_ACTION_MODULES=None, RECKON_DEMO=None)
    assert plain == {"actions": ["reckon.echo"], "demo_imported": False}

    own = _registry_of_a_process(DATABASE_URL=url, RECKON_ACTION_MODULES="tests.ledger.example_actions",
                                 RECKON_DEMO=None)
    assert own == {"actions": ["example.ping", "reckon.echo"], "demo_imported": False}

    demo = _registry_of_a_process(DATABASE_URL=url, RECKON_ACTION_MODULES="tests.ledger.example_actions",
                                  RECKON_DEMO="true")
    assert set(demo["actions"]) == DEMO | {"example.ping", "reckon.echo"} and demo["demo_imported"]


def test_a_module_that_cannot_be_imported_is_refused_with_its_name():
    with pytest.raises(ImproperlyConfigured, match="RECKON_ACTION_MODULES names 'reckon_nowhere.actions'"):
        load_action_modules(["reckon_nowhere.actions"])


@pytest.mark.django_db
def test_the_action_decorator_registers_an_executor_the_worker_loop_runs():
    @action("test.decorated", reversible=False, queryable=False, max_attempts=1)
    def decorated(job):
        return Succeeded(result_ref=f"done:{job.job_id}")

    try:
        registered = get_action("test.decorated")
        assert registered.executor is decorated and registered.reversible is False
        assert registered.max_attempts == 1
        make_job("deco-1", action="test.decorated")
        runtime.run_job("deco-1", worker="w-1")
        job = Job.objects.get(job_id="deco-1")
        assert job.status == "succeeded"
        assert job.attempts.get().result_ref == "done:deco-1"
    finally:
        _registry.pop("test.decorated")
