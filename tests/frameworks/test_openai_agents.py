"""The OpenAI Agents SDK's own loop (its ScriptedModel, a `Model` per the SDK's interface, in place of
an LLM) through the gateway, set up as docs/agents/frameworks/openai-agents.md says
(examples/frameworks/openai_agents_agent.py)."""

from __future__ import annotations

import asyncio

import pytest
from agents import Runner, set_tracing_disabled
from agents.items import ToolCallOutputItem
from agents.mcp import MCPServerStreamableHttp
from agents.testing import ScriptedModel, assistant_message, function_call

from examples.frameworks.openai_agents_agent import reckon_agent, reckon_server
from ledger.states import JobStatus
from tests.conftest import event_kinds
from tests.frameworks.conftest import in_fresh_thread, job_of, listed_name

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


set_tracing_disabled(True)  # no traces sent anywhere from the tests

DEFAULT_ERROR = "An error occurred while running the tool. Please try again."


def calling(tool: str, *calls: dict) -> ScriptedModel:
    """A model that calls `tool` with each of `calls` in turn, one a step, then answers "done"."""
    steps = [[function_call(tool, arguments, call_id=f"call-{n}")] for n, arguments in enumerate(calls)]
    return ScriptedModel([*steps, [assistant_message("done")]])


def run(model: ScriptedModel, server, work: str) -> tuple[str, list[str]]:
    """The agent's run: its final output and what the model was told of each call."""

    async def go():
        async with server:
            return await Runner.run(reckon_agent(model, server), "do the work", context=work)

    result = in_fresh_thread(lambda: asyncio.run(go()))
    return result.final_output, [str(item.output) for item in result.new_items if isinstance(item, ToolCallOutputItem)]


def test_it_runs_the_call_once_and_the_same_call_again_is_answered_from_the_ledger(gateway, upstream, token, title):
    tool = listed_name(gateway.url, token, "notes", "create_note")
    arguments = {"title": title, "body": "hello"}
    model = calling(tool, arguments, arguments)

    output, answers = run(model, reckon_server(gateway.url, token), f"work-{title}")

    assert output == "done"
    assert tool in [listed.name for listed in model.first_call.tools]  # as tools/list gave it, to the model
    first, again = answers
    assert first == again and title in first
    assert upstream.notes(title) == 1
    assert job_of(title).status == JobStatus.SUCCEEDED
    assert event_kinds(job_of(title).job_id)[-1] == "enqueue_repeated"


def test_the_key_from_tool_meta_resolver_makes_a_second_run_a_replay(gateway, upstream, token, title):
    tool = listed_name(gateway.url, token, "keyed", "create_note")  # its key only from _meta
    arguments = {"title": title, "body": "keyed"}

    answers = [run(calling(tool, arguments), reckon_server(gateway.url, token), f"order-{title}")[1][0]
               for _ in range(2)]

    # Without the key the gateway refuses this tool: both answering the note says it was sent.
    assert answers[0] == answers[1] and title in answers[0]
    assert upstream.notes(title) == 1
    assert event_kinds(job_of(title).job_id)[-1] == "enqueue_repeated"


def test_past_the_sdks_default_timeout_the_model_reads_the_gateways_answer(gateway, upstream, token, title):
    tool = listed_name(gateway.url, token, "slow", "create_note")  # the gateway waits 6 s; the SDK's default 5
    arguments = {"title": title, "body": "held", "hold": title}

    try:
        output, answers = run(calling(tool, arguments, arguments), reckon_server(gateway.url, token), f"work-{title}")
    finally:
        upstream.drop(title)

    assert output == "done"
    assert all("outcome unknown, not repeated" in answer and f"/jobs/{job_of(title).job_id}/" in answer
               for answer in answers) and len(answers) == 2
    assert upstream.receipts(title) == 1
    assert job_of(title).status == JobStatus.NEEDS_RECONCILIATION


def test_with_the_sdks_default_timeout_the_model_reads_a_generic_error(gateway, upstream, token, title):
    """Why the guide sets client_session_timeout_seconds."""
    tool = listed_name(gateway.url, token, "slow", "create_note")
    arguments = {"title": title, "body": "held", "hold": title}
    server = MCPServerStreamableHttp({"url": gateway.url, "headers": {"Authorization": f"Bearer {token}"}})  # defaults

    try:
        _, [answer] = run(calling(tool, arguments), server, f"work-{title}")
    finally:
        upstream.drop(title)

    assert answer == DEFAULT_ERROR and "outcome unknown" not in answer


def test_a_held_call_is_told_to_the_model_and_stays_held(gateway, upstream, token, title):
    tool = listed_name(gateway.url, token, "payments", "create_note")  # irreversible: a person approves first
    arguments = {"title": title, "body": "pay"}

    output, answers = run(calling(tool, arguments, arguments), reckon_server(gateway.url, token), f"work-{title}")

    assert output == "done" and len(answers) == 2 and all("awaiting approval" in answer for answer in answers)
    assert upstream.notes(title) == 0 and job_of(title).status == JobStatus.AWAITING_APPROVAL
