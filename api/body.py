"""Reading a request body: JSON only, within the size limit, parsed strictly.

JSON leaves a few things to the parser, and Python's choices would act on something other than
what the client meant: a repeated key (Python keeps the last, other parsers the first), NaN and
Infinity (not JSON, but Python reads them) and `\\ud800` escapes (no Unicode text, and
PostgreSQL cannot store them). All are refused here, before any field is looked at. A number
with a fraction or an exponent is read as the exact Decimal it spells (1e309 is not infinity,
2.0 is the integer JSON Schema says it is); the fields decide what to make of it.
"""

from __future__ import annotations

import json
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest

JSON = "application/json"


class BodyRefused(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code = status, code


def invalid(message: str) -> BodyRefused:
    return BodyRefused(400, "invalid", message)


def check_declared_size(request: HttpRequest) -> None:
    """Refuse an oversized body by its Content-Length, before anything reads it."""
    limit = settings.RECKON_API_MAX_BODY_BYTES
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise invalid("Content-Length is not a number") from None
    if declared > limit:
        raise BodyRefused(413, "body_too_large", f"request body is {declared} bytes; the limit is {limit}")


def parse_json_object(request: HttpRequest) -> dict:
    if request.content_type != JSON or request.content_params.get("charset", "utf-8").lower() != "utf-8":
        raise BodyRefused(
            415,
            "unsupported_media_type",
            f"the body must be {JSON} (UTF-8), not {request.META.get('CONTENT_TYPE') or 'undeclared'}",
        )
    limit = settings.RECKON_API_MAX_BODY_BYTES
    try:
        raw = request.body
    except RequestDataTooBig:
        raise BodyRefused(413, "body_too_large", f"request body is over the limit of {limit} bytes") from None
    if len(raw) > limit:  # a chunked body declares no length
        raise BodyRefused(413, "body_too_large", f"request body is {len(raw)} bytes; the limit is {limit}")
    try:
        value = json.loads(
            raw.decode("utf-8"), object_pairs_hook=_unique_keys, parse_constant=_not_json, parse_float=Decimal
        )
    except UnicodeDecodeError:
        raise invalid("the body is not UTF-8") from None
    except RepeatedKey as exc:
        raise invalid(str(exc)) from None
    except RecursionError:
        raise invalid("the body is nested too deeply") from None
    except ValueError as exc:
        raise invalid(f"the body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise invalid(f"the body must be a JSON object, got {json_type(value)}")
    _refuse_lone_surrogates(value)
    return value


class RepeatedKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen = set()
        repeated = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise RepeatedKey(f"the key {repeated!r:.80} appears twice in one object; which value was meant?")
    return value


def _not_json(name: str):
    raise ValueError(f"{name} is not valid JSON")


def _refuse_lone_surrogates(value) -> None:
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise invalid("the body has a string with unpaired surrogates (\\ud800-\\udfff)") from None


def json_type(value) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )
