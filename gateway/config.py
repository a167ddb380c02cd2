"""MCP upstreams and their tools' policies, declared in the actions file beside the actions.

    [[mcp.upstreams]]
    name = "notes"                                  # tools are listed as "notes_<tool>" (docs/agents/mcp-tool-names.md)
    tenant = "acme"                                 # the tenant whose jobs these calls are
    url = "http://127.0.0.1:9100/mcp"               # Streamable HTTP (http:// only as a webhook may: loopback
                                                    # or RECKON_WEBHOOK_HTTP_HOSTS); or command = ["python", "server.py"]
    headers = { Authorization = "NOTES_AUTHORIZATION" }  # header -> environment variable holding it
                                                    # (never one of Reckon's own secrets; required where
                                                    # upstreams are called: the gateway, the reconciler)
    timeout = 10                                    # seconds, for every tool without its own

    [mcp.upstreams.tools.create_note]
    name = "notes_create_note"                      # the name it is listed under (the default shown; at most 48 of A-Z a-z 0-9 _ -)
    effect = "reversible"                           # "none" (read-only, passed through), "reversible", "irreversible"
    key = "arguments"                               # "arguments" (canonical JSON with tenant and tool),
                                                    # "argument:<name>", or "meta" (_meta["reckon/idempotency_key"],
                                                    # or "idempotencyKey", "io.modelcontextprotocol/idempotency-key")
    timeout = 5
    redact = ["api_key"]                            # never written to the ledger nor shown
    # The look-up that settles an unknown call: the read-only tool, its arguments from the call's
    # ("$key": the idempotency key), `found` a JMESPath expression naming the list of found items in
    # its answer, `match` the found items' fields that must equal the call's arguments.
    reconcile = { tool = "find_note", arguments = { title = "title" }, found = "result", match = { title = "title" } }
    # or reconciler = "python:dotted.path" | "webhook" (with webhook_url, webhook_secrets) | "external"

    [mcp.upstreams.tools.delete_notes]
    effect = "irreversible"
    approval = "first_call"                         # or "replay": only before a replay after an unknown

Each side-effecting tool is registered as the action `mcp:<upstream>.<tool>` (worker tokens name
it in their actions): that dotted name is Reckon's own (the actions, job ids, the ledger) and is
still accepted in a call; the listed name is the one model APIs accept. A bad declaration, or two
tools listed under one name, stops start-up with one message naming the file.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import jmespath
from django.conf import settings

from ledger.actions import Action, declared_action, register
from ledger.declarations import DeclarationError, parse_action, plain_http_problem

EFFECTS = ("none", "reversible", "irreversible")
APPROVALS = ("first_call", "replay")
META_KEY = "reckon/idempotency_key"  # where a client passes its own key, in the call's _meta
# The spellings of a client's key the ecosystem already sends in a call's _meta, beside Reckon's own:
# SEP-3182's (`idempotencyKey`), and the reserved-prefix forms its demos and SDKs use.
META_KEYS = (META_KEY, "idempotencyKey", "io.modelcontextprotocol/idempotency-key",
             "io.modelcontextprotocol/idempotencyKey")
# The reconciler of every tool that reconciles through a read-only tool of its upstream.
LOOKUP_RECONCILER = "gateway.reconcile.look_up"
UPSTREAM_KEYS = {"name", "tenant", "url", "command", "env", "headers", "timeout", "tools"}
TOOL_KEYS = {"name", "effect", "key", "timeout", "redact", "reconcile", "approval", "max_attempts",
             "reconciler", "webhook_url", "webhook_secrets", "webhook_timeout", "reconciliation_lease",
             "runbook_url", "check_by_hand"}
# Keys a tool passes on to the ledger's own declaration parser (ledger/declarations.py).
# A listed tool name: what OpenAI's function names and Anthropic's tool names accept
# (^[a-zA-Z0-9_-]{1,64}$), less room for a client's own prefix (Claude Code's "mcp__<server>__").
LISTED_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,48}$")
LISTED_NAME_MAX = 48
NOT_LISTABLE = re.compile(r"[^A-Za-z0-9_-]")
PASSED_ON = ("reconciler", "webhook_url", "webhook_secrets", "webhook_timeout", "reconciliation_lease",
             "max_attempts", "runbook_url", "check_by_hand")


@dataclass(frozen=True)
class Lookup:
    """How to reconcile through a read-only tool: call `tool` with arguments taken from the
    original call (`arguments`: lookup argument -> call argument, or "$key"); `found`, a JMESPath
    expression over its answer, names the list of items found, and `match` (found item's field ->
    call argument, or "$key") the fields an item must share with the call to count. Zero items:
    not_found; one: confirmed; more: conflict; an answer the rule cannot read: unavailable
    (gateway/reconcile.py)."""

    tool: str
    arguments: dict[str, str]
    found: str
    match: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolPolicy:
    upstream: str
    tool: str
    effect: str
    key: str = "arguments"
    timeout: float = 10.0
    redact: tuple[str, ...] = ()
    lookup: Lookup | None = None
    approval: str = "replay"
    listed_name: str = ""  # the name tools/list shows (listed_name_of); the dotted `name` is still accepted

    def __post_init__(self):
        if not self.listed_name:  # (made without a declaration's name: the default)
            object.__setattr__(self, "listed_name", listed_name_of(self.upstream, self.tool))

    @property
    def name(self) -> str:
        """Reckon's own name of the tool: its action's, its job ids', the ledger's (and a call by it is
        still accepted, for clients configured before names were listed as model APIs accept them)."""
        return f"{self.upstream}.{self.tool}"

    @property
    def action(self) -> str:
        """The ledger action its calls are jobs of (and worker tokens are scoped to)."""
        return f"mcp:{self.name}"

    @property
    def journaled(self) -> bool:
        return self.effect != "none"


@dataclass(frozen=True)
class Upstream:
    name: str
    tenant: str
    url: str = ""
    command: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # stdio: variable -> environment variable holding it
    headers: dict[str, str] = field(default_factory=dict)  # header -> environment variable holding it
    tools: dict[str, ToolPolicy] = field(default_factory=dict)
    source: str = ""

    @property
    def variables(self) -> tuple[str, ...]:
        """The environment variables its headers and env are read from."""
        return tuple(dict.fromkeys([*self.headers.values(), *self.env.values()]))

    def missing_variables(self) -> list[str]:
        """What a process that connects to it lacks: one line per variable not set, naming the file."""
        return [f"{self.source}: MCP upstream {self.name!r}: the environment variable {variable} is not set "
                f"(its headers or env are read from it)" for variable in self.variables if not os.environ.get(variable)]

    def header_values(self) -> dict[str, str]:
        return {header: _value_of(self, variable) for header, variable in self.headers.items()}

    def env_values(self) -> dict[str, str]:
        return {name: _value_of(self, variable) for name, variable in self.env.items()}


def _value_of(upstream: Upstream, variable: str) -> str:
    """A variable's value; never an empty header or env in its place (the processes that connect
    refuse to start without it, so this is only met when it was unset since)."""
    value = os.environ.get(variable, "")
    if not value:
        raise DeclarationError(f"{upstream.source}: MCP upstream {upstream.name!r}: the environment variable "
                               f"{variable} is not set")
    return value


def missing_variables() -> list[str]:
    """What this process lacks to connect to every declared upstream (the gateway refuses to start)."""
    return [problem for upstream in _upstreams.values() for problem in upstream.missing_variables()]


_upstreams: dict[str, Upstream] = {}


def upstreams() -> list[Upstream]:
    return list(_upstreams.values())


def get_upstream(name: str) -> Upstream | None:
    return _upstreams.get(name)


def listed_name_of(upstream: str, tool: str) -> str:
    """The default listed name: `<upstream>_<tool>`, every character outside [A-Za-z0-9_-] made `_`."""
    return NOT_LISTABLE.sub("_", f"{upstream}_{tool}")


def policy_named(name: str) -> ToolPolicy | None:
    """The declared tool a call names: by its listed name, or by Reckon's dotted `<upstream>.<tool>`."""
    for declared in _upstreams.values():  # (a handful of tools: read, not indexed, so never stale)
        for policy in declared.tools.values():
            if policy.listed_name == name:
                return policy
    upstream, _, tool = name.partition(".")
    found = _upstreams.get(upstream)
    return found.tools.get(tool) if found else None


def policy_for_action(action: str) -> ToolPolicy | None:
    """The tool policy behind an `mcp:` action, or None."""
    upstream, _, tool = action.removeprefix("mcp:").partition(".")
    found = _upstreams.get(upstream) if action.startswith("mcp:") else None
    return found.tools.get(tool) if found else None


def load_upstreams(path: Path | str) -> list[Upstream]:
    """Register the file's MCP upstreams and an action per side-effecting tool (nothing without a file)."""
    path = Path(path)
    if not path.exists():
        return []
    document = tomllib.loads(path.read_text(encoding="utf-8"))  # the ledger has read it already
    tables = document.get("mcp", {})
    if not isinstance(tables, dict) or set(tables) - {"upstreams"}:
        raise DeclarationError(f"{path}: the mcp table holds only [[mcp.upstreams]]")
    loaded = [parse_upstream(table, source=str(path)) for table in tables.get("upstreams", [])]
    names = [upstream.name for upstream in loaded]
    if len(set(names)) != len(names):
        raise DeclarationError(f"{path}: an MCP upstream name is declared twice: {', '.join(names)}")
    listed_names(loaded, source=str(path))
    for upstream, table in zip(loaded, tables.get("upstreams", []), strict=True):
        _upstreams[upstream.name] = upstream
        for name, policy in upstream.tools.items():
            if not policy.journaled:
                continue
            already = declared_action(policy.action)
            if already is not None and "(MCP upstream" not in already.source:
                raise DeclarationError(f"{path}: action {policy.action} is declared twice (also in {already.source})")
            register(_action_of(policy, table["tools"][name], source=str(path), upstream=upstream))
    return loaded


def listed_names(upstreams: list[Upstream], *, source: str) -> dict[str, ToolPolicy]:
    """Each tool by the name it is listed under; two tools under one name stop the start."""
    listed: dict[str, ToolPolicy] = {}
    for upstream in upstreams:
        for policy in upstream.tools.values():
            other = listed.setdefault(policy.listed_name, policy)
            if other is not policy:
                raise DeclarationError(
                    f"{source}: two MCP tools would be listed as {policy.listed_name!r}: "
                    f"[mcp.upstreams.tools.{other.tool}] of upstream {other.upstream!r} and "
                    f"[mcp.upstreams.tools.{policy.tool}] of upstream {policy.upstream!r}; "
                    'give one of them its own name = "..." (letters, digits, _ and -, at most '
                    f"{LISTED_NAME_MAX} characters)")
    return listed


def parse_upstream(table, *, source: str) -> Upstream:
    if not isinstance(table, dict):
        raise DeclarationError(f"{source}: each [[mcp.upstreams]] must be a table")
    name = table.get("name")

    def refuse(problem: str) -> DeclarationError:
        return DeclarationError(f"{source}: MCP upstream {name!r}: {problem}")

    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "_-" for c in name):
        raise refuse("name is required: letters, digits, _ and - only")
    unknown = sorted(set(table) - UPSTREAM_KEYS)
    if unknown:
        raise refuse(f"unknown key(s) {', '.join(unknown)}; known keys: {', '.join(sorted(UPSTREAM_KEYS))}")
    tenant = table.get("tenant")
    if not isinstance(tenant, str) or not tenant.strip():
        raise refuse("tenant is required: the tenant whose jobs its calls are")
    url, command = table.get("url", ""), table.get("command", [])
    if bool(url) == bool(command):
        raise refuse("give either url (Streamable HTTP) or command (stdio), not both")
    if url and not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        raise refuse(f"url must be an http(s) URL, got {url!r}")
    if url and (problem := plain_http_problem("url", url, carrying="its calls (arguments, headers and answers)")):
        raise refuse(problem)
    if command and not (isinstance(command, list) and all(isinstance(part, str) and part for part in command)):
        raise refuse("command must be a list of strings: the program and its arguments")
    headers, env = table.get("headers", {}), table.get("env", {})
    for key, mapping in (("headers", headers), ("env", env)):
        if not isinstance(mapping, dict) or not all(isinstance(v, str) and v for v in mapping.values()):
            raise refuse(f"{key} maps each name to the environment variable holding its value "
                         "(values are never written in the file)")
        own = sorted(set(mapping.values()) & settings.RECKON_OWN_SECRETS)
        if own:
            raise refuse(f"{key} names {', '.join(own)}: Reckon's own secret(s), never handed to an upstream; "
                         "give the upstream a variable of its own")
    timeout = table.get("timeout", 10)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 600:
        raise refuse("timeout must be more than 0 and at most 600 seconds")
    tools = table.get("tools", {})
    if not isinstance(tools, dict) or not tools:
        raise refuse("declare its tools: [mcp.upstreams.tools.<tool>] with an effect each; "
                     "undeclared tools are refused")
    policies = {tool: _parse_tool(name, tool, spec, float(timeout), refuse) for tool, spec in tools.items()}
    for policy in policies.values():
        if policy.lookup and (policy.lookup.tool not in policies or policies[policy.lookup.tool].journaled):
            raise refuse(f"tool {policy.tool}: reconcile.tool {policy.lookup.tool!r} must be a declared "
                         'read-only tool (effect = "none") of the same upstream')
    return Upstream(name=name, tenant=tenant.strip(), url=url, command=tuple(command), env=dict(env),
                    headers=dict(headers), tools=policies, source=source)


def _parse_tool(upstream: str, tool: str, spec, timeout: float, refuse) -> ToolPolicy:
    def problem(text: str) -> DeclarationError:
        return refuse(f"tool {tool}: {text}")

    if not isinstance(spec, dict):
        raise problem("must be a table of settings")
    if not tool or not all(c.isalnum() or c in "_-." for c in tool):
        raise problem("a tool name has letters, digits, _ - and . only")
    unknown = sorted(set(spec) - TOOL_KEYS)
    if unknown:
        raise problem(f"unknown key(s) {', '.join(unknown)}; known keys: {', '.join(sorted(TOOL_KEYS))}")
    effect = spec.get("effect")
    if effect not in EFFECTS:
        raise problem(f'effect must be one of {", ".join(EFFECTS)}, got {effect!r}')
    listed_name = spec.get("name", listed_name_of(upstream, tool))
    if not isinstance(listed_name, str) or not LISTED_NAME.fullmatch(listed_name):
        given = "its own name" if "name" in spec else f"its default name {listed_name!r} (<upstream>_<tool>)"
        raise problem(f"{given} is not a name model APIs accept with room for a client's prefix: "
                      f"1 to {LISTED_NAME_MAX} of the letters A-Z a-z, digits, _ and -; "
                      f'give it a name = "..." that is')
    if effect == "none":
        extra = sorted(set(spec) - {"effect", "timeout", "name"})
        if extra:
            raise problem(f"a read-only tool is passed through and not journaled: {', '.join(extra)} do not apply")
    key = spec.get("key", "arguments")
    if not isinstance(key, str) or not (key in ("arguments", "meta") or
                                        (key.startswith("argument:") and key.removeprefix("argument:"))):
        raise problem(f'key must be "arguments", "argument:<name>" or "meta", got {key!r}')
    tool_timeout = spec.get("timeout", timeout)
    if isinstance(tool_timeout, bool) or not isinstance(tool_timeout, (int, float)) or not 0 < tool_timeout <= 600:
        raise problem("timeout must be more than 0 and at most 600 seconds")
    redact = spec.get("redact", [])
    if not isinstance(redact, list) or not all(isinstance(name, str) and name for name in redact):
        raise problem("redact must be a list of argument names")
    approval = spec.get("approval", "first_call" if effect == "irreversible" else "replay")
    if approval not in APPROVALS or (effect != "irreversible" and "approval" in spec):
        raise problem('approval is for irreversible tools: "first_call" or "replay"')
    lookup = _parse_lookup(spec, redact, problem) if "reconcile" in spec else None
    return ToolPolicy(upstream=upstream, tool=tool, effect=effect, key=key, timeout=float(tool_timeout),
                      redact=tuple(redact), lookup=lookup, approval=approval, listed_name=listed_name)


LOOKUP_EXAMPLE = ('reconcile = { tool = "find_tickets", arguments = { ref = "ref" }, found = "tickets", '
                  'match = { ref = "ref" } }')
LOOKUP_KEYS = {"tool", "arguments", "found", "match"}


def _parse_lookup(spec: dict, redact: list[str], problem) -> Lookup:
    """A look-up rule states what in the answer is the effect: nothing is found by guessing."""
    rule = spec["reconcile"]
    if "reconciler" in spec:
        raise problem("give reconcile (a read-only tool) or reconciler, not both")
    if not isinstance(rule, dict) or set(rule) - LOOKUP_KEYS or not isinstance(rule.get("tool"), str):
        raise problem(f"reconcile takes {', '.join(sorted(LOOKUP_KEYS))}, e.g. {LOOKUP_EXAMPLE}")
    if not isinstance(rule.get("found"), str) or not rule["found"].strip():
        raise problem("reconcile.found is required: a JMESPath expression naming the list of items the look-up "
                      "found in its answer (its structured content, or its text read as JSON), so that an answer "
                      f"such as {{\"tickets\": []}} is not taken for an effect; e.g. {LOOKUP_EXAMPLE}")
    try:
        jmespath.compile(rule["found"])
    except jmespath.exceptions.JMESPathError as exc:
        raise problem(f"reconcile.found {rule['found']!r} is not a JMESPath expression: {exc}") from None
    for part in ("arguments", "match"):
        mapping = rule.get(part, {})
        if not isinstance(mapping, dict) or not all(isinstance(v, str) and v for v in mapping.values()):
            raise problem(f'reconcile.{part} maps each name to a call argument (or "$key")')
        hidden = sorted(set(mapping.values()) & set(redact))
        if hidden:
            raise problem(f"reconcile.{part} cannot use redacted arguments ({', '.join(hidden)}): "
                          "the ledger never holds them")
    return Lookup(tool=rule["tool"], arguments=dict(rule.get("arguments", {})), found=rule["found"].strip(),
                  match=dict(rule.get("match", {})))


def _action_of(policy: ToolPolicy, spec: dict, *, source: str, upstream: Upstream) -> Action:
    """The ledger action of a side-effecting tool, checked by the ledger's own declaration parser."""
    declaration = {key: spec[key] for key in PASSED_ON if key in spec}
    if policy.lookup is not None:
        declaration["reconciler"] = f"python:{LOOKUP_RECONCILER}"
    queryable = declaration.get("reconciler", "none") != "none"
    declaration |= {
        "executor": "external",  # the gateway runs it; no django-q2 worker does
        "reversible": policy.effect == "reversible",
        "queryable": queryable,
        # Short, and renewed while the upstream runs the call (gateway/renewal.py), whatever the
        # tool's timeout: a gateway that dies mid-call leaves a lease that runs out within seconds,
        # with the side effect submitted, which the next identical call or the sweeper makes unknown.
        "lease_ttl": settings.RECKON_MCP_GATEWAY_LEASE_S,
    }
    if policy.effect == "irreversible" and policy.approval == "first_call":
        # The first attempt is closed unrun when approval is asked; the approved one follows it.
        declaration["max_attempts"] = declaration.get("max_attempts", 3) + 1
    action = parse_action(policy.action, declaration, source=source)
    # An upstream that ignores the cancel may still be running a call the gateway gave up on: the
    # reconciler's first look waits the tool's timeout after the call became unknown.
    return Action(**{**action.__dict__, "source": f"{source} (MCP upstream {policy.upstream})",
                     "first_look_after": timedelta(seconds=policy.timeout),
                     # A look-up calls the upstream from the reconciler's process, with its headers.
                     "reconciler_variables": upstream.variables if policy.lookup is not None else ()})
