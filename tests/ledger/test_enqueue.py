import pytest

from ledger import services
from ledger.actions import UnknownAction
from ledger.models import Attempt, Job
from tests.conftest import event_kinds, make_job

pytestmark = pytest.mark.django_db


def test_it_creates_the_job_its_first_attempt_and_an_event():
    job = make_job("inv-1", payload={"amount": 5})
    assert job.status == "pending"
    assert job.idempotency_key == "reckon.echo:inv-1"
    attempt = Attempt.objects.get(job=job)
    assert (attempt.number, attempt.delivery_state, attempt.execution_state, attempt.side_effect_state) == (
        1, "queued", "not_started", "not_attempted")
    event = job.events.get()
    assert (event.kind, event.before, event.after["execution"]) == ("enqueued", {}, "not_started")


def test_it_is_idempotent_on_job_id_and_records_the_repeat():
    first = make_job("inv-1", payload={"amount": 5})
    again = make_job("inv-1", payload={"amount": 5})
    assert again.pk == first.pk
    assert Job.objects.count() == 1 and Attempt.objects.count() == 1
    assert event_kinds("inv-1") == ["enqueued", "enqueue_repeated"]


@pytest.mark.parametrize("change", [{"payload": {"amount": 6}}, {"action": "other"}, {"tenant": "globex"}])
def test_it_refuses_the_same_job_id_for_different_work(change):
    from ledger.actions import Action, register

    register(Action(name="other", executor=lambda job: None))
    make_job("inv-1", payload={"amount": 5})
    args = {"job_id": "inv-1", "tenant": "acme", "action": "reckon.echo", "payload": {"amount": 5}} | change
    with pytest.raises(services.JobConflict, match="already exists with a different"):
        services.enqueue_job(**args)
    job = Job.objects.get()
    assert job.payload == {"amount": 5} and job.action == "reckon.echo" and job.tenant == "acme"
    assert event_kinds("inv-1") == ["enqueued"]


def test_it_refuses_an_unknown_action_and_says_which_exist():
    with pytest.raises(UnknownAction, match="reckon.echo"):
        services.enqueue_job(job_id="x", tenant="acme", action="no.such", payload={})
    assert not Job.objects.exists()


@pytest.mark.parametrize("payload, message", [
    ("{not json", "not valid JSON"),
    ({"when": object()}, "JSON-serialisable"),
    ({"x": float("nan")}, "JSON-serialisable"),
    ([1, 2], "must be a JSON object"),
])
def test_it_refuses_a_payload_that_is_not_a_json_object(payload, message):
    with pytest.raises(services.InvalidJob, match=message):
        services.enqueue_job(job_id="x", tenant="acme", action="reckon.echo", payload=payload)
    assert not Job.objects.exists()


def test_it_accepts_a_payload_given_as_json_text():
    job = services.enqueue_job(job_id="x", tenant="acme", action="reckon.echo", payload='{"a": [1, 2]}')
    assert Job.objects.get(pk=job.pk).payload == {"a": [1, 2]}


@pytest.mark.parametrize("job_id, tenant", [("", "acme"), ("   ", "acme"), ("x", ""), ("x" * 201, "acme")])
def test_it_refuses_blank_or_oversized_identifiers(job_id, tenant):
    with pytest.raises(services.InvalidJob):
        services.enqueue_job(job_id=job_id, tenant=tenant, action="reckon.echo", payload={})
    assert not Job.objects.exists()
