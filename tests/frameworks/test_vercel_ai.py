"""The Vercel AI SDK's own loop (`generateText` with its MockLanguageModelV3 from `ai/test` in place of
an LLM) through the gateway with @ai-sdk/mcp, set up as docs/agents/frameworks/vercel-ai.md says
(examples/frameworks/vercel-ai/agent.mjs, its packages pinned by the lock file beside it)."""

from __future__ import annotations

import pytest

from ledger.states import JobStatus
from tests.conftest import event_kinds
from tests.frameworks.conftest import job_of, listed_name
from tests.frameworks.conftest import run_vercel_ai as run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_it_runs_the_call_once_and_the_same_call_again_is_answered_from_the_ledger(gateway, upstream, token, title):
    tool = listed_name(gateway.url, token, "notes", "create_note")
    arguments = {"title": title, "body": "hello"}

    ran = run(gateway.url, token, tool, arguments, arguments)

    assert ran["output"] == "done" and tool in ran["tools"]
    first, again = ran["told"]
    assert first == again and first["type"] == "tool-result" and title in first["text"]
    assert [read["type"] for read in ran["read"]] == ["content", "content"]
    assert upstream.notes(title) == 1
    assert job_of(title).status == JobStatus.SUCCEEDED
    assert event_kinds(job_of(title).job_id)[-1] == "enqueue_repeated"


def test_an_unknown_call_called_again_by_the_model_is_not_repeated(gateway, upstream, token, title):
    tool = listed_name(gateway.url, token, "notes", "create_note")
    arguments = {"title": title, "body": "held", "hold": title}  # held past the tool's 2 s

    try:
        ran = run(gateway.url, token, tool, arguments, arguments)
    finally:
        upstream.drop(title)

    assert ran["output"] == "done" and len(ran["told"]) == 2
    assert all(told["isError"] is True and "outcome unknown, not repeated" in told["text"] for told in ran["told"])
    # The guide's toModelOutput: the model reads an error, not plain content.
    assert [read["type"] for read in ran["read"]] == ["error-text", "error-text"]
    assert all("outcome unknown, not repeated" in read["value"] for read in ran["read"])
    assert upstream.receipts(title) == 1
    assert job_of(title).status == JobStatus.NEEDS_RECONCILIATION


def test_a_held_call_is_told_to_the_model_and_stays_held(gateway, upstream, token, title):
    tool = listed_name(gateway.url, token, "payments", "create_note")  # irreversible: a person approves first
    arguments = {"title": title, "body": "pay"}

    ran = run(gateway.url, token, tool, arguments, arguments)

    assert len(ran["told"]) == 2 and all("awaiting approval" in told["text"] for told in ran["told"])
    assert [read["type"] for read in ran["read"]] == ["error-text", "error-text"]
    assert upstream.notes(title) == 0 and job_of(title).status == JobStatus.AWAITING_APPROVAL
