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

from sandbox.faults import FaultError, RatedFaults

KINDS = ("tempfail_mail", "reject_rcpt", "drop_before_data", "drop_during_data", "drop_after_data")
# The kinds that act once the message has been received, and so can be chosen by its marker.
DATA_KINDS = ("drop_during_data", "drop_after_data")
MAX_RULES = 10_000


class FaultConfig(RatedFaults):
    """The SMTP sandbox's configured faults: rates, and rules by marker and by recipient; shared by
    the SMTP loop and the HTTP threads."""

    KINDS = KINDS
    FIELDS = ("rates", "markers", "recipients", "seed")

    def __init__(self, rates: dict | None = None, seed: int | None = None):
        super().__init__({"rates": rates or {}, "seed": seed})

    def _parse_options(self, data: dict) -> dict:
        recipients = _rules(data.get("recipients") or {}, "recipients", KINDS)
        return {"markers": _rules(data.get("markers") or {}, "markers", DATA_KINDS),
                "recipients": {address.lower(): kind for address, kind in recipients.items()}}

    def draw(self) -> str | None:
        """The fault drawn for a new transaction from the rates, if any."""
        with self._lock:
            return self._drawn_kind()

    def for_recipient(self, address: str) -> str | None:
        with self._lock:
            return self._options["recipients"].get(address.lower())

    def for_marker(self, marker: str | None) -> str | None:
        with self._lock:
            return self._options["markers"].get(marker) if marker else None


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
