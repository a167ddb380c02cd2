"""Free-form JSON objects (payload, identity, observed identity, evidence): the rule and its schema.

`stored_object` validates such a field, with a message that points at the offending value, and
`JsonObject` declares the same rule for the OpenAPI document, both from the constants below. What is refused is what PostgreSQL cannot store
or Python cannot read back as sent: NUL characters, numbers beyond a finite double, and absurd
nesting (a cheap way to exhaust a parser).
"""

from __future__ import annotations

import math
import sys
from decimal import Decimal
from typing import Annotated, Union

from pydantic import Field, StrictBool, StrictFloat, StrictInt, TypeAdapter, WithJsonSchema
from typing_extensions import TypeAliasType

MAX_NESTING = 32
MAX_NUMBER = sys.float_info.max
WITHOUT_NUL = r"^[^\u0000]*$"


def stored_object(value: dict) -> dict:
    """The object in the form PostgreSQL stores it and Python reads it back; ValueError says why not."""
    return _stored(value, "", 1)


def _stored(value, path: str, depth: int):
    if isinstance(value, dict | list) and depth > MAX_NESTING:
        raise ValueError(f"at {path or '/'}: nested deeper than {MAX_NESTING} levels")
    if isinstance(value, dict):
        return {
            _text(key, path): _stored(item, f"{path}/{_pointer(key)}", depth + 1)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_stored(item, f"{path}/{n}", depth + 1) for n, item in enumerate(value)]
    if isinstance(value, str):
        return _text(value, path)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float | Decimal):
        if not (isinstance(value, int) or math.isfinite(value)) or abs(value) > MAX_NUMBER:
            raise ValueError(f"at {path or '/'}: a number must be finite, within ±{MAX_NUMBER!r}")
        return _stored_number(value)
    raise ValueError(f"at {path or '/'}: {type(value).__name__} is not a JSON value")


def _stored_number(number: int | float | Decimal) -> int | float:
    """PostgreSQL keeps the decimal Python sends (a float's repr), and one with no fraction digits
    comes back as an integer: the float 1e23 is stored as 1e+23 and read back as 10**23, which is
    another number. Sending that integer instead makes a retry compare equal to what was stored."""
    if isinstance(number, Decimal):  # as read from a request body: 1e23, 2.50
        number = int(number) if number.as_tuple().exponent >= 0 else float(number)
    if isinstance(number, float) and Decimal(repr(number)).as_tuple().exponent >= 0:
        return int(Decimal(repr(number)))
    return number


def _text(value: str, path: str) -> str:
    if "\x00" in value:
        raise ValueError(
            f"at {path or '/'}: text must not contain NUL (U+0000), which PostgreSQL cannot store"
        )
    return value


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


class _KeysLike:
    """pydantic states a constrained key type as patternProperties, which leaves other keys free."""

    def __get_pydantic_json_schema__(self, core_schema, handler):
        schema = handler(core_schema)
        ((pattern, values),) = schema.pop("patternProperties").items()
        return {**schema, "propertyNames": {"pattern": pattern}, "additionalProperties": values}


class DescribedBy:
    """Publish `declared`'s JSON schema for a field that `stored_object` validates."""

    def __init__(self, declared):
        self.core_schema = TypeAdapter(declared).core_schema

    def __get_pydantic_json_schema__(self, core_schema, handler):
        return handler(self.core_schema)


class WithoutKey:
    """Publish that an object must not hold `key` at its top level (a validator refuses it)."""

    def __init__(self, key: str):
        self.key = key

    def __get_pydantic_json_schema__(self, core_schema, handler):
        return {**handler(core_schema), "not": {"required": [self.key]}}


# The rule above, declared: the OpenAPI document shows this, and a test checks that it accepts
# exactly what `stored_object` accepts.
Text = Annotated[str, Field(pattern=WITHOUT_NUL)]
Number = Annotated[
    StrictInt | StrictFloat, WithJsonSchema({"type": "number", "minimum": -MAX_NUMBER, "maximum": MAX_NUMBER})
]
JsonValue = TypeAliasType("JsonValue", Union[None, StrictBool, Number, Text, list["JsonValue"], "JsonObject"])
JsonObject = TypeAliasType(
    "JsonObject",
    Annotated[
        dict[Text, JsonValue],
        Field(
            description=(
                f"Any JSON object nested at most {MAX_NESTING} levels deep (this object is level 1), "
                "with no NUL (U+0000) in any string or key and every number finite, "
                f"within ±{MAX_NUMBER!r}. A number of 1e16 or more sent as a float (1e23) is stored, "
                "and returned, as the integer its decimal notation names (100000000000000000000000)."
            )
        ),
        _KeysLike(),
    ],
)
