"""Calling a provider over HTTP and saying honestly what we know afterwards.

The one distinction that matters: did the request leave this process? A connection that was
refused never sent anything (safe to retry). Once the request is on the wire, a timeout, a
reset or an empty reply proves nothing: the effect may have happened.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

from ledger.budget import BUDGET, CircuitOpen, NotSent, OverBudget, parse_retry_after
from ledger.faults import fault_point

__all__ = ["CircuitOpen", "NoAnswer", "NotSent", "OverBudget", "Reply", "call"]


class NoAnswer(Exception):
    """The request was sent, but no complete answer came back: the outcome is unknown."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict
    retry_after: float | None = None  # seconds, from a Retry-After header

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def error(self) -> str:
        return str(self.body.get("error") or self.body)[:500]


def call(
    method: str,
    url: str,
    *,
    body: dict | None = None,
    headers: dict | None = None,
    timeout: float | None = None,
    fault_job: str = "",
    provider: str | None = None,
) -> Reply:
    """One request within `provider`'s budget (ledger.budget; by default the URL's host and port
    name the provider): raises NotSent (OverBudget, CircuitOpen among them) or NoAnswer."""
    parts = urlsplit(url)
    timeout = timeout if timeout is not None else settings.RECKON_PROVIDER_TIMEOUT
    slot = BUDGET.slot(provider or parts.netloc)
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        try:
            connection.connect()
        except OSError as exc:
            slot.no_answer(f"could not connect: {exc}")
            raise NotSent(f"could not connect to {parts.netloc}: {exc}") from exc
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        data = None if body is None else json.dumps(body).encode()
        try:
            connection.request(
                method,
                path or "/",
                body=data,
                headers={"Content-Type": "application/json", **(headers or {})},
            )
            if fault_job:
                fault_point("during_call", fault_job)
            response = connection.getresponse()
            raw = response.read()
        except (TimeoutError, OSError, http.client.HTTPException) as exc:
            slot.no_answer(f"no answer: {type(exc).__name__}")
            raise NoAnswer(f"{method} {url}: {type(exc).__name__}: {exc or 'connection closed'}") from exc
        try:
            decoded = json.loads(raw) if raw else {}
        except ValueError:
            decoded = {"text": raw[:500].decode(errors="replace")}
        retry_after = parse_retry_after(response.getheader("Retry-After"))
        slot.answered(response.status, retry_after)
        return Reply(response.status, decoded if isinstance(decoded, dict) else {"value": decoded}, retry_after)
    finally:
        connection.close()
