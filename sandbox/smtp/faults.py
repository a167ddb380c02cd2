"""Which SMTP transactions the sandbox breaks, and where.

Each kind acts at one step of the transaction, which decides what the client can know:

* ``tempfail_mail``: ``451`` to MAIL FROM; nothing is accepted (the client may try again);
* ``reject_rcpt``: ``550`` to RCPT TO; nothing is accepted (a definitive refusal);
* ``drop_before_data``: the connection is closed at RCPT TO, before DATA: no message left the client;
* ``drop_during_data``: the whole message is received, then the connection is closed before it is
  archived: the client sent everything and never hears back, and nothing was accepted;
* ``drop_after_data``: the message is archived, then the connection is closed before the ``250``:
  the client sent everything and never hears back, and the message exists.

A transaction gets at most one fault: drawn from the configured rates when it starts (MAIL
FROM, from a seeded ``random.Random``), or chosen for it by a rule: by recipient address (any
kind, applied from RCPT TO) or by the message's ``X-Reckon-Marker`` (the kinds that act once the
message has arrived: the marker travels inside it). A rule wins over a draw.
"""

from __future__ import annotations

import random
import threading

KINDS = ("tempfail_mail", "reject_rcpt", "drop_before_data", "drop_during_data", "drop_after_data")
# The kinds that act once the message has been received, and so can be chosen by its marker.
DATA_KINDS = ("drop_during_data", "drop_after_data")
FIELDS = ("rates", "markers", "recipients", "seed")
MAX_RULES = 10_000


class FaultError(ValueError):
    """A fault configuration is invalid (answered with a 400; nothing changes)."""


class FaultConfig:
    """The configured faults, shared by the SMTP loop and the HTTP threads."""

    def __init__(self, rates: dict | None = None, seed: int | None = None):
        self._lock = threading.Lock()
        self._random = random.Random(seed)  # nosec B311  # seeded fault injection, reproducible on purpose; not security
        self._rates: dict[str, float] = {}
        self._markers: dict[str, str] = {}
        self._recipients: dict[str, str] = {}
        self._seed = seed
        self._initial = {"rates": rates or {}, "seed": seed}
        self.update(self._initial)

    def update(self, data: object) -> dict:
        """Replace the configuration (the body of ``PUT /_admin/faults``), validated whole first."""
        if not isinstance(data, dict):
            raise FaultError("the fault configuration must be a JSON object")
        unknown = sorted(set(data) - set(FIELDS))
        if unknown:
            raise FaultError(f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(FIELDS)}")
        rates = _rates(data.get("rates") or {})
        markers = _rules(data.get("markers") or {}, "markers", DATA_KINDS)
        recipients = {address.lower(): kind
                      for address, kind in _rules(data.get("recipients") or {}, "recipients", KINDS).items()}
        seed = data.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise FaultError(f"seed must be an integer, got {seed!r}")
        with self._lock:
            self._rates, self._markers, self._recipients = rates, markers, recipients
            if seed is not None:
                self._seed = seed
                self._random.seed(seed)
        return self.as_dict()

    def reset(self) -> dict:
        """Back to the configuration the process started with."""
        return self.update(self._initial)

    def as_dict(self) -> dict:
        with self._lock:
            return {"rates": dict(self._rates), "markers": dict(self._markers),
                    "recipients": dict(self._recipients), "seed": self._seed}

    def draw(self) -> str | None:
        """The fault drawn for a new transaction from the rates, if any."""
        with self._lock:
            roll = self._random.random()
            threshold = 0.0
            for kind in KINDS:
                threshold += self._rates.get(kind, 0.0)
                if roll < threshold:
                    return kind
            return None

    def for_recipient(self, address: str) -> str | None:
        with self._lock:
            return self._recipients.get(address.lower())

    def for_marker(self, marker: str | None) -> str | None:
        with self._lock:
            return self._markers.get(marker) if marker else None


def _rates(rates: object) -> dict[str, float]:
    if not isinstance(rates, dict):
        raise FaultError('rates must be an object like {"drop_after_data": 0.1}')
    unknown = sorted(set(rates) - set(KINDS))
    if unknown:
        raise FaultError(f"unknown fault kind(s) {', '.join(unknown)}; known: {', '.join(KINDS)}")
    parsed = {}
    for kind, value in rates.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise FaultError(f"rates.{kind} must be a number between 0 and 1, got {value!r}")
        parsed[kind] = float(value)
    if sum(parsed.values()) > 1 + 1e-9:
        raise FaultError("the fault rates must add up to at most 1")
    return parsed


def _rules(rules: object, name: str, kinds: tuple[str, ...]) -> dict[str, str]:
    if not isinstance(rules, dict):
        raise FaultError(f'{name} must be an object like {{"...": "{kinds[-1]}"}}')
    if len(rules) > MAX_RULES:
        raise FaultError(f"{name} may hold at most {MAX_RULES} rules")
    for key, kind in rules.items():
        if not key.strip():
            raise FaultError(f"{name}: a rule needs a non-empty key")
        if kind not in kinds:
            hint = " (the marker is read from the message, so only faults that act once it has arrived)" \
                if name == "markers" else ""
            raise FaultError(f"{name}[{key!r}]: {kind!r} is not a fault kind here; choose one of "
                             f"{', '.join(kinds)}{hint}")
    return dict(rules)
