"""Free-form JSON fields: the validator and the schema the OpenAPI document publishes agree,
and what is validated is what PostgreSQL stores and gives back."""

import itertools
import math

import jsonschema_rs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from api.json_values import MAX_NESTING, JsonObject, stored_object
from ledger import services
from ledger.models import Job

# The schema as published (pydantic's rendering of the declaration), checked by a JSON Schema validator.
PUBLISHED = jsonschema_rs.validator_for(TypeAdapter(JsonObject).json_schema())

numbers = st.one_of(
    st.integers(),
    st.integers(min_value=10**300, max_value=10**320),
    st.floats(),  # NaN and the infinities included: both sides must refuse them
)
texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=6)  # NUL included
values = st.recursive(
    st.none() | st.booleans() | numbers | texts,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=10,
)


def _accepted_by_validator(value) -> bool:
    try:
        stored_object(value)
    except ValueError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(texts, values, max_size=4))
def test_the_published_schema_accepts_exactly_what_the_validator_accepts(value):
    # Nesting is the one rule the schema states only in words; these values stay far below it.
    assert PUBLISHED.is_valid(value) == _accepted_by_validator(value), value


def test_nesting_beyond_the_limit_is_refused_with_where():
    deep = inner = {}
    for _ in range(MAX_NESTING - 1):
        inner["a"] = {}
        inner = inner["a"]
    assert stored_object(deep) == deep
    inner["a"] = []
    with pytest.raises(
        ValueError, match=f"at /{'a/' * (MAX_NESTING - 1)}a: nested deeper than {MAX_NESTING}"
    ):
        stored_object(deep)


JOB_IDS = (f"n{n}" for n in itertools.count())


@pytest.mark.django_db
@settings(max_examples=60, deadline=None)
@given(
    st.floats(allow_nan=False, allow_infinity=False) | st.integers(min_value=-(10**308), max_value=10**308)
)
def test_a_number_comes_back_from_postgresql_as_it_was_validated(number):
    payload = stored_object({"x": number, "in": [number]})
    job = services.enqueue_job(job_id=next(JOB_IDS), tenant="t", action="reckon.echo", payload=payload)
    stored = Job.objects.get(pk=job.pk).payload
    assert stored == payload and type(stored["x"]) is type(payload["x"])
    assert not isinstance(payload["x"], float) or math.isfinite(payload["x"])
