"""Property: whatever arrives at the API — any path, method, token or body — the answer is
never a 5xx, and a refused request leaves every job and attempt exactly as it was (only a 409,
which the ledger records as a refusal, may add an event)."""

import json
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.models import WorkerToken
from api.tokens import worker_token_revoke
from ledger import services
from tests.api.conftest import ApiClient, event_count, issue, ledger_state

JOB_IDS = ["j", "fresh", "done", "other", "nope", "%00", "a%2Fb", "x" * 250, "%F0%9F%92%A5", "%ED%A0%80"]
STEPS = [
    "",
    "/claim",
    "/lease/renew",
    "/lease/identity",
    "/lease/begin",
    "/lease/success",
    "/lease/failure",
    "/lease/unknown",
    "/lease",
    "/claim/extra",
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
field_values = st.one_of(json_values, st.sampled_from(["w-1", "w-2", "", " ", "\u0000", 1, 2, 0, -1, 2**63]))
field_names = st.sampled_from(
    [
        "job_id",
        "tenant",
        "action",
        "payload",
        "identity",
        "worker",
        "owner",
        "fencing_token",
        "observed",
        "result_ref",
        "error",
        "retryable",
        "reason",
        "evidence",
        "actions",
        "tenants",
        "wait_seconds",
        "max",
        "leases",
        "results",
        "outcome",
        "sent_to",
    ]
)
bodies = st.one_of(
    st.dictionaries(field_names, field_values, max_size=6).map(lambda d: json.dumps(d).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=64),
    st.just(b""),
)
paths = st.one_of(
    st.builds(
        lambda job, step: f"/api/v1/jobs/{job}{step}", st.sampled_from(JOB_IDS), st.sampled_from(STEPS)
    ),
    st.just("/api/v1/jobs"),
    st.just("/api/v1/claims"),
    st.just("/api/v1/leases/begin"),
    st.just("/api/v1/leases/results"),
    st.text(max_size=40).map(lambda t: "/api/v1/" + quote(t, safe="/")),
)


@pytest.fixture
def world(db):
    """Jobs in several states, and tokens of every kind."""
    services.enqueue_job(job_id="j", tenant="acme", action="reckon.echo", payload={})
    services.claim_job(job_id="j", worker="w-1")
    services.enqueue_job(job_id="fresh", tenant="acme", action="reckon.echo", payload={})
    services.enqueue_job(job_id="other", tenant="beta", action="reckon.echo", payload={})
    done = services.claim_job(
        job_id=services.enqueue_job(job_id="done", tenant="acme", action="reckon.echo", payload={}).job_id,
        worker="w-1",
    )
    services.begin_side_effect(lease=done)
    services.record_success(lease=done)
    revoked = issue(name="revoked")
    worker_token_revoke(worker_token=WorkerToken.objects.get(name="revoked"))
    return {
        "all": issue(name="all"),
        "acme": issue(["acme"], ["reckon.echo"], name="acme"),
        "mail": issue(["*"], ["mail.send"], name="mail"),
        "revoked": revoked,
    }


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
@pytest.mark.django_db
def test_no_request_gets_a_5xx_or_changes_the_ledger_when_refused(world, data):
    token = data.draw(
        st.one_of(st.sampled_from([*world.values(), None, "rk_forged", "x"]), st.text(max_size=20))
    )
    method = data.draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]))
    path, body = data.draw(paths), data.draw(bodies)
    before, events = ledger_state(), event_count()

    answer = ApiClient(token if token and token.isprintable() else None).call(method, path, raw=body)

    assert answer.status < 500
    assert "error" in answer.json or answer.status < 400
    if answer.status >= 400:
        assert ledger_state() == before, (method, path, body, answer)
        if answer.status != 409:
            assert event_count() == events, (method, path, body, answer)
