"""The job id alphabet: the ids Reckon itself makes are valid, lookalikes and traversal are not,
and Python reads the published pattern as JSON Schema and pydantic do."""

import re
from typing import Annotated

import pytest
from pydantic import Field, TypeAdapter, ValidationError

from ledger.identifiers import (
    JOB_ID_PATTERN,
    JOB_ID_SEGMENT_PATTERN,
    InvalidIdentifier,
    validate_job_id,
)

# Ids the tests, the simulation, the chaos harness and the benchmark make.
IN_USE = [
    "j",
    "j-1",
    "inv-1",
    "mail-42",
    "tenant/42",
    "e2e-7",
    "rec-12",
    "gen-00000001",
    "cycle4-0000003",
    "scale-a-00000001",
    "sim-20261130-133900-00001",
    "crash_before_call-7-3",
    "random_kills-8-2-4",
    "post-1",
    "vault-1",
    "m-1",
    "x" * 200,
]
REFUSED = [
    "",
    " j",
    "j ",
    "a b",
    "a..b",
    "..",
    "../etc",
    "a/../b",
    ".j",
    "-j",
    "/j",
    "_j",
    "é",
    "x" * 201,
    "inv\u202e1",
    "a\u0085b",
    "a\u2028b",
    "a\u2029b",
    "a\u200bb",
    "a\nb",
    "a\n",
    "a\x00b",
    "a\tb",
]


@pytest.mark.parametrize("job_id", IN_USE)
def test_the_ids_reckon_makes_are_valid(job_id):
    assert validate_job_id(job_id) == job_id


@pytest.mark.parametrize("job_id", REFUSED)
def test_lookalikes_controls_and_traversal_are_refused(job_id):
    with pytest.raises(InvalidIdentifier, match="letters, digits"):
        validate_job_id(job_id)


@pytest.mark.parametrize("pattern", [JOB_ID_PATTERN, JOB_ID_SEGMENT_PATTERN])
@pytest.mark.parametrize("candidate", [*IN_USE, *REFUSED, "a.", "a./b", "a.b.c", "1:2@3"])
def test_python_and_pydantic_read_the_pattern_alike(pattern, candidate):
    rust = TypeAdapter(Annotated[str, Field(pattern=pattern)])
    try:
        rust.validate_python(candidate)
        accepted = True
    except ValidationError:
        accepted = False
    assert accepted == bool(re.compile(pattern).fullmatch(candidate))


def test_the_url_segment_form_refuses_only_the_slash_more():
    assert re.fullmatch(JOB_ID_PATTERN, "tenant/42") and not re.fullmatch(JOB_ID_SEGMENT_PATTERN, "tenant/42")
