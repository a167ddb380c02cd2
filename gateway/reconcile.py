"""The reconciler of a tool that declares `reconcile = { tool = ..., arguments = ... }`: ask the
upstream's read-only tool; a non-empty answer is the effect found (its answer becomes the call's
result), an empty one proves absence, anything else proves nothing."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import anyio

from gateway import upstream as upstreams
from gateway.calls import RESULT
from gateway.config import get_upstream, policy_for_action
from ledger.models import Attempt, Job
from reconciliation.findings import Finding
from reconciliation.models import CheckOutcome

EMPTY = (None, "", [], {})


def look_up(job: Job, attempt: Attempt) -> Finding:
    policy = policy_for_action(job.action)
    if policy is None or policy.lookup is None:
        return Finding(CheckOutcome.UNAVAILABLE, f"{job.action} declares no lookup tool in this process")
    upstream = get_upstream(policy.upstream)
    called = job.payload.get("arguments", {})
    arguments = {name: (job.idempotency_key if source == "$key" else called.get(source))
                 for name, source in policy.lookup.arguments.items()}
    asked = {"tool": f"{policy.upstream}.{policy.lookup.tool}", "arguments": arguments}

    async def ask() -> dict:
        with anyio.fail_after(policy.timeout):
            return await upstreams.call_tool(upstream, policy.lookup.tool, arguments)

    try:
        result = run_apart(ask)
    except Exception as exc:  # the upstream did not answer: that proves nothing
        return Finding(CheckOutcome.UNAVAILABLE, f"lookup {asked['tool']} failed: {type(exc).__name__}: {exc}",
                       evidence={"lookup": asked})
    if result.get("isError"):
        return Finding(CheckOutcome.UNAVAILABLE, f"lookup {asked['tool']} answered with an error",
                       evidence={"lookup": asked, "answer": result})
    if answer_is_empty(result):
        return Finding(CheckOutcome.NOT_FOUND, f"{asked['tool']} found nothing for {json.dumps(arguments)}: "
                       "the call left no trace, so running it again cannot repeat it",
                       evidence={"lookup": asked, "answer": result})
    return Finding(CheckOutcome.CONFIRMED, f"{asked['tool']} found the effect",
                   evidence={"lookup": asked, RESULT: result})


def answer_is_empty(result: dict) -> bool:
    structured = result.get("structuredContent")
    if isinstance(structured, dict) and set(structured) == {"result"}:
        structured = structured["result"]  # the SDK wraps a tool's plain return value
    if structured is not None:
        return structured in EMPTY
    text = "".join(part.get("text", "") for part in result.get("content", []) if part.get("type") == "text").strip()
    try:
        return json.loads(text) in EMPTY if text else True
    except ValueError:
        return False


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
