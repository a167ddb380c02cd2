"""The actions file: a deployment's actions, declared in TOML, no code of Reckon's touched.

RECKON_ACTIONS_FILE names it (default: `actions.toml` in the project folder, read when it
exists). Each table under `actions` declares one action:

    [actions."billing.charge"]
    executor = "external"                          # or "python:myapp.actions.charge"
    reversible = false                             # a replay of an irreversible action needs approval
    queryable = true                               # its provider can be asked what happened
    reconciler = "python:myapp.reconcilers.charge" # or "webhook", "external" (agents pull), "none"
    max_attempts = 3
    lease_ttl = 30                                 # seconds
    identity = ["account"]                         # binding fields checked before any side effect
    runbook_url = "https://wiki.example.com/charges"
    check_by_hand = "Search the dashboard for the job's key"  # shown beside the decision
    replay = "approval"                            # "automatic" (reversible actions only) or "approval"
    provider = "charges"                           # its name in the provider budget (circuit, pace)
    retry_backoff = 2                              # seconds before the 2nd attempt, doubled each time...
    retry_backoff_max = 300                        # ...up to this (jittered; an open circuit waits longer)
    nothing_done = [{ status = [503], says = "nothing was done" }]  # answers proving no effect

A 5xx is unknown (the effect may have happened) unless the action declares, in `nothing_done`,
the answers its provider documents as proof that nothing was done: a 5xx of those statuses whose
error text says those words is then a failure, retried after the backoff.

A webhook reconciler is an endpoint of the team's own that Reckon asks, signed (https, or http://
to a loopback host or one named in RECKON_WEBHOOK_HTTP_HOSTS):

    reconciler = "webhook"
    webhook_url = "https://agents.example.com/reckon/reconcile"
    webhook_secrets = ["CHARGES_WEBHOOK_SECRET", "CHARGES_WEBHOOK_SECRET_OLD"]  # variable names, current first
    webhook_timeout = 5                            # seconds

Only the processes that sign need the secrets (`reconcile`, which refuses to start without them, and
a qcluster that should reconcile webhook jobs too; `webhook_secret_problems`); a secret that is set
must have at least 32 characters wherever it is read.

`${NAME}` in any string value is replaced by the environment variable NAME, so one file serves
every deployment (`webhook_url = "https://${AGENTS_HOST}/reckon"`); a variable that is not set
stops the start with a message naming the file, the action, the key and the variable.

A pull-mode reconciler (`reconciler = "external"`) is the team's agents, which claim unknown work
over the API and answer within `reconciliation_lease` seconds (60 by default).

A bad declaration stops start-up (and `manage.py check`) with one message naming the file and
the action.
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from ledger.actions import (
    Action,
    NothingDone,
    PullReconciler,
    RetryBackoff,
    Webhook,
    declared_action,
    register,
    registered_actions,
)

# key -> (expected types, required)
KEYS: dict[str, tuple[tuple[type, ...], bool]] = {
    "executor": ((str,), True),
    "reversible": ((bool,), True),
    "queryable": ((bool,), False),
    "reconciler": ((str,), False),
    "max_attempts": ((int,), False),
    "lease_ttl": ((int, float), False),
    "identity": ((list,), False),
    "runbook_url": ((str,), False),
    "check_by_hand": ((str,), False),
    "replay": ((str,), False),
    "webhook_url": ((str,), False),
    "webhook_secrets": ((list,), False),
    "webhook_timeout": ((int, float), False),
    "reconciliation_lease": ((int, float), False),
    "provider": ((str,), False),
    "retry_backoff": ((int, float), False),
    "retry_backoff_max": ((int, float), False),
    "nothing_done": ((list,), False),
}
WEBHOOK_KEYS = ("webhook_url", "webhook_secrets", "webhook_timeout")
# A signing secret shorter than this is refused (HMAC-SHA256 wants at least 128 bits of it).
WEBHOOK_SECRET_MIN_LENGTH = 32
# How long a pull-mode agent may take to answer, by default (seconds).
DEFAULT_RECONCILIATION_LEASE = 60
# `${NAME}`: an environment variable's value, in any string of a declaration.
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class DeclarationError(ImproperlyConfigured):
    pass


def load_actions_file(path: Path | str, *, required: bool) -> list[Action]:
    """Register every action the file declares; an absent file is fine unless `required`."""
    path = Path(path)
    if not path.exists():
        if required:
            raise DeclarationError(f"RECKON_ACTIONS_FILE names {path}, which does not exist")
        return []
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise DeclarationError(f"{path}: not valid TOML: {exc}") from None
    unexpected = set(document) - {"actions", "mcp"}  # [mcp]: MCP upstreams, read by gateway/config.py
    if unexpected:
        raise DeclarationError(f"{path}: unknown top-level key(s) {', '.join(sorted(unexpected))}; "
                               'declare each action as a table [actions."name"]')
    tables = document.get("actions", {})
    if not isinstance(tables, dict):
        raise DeclarationError(f'{path}: "actions" must be a table of tables ([actions."name"])')
    actions = [parse_action(name, table, source=str(path)) for name, table in tables.items()]
    for action in actions:
        already = declared_action(action.name)
        if already is not None and already.source != action.source:
            raise DeclarationError(f"{path}: action {action.name!r} is declared twice (also in {already.source})")
        register(action)
    return actions


def parse_action(name: str, table, *, source: str) -> Action:
    """One declaration, checked whole: an Action, or a DeclarationError naming the file and the action."""

    def refuse(problem: str) -> DeclarationError:
        return DeclarationError(f"{source}: action {name!r}: {problem}")

    if not isinstance(table, dict):
        raise refuse("must be a table of settings")
    if not name or not name.strip() or any(c.isspace() or not c.isprintable() for c in name):
        raise refuse("the name must be printable and contain no spaces")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise refuse(f"unknown key(s) {', '.join(unknown)}; known keys: {', '.join(KEYS)}")
    table = {key: _expanded(key, value, refuse) for key, value in table.items()}
    for key, (types, required) in KEYS.items():
        if key not in table:
            if required:
                raise refuse(f"{key} is required")
            continue
        value = table[key]
        # bool is an int in Python; a number must not be given as true/false, nor a flag as 1/0.
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            wanted = " or ".join(t.__name__ for t in types)
            raise refuse(f"{key} must be {wanted}, got {type(value).__name__} {value!r}")

    reversible = table["reversible"]
    queryable = table.get("queryable", False)
    executor = _executor(table["executor"], refuse)
    reconciler = _reconciler(table, refuse)
    if queryable and reconciler is None:
        raise refuse('queryable = true needs a reconciler ("python:dotted.path") to ask the provider')
    if reconciler is not None and not queryable:
        raise refuse("a reconciler is declared but queryable = false; set queryable = true, or reconciler = \"none\"")
    replay = table.get("replay", "automatic" if reversible else "approval")
    if replay not in ("automatic", "approval"):
        raise refuse(f'replay must be "automatic" or "approval", got {replay!r}')
    if replay == "automatic" and not reversible:
        raise refuse('an irreversible action cannot be replayed automatically: replay must be "approval"')
    if replay == "approval" and reversible:
        raise refuse('replay = "approval" is for irreversible actions: declare reversible = false')
    max_attempts = table.get("max_attempts", 3)
    if max_attempts < 1:
        raise refuse("max_attempts must be at least 1")
    lease_ttl = table.get("lease_ttl", 30)
    if lease_ttl <= 0:
        raise refuse("lease_ttl must be a positive number of seconds")
    identity = table.get("identity", [])
    if not all(isinstance(field, str) and field.strip() for field in identity) or len(set(identity)) != len(identity):
        raise refuse("identity must be a list of distinct field names")
    runbook_url = table.get("runbook_url", "")
    if runbook_url and not runbook_url.startswith(("https://", "http://")):
        raise refuse(f"runbook_url must be an http(s) URL, got {runbook_url!r}")
    try:
        backoff = RetryBackoff(float(table.get("retry_backoff", RetryBackoff.base_s)),
                               float(table.get("retry_backoff_max", RetryBackoff.cap_s)))
    except ValueError as exc:
        raise refuse(f"retry_backoff and retry_backoff_max: {exc}") from None
    return Action(
        name=name, executor=executor, reversible=reversible, queryable=queryable, max_attempts=max_attempts,
        lease_ttl=timedelta(seconds=lease_ttl), reconciler=reconciler, identity=tuple(identity),
        runbook_url=runbook_url, check_by_hand=table.get("check_by_hand", "").strip(), source=source,
        provider=table.get("provider", "").strip(), retry_backoff=backoff,
        nothing_done=_nothing_done(table.get("nothing_done", []), refuse),
    )


def _nothing_done(entries: list, refuse: Callable[[str], Exception]) -> tuple[NothingDone, ...]:
    answers = []
    for entry in entries:
        if not isinstance(entry, dict) or set(entry) != {"status", "says"}:
            raise refuse('each nothing_done entry is a table { status = [503], says = "nothing was done" }')
        statuses, says = entry["status"], entry["says"]
        if not isinstance(statuses, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in statuses) \
                or not isinstance(says, str):
            raise refuse("nothing_done: status is a list of 5xx codes and says a string")
        try:
            answers.append(NothingDone(tuple(statuses), says))
        except ValueError as exc:
            raise refuse(f"nothing_done: {exc}") from None
    return tuple(answers)


def _executor(value: str, refuse: Callable[[str], Exception]):
    if value == "external":
        return None
    function = _python(value, "executor", refuse)
    return function


def _reconciler(table: dict, refuse: Callable[[str], Exception]) -> str | Webhook | PullReconciler | None:
    value = table.get("reconciler", "none")
    given = [key for key in WEBHOOK_KEYS if key in table]
    if value == "webhook":
        return _webhook(table, refuse)
    if given:
        raise refuse(f"{', '.join(given)} belong to a webhook reconciler; this one is {value!r}")
    lease = table.get("reconciliation_lease")
    if value == "external":
        lease = DEFAULT_RECONCILIATION_LEASE if lease is None else lease
        if not 0 < lease <= 3600:
            raise refuse("reconciliation_lease must be more than 0 and at most 3600 seconds")
        return PullReconciler(lease=timedelta(seconds=lease))
    if lease is not None:
        raise refuse(f'reconciliation_lease belongs to a pull-mode reconciler (reconciler = "external"); '
                     f"this one is {value!r}")
    if value == "none":
        return None
    _python(value, "reconciler", refuse)
    return value.removeprefix("python:")


def _webhook(table: dict, refuse: Callable[[str], Exception]) -> Webhook:
    url = table.get("webhook_url", "")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # a port that is not a number raises here, not at the first question
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("https", "http") or not parts.hostname:
        raise refuse("a webhook reconciler needs webhook_url, an http(s) URL")
    if problem := plain_http_problem("webhook_url", url, carrying="the question (with the job's payload)"):
        raise refuse(problem)
    names = table.get("webhook_secrets", [])
    if not names or len(names) > 2 or not all(isinstance(name, str) and name for name in names):
        raise refuse("a webhook reconciler needs webhook_secrets: the names of one or two environment variables "
                     "holding its signing secret (current first, the previous one during a rotation)")
    for name in names:  # not needed here unless this process signs (webhook_secret_problems); never short
        secret = os.environ.get(name, "")
        if secret and len(secret) < WEBHOOK_SECRET_MIN_LENGTH:
            raise refuse(f"webhook_secrets: variable {name} holds fewer than {WEBHOOK_SECRET_MIN_LENGTH} characters")
    timeout = table.get("webhook_timeout", 5)
    if not 0 < timeout <= 30:
        raise refuse("webhook_timeout must be more than 0 and at most 30 seconds")
    return Webhook(url=url, secret_variables=tuple(names), timeout=float(timeout))


def plain_http_problem(key: str, url: str, *, carrying: str) -> str | None:
    """Why `url` may not be used, when it is plain http to a host that is neither loopback nor
    named in RECKON_WEBHOOK_HTTP_HOSTS: one rule for webhooks and MCP upstreams alike."""
    host = urlsplit(url).hostname or ""
    if urlsplit(url).scheme != "http" or _plain_http_allowed(host):
        return None
    return (f"{key} {url} is plain http to {host}, which is not loopback: {carrying} would travel in clear. "
            f"Use https, or name the host in RECKON_WEBHOOK_HTTP_HOSTS if its network is private")


def _plain_http_allowed(host: str) -> bool:
    """Loopback, or a host the deployment named in RECKON_WEBHOOK_HTTP_HOSTS."""
    if host == "localhost" or host in {named.lower() for named in settings.RECKON_WEBHOOK_HTTP_HOSTS}:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def webhook_secret_problems() -> list[str]:
    """What a process that signs webhook questions lacks: one line per declared webhook secret
    variable that is not set in its environment, naming the file, the action and the variable."""
    return [f"{action.source}: action {action.name!r}: webhook_secrets: variable {name} is not set "
            f"(it holds the secret this process signs its webhook questions with; at least "
            f"{WEBHOOK_SECRET_MIN_LENGTH} characters)"
            for action in registered_actions() if isinstance(action.reconciler, Webhook)
            for name in action.reconciler.missing_secrets()]


def reconciler_problems() -> list[str]:
    """What a process that reconciles lacks: the webhook secrets it signs with, and the variables
    the reconcilers it runs read (an MCP upstream's headers and env), one line each."""
    return webhook_secret_problems() + [
        f"{action.source}: action {action.name!r}: its reconciler needs the environment variable {name}, "
        f"which is not set" for action in registered_actions() for name in action.reconciler_variables
        if not os.environ.get(name)]


def _expanded(key: str, value, refuse: Callable[[str], Exception]):
    """`value` with each `${NAME}` in a string replaced by the environment variable NAME."""
    if isinstance(value, list):
        return [_expanded(key, item, refuse) for item in value]
    if not isinstance(value, str):
        return value

    def variable(found: re.Match) -> str:
        name = found.group(1)
        if not os.environ.get(name):
            raise refuse(f"{key}: ${{{name}}} names the environment variable {name}, which is not set")
        return os.environ[name]

    return VARIABLE.sub(variable, value)


def _python(value: str, key: str, refuse: Callable[[str], Exception]):
    if not value.startswith("python:") or not value.removeprefix("python:"):
        choices = ('"external" or "python:dotted.path"' if key == "executor"
                   else '"python:dotted.path", "webhook", "external" or "none"')
        raise refuse(f"{key} must be {choices}, got {value!r}")
    path = value.removeprefix("python:")
    try:
        found = import_string(path)
    except ImportError as exc:
        raise refuse(f"{key} {path!r} cannot be imported: {exc}") from None
    if not callable(found):
        raise refuse(f"{key} {path!r} is not callable")
    return found
