"""pydantic-ai's own agent loop (its FunctionModel in place of an LLM) through the gateway, set up as
docs/agents/frameworks/pydantic-ai.md says (examples/frameworks/pydantic_ai_agent.py)."""

from __future__ import annotations

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from approvals.models import ApprovalRequest
from approvals.services import approve
from examples.frameworks.pydantic_ai_agent import reckon_agent
from ledger.states import JobStatus
from tests.conftest import event_kinds
from tests.frameworks.conftest import in_fresh_thread, job_of, listed_name

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def calling(tool: str, *calls: dict) -> FunctionModel:
    """A model that calls `tool` with each of `calls` in turn, one a step, then answers "done"."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        assert tool in [definition.name for definition in info.function_tools]
        made = sum(isinstance(part, ToolCallPart) for message in messages for part in message.parts)
        if made < len(calls):
            return ModelResponse(parts=[ToolCallPart(tool, calls[made], tool_call_id=f"call-{made}")])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(respond)


def told(messages: list[ModelMessage]) -> list[tuple[str, str]]:
    """What the model was told of each call: (outcome, text)."""
    return [(getattr(part, "outcome", "retry-prompt"), part.model_response_str())
            for message in messages for part in message.parts if isinstance(part, ToolReturnPart | RetryPromptPart)]


def test_it_runs_the_call_once_and_the_same_call_again_is_answered_from_the_ledger(gateway, upstream, token, title):
    tool = listed_name(gateway.url, token, "notes", "create_note")
    arguments = {"title": title, "body": "hello"}
    agent = reckon_agent(calling(tool, arguments, arguments), gateway.url, token)

    run = in_fresh_thread(lambda: agent.run_sync("write the note, then again", deps=f"work-{title}"))

    assert run.output == "done"
    first, again = told(run.all_messages())
    assert first == again and first[0] == "success" and title in first[1]
    assert upstream.notes(title) == 1
    assert job_of(title).status == JobStatus.SUCCEEDED
    assert event_kinds(job_of(title).job_id)[-1] == "enqueue_repeated"


def test_the_key_sent_in_meta_makes_a_second_call_a_replay(gateway, upstream, token, title):
    tool = listed_name(gateway.url, token, "keyed", "create_note")  # its key only from _meta
    arguments = {"title": title, "body": "keyed"}
    agent = reckon_agent(calling(tool, arguments), gateway.url, token)

    runs = [in_fresh_thread(lambda: agent.run_sync("write the note", deps=f"order-{title}")) for _ in range(2)]  # the work run twice

    # Without the key the gateway refuses this tool: both succeeding says it was sent.
    assert [told(run.all_messages())[0][0] for run in runs] == ["success", "success"]
    assert upstream.notes(title) == 1
    assert event_kinds(job_of(title).job_id)[-1] == "enqueue_repeated"


def test_an_unknown_call_called_again_by_the_model_is_not_repeated_and_the_run_ends(gateway, upstream, token, title):
    tool = listed_name(gateway.url, token, "notes", "create_note")
    # Received, then held past the tool's 2 s: the gateway answers "outcome unknown".
    arguments = {"title": title, "body": "held", "hold": title}
    agent = reckon_agent(calling(tool, arguments, arguments), gateway.url, token)

    try:
        run = in_fresh_thread(lambda: agent.run_sync("write the note; call again if it fails", deps=f"work-{title}"))
    finally:
        upstream.drop(title)

    assert run.output == "done"
    answers = told(run.all_messages())
    assert [outcome for outcome, _ in answers] == ["failed", "failed"]
    assert all("outcome unknown, not repeated" in text and job_of(title).job_id in text for _, text in answers)
    assert upstream.receipts(title) == 1
    assert job_of(title).status == JobStatus.NEEDS_RECONCILIATION


def test_a_held_call_is_told_to_the_model_stays_held_and_runs_once_a_second_person_approves(
        gateway, upstream, token, title, approver):
    tool = listed_name(gateway.url, token, "payments", "create_note")  # irreversible: a person approves first
    arguments = {"title": title, "body": "pay"}
    agent = reckon_agent(calling(tool, arguments, arguments), gateway.url, token)

    run = in_fresh_thread(lambda: agent.run_sync("pay; call again once approved", deps=f"work-{title}"))

    answers = told(run.all_messages())
    assert [outcome for outcome, _ in answers] == ["failed", "failed"]
    assert all("awaiting approval" in text for _, text in answers)
    assert upstream.notes(title) == 0 and job_of(title).status == JobStatus.AWAITING_APPROVAL

    approve(request_id=ApprovalRequest.objects.get(job=job_of(title)).pk, user=approver, note="checked: pay")
    run = in_fresh_thread(lambda: reckon_agent(calling(tool, arguments, arguments), gateway.url, token).run_sync("pay", deps=f"work-{title}"))

    [(ran, first), (again, second)] = told(run.all_messages())
    assert ran == again == "success" and title in first and first == second
    assert upstream.notes(title) == 1 and job_of(title).status == JobStatus.SUCCEEDED


def test_with_pydantic_ais_defaults_calling_again_as_the_gateway_advises_ends_the_run(gateway, upstream, token, title):
    """Why the guide sets tool_error_behavior: by default an error result is a retry prompt counted
    against the tool's budget (1), and the second ends the run."""
    tool = listed_name(gateway.url, token, "payments", "create_note")
    arguments = {"title": title, "body": "pay"}
    defaults = MCPToolset(gateway.url, headers={"Authorization": f"Bearer {token}"})
    agent = Agent(calling(tool, arguments, arguments), toolsets=[defaults])

    with pytest.raises(UnexpectedModelBehavior, match="exceeded max retries"):
        in_fresh_thread(lambda: agent.run_sync("pay; call again once approved"))

    assert upstream.notes(title) == 0 and job_of(title).status == JobStatus.AWAITING_APPROVAL
