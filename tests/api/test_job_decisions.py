"""The API reads the registry of decisions: a job's answer lists what a person may decide on it now."""

import pytest

from reconciliation.registry import REGISTRY
from tests.api.conftest import lease_body

pytestmark = pytest.mark.django_db


def test_a_failed_job_lists_its_decisions_from_the_registry(api):
    api.post("/api/v1/jobs", {"job_id": "d1", "tenant": "acme", "action": "reckon.echo", "payload": {}})
    assert api.get("/api/v1/jobs/d1").json["decisions"] == [
        {"name": "cancel_job", "label": "Cancel job", "role": "operators", "help": REGISTRY["cancel_job"].help}
    ]
    lease = api.post("/api/v1/jobs/d1/claim", {"worker": "w1"}).json
    api.post("/api/v1/jobs/d1/lease/failure", lease_body(lease, error="400: malformed address"))
    answer = api.get("/api/v1/jobs/d1")
    assert answer.status == 200 and answer.json["status"] == "failed"
    assert [(d["name"], d["label"], d["role"]) for d in answer.json["decisions"]] == [
        (name, REGISTRY[name].label, "operators") for name in ("retry_failed", "retry_corrected", "close_failed")
    ]


def test_the_decisions_are_in_the_openapi_document(api):
    document = api.get("/api/v1/openapi.json", token=None).json
    schema = document["components"]["schemas"]["OpenDecision"]
    assert set(schema["properties"]["name"]["enum"]) == {d.name for d in REGISTRY.values() if d.role == "operators"}
