"""The API's HTTP edge: one JSON error shape, worker-token authentication, and the answers
django-ninja would otherwise give as text or HTML (405, 404, validation, server errors).

Every refusal is JSON: {"error": {"code", "message", "fields"?, "reason"?}}. Ledger refusals
map to HTTP here, once, so the views only call one service and serialise.
"""

from __future__ import annotations

import functools
import logging

from django.http import Http404, HttpRequest, HttpResponseNotAllowed, JsonResponse
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security.http import HttpAuthBase

from api import tokens
from api.body import BodyRefused, check_declared_size, json_type
from api.models import ALL
from ledger.actions import UnknownAction, is_gateway_action
from ledger.availability import RETRY_AFTER_S, database_unavailable, drop_broken_connections
from ledger.services import (
    ClaimRefused,
    IdentityMismatch,
    InvalidJob,
    JobArchived,
    JobConflict,
    LedgerError,
    StaleLease,
)

log = logging.getLogger("reckon.api")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, **extra):
        super().__init__(message)
        self.status, self.code, self.extra = status, code, extra


def error_response(status: int, code: str, message: str, **extra) -> JsonResponse:
    response = JsonResponse({"error": {"code": code, "message": message, **extra}}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="reckon"'
    return response


def no_such_job() -> ApiError:
    """Also the answer for a job outside the token's scope: another tenant cannot probe ids."""
    return ApiError(404, "not_found", "no such job")


def check_reach(token, *, tenants: list[str] | None, actions: list[str] | None, doing: str) -> None:
    """Refuse (403) a request that names tenants or actions beyond the token's reach, saying which
    and, for the MCP gateway's tools, why: only the gateway runs their jobs."""
    tenants = sorted({t for t in tenants or () if ALL not in token.tenants and t not in token.tenants})
    actions = sorted({a for a in actions or () if not token.reaches_action(a)})
    if not tenants and not actions:
        return
    named = [*([f"for tenant(s) {', '.join(tenants)}"] if tenants else []),
             *([f"jobs of action(s) {', '.join(actions)}"] if actions else [])]
    message = f"token {token.prefix}… may not {doing} {' or '.join(named)}"
    gateway = [a for a in actions if is_gateway_action(a)]
    if gateway and ALL in token.actions:
        message += (f": {', '.join(gateway)} {'is a tool' if len(gateway) == 1 else 'are tools'} of the MCP "
                    "gateway, which alone enqueues and runs its jobs and records their results; a \"*\" does not "
                    "reach the gateway's tools over the worker API, only a token that names the action does")
    raise ApiError(403, "forbidden", message)


class WorkerTokenAuth(HttpAuthBase):
    """`Authorization: Bearer rk_...`; session cookies are never consulted, so there is no CSRF."""

    openapi_scheme = "bearer"
    openapi_description = "A worker token (manage.py worker_token create), scoped to tenants and actions."

    def __call__(self, request: HttpRequest):
        return tokens.authenticate(request.headers.get("Authorization", ""))


# -- refusals, as the API's exception handlers ----------------------------------------------------


def refusal(request: HttpRequest, exc: Exception) -> JsonResponse:
    """The HTTP answer for an API or ledger refusal."""
    match exc:
        case ApiError():
            return error_response(exc.status, exc.code, str(exc), **exc.extra)
        case UnknownAction():
            return error_response(400, "invalid", "some fields are invalid", fields={"action": str(exc)})
        case InvalidJob():
            return error_response(400, "invalid", str(exc))
        case ClaimRefused():
            return error_response(409, "claim_refused", str(exc), reason=exc.reason)
        case StaleLease():
            return error_response(409, "stale_lease", str(exc))
        case IdentityMismatch():
            return error_response(409, "identity_mismatch", str(exc))
        case JobArchived():
            return error_response(409, "job_archived", str(exc), final_status=exc.tombstone.status,
                                  archived_at=exc.tombstone.checkpoint.archived_at.isoformat())
        case JobConflict():
            return error_response(409, "job_conflict", str(exc))
        case LedgerError():
            return error_response(409, "invalid_transition", str(exc))
    raise TypeError(f"not a refusal: {exc!r}")


def http_error(request: HttpRequest, exc: HttpError) -> JsonResponse:
    # ninja wraps whatever the body parser raises; the parser's own refusal says more.
    if isinstance(exc.__cause__, BodyRefused):
        cause = exc.__cause__
        if cause.status == 400:
            return error_response(400, "invalid", "the body is invalid", fields={"body": str(cause)})
        return error_response(cause.status, cause.code, str(cause))
    if isinstance(exc, AuthenticationError):
        return error_response(
            401, "unauthorized", "a valid worker token is required: Authorization: Bearer <token>"
        )
    return error_response(exc.status_code, "http_error", exc.message)


def invalid_fields(request: HttpRequest, exc: ValidationError) -> JsonResponse:
    if any(error["loc"][0] == "path" for error in exc.errors):
        return refusal(request, no_such_job())  # an id no job could have: as unknown as any other
    fields = {}
    for error in exc.errors:
        fields.setdefault(_field_name(error["loc"]), error["message"])
    return error_response(400, "invalid", "some fields are invalid", fields=fields)


def server_error(request: HttpRequest, exc: Exception) -> JsonResponse:
    if database_unavailable(exc):  # a failover: nothing is known to have changed; ask again
        log.warning("API %s %s: the database is unavailable (%s)", request.method, request.path, exc)
        drop_broken_connections()
        return database_unavailable_response()
    log.exception("API %s %s failed", request.method, request.path)
    return error_response(500, "server_error", "the server failed; the error is logged")


def database_unavailable_response() -> JsonResponse:
    """503 with Retry-After: the ledger's database has no primary right now (a failover, a restart).
    Whether a write of this request committed is unknown: every write is a compare-and-set or
    keyed by the job, so asking again is safe and tells."""
    response = error_response(503, "database_unavailable",
                              "the ledger's database is unavailable (a failover or a restart); whether this "
                              "request's write committed is unknown: ask again, the same request, after Retry-After")
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response


def _field_name(loc: tuple) -> str:
    # ("body", "body", "payload") -> "payload"; a missing body is ("body", "body").
    names = [str(part) for part in loc[2:]]
    return ".".join(names) or "body"


def field_message(error: dict, allowed: list[str]) -> str:
    """What is wrong with a field, from pydantic's error (`loc` relative to the body model)."""
    kind, context = error["type"], error.get("ctx", {})
    value = error.get("input")
    got = f", got {json_type(value)}"
    match kind:
        case "missing" if error["loc"][1:]:
            return "this field is required"
        case "missing":
            return "a JSON object body is required"
        case "extra_forbidden":
            return "unexpected field; allowed: " + ", ".join(allowed)
        case "literal_error":
            return f"must be one of {context['expected']}"
        case "string_type":
            return "must be a string" + got
        case "int_type":
            return "must be an integer" + got
        case "bool_type":
            return "must be true or false" + got
        case "dict_type" | "model_type":
            return "must be a JSON object" + got
        case "string_too_short":
            return "must not be empty"
        case "string_too_long":
            return f"must be at most {context['max_length']} characters, got {len(value)}"
        case "greater_than_equal":
            return f"must be at least {context['ge']}"
        case "less_than_equal":
            return f"must be at most {context['le']}"
        case "value_error":
            return str(context.get("error", error["msg"]))
    return error["msg"]


# -- what ninja answers outside its handlers -------------------------------------------------------


def edge(view):
    """Wrap a ninja URL view: refuse an oversized body unread, and answer 404 and 405 as JSON."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs):
        try:
            check_declared_size(request)
            response = view(request, *args, **kwargs)
        except BodyRefused as refused:
            return error_response(refused.status, refused.code, str(refused))
        except Http404:
            return error_response(404, "not_found", f"no API endpoint at {request.path}")
        if isinstance(response, HttpResponseNotAllowed):
            allowed = response["Allow"]
            response = error_response(
                405, "method_not_allowed", f"{request.method} is not allowed here; use {allowed}"
            )
            response["Allow"] = allowed
        return response

    return wrapper
