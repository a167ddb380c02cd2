"""What frameworks read from the gateway: the tool list states Reckon's policy (hints from the
actions file, not the upstream's own; the gateway's deadline in each tool's _meta), and an answer
that is Reckon's word says in words and in _meta whether and when to call again."""

import sys
import uuid

import pytest
from django.contrib.auth.models import User

from api.tokens import worker_token_create
from gateway.config import load_upstreams
from gateway.reconcile import run_apart
from ledger.models import Job
from ledger.states import JobStatus
from tests.conftest import token_issuer
from tests.gateway.conftest import HELPDESK_SERVER, Gateway, Helpdesk, _with_client, call, text
from tests.processes import free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# The helpdesk's open_ticket says of itself destructiveHint false, idempotentHint false.
DESK = """
[[mcp.upstreams]]
name = "desk"
tenant = "acme"
url = "{url}"
timeout = 3

[mcp.upstreams.tools.open_ticket]
effect = "irreversible"
key = "argument:ref"

[mcp.upstreams.tools.find_tickets]
effect = "none"
"""


@pytest.fixture(scope="module")
def helpdesk(tmp_path_factory):
    folder = tmp_path_factory.mktemp("desk")
    port, db = free_port(), folder / "helpdesk.sqlite3"
    desk = Helpdesk([sys.executable, str(HELPDESK_SERVER), "--db", str(db), "--port", str(port)], db,
                    f"http://127.0.0.1:{port}/mcp")
    desk.start()
    yield desk
    desk.stop()


@pytest.fixture(scope="module")
def desk_gateway(helpdesk, tmp_path_factory, django_db_setup, django_db_blocker):
    path = tmp_path_factory.mktemp("desk-gateway") / "actions.toml"
    path.write_text(DESK.format(url=helpdesk.url))
    load_upstreams(path)
    with Gateway(path, log_name="mcp-gateway-desk") as running:
        yield running


def token() -> str:
    return worker_token_create(name="reader", tenants=["acme", "globex"], actions=["*"],
                               created_by=token_issuer()).token


def listed(url: str, worker_token: str) -> dict:
    async def tools(client):
        return {tool.name: tool for tool in (await client.list_tools()).tools}

    return run_apart(_with_client, url, worker_token, tools)


def test_an_irreversible_tool_is_listed_destructive_and_idempotent_whatever_its_server_says(desk_gateway):
    tools = listed(desk_gateway.url, token())

    ticket = tools["desk_open_ticket"]
    assert ticket.annotations.destructive_hint is True  # the helpdesk said False
    assert ticket.annotations.idempotent_hint is True  # the helpdesk said False: Reckon answers a replay from the ledger
    assert ticket.annotations.read_only_hint is False
    assert ticket.annotations.title == "Open a ticket" and ticket.annotations.open_world_hint is True  # kept
    assert ticket.meta["helpdesk/queue"] == "front"  # its own _meta, kept
    assert ticket.meta["reckon/effect"] == "irreversible" and ticket.meta["reckon/approval"] == "first_call"
    assert ticket.meta["reckon/key"] == "argument:ref" and ticket.meta["reckon/action"] == "mcp:desk.open_ticket"
    assert (ticket.meta["reckon/timeout_s"], ticket.meta["reckon/client_timeout_s"]) == (3, 8)
    find = tools["desk_find_tickets"]
    assert (find.annotations.read_only_hint, find.annotations.destructive_hint) == (True, False)
    assert find.meta["reckon/effect"] == "none" and "reckon/key" not in find.meta


def test_each_tool_states_its_policy_and_its_deadline(gateway):
    tools = listed(gateway.url, token())

    create = tools["notes_create_note"]
    assert (create.annotations.destructive_hint, create.annotations.idempotent_hint) == (False, True)
    assert create.meta["reckon/timeout_s"] == 2  # its own timeout, not the upstream's 5
    assert tools["notes_delete_notes"].annotations.destructive_hint is True
    # A key from _meta: the same arguments with another key are another call.
    assert tools["keyed_create_note"].annotations.idempotent_hint is False
    assert tools["keyed_create_note"].meta["reckon/key"] == "meta"


def test_awaiting_approval_says_do_not_call_again_until_approved(desk_gateway, helpdesk):
    worker_token = worker_token_create(name="desk", tenants=["acme"], actions=["*"],
                                       created_by=User.objects.create_user(f"issuer-{uuid.uuid4().hex[:6]}")).token
    ref = f"T-{uuid.uuid4().hex[:6]}"

    held = call(desk_gateway.url, worker_token, "desk_open_ticket", {"ref": ref, "subject": "printer"})
    again = call(desk_gateway.url, worker_token, "desk_open_ticket", {"ref": ref, "subject": "printer"})

    job = Job.objects.get(action="mcp:desk.open_ticket")
    assert job.status == JobStatus.AWAITING_APPROVAL and helpdesk.tickets(ref) == 0
    asked = job.events.filter(kind="approval_requested", evidence__has_key="mcp").get()  # the attempt closed unrun
    assert asked.evidence["mcp"] == {"client": "test-agent/1.0", "protocol_version": "2026-07-28"}
    for answer in (held, again):
        assert answer.is_error and "awaiting approval" in text(answer)
        assert "do not call again until they have" in text(answer) and "Once approved, call again" in text(answer)
        assert answer.meta["reckon/status"] == "awaiting_approval" and answer.meta["reckon/job"] == job.job_id
        assert answer.meta["reckon/retry"] == "after_approval" and "reckon/retry_after_s" not in answer.meta
        assert answer.meta["reckon/console"].endswith(f"/jobs/{job.job_id}/")


def test_an_unknown_outcome_says_do_not_call_again_now_and_when_a_call_will_tell(gateway, upstream):
    worker_token, name = token(), f"note-{uuid.uuid4().hex[:8]}"
    arguments = {"title": name, "body": "slow", "stall": 10}  # written, answered after the 2 s timeout

    lost = call(gateway.url, worker_token, "notes_create_note", arguments)

    job = Job.objects.get(action="mcp:notes.create_note")
    assert job.status == JobStatus.NEEDS_RECONCILIATION
    assert lost.is_error and "outcome unknown, not repeated: do not call this tool again for it now" in text(lost)
    assert "never runs it twice" in text(lost)
    assert lost.meta["reckon/status"] == "needs_reconciliation" and lost.meta["reckon/retry"] == "after"
    wait = lost.meta["reckon/retry_after_s"]
    assert isinstance(wait, int) and wait >= 1 and f"after about {wait} s" in text(lost)
    assert upstream.notes(name) == 1
