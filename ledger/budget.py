"""Each provider's budget in this process: a pace kept after a 429, and a circuit for when it is down.

Every call to a provider (`ledger.providers.call`, SMTP sends, webhook questions) takes a `Slot`
first and reports how it went. Per provider name, independently of every other provider:

**Rate (AIMD).** A provider that never answered 429 is not paced at all. On a 429 the pace drops
to 90 % of the rate that was refused. That rate is the pace, or, for the first 429 (or when the
provider accepted less than half the pace over the last second: its limit fell), the rate of
requests it accepted over the last second, which while it refuses some is its limit, give or take
the burst it allows: so the first 429 of a backlog sent far too fast brings the pace near the
limit at once. A 429 for a request sent before the last cut says nothing new and is ignored. Between 429s the pace
climbs back: quickly to 97 % of the rate last refused, then slowly beyond it and faster the longer
no 429 comes (cubic), so a lifted limit is found again; at about twice the rate last
refused (RECKON_PROVIDER_RECOVER_S after the last 429, if none came since) the provider counts as
`ok` again and is no longer paced. Retry-After is honoured as a
pause of the whole provider when it says more than one second; `Retry-After: 1` is the smallest
the header can say and means "slow down" to a client sending many requests a second, which the cut
does. RECKON_PROVIDER_LIMITS caps the pace of named providers for this process (a limit known in
advance, divided by the number of processes that call the provider).

**Circuit.** After RECKON_PROVIDER_CIRCUIT_FAILURES consecutive failures (refused connection, no
answer, 5xx) the circuit opens: calls fail at once, without being sent, for
RECKON_PROVIDER_CIRCUIT_COOLDOWN_S; then one call goes through as a probe (half-open): success
closes the circuit, failure opens it for another cool-down.

A call that would wait longer than RECKON_PROVIDER_MAX_WAIT_S for its turn, or whose circuit is
open, raises `OverBudget` / `CircuitOpen`: both are `NotSent` (nothing left this process) and carry
`retry_in`, the seconds after which asking again makes sense.

**Failing.** A provider whose circuit is closed may still fail most calls (90 % of answers dropped
never makes RECKON_PROVIDER_CIRCUIT_FAILURES in a row): when at least FAILING_MIN_ANSWERS calls
ended in the last minute and more than half of them failed (5xx, no answer, refused connection),
the console shows it as `failing`, with the share.

The state is per process. `snapshot()` describes it for the console (reconciliation.providers).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

from django.conf import settings

# AIMD constants; see the module docstring.
CUT = 0.9
APPROACH = 0.97  # fast approach to this share of the rate last refused
APPROACH_PER_S = 0.5  # close half the gap to it each second
OK_AGAIN = 2.0  # at this multiple of the rate last refused, the provider is no longer paced
CALLS_WINDOW_S = 60.0  # the calls a process reports for the console: those of the last minute
RATE_WINDOW_S = 1.0  # the accepted rate is measured over this long...
MIN_SPAN_S = 0.25  # ...or since the first answer, but never over less than this
FAILING_SHARE = 0.5  # more than this share of the last minute's calls failed: `failing`
FAILING_MIN_ANSWERS = 4  # ...out of at least this many


class NotSent(Exception):
    """The request never reached the provider (connection refused, no route, DNS, or refused
    by its budget here): safe to retry. `ledger.providers` exports it with its other outcomes."""


class OverBudget(NotSent):
    """Not sent: the provider's budget has no room for this call soon enough."""

    def __init__(self, message: str, retry_in: float):
        super().__init__(message)
        self.retry_in = retry_in


class CircuitOpen(NotSent):
    """Not sent: the provider is down (its circuit is open)."""

    def __init__(self, message: str, retry_in: float):
        super().__init__(message)
        self.retry_in = retry_in


@dataclass
class _Provider:
    name: str
    cap: float | None = None  # RECKON_PROVIDER_LIMITS for this provider, per process
    rate: float | None = None  # the AIMD pace; None: no 429 seen (or recovered)
    refused_at_rate: float = 0.0  # the pace at the last 429
    cut_at: float = -1e9  # monotonic time of the last cut
    adjusted_at: float = 0.0
    next_slot: float = 0.0
    paused_until: float = 0.0
    failures: int = 0
    open_until: float = 0.0
    probing: bool = False
    probe_at: float = 0.0
    throttled: int = 0  # 429s answered to this process
    sent: int = 0
    calls: deque = field(default_factory=deque)  # times of the turns given within CALLS_WINDOW_S
    accepted: deque = field(default_factory=deque)  # times of answers other than 429, within RATE_WINDOW_S
    first_answer_at: float | None = None
    last_reason: str = ""
    outcomes: deque = field(default_factory=deque)  # (time, failed) of the calls ended within CALLS_WINDOW_S

    def pace(self) -> float | None:
        limits = [value for value in (self.rate, self.cap) if value is not None]
        return min(limits) if limits else None


class Budget:
    def __init__(self):
        self._lock = threading.Lock()
        self._providers: dict[str, _Provider] = {}
        self.changed = threading.Event()  # set when a provider's state changed (for publishing)
        self.called = threading.Event()  # set when a provider was called (its rate is published too)

    def _get(self, name: str) -> _Provider:
        provider = self._providers.get(name)
        if provider is None:
            provider = _Provider(name, cap=settings.RECKON_PROVIDER_LIMITS.get(name))
            self._providers[name] = provider
        return provider

    def slot(self, name: str) -> Slot:
        """Wait for this provider's next turn (raises OverBudget or CircuitOpen instead)."""
        with self._lock:
            provider, now = self._get(name), time.monotonic()
            probe = False
            if provider.open_until:
                cooldown = settings.RECKON_PROVIDER_CIRCUIT_COOLDOWN_S
                # One probe at a time; a probe that never reported back (its thread died) expires.
                probing = provider.probing and now - provider.probe_at < cooldown
                if now < provider.open_until or probing:
                    retry_in = max(provider.open_until - now, cooldown / 10)
                    raise CircuitOpen(f"provider {name} is down (circuit open for {retry_in:.1f} s more): "
                                      f"{provider.last_reason}; not sent", retry_in)
                provider.probing, provider.probe_at, probe = True, now, True
            self._climb(provider, now)
            pace = provider.pace()
            start = max(now, provider.paused_until, provider.next_slot if pace else 0.0)
            wait = start - now
            if wait > settings.RECKON_PROVIDER_MAX_WAIT_S:
                if probe:
                    provider.probing = False
                raise OverBudget(f"provider {name} is rate limited (pace {pace or 0:.1f}/s); its next free"
                                 f" turn is {wait:.1f} s away; not sent", wait)
            if pace:
                provider.next_slot = start + 1 / pace
            provider.sent += 1
            provider.calls.append(start)
            _forget_calls_before(provider.calls, now - CALLS_WINDOW_S)
        self.called.set()
        if wait > 0:
            time.sleep(wait)  # pacing the call itself, not waiting for another thread
        return Slot(self, name, start, probe)

    def circuit_wait(self, name: str) -> float | None:
        """Seconds before this provider's circuit lets a call through (open, or a probe under
        way); None when a call would go now. Takes no turn: a worker asks before its side effect."""
        with self._lock:
            provider = self._providers.get(name)
            if provider is None or not provider.open_until:
                return None
            now, cooldown = time.monotonic(), settings.RECKON_PROVIDER_CIRCUIT_COOLDOWN_S
            probing = provider.probing and now - provider.probe_at < cooldown
            if now < provider.open_until or probing:
                return max(provider.open_until - now, cooldown / 10)
            return None

    def would_probe(self, name: str) -> bool:
        """Whether a call now would be the circuit's one probe (its cool-down is over, no probe is
        under way): what it answers decides whether the circuit closes."""
        with self._lock:
            provider = self._providers.get(name)
            return provider is not None and bool(provider.open_until) and time.monotonic() >= provider.open_until \
                and not provider.probing

    def _climb(self, provider: _Provider, now: float) -> None:
        """Between 429s the pace climbs back (see the module docstring)."""
        elapsed, provider.adjusted_at = now - provider.adjusted_at, now
        if provider.rate is None:
            return
        target = APPROACH * provider.refused_at_rate
        if provider.rate < target:
            provider.rate = min(target, provider.rate + (target - provider.rate) * min(1.0, APPROACH_PER_S * elapsed)
                                + 0.01 * target * elapsed)
            return
        since = now - provider.cut_at
        probe_rate = target * (1 + (since / settings.RECKON_PROVIDER_RECOVER_S) ** 3)
        provider.rate = max(provider.rate, probe_rate)
        if provider.rate >= OK_AGAIN * provider.refused_at_rate:
            provider.rate = None
            self.changed.set()

    def _answered(self, slot: Slot, status: int, retry_after: float | None) -> None:
        with self._lock:
            provider, now = self._get(slot.provider), time.monotonic()
            self._ended(provider, now, failed=status >= 500)
            if status >= 500:
                self._failed(provider, now, f"answered {status}")
                return
            self._closed(provider)
            if provider.first_answer_at is None:
                provider.first_answer_at = now
            while provider.accepted and provider.accepted[0] <= now - RATE_WINDOW_S:
                provider.accepted.popleft()
            if status != 429:
                provider.accepted.append(now)
                return
            provider.throttled += 1
            if retry_after is not None and retry_after > 1:
                provider.paused_until = max(provider.paused_until, now + retry_after)
            if slot.sent_at < provider.cut_at:
                return  # sent before the last cut: nothing new
            span = max(MIN_SPAN_S, min(RATE_WINDOW_S, now - provider.first_answer_at))
            accepted_rate = max(1.0, len(provider.accepted) / span)
            pace = provider.pace()
            current = accepted_rate if pace is None or accepted_rate < pace / 2 else pace
            provider.refused_at_rate = current
            provider.rate = max(0.1, current * CUT)
            provider.cut_at = provider.adjusted_at = now
            provider.next_slot = max(provider.next_slot, now + 1 / provider.rate)
            self.changed.set()

    def _failed(self, provider: _Provider, now: float, reason: str) -> None:
        provider.failures += 1
        provider.last_reason = reason[:200]
        was_open = bool(provider.open_until)
        if provider.probing or provider.failures >= settings.RECKON_PROVIDER_CIRCUIT_FAILURES:
            provider.open_until = now + settings.RECKON_PROVIDER_CIRCUIT_COOLDOWN_S
            provider.probing = False
            if not was_open:
                self.changed.set()

    def _closed(self, provider: _Provider) -> None:
        if provider.open_until:
            self.changed.set()
        provider.failures, provider.open_until, provider.probing = 0, 0.0, False

    def _no_answer(self, slot: Slot, reason: str) -> None:
        with self._lock:
            provider, now = self._get(slot.provider), time.monotonic()
            self._ended(provider, now, failed=True)
            self._failed(provider, now, reason)

    def _ended(self, provider: _Provider, now: float, *, failed: bool) -> None:
        was = _failing(provider, now)
        provider.outcomes.append((now, failed))
        if _failing(provider, now) != was:
            self.changed.set()

    def snapshot(self) -> list[dict]:
        """Each provider this process has called: state ok / throttled / open, and its figures."""
        with self._lock:
            now, rows = time.monotonic(), []
            for provider in self._providers.values():
                failed, ended = _failed_share(provider, now)
                if provider.open_until:
                    state = "open"
                elif _failing(provider, now):
                    state = "failing"
                elif provider.rate is not None:
                    state = "throttled"
                else:
                    state = "ok"
                rows.append({
                    "provider": provider.name, "state": state, "rate": provider.pace(),
                    "open_for_s": max(0.0, provider.open_until - now) if provider.open_until else None,
                    "throttled": provider.throttled, "sent": provider.sent, "failures": provider.failures,
                    "calls_last_minute": _forget_calls_before(provider.calls, now - CALLS_WINDOW_S),
                    "reason": provider.last_reason if state != "failing" else
                    f"{failed} of the last minute's {ended} calls failed; last: {provider.last_reason}",
                })
            return rows

    def forget(self) -> None:
        """Drop every provider's state (tests and benchmarks start afresh)."""
        with self._lock:
            self._providers.clear()
            self.called.clear()


def _failed_share(provider: _Provider, now: float) -> tuple[int, int]:
    """(failed, ended) of the provider's calls that ended within the last CALLS_WINDOW_S."""
    while provider.outcomes and provider.outcomes[0][0] < now - CALLS_WINDOW_S:
        provider.outcomes.popleft()
    return sum(1 for _, failed in provider.outcomes if failed), len(provider.outcomes)


def _failing(provider: _Provider, now: float) -> bool:
    failed, ended = _failed_share(provider, now)
    return ended >= FAILING_MIN_ANSWERS and failed > FAILING_SHARE * ended


def _forget_calls_before(calls: deque, since: float) -> int:
    """Drop the calls before `since`; how many remain."""
    while calls and calls[0] < since:
        calls.popleft()
    return len(calls)


@dataclass
class Slot:
    """One call's turn: report how it went with `answered` or `no_answer`."""

    budget: Budget
    provider: str
    sent_at: float
    probe: bool

    def answered(self, status: int, retry_after: float | None = None) -> None:
        self.budget._answered(self, status, retry_after)

    def no_answer(self, reason: str) -> None:
        """Refused connection, timeout, dropped answer: counts towards opening the circuit."""
        self.budget._no_answer(self, reason)


BUDGET = Budget()


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After as delta-seconds (an HTTP date is not worth parsing here: None)."""
    try:
        seconds = float(value) if value else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds < 86400 else None
