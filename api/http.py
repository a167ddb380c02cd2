"""The API's HTTP edge: bearer-token authentication, method checks, and one error shape.

Every refusal is JSON: {"error": {"code", "message", "fields"?, "reason"?}}. Ledger refusals
map to HTTP here, once, so the views only parse, call one service and serialise.
"""

from __future__ import annotations

import functools
import logging

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from api import tokens
from api.models import WorkerToken
from api.validation import BodyTooLarge, FieldErrors
from ledger.actions import UnknownAction
from ledger.services import (
    ClaimRefused,
    IdentityMismatch,
    InvalidJob,
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


def _refusal(exc: Exception) -> JsonResponse:
    """Map a refusal to its HTTP answer; anything else is a bug and propagates."""
    match exc:
        case ApiError():
            return error_response(exc.status, exc.code, str(exc), **exc.extra)
        case FieldErrors():
            return error_response(400, "invalid", "some fields are invalid", fields=exc.fields)
        case BodyTooLarge():
            return error_response(413, "body_too_large", str(exc))
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
        case JobConflict():
            return error_response(409, "job_conflict", str(exc))
        case LedgerError():
            return error_response(409, "invalid_transition", str(exc))
    raise exc


def endpoint(*methods: str, authenticated: bool = True):
    """An API view: token in, JSON out. The view gets `request.worker_token`.

    Session cookies are never consulted: a browser logged into the console is anonymous here.
    CSRF protection is off because nothing here trusts ambient credentials.
    """

    def decorate(view):
        @csrf_exempt
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args, **kwargs):
            if request.method not in methods:
                response = error_response(
                    405,
                    "method_not_allowed",
                    f"{request.method} is not allowed here; use {', '.join(methods)}",
                )
                response["Allow"] = ", ".join(methods)
                return response
            if authenticated:
                worker_token = tokens.authenticate(request.META.get("HTTP_AUTHORIZATION", ""))
                if worker_token is None:
                    return error_response(
                        401, "unauthorized", "a valid worker token is required: Authorization: Bearer <token>"
                    )
                request.worker_token = worker_token
            try:
                return view(request, *args, **kwargs)
            except (ApiError, FieldErrors, BodyTooLarge, LedgerError, UnknownAction) as exc:
                return _refusal(exc)

        return wrapper

    return decorate


def require_scope(worker_token: WorkerToken, *, tenant: str, action: str) -> None:
    if not worker_token.allows(tenant=tenant, action=action):
        raise ApiError(
            403,
            "forbidden",
            f"token {worker_token.prefix}… may not act for tenant {tenant!r} and action {action!r}",
        )
