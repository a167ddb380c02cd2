"""The tool policies through the gateway: redacted arguments never reach the database, a token's
scope decides which tools it sees and calls, and an irreversible tool waits for a second person."""

import uuid
from io import StringIO

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.db import connection

from api.tokens import worker_token_create
from approvals.models import ApprovalRequest
from approvals.services import ApprovalRefused, approve, expire_due_approvals
from console.models import TenantScope
from gateway.calls import PIECE
from ledger.models import Job
from ledger.states import JobStatus
from reconciliation.decisions import request_approval as request_again
from tests.conftest import token_issuer
from tests.gateway.conftest import call, list_tools, text

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def title() -> str:
    return f"note-{uuid.uuid4().hex[:8]}"


def rows_holding(needle: str) -> list[str]:
    """Every table of the database whose rows, as text, contain `needle`."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        tables = [row[0] for row in cursor.fetchall()]
        holding = []
        for table in tables:
            cursor.execute(f'SELECT count(*) FROM "{table}" t WHERE t::text LIKE %s', [f"%{needle}%"])  # nosec B608
            if cursor.fetchone()[0]:
                holding.append(table)
    return holding


def test_a_redacted_argument_reaches_the_upstream_but_never_the_database_nor_the_logs(gateway, upstream, client,
                                                                                   operator):
    token, name, secret = worker_token_create(name="coder", tenants=["acme"], actions=["*"],
                                              created_by=token_issuer()).token, title(), \
        f"sk-{uuid.uuid4().hex}"
    arguments = {"title": name, "body": "with a key", "api_key": secret}

    result = call(gateway.url, token, "notes_create_note", arguments)

    assert not result.is_error and upstream.notes(name) == 1
    job = Job.objects.get(action="mcp:notes.create_note")
    assert job.payload["arguments"] == {"title": name, "body": "with a key", "api_key": "[redacted]"}
    assert rows_holding(name) and rows_holding(secret) == []
    assert secret not in gateway.output()
    TenantScope.objects.create(user=operator, all_tenants=True)
    client.force_login(operator)
    page = client.get(f"/jobs/{job.job_id}/")
    html = page.content.decode()
    assert page.status_code == 200 and secret not in html and "[redacted]" in html
    # the page shows the call as what it is: tool, upstream, agent, arguments, the upstream's result
    assert "MCP tool call" in html and "<code>create_note</code>" in html and "<dd>notes</dd>" in html
    assert "mcp:coder:test-agent/1.0" in html and "The upstream's result" in html and name in html
    # the same call with another secret is another call: the digest of the full arguments tells them apart
    again = call(gateway.url, token, "notes_create_note", {**arguments, "api_key": "sk-other"})
    assert "reckon/replay" not in again.meta and upstream.notes(name) == 2
    replayed = call(gateway.url, token, "notes_create_note", arguments)
    assert replayed.meta["reckon/replay"] is True
    html = client.get(f"/jobs/{job.job_id}/").content.decode()
    assert '<dd data-mcp-replays>1</dd>' in html and secret not in html


def test_a_token_for_one_tenant_neither_sees_nor_calls_nor_reads_another_tenants_tools(gateway, upstream):
    acme = worker_token_create(name="acme-agent", tenants=["acme"], actions=["*"],
                               created_by=token_issuer()).token
    globex = worker_token_create(name="globex-agent", tenants=["globex"], actions=["*"],
                                 created_by=token_issuer()).token
    name = title()
    done = call(gateway.url, acme, "notes_create_note", {"title": name, "body": "acme's"})
    assert not done.is_error

    assert "globex_notes_create_note" not in list_tools(gateway.url, acme)
    assert set(list_tools(gateway.url, globex)) == {"globex_notes_create_note"}
    refused = call(gateway.url, acme, "globex_notes_create_note", {"title": name, "body": "x"})
    assert refused.is_error and "may not call globex_notes_create_note" in text(refused)
    # acme's result, asked for with the very same call by globex's token: refused, nothing read
    read = call(gateway.url, globex, "notes_create_note", {"title": name, "body": "acme's"})
    assert read.is_error and "may not call notes_create_note" in text(read) and name not in text(read)
    assert "reckon/job" not in (read.meta or {})
    assert upstream.notes(name) == 1 and not Job.objects.filter(tenant="globex").exists()


def test_a_token_scoped_to_some_actions_calls_only_those_tools(gateway, upstream):
    token = worker_token_create(name="narrow", tenants=["acme"], actions=["mcp:notes.find_note"],
                                created_by=token_issuer()).token

    assert list_tools(gateway.url, token) == ["notes_find_note"]
    refused = call(gateway.url, token, "notes_create_note", {"title": title(), "body": "x"})
    assert refused.is_error and "may not call" in text(refused)
    assert not Job.objects.exists()


def test_an_irreversible_tool_waits_for_a_second_person_and_then_runs_once(gateway, upstream, approver):
    owner = User.objects.create_user("tess", password="pw-tess")  # made the agent's token
    token = worker_token_create(name="cleaner", tenants=["acme"], actions=["*"], created_by=owner).token
    name = title()
    call(gateway.url, token, "notes_create_note", {"title": name, "body": "to delete"})

    held = call(gateway.url, token, "notes_delete_notes", {"title": name})

    assert held.is_error and "awaiting approval" in text(held)
    job = Job.objects.get(action="mcp:notes.delete_notes")
    assert job.status == JobStatus.AWAITING_APPROVAL and upstream.notes(name) == 1
    assert call(gateway.url, token, "notes_delete_notes", {"title": name}).is_error  # still waiting
    request = ApprovalRequest.objects.get(job=job)
    assert request.evidence["tool"] == "notes.delete_notes" and request.evidence["arguments"] == {"title": name}

    with pytest.raises(ApprovalRefused, match=r"four eyes: tess requested this approval \(through mcp:cleaner:"
                                              r"test-agent/1.0 .*: a tool call made with a worker token tess issued"):
        approve(request_id=request.pk, user=owner, note="my own agent, fine")
    approve(request_id=request.pk, user=approver, note="checked the notes: delete them")

    ran = call(gateway.url, token, "notes_delete_notes", {"title": name})
    assert not ran.is_error and '"deleted": 1' in text(ran)
    assert upstream.notes(name) == 0
    again = call(gateway.url, token, "notes_delete_notes", {"title": name})
    assert again.meta["reckon/replay"] is True and '"deleted": 1' in text(again)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED


def test_the_issuer_of_an_agents_token_still_cannot_approve_after_a_colleague_asks_again(gateway, upstream,
                                                                                         approver):
    """Issue 42: the person who issued the agent's token (`worker_token create --by`) stays excluded
    once the first request expired and a colleague asked again: the agent's steps are in the history."""
    owner = User.objects.create_user("tess", password="pw-tess")
    colleague = User.objects.create_user("otto", password="pw-otto")
    colleague.groups.add(Group.objects.get_or_create(name="operators")[0])
    out = StringIO()
    call_command("worker_token", "create", "--name", "sweeper", "--tenant", "acme", "--action", "*", "--by", "tess",
                 stdout=out, stderr=StringIO())
    token, name = out.getvalue().strip(), title()
    call(gateway.url, token, "notes.create_note", {"title": name, "body": "to delete"})
    assert "awaiting approval" in text(call(gateway.url, token, "notes.delete_notes", {"title": name}))
    job = Job.objects.get(action="mcp:notes.delete_notes")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE approvals_approvalrequest SET expires_at = now() - interval '1 minute'")
    assert expire_due_approvals() == 1
    request_again(job_id=job.job_id, version=job.attempts.latest("number").version, user=colleague,
                  note="the first request ran out")
    again = ApprovalRequest.objects.get(job=job, status="pending")
    assert again.requested_by == colleague

    with pytest.raises(ApprovalRefused, match=r"four eyes: tess issued the worker token of mcp:sweeper:test-agent/1.0"
                                              r" .*, an agent that .* and cannot approve it"):
        approve(request_id=again.pk, user=owner, note="my agent, and otto asked")
    again.refresh_from_db()
    assert again.status == "pending" and upstream.notes(name) == 1
    approve(request_id=again.pk, user=approver, note="checked the notes: delete them")
    assert '"deleted": 1' in text(call(gateway.url, token, "notes.delete_notes", {"title": name}))


def test_an_irreversible_call_found_not_to_have_happened_waits_for_approval_before_it_runs_again(
        gateway, upstream, approver):
    from reconciliation.passes import reconcile_job
    from tests.processes import wait_for

    owner = User.objects.create_user("bea", password="pw-bea")  # made the agent's token
    token = worker_token_create(name="bookkeeper", tenants=["acme"], actions=["*"], created_by=owner).token
    name = title()
    arguments = {"title": name, "body": "entry", "hold": name}
    lost = call(gateway.url, token, "ledgerbook_create_note", arguments)  # approval = "replay": the first call runs
    assert "outcome unknown, not repeated" in text(lost)
    upstream.drop(name)
    wait_for(lambda: upstream.dropped(name), timeout=30, message="the held call to end")
    job = Job.objects.get(action="mcp:ledgerbook.create_note")

    assert reconcile_job(job_id=job.job_id).outcome == "not_found"

    held = call(gateway.url, token, "ledgerbook_create_note", arguments)
    assert "awaiting approval" in text(held) and upstream.notes(name) == 0
    # The reconciler asked; the person behind the token whose agent began the attempt stands behind it.
    request = ApprovalRequest.objects.get(job=job)
    assert (request.requested_by, request.requested_by_actor) == (owner, "reconciler")
    with pytest.raises(ApprovalRefused, match="four eyes: bea requested this approval .*a worker token bea issued"):
        approve(request_id=request.pk, user=owner, note="my agent's call: run it")
    request.refresh_from_db()
    assert request.status == "pending" and Job.objects.get(pk=job.pk).status == JobStatus.AWAITING_APPROVAL
    approve(request_id=request.pk, user=approver, note="nothing was written: run it")
    upstream.release(name)
    ran = call(gateway.url, token, "ledgerbook_create_note", arguments)
    assert not ran.is_error and upstream.notes(name) == 1
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED


def test_an_upstream_error_that_echoes_a_redacted_argument_is_scrubbed_before_anything_is_written(
        gateway, upstream, client, operator):
    token, name, secret = worker_token_create(name="coder", tenants=["acme"], actions=["*"], created_by=token_issuer()).token, title(), \
        f"sk-{uuid.uuid4().hex}"
    # The SDK's own validation error quotes the call's arguments, the redacted one among them.
    arguments = {"title": name, "api_key": secret}

    refused = call(gateway.url, token, "notes_create_note", arguments)

    # (It shows a long value's start and end: the end of the secret was there.)
    assert refused.is_error and "validation error" in text(refused) and "[redacted]" in text(refused)
    assert secret[-PIECE:] not in text(refused) and secret[:PIECE] not in text(refused)
    job = Job.objects.get(action="mcp:notes.create_note")
    assert "[redacted]" in job.attempts.get(number=1).error
    assert rows_holding(name) and rows_holding(secret) == []
    assert rows_holding(secret[-PIECE:]) == [] and rows_holding(secret[3:20]) == []  # nor a piece of it
    assert secret not in gateway.output()
    TenantScope.objects.create(user=operator, all_tenants=True)
    client.force_login(operator)
    page = client.get(f"/jobs/{job.job_id}/").content.decode()
    assert name in page and "[redacted]" in page and secret not in page
    export = b"".join(client.get("/audit/export.csv", {"job": job.job_id}).streaming_content).decode()
    assert job.job_id in export and secret not in export
    found = client.get("/search/", {"q": secret}).content.decode()
    assert job.job_id not in found
    assert name in job.search_text.text and secret[-PIECE:] not in job.search_text.text  # the index searched


def test_a_job_id_tells_nothing_of_the_arguments_without_the_secret_key(settings, actions_file):
    """The id was sha256 of the arguments: a 4-digit secret came back from it by trying them all."""
    from gateway.calls import job_id_for, key_material, unkeyed_job_id
    from gateway.config import get_upstream

    policy = get_upstream("notes").tools["create_note"]
    arguments = {"title": "pin", "body": "b", "api_key": "4821"}
    job_id, *_ = job_id_for(policy, "acme", arguments, {})

    guessed = [unkeyed_job_id(key_material(policy, "acme", {**arguments, "api_key": f"{pin:04d}"}, {})[0])
               for pin in range(10_000)]
    assert job_id.startswith("mcp-") and job_id not in guessed
    assert job_id_for(policy, "globex", arguments, {})[0] != job_id  # another tenant's call is another job
    settings.SECRET_KEY = "another deployment's secret key, as long as the real one"
    assert job_id_for(policy, "acme", arguments, {})[0] != job_id
