"""Which job ids a console URL or form may carry: up to 200 characters (the column's length),
none of them a control character (NUL, which PostgreSQL refuses in text, included).

A stop-gap until the ledger defines the allowed alphabet for every interface; an id outside it
cannot name a job, so the console answers 404 (a URL), refuses it (a bulk selection) or ignores
it (a filter)."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError

# C0 controls, DEL and C1 controls: Unicode's control characters (category Cc).
_CONTROLS = r"\x00-\x1f\x7f-\x9f"
JOB_ID_PATTERN = rf"[^{_CONTROLS}]{{1,200}}"
_JOB_ID = re.compile(JOB_ID_PATTERN)
_CONTROL = re.compile(rf"[{_CONTROLS}]")


def is_valid_job_id(value: str) -> bool:
    return isinstance(value, str) and _JOB_ID.fullmatch(value) is not None


def reject_control_characters(value: str) -> None:
    """A form validator for the console's text filters (ids, keys, actors, tenants)."""
    if value and _CONTROL.search(value):
        raise ValidationError("Control characters are not allowed here.", code="invalid")


class JobIdConverter:
    """`<job_id:job_id>` in a URL: slashes allowed (ids may contain them), control characters not."""

    regex = JOB_ID_PATTERN

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value
