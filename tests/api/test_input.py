"""Input the API once mishandled: each is refused with a clear 4xx and changes nothing, or, for
an honest retry, recognised for what it is."""

import json

import pytest

from ledger.models import Job
from tests.api.conftest import ApiClient, event_count, lease_body, ledger_state
from tests.conftest import event_kinds

pytestmark = pytest.mark.django_db

ECHO = {"job_id": "j-1", "tenant": "acme", "action": "reckon.echo", "payload": {"n": 1}}


def _begun(api: ApiClient) -> dict:
    assert api.post("/api/v1/jobs", ECHO).status == 201
    lease = api.post("/api/v1/jobs/j-1/claim", {"worker": "w-1"}).json
    assert api.post("/api/v1/jobs/j-1/lease/begin", lease_body(lease)).status == 200
    return lease


@pytest.mark.parametrize("number", ["1e309", "-1e309", "1" * 400])
@pytest.mark.parametrize(
    "step, extra", [("success", {}), ("failure", {"error": "x"}), ("unknown", {"reason": "x"})]
)
def test_a_number_beyond_a_double_in_evidence_is_a_400_not_a_500(api, step, extra, number):
    lease = _begun(api)
    before, events = ledger_state(), event_count()
    body = json.dumps(lease_body(lease, **extra))[:-1] + f', "evidence": {{"seen": [{number}]}}}}'

    answer = api.post(f"/api/v1/jobs/j-1/lease/{step}", raw=body.encode())

    assert answer.status == 400, answer.json
    assert answer.json["error"]["fields"] == {
        "evidence": "at /seen/0: a number must be finite, within ±1.7976931348623157e+308"
    }
    assert ledger_state() == before and event_count() == events


@pytest.mark.parametrize("number", ["1e23", "-1e16", "1.5e300", "12345678901234567890.0", "0.1", "2.50"])
def test_a_byte_identical_retry_with_a_float_is_recognised_as_the_same_job(api, number):
    raw = (
        b'{"job_id": "f", "tenant": "acme", "action": "reckon.echo", "payload": {"x": %s, "deep": [{"y": %s}]}}'
        % (number.encode(), number.encode())
    )
    first = api.post("/api/v1/jobs", raw=raw)
    again = api.post("/api/v1/jobs", raw=raw)

    assert (first.status, again.status) == (201, 200), again.json
    assert again.json["payload"] == first.json["payload"] == Job.objects.get().payload
    assert event_kinds("f") == ["enqueued", "enqueue_repeated"]


def test_a_large_float_is_stored_as_the_integer_its_notation_names(api):
    raw = b'{"job_id": "f", "tenant": "acme", "action": "reckon.echo", "payload": {"x": 1e23, "y": 0.5}}'
    assert api.post("/api/v1/jobs", raw=raw).status == 201
    assert Job.objects.get().payload == {"x": 10**23, "y": 0.5}


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin-1", ""],
)
def test_a_body_that_is_not_declared_json_is_a_415(api, content_type):
    before, events = ledger_state(), event_count()
    response = api.django.generic(
        "POST",
        "/api/v1/jobs",
        json.dumps(ECHO).encode(),
        content_type=content_type,
        HTTP_AUTHORIZATION=f"Bearer {api.token}",
    )
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"
    assert ledger_state() == before and event_count() == events


def test_json_with_a_charset_of_utf8_is_accepted(api):
    response = api.django.generic(
        "POST",
        "/api/v1/jobs",
        json.dumps(ECHO).encode(),
        content_type="application/json; charset=UTF-8",
        HTTP_AUTHORIZATION=f"Bearer {api.token}",
    )
    assert response.status_code == 201


@pytest.mark.parametrize(
    "raw",
    [
        b'{"job_id": "j-1", "job_id": "j-2", "tenant": "acme", "action": "reckon.echo", "payload": {}}',
        b'{"job_id": "j-1", "tenant": "acme", "action": "reckon.echo", "payload": {"to": "a", "to": "b"}}',
    ],
)
def test_a_repeated_key_is_refused_not_silently_resolved(api, raw):
    answer = api.post("/api/v1/jobs", raw=raw)
    assert answer.status == 400
    assert "appears twice in one object" in answer.json["error"]["fields"]["body"]
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    "job_id",
    [
        "inv\u202e1",  # right-to-left override: reads as another id
        "a\u0085b",  # NEL
        "a\u2028b",  # line separator
        "a..b",
        "..",
        ".hidden",
        "a/b",
        " j",
        "j ",
        "x" * 201,
        "é",
    ],
)
def test_a_job_id_outside_the_alphabet_is_refused_at_enqueue_and_unknown_in_a_path(api, job_id):
    answer = api.post("/api/v1/jobs", {**ECHO, "job_id": job_id})
    assert answer.status == 400 and set(answer.json["error"]["fields"]) == {"job_id"}
    assert Job.objects.count() == 0
    from urllib.parse import quote

    assert api.get("/api/v1/jobs/" + quote(job_id, safe="")).status == 404


@pytest.mark.parametrize(
    "job_id", ["j", "mail-42", "inv-1.retry", "acme:order@2026", "a.", "A_b-c", "x" * 200]
)
def test_ids_in_the_alphabet_are_accepted(api, job_id):
    assert api.post("/api/v1/jobs", {**ECHO, "job_id": job_id}).status == 201
    assert api.get(f"/api/v1/jobs/{job_id}").status == 200


@pytest.mark.parametrize("tenant", ["ac me", "acme\u202e", "a..b", "a/b", "", "x" * 101])
def test_a_tenant_outside_the_alphabet_is_refused(api, tenant):
    answer = api.post("/api/v1/jobs", {**ECHO, "tenant": tenant})
    assert answer.status == 400 and set(answer.json["error"]["fields"]) == {"tenant"}


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("error", "   ", "besides whitespace"),
        ("error", "x" * 2001, "at most 2000 characters"),
        ("owner", "w 1 ", "no space at either end"),
        ("owner", "w\u202e1", "printable ASCII"),
        ("fencing_token", "1", "must be an integer"),
        ("retryable", 1, "must be true or false"),
        ("evidence", None, "must be a JSON object"),
    ],
)
def test_lease_write_fields_are_strict_and_say_why(api, field, value, message):
    assert api.post("/api/v1/jobs", ECHO).status == 201
    lease = api.post("/api/v1/jobs/j-1/claim", {"worker": "w-1"}).json
    before, events = ledger_state(), event_count()
    answer = api.post("/api/v1/jobs/j-1/lease/failure", {**lease_body(lease, error="smtp 550"), field: value})
    assert answer.status == 400 and message in answer.json["error"]["fields"][field]
    assert ledger_state() == before and event_count() == events


def test_an_empty_body_names_the_required_fields(api):
    assert api.post("/api/v1/jobs", {}).status == 400
    answer = api.post("/api/v1/jobs/j-1/claim", raw=b"")
    assert answer.status == 400 and answer.json["error"]["fields"] == {
        "body": "a JSON object body is required"
    }


@pytest.mark.parametrize("written, status", [(b"1.0", 200), (b"1e0", 200), (b"1.5", 400), (b"1e400", 400)])
def test_a_fencing_token_is_any_json_integer_as_json_schema_defines_it(api, written, status):
    assert api.post("/api/v1/jobs", ECHO).status == 201
    assert api.post("/api/v1/jobs/j-1/claim", {"worker": "w-1"}).status == 201
    answer = api.post("/api/v1/jobs/j-1/lease/renew", raw=b'{"owner": "w-1", "fencing_token": %s}' % written)
    assert answer.status == status, answer.json
