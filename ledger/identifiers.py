"""What a job id, a tenant and an action name may look like: one rule for every interface.

Ids travel through URLs, pages, logs and audit exports, so the alphabet is small and visible:
ASCII letters and digits and `. _ : @ / -`, starting with a letter or digit. That leaves out
spaces, control characters, line separators (U+0085, U+2028) and bidirectional overrides
(U+202E), which make an id read differently from what it is, and `..`, which a path would
read as "up". Tenant and action names use the same alphabet without `/`.

The patterns are written so that JSON Schema (ECMA-262), Python's `re` and pydantic's Rust
engine read them alike: no lookaround, and in Python always `fullmatch` (its `$` also matches
before a final newline).
"""

from __future__ import annotations

import re

JOB_ID_MAX_LENGTH = 200
NAME_MAX_LENGTH = 100


def _without_double_dots(characters: str) -> str:
    """A letter or digit, then `characters` and dots, a dot never followed by another dot."""
    return rf"^[A-Za-z0-9](?:[{characters}]|\.[{characters}])*\.?$"


JOB_ID_PATTERN = _without_double_dots("A-Za-z0-9_:@/-")
# One URL path segment: the worker API addresses a job as /jobs/<job_id>/..., so no '/'.
JOB_ID_SEGMENT_PATTERN = _without_double_dots("A-Za-z0-9_:@-")
NAME_PATTERN = JOB_ID_SEGMENT_PATTERN

JOB_ID_RULE = (
    f"1 to {JOB_ID_MAX_LENGTH} characters: ASCII letters, digits and . _ : @ / -, "
    "starting with a letter or digit, never '..'"
)
NAME_RULE = (
    f"1 to {NAME_MAX_LENGTH} characters: ASCII letters, digits and . _ : @ -, "
    "starting with a letter or digit, never '..'"
)

_JOB_ID = re.compile(JOB_ID_PATTERN)


class InvalidIdentifier(ValueError):
    pass


def validate_job_id(value: object) -> str:
    """The job id itself, or InvalidIdentifier saying what a job id may be."""
    if not isinstance(value, str) or len(value) > JOB_ID_MAX_LENGTH or not _JOB_ID.fullmatch(value):
        raise InvalidIdentifier(f"{value!r:.80} is not a valid job id: a job id is {JOB_ID_RULE}")
    return value
