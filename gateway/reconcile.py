"""The reconciler of a tool that declares `reconcile = { tool, arguments, found, match }`: ask the
upstream's read-only tool, and read its answer by the declared rule, never by guessing.

    found   a JMESPath expression over the answer (its structured content as sent, or else its
            text read as JSON) that names the list of items found
    match   found item's field -> call argument ("$key": the idempotency key): an item counts only
            when each field equals the call's argument

No item counts: not_found; one: confirmed; more: conflict. An answer the rule cannot read (a tool
error, text that is not JSON, a shape other than the one `found` names, an item without a `match`
field) proves nothing: unavailable, for a person.

A team's own Python reconciler for a gateway tool (`reconciler = "python:..."`) returns
`effect_found(...)` when it found the effect, so that the agent is told the truth about it.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import anyio
import jmespath

from gateway import upstream as upstreams
from gateway.config import Lookup, ToolPolicy, Upstream, get_upstream, policy_for_action
from ledger.actions import GATEWAY_RESULT
from ledger.models import Attempt, Job
from reconciliation.findings import Finding
from reconciliation.models import CheckOutcome

RESULT = GATEWAY_RESULT  # the evidence key of the upstream's own result (the worker API refuses it)
FOUND = "mcp_found"  # the evidence key of the effect a reconciler found (not the tool's result)
LOOKUP = "lookup"  # the evidence key of the look-up that was asked


class Unreadable(Exception):
    """The look-up's answer cannot be read by the declared rule: it proves nothing."""


def effect_found(item, *, reason: str, result: dict | None = None, asked: dict | None = None) -> Finding:
    """A confirmed Finding for a gateway job: `item` is the effect found at the upstream (the agent's
    next call is told it was reconciled, with the item); `result`, when the reconciler can give the
    tool's own CallToolResult (as JSON: content, structuredContent, isError), is answered as the
    tool's result instead. `asked` says how it looked (shown with the item)."""
    evidence = {FOUND: item, **({LOOKUP: asked} if asked is not None else {})}
    if result is not None:
        evidence[RESULT] = result
    return Finding(CheckOutcome.CONFIRMED, reason, evidence=evidence)


def look_up(job: Job, attempt: Attempt) -> Finding:
    policy = policy_for_action(job.action)
    if policy is None or policy.lookup is None:
        return Finding(CheckOutcome.UNAVAILABLE, f"{job.action} declares no lookup tool in this process")
    return verdict(policy, get_upstream(policy.upstream), job.payload.get("arguments", {}), job.idempotency_key)


def verdict(policy: ToolPolicy, upstream: Upstream, called: dict, key: str) -> Finding:
    """Ask the look-up for one call (its recorded arguments and idempotency key) and read the answer."""
    lookup = policy.lookup
    try:
        arguments = {name: argument(called, source, key) for name, source in lookup.arguments.items()}
    except Unreadable as exc:
        return Finding(CheckOutcome.UNAVAILABLE, f"lookup {policy.upstream}.{lookup.tool}: {exc}")
    asked = {"tool": f"{policy.upstream}.{lookup.tool}", "arguments": arguments}

    async def ask() -> dict:
        with anyio.fail_after(policy.timeout):
            return await upstreams.call_tool(upstream, lookup.tool, arguments)

    try:
        answer = run_apart(ask)
    except Exception as exc:  # the upstream did not answer: that proves nothing
        return Finding(CheckOutcome.UNAVAILABLE, f"lookup {asked['tool']} failed: {type(exc).__name__}: {exc}",
                       evidence={LOOKUP: asked})
    evidence = {LOOKUP: asked, "answer": answer}
    try:
        items = found_items(lookup, answer, called, key)
    except Unreadable as exc:
        return Finding(CheckOutcome.UNAVAILABLE, f"lookup {asked['tool']}: {exc}: that proves nothing either way",
                       evidence=evidence)
    if not items:
        return Finding(CheckOutcome.NOT_FOUND, f"{asked['tool']} found nothing for {json.dumps(arguments)} "
                       f"(found = {lookup.found!r}{_matching(lookup)}): the call left no trace, so running it "
                       "again cannot repeat it", evidence=evidence)
    if len(items) > 1:
        return Finding(CheckOutcome.CONFLICT, f"{asked['tool']} found {len(items)} items for one call "
                       f"(found = {lookup.found!r}{_matching(lookup)}): the effect may exist more than once",
                       evidence={**evidence, "found": items})
    return Finding(CheckOutcome.CONFIRMED, f"{asked['tool']} found the effect (found = {lookup.found!r}"
                   f"{_matching(lookup)})", evidence={**evidence, FOUND: items[0]})


def found_items(lookup: Lookup, answer: dict, called: dict, key: str) -> list:
    """The items of `answer` that the rule counts as the call's effect; Unreadable if it cannot say."""
    if answer.get("isError"):
        raise Unreadable(f"it answered with an error ({_text(answer)[:200]!r})")
    document = answer.get("structuredContent")
    if document is None:
        text = _text(answer).strip()
        if not text:
            raise Unreadable("its answer has neither structured content nor text")
        try:
            document = json.loads(text)
        except ValueError:
            raise Unreadable(f"its answer is not JSON ({text[:200]!r})") from None
    items = jmespath.search(lookup.found, document)
    if not isinstance(items, list):
        shape = "nothing" if items is None else f"a {type(items).__name__}"
        raise Unreadable(f"found = {lookup.found!r} names {shape} in its answer, not a list of items")
    wanted = {name: argument(called, source, key) for name, source in lookup.match.items()}
    counted = []
    for item in items:
        if wanted and not (isinstance(item, dict) and set(wanted) <= set(item)):
            raise Unreadable(f"a found item lacks the field(s) match names ({', '.join(sorted(wanted))}): "
                             f"{json.dumps(item)[:200]}")
        if all(same(item[name], value) for name, value in wanted.items()):
            counted.append(item)
    return counted


def argument(called: dict, source: str, key: str):
    if source == "$key":
        return key
    if source not in called:
        raise Unreadable(f"the call has no argument {source!r} to look it up by")
    return called[source]


def same(found, called) -> bool:
    """Equal, or the same scalar written as text (an id the call passed as 42 and the look-up shows as "42")."""
    if found == called:
        return True
    scalars = (str, int, float)
    return (isinstance(found, scalars) and isinstance(called, scalars) and not isinstance(found, bool)
            and not isinstance(called, bool) and str(found) == str(called))


def _matching(lookup: Lookup) -> str:
    return f", match = {json.dumps(lookup.match)}" if lookup.match else ""


def _text(answer: dict) -> str:
    return "".join(part.get("text", "") for part in answer.get("content", []) if part.get("type") == "text")


def run_apart(function, *args):
    """`anyio.run(function, *args)`, in a thread of its own when this thread already runs an event
    loop (a reconcile pass called from async code, the benchmark's peers or a test beside
    Playwright's sync API), where a second loop cannot start."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(function, *args)
    with ThreadPoolExecutor(max_workers=1) as thread:
        return thread.submit(anyio.run, function, *args).result()
