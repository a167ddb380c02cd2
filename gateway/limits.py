"""What a tools/call may ask of the gateway, checked before anything is stored or called: the size of
its arguments (RECKON_MCP_GATEWAY_MAX_ARGUMENTS_BYTES, the worker API's body limit by default), and
the rate of its worker token's calls (RECKON_MCP_GATEWAY_CALLS_PER_MINUTE, in each gateway process:
gateways share nothing, so N processes behind a balancer let a token make up to N times as many).
"""

from __future__ import annotations

import json
import math
import time
from functools import cache

from django.conf import settings

RETRY_AFTER_META = "reckon/retry_after_s"


class CallRate:
    """A bucket per token: `per_minute` calls at once, then refilled at per_minute/60 a second.
    Used from the event loop's thread only (no lock)."""

    def __init__(self, per_minute: int):
        self.per_minute = per_minute
        self.buckets: dict[object, tuple[float, float]] = {}  # token -> (calls left, when counted)

    def take(self, token: object, now: float | None = None) -> float:
        """0 when the call may go; otherwise the seconds until the token's next call may."""
        if self.per_minute <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        left, since = self.buckets.get(token, (float(self.per_minute), now))
        left = min(float(self.per_minute), left + (now - since) * self.per_minute / 60)
        if left >= 1:
            self.buckets[token] = (left - 1, now)
            return 0.0
        self.buckets[token] = (left, now)
        return (1 - left) * 60 / self.per_minute


@cache
def call_rate() -> CallRate:
    """This process's buckets."""
    return CallRate(settings.RECKON_MCP_GATEWAY_CALLS_PER_MINUTE)


def refusal(token, arguments: dict) -> tuple[str, dict] | None:
    """Why this call is refused before anything is stored or called, and the answer's _meta; None
    when it may go on."""
    rate = call_rate()
    wait = rate.take(token.pk)
    if wait:
        seconds = math.ceil(wait)
        return (f"refused, nothing called: token {token.name!r} is past its {rate.per_minute} tool calls a minute "
                f"through this gateway (RECKON_MCP_GATEWAY_CALLS_PER_MINUTE); call again in {seconds} s",
                {RETRY_AFTER_META: seconds, "reckon/retry": "later"})
    size = len(json.dumps(arguments, separators=(",", ":"), ensure_ascii=False).encode())
    limit = settings.RECKON_MCP_GATEWAY_MAX_ARGUMENTS_BYTES
    if size > limit:
        return (f"refused, nothing called nor stored: the arguments are {size} bytes of JSON, more than the "
                f"{limit} the gateway takes (RECKON_MCP_GATEWAY_MAX_ARGUMENTS_BYTES)", {})
    return None
