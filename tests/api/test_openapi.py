"""The OpenAPI document describes every route the API serves, with bodies and answers."""

import re

import pytest
from django.test import Client

from api import urls
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db


def _document() -> dict:
    response = Client().get("/api/v1/openapi.json")
    assert response.status_code == 200
    return response.json()


def test_it_is_openapi_3_1_and_needs_no_token():
    document = _document()
    assert document["openapi"] == "3.1.0"
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_every_route_is_described_with_its_method_body_and_answers():
    document = _document()
    routes = {re.sub(r"<str:(\w+)>", r"{\1}", "/" + str(p.pattern)) for p in urls.urlpatterns if p.name}
    assert routes == set(document["paths"])
    methods = {"jobs": "post", "job": "get", "openapi": "get"}
    for pattern in (p for p in urls.urlpatterns if p.name):
        path = re.sub(r"<str:(\w+)>", r"{\1}", "/" + str(pattern.pattern))
        operation = document["paths"][path][methods.get(pattern.name, "post")]
        assert "200" in operation["responses"] or "201" in operation["responses"]
        if methods.get(pattern.name, "post") == "post":
            schema = operation["requestBody"]["content"]["application/json"]["schema"]
            assert schema["required"] and schema["additionalProperties"] is False
        if path != "/openapi.json":
            assert {"401", "403"} <= set(operation["responses"])


def test_the_described_fields_are_the_accepted_fields(api):
    """The enqueue schema's required fields are exactly what the view demands."""
    document = _document()
    described = set(
        document["paths"]["/jobs"]["post"]["requestBody"]["content"]["application/json"]["schema"]["required"]
    )
    answer = api.post("/api/v1/jobs", {})
    assert set(answer.json["error"]["fields"]) == described


def test_the_stated_error_shape_is_what_refusals_carry():
    answer = ApiClient().get("/api/v1/jobs/x", token=None)
    assert set(answer.json) == {"error"} and {"code", "message"} <= set(answer.json["error"])
