"""The OpenAPI document is generated from the schemas that validate requests, and describes
every route the API serves with its body, its answers and every rule the server applies."""

import re

import pytest
from django.test import Client
from django.urls import URLPattern

from api import urls
from ledger.identifiers import JOB_ID_SEGMENT_PATTERN, NAME_PATTERN
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db


def _document() -> dict:
    response = Client().get("/api/v1/openapi.json")
    assert response.status_code == 200
    return response.json()


def _resolve(document: dict, schema: dict) -> dict:
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def test_it_is_openapi_3_1_and_needs_no_token():
    document = _document()
    assert document["openapi"] == "3.1.0" and document["servers"] == [{"url": "/api/v1"}]
    schemes = document["components"]["securitySchemes"].values()
    assert [(s["type"], s["scheme"]) for s in schemes] == [("http", "bearer")]


def test_every_route_is_described_with_its_method_body_and_answers():
    document = _document()
    served = {
        "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", str(p.pattern))
        for p in urls.urlpatterns
        if isinstance(p, URLPattern) and p.name not in ("openapi-json", "api-root", None)
    }
    assert served == set(document["paths"])
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            assert {"200", "201"} & set(operation["responses"]), (method, path)
            assert "401" in operation["responses"] and operation["security"], (method, path)
            if "{job_id}" in path:
                assert "404" in operation["responses"], (method, path)
            if method == "post":
                schema = _resolve(document, operation["requestBody"]["content"]["application/json"]["schema"])
                assert schema["required"] and schema["additionalProperties"] is False, path
                assert {"400", "413", "415"} <= set(operation["responses"]), path


def test_the_described_fields_are_the_accepted_fields(api):
    """The enqueue schema's required fields are exactly what the view demands."""
    document = _document()
    schema = _resolve(
        document, document["paths"]["/jobs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    )
    answer = api.post("/api/v1/jobs", {})
    assert set(answer.json["error"]["fields"]) == set(schema["required"])


def test_it_states_the_identifier_alphabets_and_the_free_form_rules():
    document = _document()
    schemas = document["components"]["schemas"]
    enqueue = schemas["EnqueueRequest"]["properties"]
    assert (enqueue["job_id"]["pattern"], enqueue["job_id"]["maxLength"]) == (JOB_ID_SEGMENT_PATTERN, 200)
    assert (enqueue["tenant"]["pattern"], enqueue["tenant"]["maxLength"]) == (NAME_PATTERN, 100)
    assert "mail.send" in enqueue["action"]["enum"]
    path_parameter = document["paths"]["/jobs/{job_id}"]["get"]["parameters"][0]["schema"]
    assert path_parameter["pattern"] == JOB_ID_SEGMENT_PATTERN
    failure = schemas["FailureRequest"]["properties"]
    assert failure["error"]["pattern"] and failure["error"]["maxLength"] == 2000  # not blank, no NUL
    assert schemas["JsonObject"]["propertyNames"] == {"pattern": r"^[^\u0000]*$"}
    assert {"type": "number", "minimum": -1.7976931348623157e308, "maximum": 1.7976931348623157e308} in (
        schemas["JsonValue"]["anyOf"]
    )


def test_the_stated_error_shape_is_what_refusals_carry():
    answer = ApiClient().get("/api/v1/jobs/x", token=None)
    assert set(answer.json) == {"error"} and {"code", "message"} <= set(answer.json["error"])


def test_the_document_is_read_with_get_only():
    answer = ApiClient().post("/api/v1/openapi.json", {}, token=None)
    assert answer.status == 405 and answer.headers["Allow"] == "GET"
    assert answer.json["error"]["code"] == "method_not_allowed"
