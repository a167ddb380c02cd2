"""The actions registry: what a job does in the outside world, and how to look it up later.

An action's executor gets the job (with its idempotency key) and returns an `Outcome`; it must
send the key on every external call and classify honestly: a timeout or a dropped connection
is `Unknown`, never `Failed`.

A deployment declares its actions without touching Reckon's code, in two ways:

- an actions file (TOML, RECKON_ACTIONS_FILE; see `ledger/declarations.py`), which also declares
  `external` actions, run by workers in any language over the HTTP API;
- Python modules named in RECKON_ACTION_MODULES, imported at start-up, each registering its
  actions with the `action` decorator (or `register`):

    @action("mail.send", queryable=True, reconciler="myapp.reconcilers.mail")
    def send_mail(job: Job) -> Outcome: ...

Only `reckon.echo`, which touches nothing outside, is built in. `manage.py actions` lists them all.
"""

from __future__ import annotations

import importlib
import os
import random
from collections.abc import Callable, Iterable
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
    # Seconds the provider asked for (Retry-After) or its open circuit holds: the next attempt
    # waits at least this long, beyond the action's backoff.
    retry_in: float | None = None


@dataclass(frozen=True)
class Unknown:
    """We lost the ability to observe whether the effect happened."""

    reason: str
    evidence: dict = field(default_factory=dict)


Outcome = Succeeded | Failed | Unknown


class Executor(Protocol):
    def __call__(self, job: Job) -> Outcome: ...


@dataclass(frozen=True)
class Webhook:
    """A reconciler that is an HTTP endpoint of the team's own (reconciliation/webhooks.py asks it).

    `secret_variables` names the environment variables holding the signing secrets, the current
    one first; during a rotation both the new and the old one are set and every request carries a
    signature by each, so the receiver can verify with whichever it knows."""

    url: str
    secret_variables: tuple[str, ...]
    timeout: float = 5.0

    def __str__(self) -> str:
        return f"webhook {self.url}"

    def missing_secrets(self) -> list[str]:
        """The secret variables not set in this process (only a process that signs needs them)."""
        return [name for name in self.secret_variables if not os.environ.get(name)]


@dataclass(frozen=True)
class PullReconciler:
    """Reconciled by the team's own agents, which claim unknown work over the API
    (`POST /api/v1/reconciliations/claim`) and answer under a short reconciliation lease."""

    lease: timedelta = timedelta(seconds=60)

    def __str__(self) -> str:
        return "external (pull)"


@dataclass(frozen=True)
class NothingDone:
    """An answer that proves nothing was done: a 5xx of one of `statuses` whose error text says
    `says` (case-insensitive), as the provider documents it (the sandbox vault's "503 ... nothing was
    done", "500 ... rolled back; nothing was done"). Only what an action declares counts: any other
    5xx is unknown, since the effect may have happened before the error."""

    statuses: tuple[int, ...]
    says: str

    def __post_init__(self) -> None:
        if not self.statuses or not all(500 <= status <= 599 for status in self.statuses):
            raise ValueError(f"nothing_done statuses must be 5xx codes, got {self.statuses!r}")
        if not self.says.strip():
            raise ValueError("nothing_done needs the words the answer says (says = \"nothing was done\")")

    def proves(self, status: int, text: str) -> bool:
        return status in self.statuses and self.says.casefold() in text.casefold()


@dataclass(frozen=True)
class RetryBackoff:
    """How long a retryable failure's next attempt waits: exponential from `base_s` (doubling per
    attempt, at most `cap_s`), with jitter (between half and all of it), so that a provider's blip
    is not met by every job at once. An open circuit makes it wait at least for the circuit."""

    base_s: float = 2.0
    cap_s: float = 300.0

    def __post_init__(self) -> None:
        if not 0 <= self.base_s <= self.cap_s:
            raise ValueError(f"retry backoff: 0 <= base ({self.base_s:g} s) <= cap ({self.cap_s:g} s)")

    def delay_after(self, attempt: int, *, seed: str) -> float:
        """Seconds before the attempt after `attempt` (1 for the first failure). The jitter is drawn
        from `seed` (the job's key): jobs spread apart, and one job's delay can be checked."""
        ceiling = min(self.cap_s, self.base_s * 2 ** max(0, attempt - 1))
        draw = random.Random(f"{seed}:{attempt}").random()  # nosec B311  # jitter, not a secret
        return ceiling / 2 + draw * ceiling / 2


@dataclass(frozen=True)
class Action:
    name: str
    # Runs the side effect in a django-q2 worker; None: an external action, run by workers over HTTP.
    executor: Executor | None = None
    reversible: bool = True
    queryable: bool = False
    max_attempts: int = 3
    lease_ttl: timedelta = timedelta(seconds=30)
    # The reconciler: the dotted path of a function of the job and the attempt returning a
    # Finding, a Webhook, or a PullReconciler (agents pull the work); None: a person decides.
    reconciler: str | Webhook | PullReconciler | None = None
    # Reads the identity the worker actually runs as (profile, account); None: no binding.
    observe_identity: Callable[[Job], dict] | None = None
    # The identity fields a job of this action must be bound to (checked before any side effect).
    identity: tuple[str, ...] = ()
    # Where the executor sends the job's effect (its provider's endpoint or account, from this
    # process's configuration; ledger.endpoints), recorded when the effect begins; None: not said.
    sent_to: Callable[[Job], str] | None = None
    runbook_url: str = ""
    # How an operator checks by hand whether the effect happened (a few lines, shown beside the
    # decision on the job page), for when the reconciler cannot tell.
    check_by_hand: str = ""
    # How long an attempt that became unknown waits for the reconciler's first look: the provider
    # may still be carrying out a call the worker gave up on (an MCP upstream that ignores the
    # cancel runs the tool to its end), and a look before it ends could find nothing and replay it.
    first_look_after: timedelta = timedelta(0)
    # The environment variables its reconciler reads where it runs (an MCP upstream's headers and
    # env, for a look-up through the upstream): `reconcile` refuses to start without them.
    reconciler_variables: tuple[str, ...] = ()
    # The name its calls take in the provider budget (ledger.budget): while that provider's circuit
    # is open in this process, an attempt is handed back before its side effect, not spent; "": none.
    provider: str = ""
    # The provider's answers that prove nothing was done (a failure, retried), beyond which a 5xx
    # is unknown.
    nothing_done: tuple[NothingDone, ...] = ()
    retry_backoff: RetryBackoff = RetryBackoff()
    # Where the action was declared (the actions file, or a module), for `manage.py actions`.
    source: str = ""

    def proves_nothing_done(self, status: int, text: str) -> bool:
        return any(answer.proves(status, text) for answer in self.nothing_done)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"action {self.name}: max_attempts must be at least 1")
        if self.lease_ttl <= timedelta(0):
            raise ValueError(f"action {self.name}: lease_ttl must be positive")

    @property
    def external(self) -> bool:
        return self.executor is None

    @property
    def policy(self) -> Policy:
        return Policy(self.reversible, self.queryable, self.max_attempts)


@dataclass(frozen=True)
class Policy:
    """What decides whether a job may be replayed without a person. Each job keeps the policy
    its action had when it was enqueued (`Job.policy`): editing a declaration later never makes
    an irreversible job replayable without approval."""

    reversible: bool
    queryable: bool
    max_attempts: int

    def as_json(self) -> dict:
        return {"reversible": self.reversible, "queryable": self.queryable, "max_attempts": self.max_attempts}


def policy_of(job: Job) -> Policy:
    """The policy a job was enqueued with; for a job from before snapshots, its action's now."""
    if job.policy:
        return Policy(**job.policy)
    return get_action(job.action).policy


# The MCP gateway's tool calls are jobs of the actions `mcp:<upstream>.<tool>` (gateway/config.py),
# and the gateway records an upstream's result in an event's evidence under GATEWAY_RESULT, from
# which it answers the agent's next identical call: only the gateway and its reconciler write it.
GATEWAY_ACTIONS = "mcp:"
GATEWAY_RESULT = "mcp_result"


def is_gateway_action(name: str) -> bool:
    return name.startswith(GATEWAY_ACTIONS)


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


def declared_action(name: str) -> Action | None:
    """The action, or None when this process does not declare it (a job enqueued by a deployment
    whose action modules differ: shown, and decided on only where the action does not matter)."""
    return _registry.get(name)


def registered_actions() -> list[Action]:
    return sorted(_registry.values(), key=lambda a: a.name)


def reconciled_elsewhere() -> list[str]:
    """The actions a reconciliation pass in this process leaves alone: those agents pull, and
    those whose webhook secret this process does not have (a qcluster on a web host, say): the
    `reconcile` loop, which refuses to start without the secrets, asks their webhooks."""
    return sorted(a.name for a in _registry.values() if isinstance(a.reconciler, PullReconciler)
                  or (isinstance(a.reconciler, Webhook) and a.reconciler.missing_secrets()))


def action(
    name: str,
    *,
    reversible: bool = True,
    queryable: bool = False,
    max_attempts: int = 3,
    lease_ttl: timedelta = timedelta(seconds=30),
    reconciler: str | None = None,
    observe_identity: Callable[[Job], dict] | None = None,
    identity: tuple[str, ...] = (),
    sent_to: Callable[[Job], str] | None = None,
    runbook_url: str = "",
    check_by_hand: str = "",
    provider: str = "",
    nothing_done: tuple[NothingDone, ...] = (),
    retry_backoff: RetryBackoff = RetryBackoff(),
) -> Callable[[Executor], Executor]:
    """Register the decorated function as the executor of action `name` (see `Action`)."""

    def decorate(executor: Executor) -> Executor:
        register(Action(name=name, executor=executor, reversible=reversible, queryable=queryable,
                        max_attempts=max_attempts, lease_ttl=lease_ttl, reconciler=reconciler,
                        observe_identity=observe_identity, identity=tuple(identity), sent_to=sent_to,
                        runbook_url=runbook_url, provider=provider, nothing_done=tuple(nothing_done),
                        retry_backoff=retry_backoff,
                        check_by_hand=check_by_hand, source=f"module {executor.__module__}"))
        return executor

    return decorate


@action("reckon.echo")  # built in
def _echo(job: Job) -> Outcome:
    """The built-in trivial action: no outside world, succeeds with the key as its result."""
    if job.payload.get("fail"):
        return Failed(error=str(job.payload["fail"]))
    return Succeeded(result_ref=f"echo:{job.idempotency_key}")


def load_action_modules(modules: Iterable[str]) -> None:
    """Import each module of RECKON_ACTION_MODULES; importing one registers its actions."""
    from django.core.exceptions import ImproperlyConfigured

    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (module == exc.name or module.startswith(exc.name + ".")):
                raise ImproperlyConfigured(f"RECKON_ACTION_MODULES names {module!r}, which imports {exc.name!r}: "
                                           f"{exc} (is it installed in this environment?)") from exc
            raise ImproperlyConfigured(f"RECKON_ACTION_MODULES names {module!r}, which cannot be imported: {exc}") \
                from exc
