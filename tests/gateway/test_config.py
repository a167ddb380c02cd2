"""The [[mcp.upstreams]] declarations: what they register, and one clear message for what is wrong."""

import pytest
from django.conf import settings

from gateway.config import load_upstreams, parse_upstream, policy_for_action
from ledger.actions import get_action
from ledger.declarations import DeclarationError, load_actions_file
from tests.conftest import token_issuer


def upstream(**tools):
    return {"name": "crm", "tenant": "acme", "url": "http://127.0.0.1:9/mcp", "tools": tools}


def test_each_side_effecting_tool_becomes_an_action_with_its_policy(tmp_path):
    path = tmp_path / "actions.toml"
    path.write_text("""
[actions."billing.charge"]
executor = "external"
reversible = true

[[mcp.upstreams]]
name = "crm_cfg"
tenant = "acme"
command = ["python", "crm.py"]

[mcp.upstreams.tools.add_contact]
effect = "reversible"
key = "argument:email"
timeout = 4
reconcile = { tool = "find_contact", arguments = { email = "email" }, found = "contacts" }

[mcp.upstreams.tools.find_contact]
effect = "none"

[mcp.upstreams.tools.wipe]
effect = "irreversible"
approval = "replay"
""")
    load_actions_file(path, required=True)  # the ledger reads the same file and leaves [mcp] to the gateway
    [loaded] = load_upstreams(path)

    assert set(loaded.tools) == {"add_contact", "find_contact", "wipe"}
    add = get_action("mcp:crm_cfg.add_contact")
    assert add.external and add.reversible and add.queryable and add.reconciler == "gateway.reconcile.look_up"
    assert add.lease_ttl.total_seconds() == settings.RECKON_MCP_GATEWAY_LEASE_S  # renewed, whatever the timeout
    wipe = get_action("mcp:crm_cfg.wipe")
    assert not wipe.reversible and not wipe.queryable and wipe.max_attempts == 3
    assert policy_for_action("mcp:crm_cfg.add_contact").key == "argument:email"
    with pytest.raises(LookupError):
        get_action("mcp:crm_cfg.find_contact")  # read-only: passed through, never a job


@pytest.mark.parametrize(("table", "message"), [
    (upstream(write={"effect": "maybe"}), "effect must be one of none, reversible, irreversible"),
    (upstream(write={"effect": "reversible", "key": "random"}), 'key must be "arguments", "argument:<name>" or "meta"'),
    (upstream(write={"effect": "none", "redact": ["x"]}), "a read-only tool is passed through"),
    (upstream(write={"effect": "reversible", "reconcile": {"tool": "write", "found": "items"}}),
     "must be a declared read-only tool"),
    (upstream(write={"effect": "reversible", "redact": ["token"],
                     "reconcile": {"tool": "look", "arguments": {"token": "token"}, "found": "items"}},
              look={"effect": "none"}),
     "cannot use redacted arguments"),
    (upstream(write={"effect": "reversible", "redact": ["token"],
                     "reconcile": {"tool": "look", "found": "items", "match": {"secret": "token"}}},
              look={"effect": "none"}),
     "reconcile.match cannot use redacted arguments"),
    # Without a rule, "anything but null, '', [] or {}" confirmed {"tickets": []}: a rule is required.
    (upstream(write={"effect": "reversible", "reconcile": {"tool": "look", "arguments": {"ref": "ref"}}},
              look={"effect": "none"}),
     'reconcile.found is required: a JMESPath expression naming the list of items the look-up found'),
    (upstream(write={"effect": "reversible", "reconcile": {"tool": "look", "found": "tickets[?"}},
              look={"effect": "none"}),
     "reconcile.found 'tickets[?' is not a JMESPath expression"),
    (upstream(write={"effect": "reversible", "reconcile": {"tool": "look", "found": "x", "when": "y"}},
              look={"effect": "none"}),
     'reconcile takes arguments, found, match, tool, e.g. reconcile = { tool = "find_tickets"'),
    (upstream(write={"effect": "reversible", "approval": "first_call"}), "approval is for irreversible tools"),
    (upstream(), "declare its tools"),
    ({**upstream(write={"effect": "none"}), "command": ["x"]}, "either url (Streamable HTTP) or command (stdio)"),
    ({**upstream(write={"effect": "none"}), "headers": {"Authorization": ""}}, "environment variable"),
    ({**upstream(write={"effect": "none"}), "tenant": ""}, "tenant is required"),
])
def test_a_bad_declaration_is_refused_naming_the_file_the_upstream_and_the_tool(table, message):
    with pytest.raises(DeclarationError, match="^actions.toml: MCP upstream 'crm'") as refused:
        parse_upstream(table, source="actions.toml")
    assert message in str(refused.value)


def test_a_worker_pulling_any_job_is_never_handed_a_tool_call_of_the_gateway(tmp_path, db):
    from api.claims import claim_scope
    from api.http import ApiError
    from api.tokens import worker_token_create

    path = tmp_path / "actions.toml"
    path.write_text('[[mcp.upstreams]]\nname = "pulled"\ntenant = "acme"\nurl = "http://127.0.0.1:9/mcp"\n'
                    '[mcp.upstreams.tools.send]\neffect = "reversible"\n')
    load_upstreams(path)
    token = worker_token_create(name="any", tenants=["*"], actions=["*"],
                                created_by=token_issuer()).worker_token

    assert "mcp:pulled.send" not in claim_scope(token, actions=None, tenants=None).actions
    # A "*" does not reach the gateway's tools even when the claim names one; naming it in the token does.
    with pytest.raises(ApiError, match="tool of the MCP gateway"):
        claim_scope(token, actions=["mcp:pulled.send"], tenants=None)
    named = worker_token_create(name="named", tenants=["*"], actions=["mcp:pulled.send"],
                                created_by=token_issuer()).worker_token
    assert "mcp:pulled.send" not in claim_scope(named, actions=None, tenants=None).actions
    assert "mcp:pulled.send" in claim_scope(named, actions=["mcp:pulled.send"], tenants=None).actions


def test_an_irreversible_tools_first_call_is_held_unrun_and_the_queue_says_so(tmp_path, db):
    from api.tokens import worker_token_create
    from console.selectors.triage import triage
    from gateway.calls import Answer, open_call
    from ledger.models import Job
    from ledger.services import latest_attempt
    from ledger.states import Execution, JobStatus, SideEffect

    path = tmp_path / "actions.toml"
    path.write_text('[[mcp.upstreams]]\nname = "vault_cfg"\ntenant = "acme"\nurl = "http://127.0.0.1:9/mcp"\n'
                    '[mcp.upstreams.tools.rotate]\neffect = "irreversible"\nredact = ["old_secret"]\n')
    [declared] = load_upstreams(path)
    token = worker_token_create(name="ops-agent", tenants=["acme"], actions=["*"],
                                created_by=token_issuer()).worker_token

    answer = open_call(token=token, policy=declared.tools["rotate"], arguments={"name": "db", "old_secret": "x1"},
                       meta={}, agent="mcp:ops-agent:cli/1")

    assert isinstance(answer, Answer) and answer.is_error and "awaiting approval" in answer.content[0]["text"]
    job = Job.objects.get(action="mcp:vault_cfg.rotate")
    attempt = latest_attempt(job)
    assert job.status == JobStatus.AWAITING_APPROVAL and job.payload["arguments"]["old_secret"] == "[redacted]"
    assert (attempt.execution_state, attempt.side_effect_state) == (Execution.FAILED, SideEffect.NOT_ATTEMPTED)
    why = triage(job, attempt, None)
    assert "first call of this irreversible MCP tool" in why.reason and not why.sent
