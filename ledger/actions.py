"""The actions registry: what a job does in the outside world, and how to look it up later.

An action's executor gets the job (with its idempotency key) and returns an `Outcome`; it must
send the key on every external call and classify honestly: a timeout or a dropped connection
is `Unknown`, never `Failed`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ledger.models import Job


@dataclass(frozen=True)
class Succeeded:
    result_ref: str = ""
    evidence: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Failed:
    """A definitive refusal: the provider proved nothing happened (or nothing was sent)."""

    error: str
    retryable: bool = False
    evidence: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Unknown:
    """We lost the ability to observe whether the effect happened."""

    reason: str
    evidence: dict = field(default_factory=dict)


Outcome = Succeeded | Failed | Unknown


class Executor(Protocol):
    def __call__(self, job: Job) -> Outcome: ...


@dataclass(frozen=True)
class Action:
    name: str
    executor: Executor
    reversible: bool = True
    queryable: bool = False
    max_attempts: int = 3
    lease_ttl: timedelta = timedelta(seconds=30)
    # Dotted path of the reconciler (reconciliation.reconcilers.*): it lives in another app.
    reconciler: str | None = None
    # Reads the identity the worker actually runs as (profile, account); None: no binding.
    observe_identity: Callable[[Job], dict] | None = None

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"action {self.name}: max_attempts must be at least 1")
        if self.lease_ttl <= timedelta(0):
            raise ValueError(f"action {self.name}: lease_ttl must be positive")


class UnknownAction(LookupError):
    pass


_registry: dict[str, Action] = {}


def register(action: Action) -> Action:
    _registry[action.name] = action
    return action


def get_action(name: str) -> Action:
    try:
        return _registry[name]
    except KeyError:
        known = ", ".join(sorted(_registry)) or "none"
        raise UnknownAction(f"unknown action {name!r}; registered actions: {known}") from None


def registered_actions() -> list[Action]:
    return sorted(_registry.values(), key=lambda a: a.name)


def _echo(job: Job) -> Outcome:
    """The built-in trivial action: no outside world, succeeds with the key as its result."""
    if job.payload.get("fail"):
        return Failed(error=str(job.payload["fail"]))
    return Succeeded(result_ref=f"echo:{job.idempotency_key}")


def load_builtin_actions() -> None:
    register(
        Action(
            name="reckon.echo",
            executor=_echo,
            reversible=True,
            queryable=False,
            max_attempts=3,
            lease_ttl=timedelta(seconds=30),
        )
    )
    from ledger.demo_actions import load_demo_actions

    load_demo_actions()
