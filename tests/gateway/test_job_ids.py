"""A call's job id across upgrades: ids are keyed now, and a key the ledger holds under the id an
earlier gateway gave it (unkeyed, or keyed under a secret key since rotated) keeps that id, so that
the upgrade itself repeats no effect."""

import pytest

from api.tokens import authenticate, worker_token_create
from gateway import calls
from gateway.config import get_upstream
from ledger import services
from ledger.models import Job
from tests.conftest import token_issuer

pytestmark = pytest.mark.django_db

ARGUMENTS = {"title": "from-9297e58", "body": "b", "api_key": "sk-1"}
# The id gateways up to 9297e58 gave this call of notes.create_note for tenant acme (computed by
# that commit's gateway/calls.py job_id_for).
ID_OF_9297E58 = "mcp:notes.create_note:185d25f337bfd735d2eb8f544f6d90a865ddbbdd"


@pytest.fixture
def token():
    return authenticate(f"Bearer {worker_token_create(name='ids', tenants=['acme'], actions=['*'], created_by=token_issuer()).token}")


@pytest.fixture(autouse=True)
def _ask_the_ledger_afresh(monkeypatch):
    monkeypatch.setattr(calls, "_unkeyed_ids", [])


def succeeded_earlier(job_id: str) -> None:
    """The call as an earlier gateway journaled it: run once, its result recorded."""
    policy = get_upstream("notes").tools["create_note"]
    lease = services.enqueue_claim_and_begin(
        job_id=job_id, tenant="acme", action=policy.action, worker="mcp:old:agent",
        payload={"upstream": "notes", "tool": "create_note", "arguments": calls.redacted(policy, ARGUMENTS),
                 "arguments_digest": calls.arguments_digest(ARGUMENTS), "key_made_of": "arguments"})
    services.record_success(lease=lease, result_ref="made then",
                            evidence={"mcp_result": {"content": [{"type": "text", "text": "made then"}]}})


def test_the_unkeyed_id_is_what_the_gateway_of_9297e58_computed(actions_file):
    policy = get_upstream("notes").tools["create_note"]
    material, _ = calls.key_material(policy, "acme", ARGUMENTS, {})
    assert calls.unkeyed_job_id(material) == ID_OF_9297E58


def test_a_call_journaled_under_an_unkeyed_id_is_answered_from_it_after_the_upgrade(actions_file, token):
    succeeded_earlier(ID_OF_9297E58)

    answer = calls.open_call(token=token, policy=get_upstream("notes").tools["create_note"], arguments=ARGUMENTS,
                             meta={}, agent="mcp:ids:test")

    assert isinstance(answer, calls.Answer) and answer.meta["reckon/replay"] is True
    assert answer.content == [{"type": "text", "text": "made then"}]
    assert list(Job.objects.values_list("job_id", flat=True)) == [ID_OF_9297E58]


def test_a_call_journaled_under_a_rotated_secret_key_keeps_its_id(actions_file, token, settings):
    policy = get_upstream("notes").tools["create_note"]
    material, _ = calls.key_material(policy, "acme", ARGUMENTS, {})
    earlier = calls.keyed_job_id(material, settings.SECRET_KEY)
    succeeded_earlier(earlier)
    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "the rotated secret key, long and random enough for the test"

    answer = calls.open_call(token=token, policy=policy, arguments=ARGUMENTS, meta={}, agent="mcp:ids:test")

    assert isinstance(answer, calls.Answer) and answer.meta["reckon/replay"] is True
    assert list(Job.objects.values_list("job_id", flat=True)) == [earlier]
    other = calls.open_call(token=token, policy=policy, arguments={**ARGUMENTS, "title": "new"}, meta={},
                            agent="mcp:ids:test")
    assert isinstance(other, calls.Go) and other.job_id == calls.keyed_job_id(
        calls.key_material(policy, "acme", {**ARGUMENTS, "title": "new"}, {})[0], settings.SECRET_KEY)


def test_a_new_ledger_is_not_asked_for_unkeyed_ids_again_on_every_call(actions_file, token):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    policy = get_upstream("notes").tools["create_note"]
    calls.open_call(token=token, policy=policy, arguments={**ARGUMENTS, "title": "first"}, meta={}, agent="mcp:ids:t")
    assert calls._unkeyed_ids == [False]
    with CaptureQueriesContext(connection) as queries:
        go = calls.open_call(token=token, policy=policy, arguments={**ARGUMENTS, "title": "second"}, meta={},
                             agent="mcp:ids:t")
    # enqueue, claim and begin in one statement (in a savepoint here, inside the test's transaction)
    statements = [q["sql"] for q in queries.captured_queries if "SAVEPOINT" not in q["sql"]]
    assert isinstance(go, calls.Go) and len(statements) == 1 and "reckon_enqueue" in statements[0]
