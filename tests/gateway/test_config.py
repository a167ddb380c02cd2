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


@pytest.mark.parametrize(("change", "message"), [
    ({"headers": {"Authorization": "RECKON_SECRET_KEY"}}, "headers names RECKON_SECRET_KEY: Reckon's own secret"),
    ({"headers": {"X-Old": "RECKON_SECRET_KEY_FALLBACKS"}}, "headers names RECKON_SECRET_KEY_FALLBACKS"),
    ({"url": "", "command": ["python", "crm.py"], "env": {"DB": "DATABASE_URL"}}, "env names DATABASE_URL"),
    ({"headers": {"Authorization": "RECKON_METRICS_TOKEN"}}, "headers names RECKON_METRICS_TOKEN"),
    ({"url": "http://crm.example.com/mcp"}, "url http://crm.example.com/mcp is plain http to crm.example.com, "
                                            "which is not loopback"),
])
def test_an_upstream_is_never_handed_reckons_secrets_nor_called_in_clear_off_the_host(change, message):
    table = {**upstream(write={"effect": "none"}), **change}
    with pytest.raises(DeclarationError, match="^actions.toml: MCP upstream 'crm'") as refused:
        parse_upstream(table, source="actions.toml")
    assert message in str(refused.value)


def test_the_secrets_refused_are_the_ones_the_settings_declare_secret():
    from config.env import DECLARED

    assert {"RECKON_SECRET_KEY", "RECKON_SECRET_KEY_FALLBACKS", "DATABASE_URL"} <= settings.RECKON_OWN_SECRETS
    assert settings.RECKON_OWN_SECRETS == {name for name, declared in DECLARED.items() if declared.secret}


def test_plain_http_follows_the_webhooks_rule(settings):
    for url in ("http://127.0.0.1:9/mcp", "http://localhost:9/mcp", "http://[::1]:9/mcp", "https://crm.example.com"):
        assert parse_upstream({**upstream(write={"effect": "none"}), "url": url}, source="actions.toml").url == url
    settings.RECKON_WEBHOOK_HTTP_HOSTS = ["crm.internal"]
    assert parse_upstream({**upstream(write={"effect": "none"}), "url": "http://crm.internal/mcp"},
                          source="actions.toml")


def test_a_file_handing_a_secret_to_an_upstream_is_refused_naming_it_and_registers_nothing(tmp_path, monkeypatch):
    from gateway import config

    monkeypatch.setattr(config, "_upstreams", dict(config._upstreams))
    path = tmp_path / "actions.toml"
    path.write_text('[[mcp.upstreams]]\nname = "leaky"\ntenant = "acme"\nurl = "https://crm.example.com/mcp"\n'
                    'headers = { Authorization = "DATABASE_URL" }\n[mcp.upstreams.tools.send]\neffect = "reversible"\n')
    with pytest.raises(DeclarationError, match=f"^{path}: MCP upstream 'leaky': headers names DATABASE_URL"):
        load_upstreams(path)
    assert config.get_upstream("leaky") is None and policy_for_action("mcp:leaky.send") is None


def _with_headers(tmp_path, monkeypatch, name):
    from gateway import config
    from ledger import actions

    # Registered here only: a later test's `reconcile` must not meet this upstream's unset variable.
    monkeypatch.setattr(config, "_upstreams", dict(config._upstreams))
    monkeypatch.setattr(actions, "_registry", dict(actions._registry))
    monkeypatch.delenv("CRM_TOKEN_UNSET", raising=False)
    path = tmp_path / "actions.toml"
    path.write_text(f'[[mcp.upstreams]]\nname = "{name}"\ntenant = "acme"\nurl = "http://127.0.0.1:9/mcp"\n'
                    'headers = { Authorization = "CRM_TOKEN_UNSET" }\n'
                    f'[mcp.upstreams.tools.send]\neffect = "reversible"\n'
                    'reconcile = { tool = "find", arguments = { ref = "ref" }, found = "items" }\n'
                    '[mcp.upstreams.tools.find]\neffect = "none"\n')
    [loaded] = load_upstreams(path)
    return path, loaded


def test_an_unset_header_variable_is_never_sent_empty(tmp_path, monkeypatch):
    path, loaded = _with_headers(tmp_path, monkeypatch, "unset_header")

    with pytest.raises(DeclarationError, match="variable CRM_TOKEN_UNSET is not set"):
        loaded.header_values()
    monkeypatch.setenv("CRM_TOKEN_UNSET", "Bearer t0")
    assert loaded.header_values() == {"Authorization": "Bearer t0"}


def test_the_gateway_and_the_reconciler_refuse_to_start_without_an_upstreams_variable(tmp_path, monkeypatch):
    from django.core.management import CommandError, call_command

    path, _ = _with_headers(tmp_path, monkeypatch, "unset_start")

    with pytest.raises(CommandError, match=f"{path}: MCP upstream 'unset_start': the environment variable "
                                           "CRM_TOKEN_UNSET is not set"):
        call_command("mcp_gateway", "--port", "9")
    with pytest.raises(CommandError, match="action 'mcp:unset_start.send': its reconciler needs the environment "
                                           "variable CRM_TOKEN_UNSET"):
        call_command("reconcile", "--once")
    monkeypatch.setenv("CRM_TOKEN_UNSET", "Bearer t0")
    from ledger.declarations import reconciler_problems

    assert not any("CRM_TOKEN_UNSET" in problem for problem in reconciler_problems())
