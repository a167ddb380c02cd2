"""Fault injection for the sandbox provider.

Two sources of faults, merged for each request:

* the ``X-Sandbox-Fault`` request header, e.g. ``latency=0.5,drop_after_commit``;
* the configured rates (``PUT /_admin/faults`` or ``--fault-rate``), drawn from a seeded
  ``random.Random`` for effect-creating POSTs only.

Fault kinds:

* ``latency=<seconds>``: sleep before handling the request;
* ``error_5xx``: answer 503, nothing happens;
* ``fail_before_commit``: do the work, roll it back, answer 500: nothing happened;
* ``drop_after_commit``: commit the effect, then close the connection without a response.
"""

from __future__ import annotations

import math
import random
import threading
from dataclasses import dataclass, replace

KINDS = ("error_5xx", "fail_before_commit", "drop_after_commit")
MAX_LATENCY = 300.0


class FaultError(ValueError):
    """A fault header or fault configuration is invalid (answered with a 400)."""


@dataclass(frozen=True)
class Faults:
    """The faults to apply to one request."""

    latency: float = 0.0
    error_5xx: bool = False
    fail_before_commit: bool = False
    drop_after_commit: bool = False

    def merge(self, other: Faults) -> Faults:
        return Faults(
            latency=self.latency + other.latency,
            error_5xx=self.error_5xx or other.error_5xx,
            fail_before_commit=self.fail_before_commit or other.fail_before_commit,
            drop_after_commit=self.drop_after_commit or other.drop_after_commit,
        )


def _seconds(value: object, what: str, *, text: bool = False) -> float:
    types = (int, float, str) if text else (int, float)
    if isinstance(value, bool) or not isinstance(value, types):
        raise FaultError(f"{what} must be a number of seconds, got {value!r}")
    try:
        seconds = float(value)
    except ValueError:
        raise FaultError(f"{what} must be a number of seconds, got {value!r}") from None
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_LATENCY:
        raise FaultError(f"{what} must be between 0 and {MAX_LATENCY:g} seconds, got {value!r}")
    return seconds


def parse_header(value: str | None) -> Faults:
    """Parse ``X-Sandbox-Fault: latency=0.2,error_5xx``; raises FaultError on unknown names."""
    faults = Faults()
    if not value:
        return faults
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, arg = (part.strip() for part in item.partition("="))
        if name == "latency":
            if not sep:
                raise FaultError("X-Sandbox-Fault: latency needs a value, e.g. latency=0.5")
            faults = replace(faults, latency=_seconds(arg, "X-Sandbox-Fault latency", text=True))
        elif name in KINDS:
            if sep:
                raise FaultError(f"X-Sandbox-Fault: {name} takes no value")
            faults = replace(faults, **{name: True})
        else:
            known = ", ".join(("latency=<seconds>",) + KINDS)
            raise FaultError(f"X-Sandbox-Fault: unknown fault {name!r}; known faults: {known}")
    return faults


class RatedFaults:
    """What the sandboxes' fault configurations share (``PUT /_admin/faults``, the HTTP sandbox's
    `FaultConfig` and the SMTP sandbox's): a rate per fault kind, drawn from a seeded
    ``random.Random`` so that a run can be repeated, under a lock shared by the request threads; a
    new configuration validated whole before anything changes; `reset` to the one the process
    started with. A subclass names its KINDS and the FIELDS it takes beyond rates and seed, and
    parses those (`_parse_options`) into `_options`."""

    KINDS: tuple[str, ...] = ()
    FIELDS: tuple[str, ...] = ("rates", "seed")

    def __init__(self, initial: dict):
        self._lock = threading.Lock()
        self._random = random.Random(initial.get("seed"))  # nosec B311  # seeded fault injection, reproducible on purpose; not security
        self._rates = dict.fromkeys(self.KINDS, 0.0)
        self._options: dict = {}
        self._seed = initial.get("seed")
        self._initial = initial
        self.update(initial)

    def update(self, data: object) -> dict:
        """Replace the configuration (the body of ``PUT /_admin/faults``), validated whole first."""
        if not isinstance(data, dict):
            raise FaultError("the fault configuration must be a JSON object")
        unknown = sorted(set(data) - set(self.FIELDS))
        if unknown:
            raise FaultError(f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(self.FIELDS)}")
        rates = self._parse_rates(data.get("rates") or {})
        options = self._parse_options(data)
        seed = data.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise FaultError(f"seed must be an integer, got {seed!r}")
        with self._lock:
            self._rates, self._options = rates, options
            if seed is not None:
                self._seed = seed
                self._random.seed(seed)
        return self.as_dict()

    def reset(self) -> dict:
        """Back to the configuration the process started with."""
        return self.update(self._initial)

    def as_dict(self) -> dict:
        with self._lock:
            return {"rates": dict(self._rates), **self._options, "seed": self._seed}

    def _parse_options(self, data: dict) -> dict:
        return {}

    def _parse_rates(self, rates: object) -> dict[str, float]:
        if not isinstance(rates, dict):
            raise FaultError(f'rates must be an object like {{"{self.KINDS[-1]}": 0.1}}')
        unknown = sorted(set(rates) - set(self.KINDS))
        if unknown:
            raise FaultError(f"unknown fault kind(s) {', '.join(unknown)}; known: {', '.join(self.KINDS)}")
        parsed = dict.fromkeys(self.KINDS, 0.0)
        for kind, value in rates.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise FaultError(f"rates.{kind} must be a number between 0 and 1, got {value!r}")
            parsed[kind] = float(value)
        if sum(parsed.values()) > 1 + 1e-9:
            raise FaultError("the fault rates must add up to at most 1")
        return parsed

    def _drawn_kind(self) -> str | None:
        """One roll against the rates (the caller holds the lock): the kind it lands on, if any."""
        roll = self._random.random()
        threshold = 0.0
        for kind in self.KINDS:
            threshold += self._rates[kind]
            if roll < threshold:
                return kind
        return None


class FaultConfig(RatedFaults):
    """The HTTP sandbox's configured faults: rates and a latency range."""

    KINDS = KINDS
    FIELDS = ("rates", "latency", "seed")

    def __init__(self, rates: dict | None = None, latency: dict | None = None, seed: int | None = None):
        super().__init__({"rates": rates or {}, "latency": latency or {}, "seed": seed})

    @classmethod
    def from_rate(cls, rate: float, seed: int | None = None) -> FaultConfig:
        """``--fault-rate R``: R/3 for each of the three fault kinds."""
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1:
            raise FaultError(f"the fault rate must be between 0 and 1, got {rate!r}")
        return cls(rates={kind: rate / 3 for kind in KINDS}, seed=seed)

    def _parse_options(self, data: dict) -> dict:
        latency = data.get("latency") or {}
        if not isinstance(latency, dict):
            raise FaultError("latency must be an object like {\"min\": 0.0, \"max\": 0.2}")
        unknown = sorted(set(latency) - {"min", "max"})
        if unknown:
            raise FaultError(f"unknown latency field(s) {', '.join(unknown)}; allowed: min, max")
        low = _seconds(latency.get("min", 0.0), "latency.min")
        high = _seconds(latency.get("max", low), "latency.max")
        if low > high:
            raise FaultError("latency.min must not be greater than latency.max")
        return {"latency": {"min": low, "max": high}}

    def draw(self) -> Faults:
        """The configured faults for one effect-creating request (at most one fault kind)."""
        with self._lock:
            low, high = self._options["latency"]["min"], self._options["latency"]["max"]
            latency = self._random.uniform(low, high) if high > 0 else 0.0
            kind = self._drawn_kind()
        return Faults(latency=latency, **({kind: True} if kind else {}))


class Latency:
    """The provider's own round trip, not a fault: every request to a provider endpoint (lookups
    and effects alike; not admin, health or accounting) waits this long before it is handled.
    Set with ``--latency-ms`` or ``PUT /_admin/latency {"ms": 50}``; ``/_admin/reset`` restores the
    start value. Each request waits in its own server thread, so concurrent requests overlap."""

    def __init__(self, ms: float = 0.0):
        self._initial = self._parse(ms)
        self._seconds = self._initial

    @staticmethod
    def _parse(ms: object) -> float:
        if isinstance(ms, bool) or not isinstance(ms, (int, float)):
            raise FaultError(f"the latency must be a number of milliseconds, got {ms!r}")
        if not math.isfinite(ms) or not 0 <= ms <= MAX_LATENCY * 1000:
            raise FaultError(f"the latency must be between 0 and {MAX_LATENCY * 1000:g} ms, got {ms!r}")
        return ms / 1000

    @property
    def seconds(self) -> float:
        return self._seconds

    def update(self, data: object) -> dict:
        """The body of ``PUT /_admin/latency``, validated before anything changes."""
        if not isinstance(data, dict) or set(data) != {"ms"}:
            raise FaultError('the latency must be a JSON object like {"ms": 50}')
        self._seconds = self._parse(data["ms"])  # one float assignment: atomic for request threads
        return self.as_dict()

    def reset(self) -> dict:
        self._seconds = self._initial
        return self.as_dict()

    def as_dict(self) -> dict:
        return {"ms": round(self._seconds * 1000, 3)}
