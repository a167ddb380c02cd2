"""The sandbox provider's HTTP API, independent of the socket server.

``App.handle(Request) -> Response`` routes a request, applies the injected faults, validates
the JSON body and calls the store. The socket-level work (reading the body, writing the
response, dropping the connection for ``drop_after_commit``) lives in ``sandbox.server``.

The payments provider (``/charges``) plays a team's own Express service with Stripe-style
idempotency keys: a key's request that was acted on but never answered (``drop_after_commit``)
leaves the key ``in progress`` for ever, so every later request with that key is answered
``409 {"error": "in progress"}`` although the charge exists. ``GET /charges?idempotency_key=K``
tells the truth: the key's charges and its state (``in_progress``, ``completed`` or null: never seen).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote

from sandbox.faults import FaultConfig, FaultError, Faults, Latency, parse_header
from sandbox.ratelimit import RateLimits
from sandbox.store import Refused, RolledBack, Store

MAX_TEXT = 10_000
MAX_HEADER = 255
CURRENCY = re.compile(r"[A-Za-z]{3}")


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


@dataclass
class Request:
    method: str
    target: str  # path and query string, as sent
    headers: dict  # lower-case names
    body: bytes = b""
    path: str = ""
    query: dict = field(default_factory=dict)
    rollback: bool = False  # the fail_before_commit fault
    dropping: bool = False  # the drop_after_commit fault: a 2xx answer will never be sent

    def header(self, name: str) -> str | None:
        """An optional header; present but empty or too long is a 400."""
        value = self.headers.get(name.lower())
        if value is None:
            return None
        value = value.strip()
        if not value or len(value) > MAX_HEADER:
            raise ApiError(400, f"header {name} must be 1 to {MAX_HEADER} characters")
        return value

    def json(self, *, empty_ok: bool = False) -> dict:
        if not self.body.strip() and empty_ok:
            return {}
        try:
            data = json.loads(self.body.decode("utf-8"), parse_constant=_reject_constant)
        except UnicodeDecodeError:
            raise ApiError(400, "request body must be UTF-8 encoded JSON") from None
        except ValueError as exc:
            raise ApiError(400, f"request body is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ApiError(400, "request body must be a JSON object")
        return data

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        if values is None:
            return None
        if len(values) != 1 or not values[0]:
            raise ApiError(400, f"query parameter {name} must be given once and not be empty")
        return values[0]

    def only_params(self, *allowed: str) -> None:
        unknown = sorted(set(self.query) - set(allowed))
        if unknown:
            allowed_text = ", ".join(allowed) or "none"
            raise ApiError(400, f"unknown query parameter(s) {', '.join(unknown)};"
                                f" allowed: {allowed_text}")


@dataclass
class Response:
    status: int
    payload: dict
    headers: dict = field(default_factory=dict)
    drop: bool = False  # close the connection without sending this response


def _reject_constant(name: str):
    raise ValueError(f"{name} is not allowed")


def check_fields(body: dict, required: tuple = (), optional: tuple = ()) -> None:
    unknown = sorted(set(body) - set(required) - set(optional))
    if unknown:
        allowed = ", ".join(required + optional)
        raise ApiError(400, f"unknown field(s) {', '.join(unknown)}; allowed: {allowed}")
    missing = [name for name in required if name not in body]
    if missing:
        raise ApiError(400, f"missing required field(s): {', '.join(missing)}")


def text(body: dict, name: str, *, empty_ok: bool = False, max_len: int = MAX_TEXT) -> str:
    value = body[name]
    if not isinstance(value, str):
        raise ApiError(400, f"{name} must be a string, got {type(value).__name__}")
    if not empty_ok and not value.strip():
        raise ApiError(400, f"{name} must not be empty")
    if len(value) > max_len:
        raise ApiError(400, f"{name} must be at most {max_len} characters")
    return value


def path_name(value: str, what: str) -> str:
    if not value.strip() or len(value) > MAX_HEADER:
        raise ApiError(400, f"{what} must be 1 to {MAX_HEADER} characters")
    return value


@dataclass(frozen=True)
class Route:
    pattern: re.Pattern
    methods: dict  # method -> App method name
    kind: str = "read"  # "effect" (POST creates effects), "read" or "internal"
    refusal: str | None = None  # custom 405 message


def route(path: str, methods: dict, kind: str = "read", refusal: str | None = None) -> Route:
    return Route(re.compile(path), methods, kind, refusal)


ROUTES = (
    route(r"/invoices", {"POST": "create_invoice", "GET": "list_invoices"}, "effect"),
    route(r"/invoices/(?P<invoice_id>[^/]+)", {"GET": "get_invoice"}),
    route(r"/messages", {"POST": "send_message", "GET": "list_messages"}, "effect"),
    route(r"/profiles/(?P<profile>[^/]+)", {"GET": "get_profile"}),
    route(r"/posts", {"POST": "publish_post", "GET": "list_posts"}, "effect"),
    route(r"/charges", {"POST": "create_charge", "GET": "list_charges"}, "effect"),
    route(r"/charges/(?P<charge_id>[^/]+)", {"GET": "get_charge"}),
    route(r"/credentials/(?P<name>[^/]+)/rotate", {"POST": "rotate_credential"}, "effect"),
    route(r"/credentials(?:/[^/]+)?", {}, refusal="the vault cannot be queried"),
    route(r"/_admin/profiles/(?P<profile>[^/]+)", {"PUT": "admin_set_profile"}, "internal"),
    route(r"/_admin/faults", {"GET": "admin_get_faults", "PUT": "admin_set_faults"}, "internal"),
    route(r"/_admin/latency", {"GET": "admin_get_latency", "PUT": "admin_set_latency"}, "internal"),
    route(r"/_admin/forget_keys", {"GET": "admin_get_forget", "PUT": "admin_set_forget"},
          "internal"),
    route(r"/_admin/rate_limits", {"GET": "admin_get_rate_limits", "PUT": "admin_set_rate_limits"},
          "internal"),
    route(r"/_admin/reset", {"POST": "admin_reset"}, "internal"),
    route(r"/_effects", {"GET": "effects"}, "internal"),
    route(r"/_health", {"GET": "health"}, "internal"),
)


class App:
    def __init__(self, store: Store, faults: FaultConfig | None = None, latency: Latency | None = None,
                 limits: RateLimits | None = None):
        self.store = store
        self.faults = faults or FaultConfig()
        self.latency = latency or Latency()
        self.limits = limits or RateLimits()

    # -- dispatch --------------------------------------------------------------------------

    def handle(self, request: Request) -> Response:
        try:
            return self._handle(request)
        except ApiError as exc:
            return Response(exc.status, {"error": exc.message}, exc.headers)
        except FaultError as exc:
            return Response(400, {"error": str(exc)})
        except Refused as exc:
            return Response(exc.status, {"error": exc.message})

    def _handle(self, request: Request) -> Response:
        raw_path, _, query = request.target.partition("?")
        request.path = raw_path.rstrip("/") or "/"
        request.query = parse_qs(query, keep_blank_values=True)
        requested = parse_header(request.headers.get("x-sandbox-fault"))
        matched, params = self._match(request.path)
        handler_name = matched.methods.get(request.method)
        if handler_name is None:
            allow = ", ".join(sorted(matched.methods))
            message = matched.refusal or (
                f"method {request.method} is not allowed on {request.path}; allowed: {allow}")
            raise ApiError(405, message, {"Allow": allow} if allow else {})
        if matched.kind != "internal" and (refused := self.limits.check(request.path)):
            name, rate, wait = refused
            # Retry-After is whole seconds (RFC 9110); the bucket refills sooner at high rates.
            raise ApiError(429, f"rate limit of {rate:g} requests/s on {name} exceeded;"
                                f" nothing was done", {"Retry-After": str(max(1, math.ceil(wait)))})
        creates = matched.kind == "effect" and request.method == "POST"
        if matched.kind != "internal" and self.latency.seconds:
            time.sleep(self.latency.seconds)  # the provider's round trip (sandbox.faults.Latency)
        if matched.kind == "internal":
            faults = Faults()  # admin, health and effect accounting are never faulted
        elif creates:
            faults = requested.merge(self.faults.draw())  # configured faults: effects only
        else:
            faults = requested
        return self._run(request, faults, creates, getattr(self, handler_name), params)

    @staticmethod
    def _match(path: str) -> tuple[Route, dict]:
        for candidate in ROUTES:
            found = candidate.pattern.fullmatch(path)
            if found:
                params = {name: unquote(value) for name, value in found.groupdict().items()}
                return candidate, params
        raise ApiError(404, f"no such endpoint: {path}")

    def _run(self, request: Request, faults: Faults, creates: bool, handler, params: dict):
        names = _fault_names(faults)
        injected = {"X-Sandbox-Fault-Injected": names} if names else {}
        if faults.latency:
            time.sleep(faults.latency)
        if faults.error_5xx:
            return Response(503, {"error": "injected fault error_5xx: service unavailable;"
                                           " nothing was done"}, injected)
        if faults.fail_before_commit and not creates:  # a lookup: nothing to roll back
            return Response(500, {"error": "injected fault fail_before_commit: nothing was done"},
                            injected)
        request.rollback = faults.fail_before_commit
        request.dropping = faults.drop_after_commit
        try:
            response = handler(request, **params)
        except RolledBack:
            return Response(500, {"error": "injected fault fail_before_commit: the work was"
                                           " rolled back; nothing was done"}, injected)
        response.headers.update(injected)
        response.drop = faults.drop_after_commit and 200 <= response.status < 300
        return response

    # -- billing ---------------------------------------------------------------------------

    def create_invoice(self, request: Request) -> Response:
        key = request.header("Idempotency-Key")
        marker = request.header("X-Reckon-Marker")
        body = request.json()
        check_fields(body, ("customer", "amount_cents", "currency"), ("description", "metadata"))
        amount = body["amount_cents"]
        if isinstance(amount, bool) or not isinstance(amount, int):
            raise ApiError(400, f"amount_cents must be an integer, got {amount!r}")
        if not 0 < amount <= 10**12:
            raise ApiError(400, f"amount_cents must be a positive integer, got {amount}")
        currency = text(body, "currency")
        if not CURRENCY.fullmatch(currency):
            raise ApiError(400, f"currency must be a 3-letter code like 'eur', got {currency!r}")
        description = body.get("description")
        if description is not None:
            description = text(body, "description", empty_ok=True)
        metadata = body.get("metadata")
        if metadata is None:
            metadata = {}
        if not isinstance(metadata, dict) or not all(
                isinstance(value, str) for value in metadata.values()):
            raise ApiError(400, "metadata must be an object of string keys to string values")
        if len(metadata) > 50:
            raise ApiError(400, "metadata may hold at most 50 keys")
        params = {"customer": text(body, "customer", max_len=MAX_HEADER), "amount_cents": amount,
                  "currency": currency, "description": description, "metadata": metadata}
        invoice, replayed = self.store.create_invoice(params, key, marker, request.rollback)
        if replayed:
            return Response(200, invoice, {"Idempotent-Replayed": "true"})
        return Response(201, invoice)

    def list_invoices(self, request: Request) -> Response:
        request.only_params("idempotency_key", "marker")
        invoices = self.store.find_invoices(request.param("idempotency_key"),
                                            request.param("marker"))
        return Response(200, {"invoices": invoices})

    def get_invoice(self, request: Request, invoice_id: str) -> Response:
        request.only_params()
        invoice = self.store.get_invoice(invoice_id)
        if invoice is None:
            raise ApiError(404, f"no invoice {invoice_id!r}")
        return Response(200, invoice)

    # -- payments (Stripe-style idempotency) ---------------------------------------------

    def create_charge(self, request: Request) -> Response:
        key = request.header("Idempotency-Key")
        marker = request.header("X-Reckon-Marker")
        body = request.json()
        check_fields(body, ("customer", "amount_cents", "currency"))
        amount = body["amount_cents"]
        if isinstance(amount, bool) or not isinstance(amount, int) or not 0 < amount <= 10**12:
            raise ApiError(400, f"amount_cents must be a positive integer, got {amount!r}")
        currency = text(body, "currency")
        if not CURRENCY.fullmatch(currency):
            raise ApiError(400, f"currency must be a 3-letter code like 'eur', got {currency!r}")
        params = {"customer": text(body, "customer", max_len=MAX_HEADER), "amount_cents": amount,
                  "currency": currency}
        charge, replayed = self.store.create_charge(params, key, marker, rollback=request.rollback,
                                                    unfinished=request.dropping)
        if replayed:
            return Response(200, charge, {"Idempotent-Replayed": "true"})
        return Response(201, charge)

    def list_charges(self, request: Request) -> Response:
        request.only_params("idempotency_key", "marker")
        return Response(200, self.store.find_charges(request.param("idempotency_key"), request.param("marker")))

    def get_charge(self, request: Request, charge_id: str) -> Response:
        request.only_params()
        charge = self.store.get_charge(charge_id)
        if charge is None:
            raise ApiError(404, f"no charge {charge_id!r}")
        return Response(200, charge)

    # -- mail ------------------------------------------------------------------------------

    def send_message(self, request: Request) -> Response:
        key = request.header("Idempotency-Key")
        marker = request.header("X-Reckon-Marker")
        body = request.json()
        check_fields(body, ("to", "subject", "body"))
        to = text(body, "to", max_len=MAX_HEADER)
        if "@" not in to.strip(" @") or any(c.isspace() for c in to):
            raise ApiError(400, f"to must be an e-mail address, got {to!r}")
        message = self.store.send_message(
            to, text(body, "subject", empty_ok=True, max_len=1000),
            text(body, "body", empty_ok=True), key, marker, request.rollback)
        return Response(201, message)

    def list_messages(self, request: Request) -> Response:
        request.only_params("marker")
        return Response(200, {"messages": self.store.find_messages(request.param("marker"))})

    # -- publish target --------------------------------------------------------------------

    def get_profile(self, request: Request, profile: str) -> Response:
        request.only_params()
        found = self.store.get_profile(profile)
        if found is None:
            raise ApiError(404, f"unknown profile {profile!r}")
        return Response(200, found)

    def publish_post(self, request: Request) -> Response:
        profile = request.header("X-Profile")
        if profile is None:
            raise ApiError(400, "header X-Profile is required: the browser profile to post from")
        key = request.header("Idempotency-Key")
        marker_header = request.header("X-Reckon-Marker")
        body = request.json()
        check_fields(body, ("body",), ("marker",))
        marker = text(body, "marker", max_len=MAX_HEADER) if "marker" in body else marker_header
        post = self.store.publish_post(profile, text(body, "body"), marker, key,
                                       marker_header or marker, request.rollback)
        return Response(201, post)

    def list_posts(self, request: Request) -> Response:
        request.only_params("marker")
        return Response(200, {"posts": self.store.find_posts(request.param("marker"))})

    # -- vault -----------------------------------------------------------------------------

    def rotate_credential(self, request: Request, name: str) -> Response:
        path_name(name, "the credential name")
        key = request.header("Idempotency-Key")
        marker = request.header("X-Reckon-Marker")
        check_fields(request.json(empty_ok=True))
        return Response(200, self.store.rotate_credential(name, key, marker, request.rollback))

    # -- admin and accounting --------------------------------------------------------------

    def admin_set_profile(self, request: Request, profile: str) -> Response:
        path_name(profile, "the profile name")
        body = request.json()
        check_fields(body, ("account",), ("session",))
        session = body.get("session", "active")
        if session not in ("active", "expired"):
            raise ApiError(400, f"session must be 'active' or 'expired', got {session!r}")
        account = text(body, "account", max_len=MAX_HEADER)
        return Response(200, self.store.set_profile(profile, account, session))

    def admin_get_faults(self, request: Request) -> Response:
        return Response(200, self.faults.as_dict())

    def admin_set_faults(self, request: Request) -> Response:
        return Response(200, self.faults.update(request.json()))

    def admin_get_latency(self, request: Request) -> Response:
        return Response(200, self.latency.as_dict())

    def admin_set_latency(self, request: Request) -> Response:
        return Response(200, self.latency.update(request.json()))

    def admin_get_rate_limits(self, request: Request) -> Response:
        return Response(200, self.limits.as_dict())

    def admin_set_rate_limits(self, request: Request) -> Response:
        return Response(200, self.limits.update(request.json()))

    def admin_get_forget(self, request: Request) -> Response:
        return Response(200, {"forget": self.store.forgets_keys()})

    def admin_set_forget(self, request: Request) -> Response:
        body = request.json()
        check_fields(body, ("forget",))
        if not isinstance(body["forget"], bool):
            raise ApiError(400, f"forget must be true or false, got {body['forget']!r}")
        self.store.set_forget_keys(body["forget"])
        return Response(200, {"forget": body["forget"]})

    def admin_reset(self, request: Request) -> Response:
        self.store.reset()
        self.faults.reset()
        self.latency.reset()
        self.limits.reset()
        return Response(200, {"reset": True})

    def effects(self, request: Request) -> Response:
        request.only_params("key", "marker")
        key, marker = request.param("key"), request.param("marker")
        if key is None and marker is None:
            return Response(200, self.store.effect_summary())
        found = self.store.effects(key=key, marker=marker)
        return Response(200, {"count": len(found), "effects": found})

    def health(self, request: Request) -> Response:
        return Response(200, {"ok": True, "pid": os.getpid(), "db": str(self.store.path)})


def _fault_names(faults: Faults) -> str:
    names = [name for name in ("error_5xx", "fail_before_commit", "drop_after_commit")
             if getattr(faults, name)]
    if faults.latency:
        names.insert(0, f"latency={faults.latency:.3f}")
    return ",".join(names)
