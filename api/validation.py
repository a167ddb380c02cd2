"""Reading an API request body: size, JSON, and every field checked with a clear message.

PostgreSQL refuses NUL characters and unpaired surrogates in text and jsonb, and deep nesting
is a cheap way to exhaust a parser; all are refused here, before any query runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest

MAX_NESTING = 32
MAX_BIGINT = 2**63 - 1


class FieldErrors(Exception):
    def __init__(self, fields: dict[str, str]):
        super().__init__("; ".join(f"{name}: {message}" for name, message in fields.items()))
        self.fields = fields


class BodyTooLarge(Exception):
    pass


def read_json_object(request: HttpRequest) -> dict:
    limit = settings.RECKON_API_MAX_BODY_BYTES
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise FieldErrors({"body": "Content-Length is not a number"}) from None
    if declared > limit:
        raise BodyTooLarge(f"request body is {declared} bytes; the limit is {limit}")
    try:
        raw = request.body
    except RequestDataTooBig:
        raise BodyTooLarge(f"request body is over the limit of {limit} bytes") from None
    if len(raw) > limit:
        raise BodyTooLarge(f"request body is {len(raw)} bytes; the limit is {limit}")
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except UnicodeDecodeError:
        raise FieldErrors({"body": "the body is not UTF-8"}) from None
    except RecursionError:
        raise FieldErrors({"body": f"JSON nested deeper than {MAX_NESTING} levels"}) from None
    except ValueError as exc:
        raise FieldErrors({"body": f"the body is not valid JSON: {exc}"}) from None
    if not isinstance(value, dict):
        raise FieldErrors({"body": f"the body must be a JSON object, got {_json_type(value)}"})
    check_storable("body", value)
    return value


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def check_storable(name: str, value, depth: int = 0) -> None:
    """Refuse what PostgreSQL cannot store (NUL, lone surrogates) and absurd nesting."""
    if depth > MAX_NESTING:
        raise FieldErrors({name: f"nested deeper than {MAX_NESTING} levels"})
    if isinstance(value, str):
        check_text(name, value)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(name, key)
            check_storable(name, item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            check_storable(name, item, depth + 1)
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**100:
        raise FieldErrors({name: "number too large"})


def check_text(name: str, value: str) -> None:
    if "\x00" in value:
        raise FieldErrors({name: "must not contain NUL characters"})
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise FieldErrors({name: "must not contain unpaired surrogates"}) from None


def _json_type(value) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


# -- fields -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    check: Callable[[object], object]
    required: bool = True
    default: object = None


def text(
    max_length: int, *, allow_empty: bool = False, identifier: bool = False, forbid: str = ""
) -> Callable:
    """A string, stripped; an identifier is one line with no control characters."""

    def check(value):
        if not isinstance(value, str):
            raise ValueError(f"must be a string, got {_json_type(value)}")
        value = value.strip()
        if not value and not allow_empty:
            raise ValueError("must not be empty")
        if len(value) > max_length:
            raise ValueError(f"must be at most {max_length} characters, got {len(value)}")
        if identifier and any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ValueError("must not contain control characters")
        for character in forbid:
            if character in value:
                raise ValueError(f"must not contain {character!r}")
        return value

    return check


def positive_integer(value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be an integer, got {_json_type(value)}")
    if not 1 <= value <= MAX_BIGINT:
        raise ValueError(f"must be between 1 and {MAX_BIGINT}")
    return value


def boolean(value):
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {_json_type(value)}")
    return value


def json_object(value):
    if not isinstance(value, dict):
        raise ValueError(f"must be a JSON object, got {_json_type(value)}")
    return value


def validate(body: dict, fields: dict[str, Field]) -> dict:
    """Every field checked, all messages at once; unexpected fields are refused, not ignored."""
    errors, cleaned = {}, {}
    for name in body:
        if name not in fields:
            errors[name] = f"unexpected field; allowed: {', '.join(fields)}"
    for name, field in fields.items():
        if name not in body or body[name] is None:
            if field.required:
                errors[name] = "this field is required"
            else:
                cleaned[name] = field.default() if callable(field.default) else field.default
            continue
        try:
            cleaned[name] = field.check(body[name])
        except ValueError as exc:
            errors[name] = str(exc)
    if errors:
        raise FieldErrors(errors)
    return cleaned


def path_job_id(job_id: str) -> str | None:
    """A job id from the URL, or None when no job could have it (so: 404, never a query error)."""
    try:
        check_text("job_id", job_id)
    except FieldErrors:
        return None
    return job_id if 0 < len(job_id) <= 200 else None
