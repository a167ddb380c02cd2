"""Found means found, by the rule the declaration states: a helpdesk upstream whose look-up wraps its
list in an object, one that answers in prose, and a reference with two tickets, each to its verdict;
a call made while the helpdesk was down is reconciled not found and then runs once."""

from __future__ import annotations

import sqlite3
import sys
import uuid
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from api.tokens import worker_token_create
from gateway import calls
from gateway.config import Lookup, get_upstream, load_upstreams
from gateway.reconcile import Unreadable, found_items
from ledger.models import Job
from ledger.states import JobStatus
from reconciliation.passes import reconcile_job
from tests.gateway.conftest import HELPDESK, HELPDESK_SERVER, Gateway, Helpdesk, call, text
from tests.processes import free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ACTIONS = HELPDESK + """
[[mcp.upstreams]]
name = "helpdesk_prose"
tenant = "acme"
url = "{url}"
timeout = 3

[mcp.upstreams.tools.open_ticket]
effect = "reversible"
key = "argument:ref"
reconcile = {{ tool = "describe_tickets", arguments = {{ ref = "ref" }}, found = "tickets" }}

[mcp.upstreams.tools.describe_tickets]
effect = "none"

[[mcp.upstreams]]
name = "helpdesk_own"
tenant = "acme"
url = "{url}"

[mcp.upstreams.tools.open_ticket]
effect = "reversible"
key = "argument:ref"
reconciler = "python:tests.gateway.test_lookup_rules.ticket_by_hand"
"""
DESK_DB: list[Path] = []  # the helpdesk's file, for the team's own reconciler below


def ticket_by_hand(job, attempt):
    """A team's own reconciler for a gateway tool: it reads the helpdesk's records itself."""
    from gateway.reconcile import effect_found
    from reconciliation.findings import Finding
    from reconciliation.models import CheckOutcome

    called = job.payload["arguments"]
    with sqlite3.connect(DESK_DB[0]) as connection:
        row = connection.execute("SELECT id, ref FROM tickets WHERE ref = ?", (called["ref"],)).fetchone()
    if row is None:
        return Finding(CheckOutcome.NOT_FOUND, "no ticket carries the call's reference")
    return effect_found({"id": row[0], "ref": row[1]}, reason="the helpdesk's records hold the ticket",
                        result={"content": [{"type": "text", "text": f"ticket #{row[0]}"}],
                                "structuredContent": {"id": row[0], "ref": row[1]}, "isError": False})

RULE = Lookup(tool="find_tickets", arguments={"ref": "ref"}, found="tickets", match={"ref": "ref"})


def structured(document) -> dict:
    return {"content": [], "structuredContent": document, "isError": False}


def prose(words: str) -> dict:
    return {"content": [{"type": "text", "text": words}], "isError": False}


@pytest.mark.parametrize(("answer", "counted"), [
    (structured({"tickets": []}), 0),  # the answer that "non-empty means found" confirmed
    (structured({"tickets": [{"id": 1, "ref": "r-1"}]}), 1),
    (structured({"tickets": [{"id": 1, "ref": "r-1"}, {"id": 2, "ref": "r-1"}]}), 2),
    (structured({"tickets": [{"id": 1, "ref": "r-2"}]}), 0),  # found, but another call's effect
    (prose('{"tickets": [{"id": 7, "ref": "r-1"}]}'), 1),  # no structured content: the text as JSON
    (structured({"tickets": [{"id": 1, "ref": 1}]}), 0),
])
def test_the_rule_counts_the_items_it_names_that_match_the_call(answer, counted):
    assert len(found_items(RULE, answer, {"ref": "r-1"}, key="k")) == counted


@pytest.mark.parametrize(("answer", "why"), [
    (prose("No tickets found"), "its answer is not JSON ('No tickets found')"),
    (structured({"result": "No tickets found"}), "found = 'tickets' names nothing in its answer"),
    (structured({"tickets": {"id": 1}}), "names a dict in its answer, not a list"),
    (structured({"tickets": [{"id": 1}]}), "a found item lacks the field(s) match names (ref)"),
    ({"content": [{"type": "text", "text": "helpdesk on fire"}], "isError": True}, "it answered with an error"),
    ({"content": [], "isError": False}, "neither structured content nor text"),
])
def test_an_answer_the_rule_cannot_read_proves_nothing(answer, why):
    with pytest.raises(Unreadable, match=None) as unreadable:
        found_items(RULE, answer, {"ref": "r-1"}, key="k")
    assert why in str(unreadable.value)


@pytest.fixture(scope="module")
def helpdesk(tmp_path_factory):
    folder = tmp_path_factory.mktemp("helpdesk")
    port, db = free_port(), folder / "helpdesk.sqlite3"
    argv = [sys.executable, str(HELPDESK_SERVER), "--db", str(db), "--port", str(port)]
    desk = Helpdesk(argv, db, f"http://127.0.0.1:{port}/mcp")
    DESK_DB[:] = [db]
    desk.start()
    yield desk
    desk.stop()


@pytest.fixture(scope="module")
def desk_gateway(helpdesk, tmp_path_factory, django_db_setup, django_db_blocker):
    path = tmp_path_factory.mktemp("helpdesk-gateway") / "actions.toml"
    path.write_text(ACTIONS.format(url=helpdesk.url))
    load_upstreams(path)
    with Gateway(path, log_name="mcp-gateway-helpdesk") as running:
        yield running


@pytest.fixture
def agent_token():
    owner = User.objects.create_user(f"owner-{uuid.uuid4().hex[:6]}")
    return worker_token_create(name="desk-agent", tenants=["acme"], actions=["*"], created_by=owner)


def unknown_call(token, upstream: str, ref: str) -> Job:
    """A call whose outcome the gateway lost (its upstream call vanished): the job is unknown."""
    policy = get_upstream(upstream).tools["open_ticket"]
    go = calls.open_call(token=token.worker_token, policy=policy, arguments={"ref": ref, "subject": "printer"},
                         meta={}, agent="mcp:desk-agent:test")
    calls.lose_call(go, "the test dropped the call")
    job = Job.objects.get(job_id=go.job_id)
    assert job.status == JobStatus.NEEDS_RECONCILIATION
    return job


def ref() -> str:
    return f"r-{uuid.uuid4().hex[:8]}"


def test_a_found_ticket_is_confirmed_and_the_agent_is_told_it_was_found_not_replayed(
        desk_gateway, helpdesk, agent_token):
    name = ref()
    helpdesk.open_by_hand(name)  # the lost call did open its ticket
    job = unknown_call(agent_token, "helpdesk", name)

    assert reconcile_job(job_id=job.job_id).outcome == "confirmed"

    told = call(desk_gateway.url, agent_token.token, "helpdesk_open_ticket", {"ref": name, "subject": "printer"})
    assert not told.is_error and told.meta["reckon/reconciled"] is True and "reckon/replay" not in told.meta
    assert told.meta["reckon/found"]["ref"] == name and told.structured_content is None
    assert told.meta["reckon/lookup"] == {"tool": "helpdesk.find_tickets", "arguments": {"ref": name}}
    assert helpdesk.tickets(name) == 1


def test_two_tickets_for_one_call_are_a_conflict_for_a_person(desk_gateway, helpdesk, agent_token):
    name = ref()
    helpdesk.open_by_hand(name)
    helpdesk.open_by_hand(name)
    job = unknown_call(agent_token, "helpdesk", name)

    decision = reconcile_job(job_id=job.job_id)

    assert decision.outcome == "conflict"
    job.refresh_from_db()
    assert job.status != JobStatus.SUCCEEDED
    told = call(desk_gateway.url, agent_token.token, "helpdesk_open_ticket", {"ref": name, "subject": "printer"})
    assert told.is_error and helpdesk.tickets(name) == 2


def test_a_look_up_that_answers_in_prose_proves_nothing(desk_gateway, helpdesk, agent_token):
    found, missing = ref(), ref()
    helpdesk.open_by_hand(found)

    for name in (found, missing):  # "Found 1 ticket(s): ..." and "No tickets found" alike
        job = unknown_call(agent_token, "helpdesk_prose", name)
        decision = reconcile_job(job_id=job.job_id)
        assert decision.outcome == "unavailable" and "its answer is not JSON" in decision.note
        job.refresh_from_db()
        assert job.status == JobStatus.NEEDS_RECONCILIATION

    assert helpdesk.tickets(missing) == 0 and helpdesk.tickets(found) == 1


def test_a_call_made_while_the_helpdesk_was_down_is_found_not_to_have_happened_and_runs_once(
        desk_gateway, helpdesk, agent_token):
    name = ref()
    arguments = {"ref": name, "subject": "printer"}
    helpdesk.stop()
    try:
        lost = call(desk_gateway.url, agent_token.token, "helpdesk_open_ticket", arguments)
    finally:
        helpdesk.start()
    assert lost.is_error and "outcome unknown" in text(lost)
    job = Job.objects.get(action="mcp:helpdesk.open_ticket", payload__arguments__ref=name)

    assert reconcile_job(job_id=job.job_id).outcome == "not_found"  # {"tickets": []}: nothing happened

    ran = call(desk_gateway.url, agent_token.token, "helpdesk_open_ticket", arguments)
    assert not ran.is_error and "reckon/replay" not in ran.meta and helpdesk.tickets(name) == 1
    again = call(desk_gateway.url, agent_token.token, "helpdesk_open_ticket", arguments)
    assert again.meta["reckon/replay"] is True and helpdesk.tickets(name) == 1


def test_a_dry_run_prints_the_verdict_a_rule_reaches_for_one_call_and_changes_nothing(
        desk_gateway, helpdesk):
    from io import StringIO

    from django.core.management import call_command

    there, missing = ref(), ref()
    helpdesk.open_by_hand(there)

    def dry_run(tool: str, name: str) -> str:
        out = StringIO()
        call_command("mcp_lookup", tool, arguments=f'{{"ref": "{name}", "subject": "printer"}}', stdout=out)
        return out.getvalue()

    printed = dry_run("helpdesk.open_ticket", there)
    assert "verdict: confirmed" in printed and f'"arguments": {{"ref": "{there}"}}' in printed
    assert "verdict: not_found" in dry_run("helpdesk.open_ticket", missing)
    assert "verdict: unavailable" in dry_run("helpdesk_prose.open_ticket", there)
    assert not Job.objects.exists() and helpdesk.tickets(missing) == 0


def test_a_teams_own_reconciler_gives_the_tools_result_through_the_public_helper(
        desk_gateway, helpdesk, agent_token):
    name = ref()
    helpdesk.open_by_hand(name)
    job = unknown_call(agent_token, "helpdesk_own", name)

    assert reconcile_job(job_id=job.job_id).outcome == "confirmed"

    told = call(desk_gateway.url, agent_token.token, "helpdesk_own.open_ticket", {"ref": name, "subject": "printer"})
    assert not told.is_error and told.meta["reckon/replay"] is True
    assert told.structured_content["ref"] == name and text(told).startswith("ticket #")
    assert helpdesk.tickets(name) == 1
