"""Rate limits of the sandbox provider: above N requests per second, answer 429 with Retry-After.

A limit applies to a path prefix (``/invoices`` covers ``/invoices`` and ``/invoices/in_1``) or,
under the name ``*``, to every request that no prefix limit covers. Internal routes (``/_admin``,
``/_health``, ``/_effects``) are never limited, so a test can always change the limits live:

    PUT /_admin/rate_limits  {"limits": {"/messages": 50, "*": 200}, "burst_s": 0.2}
    GET /_admin/rate_limits  -> the configuration and how many requests each limit refused

Each limit is a token bucket: it refills at N tokens per second and holds at most N × burst_s
(at least 2), so a client spacing its requests evenly at N per second is never refused, and one
that sends faster is refused within burst_s seconds. A refused request did nothing.
"""

from __future__ import annotations

import math
import threading
import time

from sandbox.faults import FaultError

DEFAULT_BURST_S = 0.2
MAX_BURST_S = 60.0
GLOBAL = "*"


class _Bucket:
    def __init__(self, rate: float, burst_s: float):
        self.rate = rate
        self.capacity = max(2.0, rate * burst_s)
        self.tokens = self.capacity
        self.at = time.monotonic()
        self.refused = 0
        self.allowed = 0

    def take(self) -> float:
        """0 if the request may go ahead; otherwise the seconds until a token is there."""
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            self.allowed += 1
            return 0.0
        self.refused += 1
        return (1 - self.tokens) / self.rate


class RateLimits:
    """The configured limits, shared by all request threads."""

    def __init__(self, limits: dict | None = None, burst_s: float = DEFAULT_BURST_S):
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}
        self._burst_s = DEFAULT_BURST_S
        self._initial = {"limits": limits or {}, "burst_s": burst_s}
        self.update(self._initial)

    def update(self, data: object) -> dict:
        """Replace the configuration (the body of ``PUT /_admin/rate_limits``), validated first."""
        if not isinstance(data, dict):
            raise FaultError("the rate limit configuration must be a JSON object")
        unknown = sorted(set(data) - {"limits", "burst_s"})
        if unknown:
            raise FaultError(f"unknown field(s) {', '.join(unknown)}; allowed: limits, burst_s")
        limits = data.get("limits") or {}
        if not isinstance(limits, dict):
            raise FaultError('limits must be an object like {"/invoices": 100, "*": 500}')
        burst_s = data.get("burst_s", DEFAULT_BURST_S)
        if isinstance(burst_s, bool) or not isinstance(burst_s, (int, float)) \
                or not math.isfinite(burst_s) or not 0 < burst_s <= MAX_BURST_S:
            raise FaultError(f"burst_s must be a number of seconds in (0, {MAX_BURST_S:g}], got {burst_s!r}")
        parsed = {}
        for prefix, rate in limits.items():
            if prefix != GLOBAL and (not prefix.startswith("/") or prefix.startswith("/_")):
                raise FaultError(f"a limit applies to a path prefix like /invoices or to {GLOBAL!r}"
                                 f" (internal routes are never limited), got {prefix!r}")
            if isinstance(rate, bool) or not isinstance(rate, (int, float)) \
                    or not math.isfinite(rate) or rate <= 0:
                raise FaultError(f"the limit of {prefix} must be a positive number of requests per"
                                 f" second, got {rate!r}")
            parsed[prefix.rstrip("/") or "/"] = float(rate)
        with self._lock:
            self._burst_s = float(burst_s)
            self._buckets = {prefix: _Bucket(rate, self._burst_s) for prefix, rate in parsed.items()}
        return self.as_dict()

    def reset(self) -> dict:
        return self.update(self._initial)

    def as_dict(self) -> dict:
        with self._lock:
            return {
                "limits": {prefix: bucket.rate for prefix, bucket in self._buckets.items()},
                "burst_s": self._burst_s,
                "allowed": {prefix: bucket.allowed for prefix, bucket in self._buckets.items()},
                "refused": {prefix: bucket.refused for prefix, bucket in self._buckets.items()},
            }

    def check(self, path: str) -> tuple[str, float, int] | None:
        """None if the request may go ahead; otherwise (the limit's name, its rate, the seconds
        to wait), for the 429. The longest matching prefix decides; ``*`` covers the rest."""
        with self._lock:
            if not self._buckets:
                return None
            matching = [p for p in self._buckets if p != GLOBAL and (path == p or path.startswith(p + "/"))]
            name = max(matching, key=len) if matching else (GLOBAL if GLOBAL in self._buckets else None)
            if name is None:
                return None
            bucket = self._buckets[name]
            wait = bucket.take()
            return None if wait == 0 else (name, bucket.rate, wait)


def parse_cli(values: list[str]) -> dict:
    """``--rate-limit /invoices=100 --rate-limit '*=500'`` -> {"/invoices": 100.0, "*": 500.0}."""
    limits = {}
    for value in values:
        prefix, sep, rate = value.rpartition("=")
        try:
            limits[prefix] = float(rate)
        except ValueError:
            raise FaultError(f"--rate-limit takes PREFIX=REQUESTS_PER_S, got {value!r}") from None
        if not sep:
            raise FaultError(f"--rate-limit takes PREFIX=REQUESTS_PER_S, got {value!r}")
    return limits
