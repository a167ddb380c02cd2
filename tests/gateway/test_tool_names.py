"""Tool names the model APIs accept: `<upstream>_<tool>` (or a declared `name`), at most 48
characters, checked against the published patterns with a client's prefix in front; two tools
listed under one name, or a name that does not fit, stop the start; Reckon's own dotted name
stays the action's and is still accepted in a call."""

import re

import pytest

from api.tokens import worker_token_create
from gateway.config import listed_name_of, load_upstreams, policy_named
from ledger.declarations import DeclarationError
from ledger.models import Job
from tests.conftest import token_issuer
from tests.gateway.conftest import call, list_tools, text

# OpenAI's function names and Anthropic's tool names (the pattern Anthropic's API quotes back:
# "tools.7.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'").
OPENAI_FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
ANTHROPIC_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
CLAUDE_CODE_PREFIX = "mcp__reckon__"  # Claude Code lists a server's tools as mcp__<server>__<tool>

UPSTREAM = """
[[mcp.upstreams]]
name = "{name}"
tenant = "acme"
url = "http://127.0.0.1:9/mcp"
"""


def declared(tmp_path, text_: str):
    path = tmp_path / "actions.toml"
    path.write_text(text_)
    return load_upstreams(path)


def test_the_default_name_is_upstream_underscore_tool_with_every_other_character_made_an_underscore():
    assert listed_name_of("notes", "create_note") == "notes_create_note"
    assert listed_name_of("crm-eu", "contacts.add/v2") == "crm-eu_contacts_add_v2"


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_every_listed_name_fits_the_model_apis_with_a_clients_prefix(gateway):
    token = worker_token_create(name="names", tenants=["acme", "globex"], actions=["*"],
                                created_by=token_issuer()).token

    names = list_tools(gateway.url, token)

    assert "notes_create_note" in names and "notes_find_note" in names and "globex_notes_create_note" in names
    assert not any("." in name for name in names)
    for name in names:
        assert len(name) <= 48, name
        assert OPENAI_FUNCTION_NAME.fullmatch(CLAUDE_CODE_PREFIX + name), name
        assert ANTHROPIC_TOOL_NAME.fullmatch(CLAUDE_CODE_PREFIX + name), name


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_call_by_the_listed_name_and_one_by_the_old_dotted_name_are_the_same_job(gateway, upstream):
    token = worker_token_create(name="names", tenants=["acme"], actions=["*"], created_by=token_issuer()).token
    arguments = {"title": "named-once", "body": "x"}

    first = call(gateway.url, token, "notes_create_note", arguments)
    again = call(gateway.url, token, "notes.create_note", arguments)  # a client configured before

    assert not first.is_error and again.meta["reckon/replay"] is True
    [job] = Job.objects.all()
    assert job.action == "mcp:notes.create_note"  # Reckon's own name: actions, job ids, the ledger
    assert first.meta["reckon/job"] == again.meta["reckon/job"] == job.job_id
    assert upstream.notes("named-once") == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_an_unknown_name_is_refused_with_the_rule(gateway):
    token = worker_token_create(name="names", tenants=["acme"], actions=["*"], created_by=token_issuer()).token

    refused = call(gateway.url, token, "notes_wipe_everything", {})

    assert refused.is_error and "no declared tool is listed as 'notes_wipe_everything'" in text(refused)
    assert not Job.objects.exists()


def test_a_declared_name_is_listed_and_the_dotted_name_still_names_the_action(tmp_path):
    declared(tmp_path, UPSTREAM.format(name="crm_names") + """
[mcp.upstreams.tools."contacts.add"]
name = "add_contact"
effect = "reversible"
""")

    policy = policy_named("add_contact")

    assert policy is policy_named("crm_names.contacts.add")
    assert (policy.listed_name, policy.action) == ("add_contact", "mcp:crm_names.contacts.add")


def test_two_tools_listed_under_one_name_stop_the_start_naming_the_file_and_both(tmp_path):
    with pytest.raises(DeclarationError) as refused:
        declared(tmp_path, UPSTREAM.format(name="crm_a") + """
[mcp.upstreams.tools.b_add]
effect = "reversible"
""" + UPSTREAM.format(name="crm_a_b") + """
[mcp.upstreams.tools.add]
effect = "reversible"
""")

    message = str(refused.value)
    assert str(tmp_path / "actions.toml") in message and "'crm_a_b_add'" in message
    assert "[mcp.upstreams.tools.b_add] of upstream 'crm_a'" in message
    assert "[mcp.upstreams.tools.add] of upstream 'crm_a_b'" in message and 'name = "..."' in message
    assert policy_named("crm_a_b_add") is None  # nothing of the file was registered


def test_a_declared_name_may_not_take_another_tools_default(tmp_path):
    with pytest.raises(DeclarationError, match="two MCP tools would be listed as 'crm_c_add'"):
        declared(tmp_path, UPSTREAM.format(name="crm_c") + """
[mcp.upstreams.tools.add]
effect = "reversible"

[mcp.upstreams.tools.create]
name = "crm_c_add"
effect = "reversible"
""")


@pytest.mark.parametrize(("tools", "message"), [
    ('[mcp.upstreams.tools.create_a_contact_with_every_field_the_crm_has]\neffect = "reversible"',
     "its default name 'crm_d_create_a_contact_with_every_field_the_crm_has' (<upstream>_<tool>) is not a name "
     "model APIs accept"),
    ('[mcp.upstreams.tools.add]\nname = "crm.add"\neffect = "reversible"', "its own name is not a name model APIs"),
    ('[mcp.upstreams.tools.add]\nname = ""\neffect = "none"', "its own name is not a name model APIs"),
    ('[mcp.upstreams.tools.add]\nname = "' + "a" * 49 + '"\neffect = "none"', "1 to 48 of the letters"),
])
def test_a_name_that_does_not_fit_stops_the_start(tmp_path, tools, message):
    with pytest.raises(DeclarationError, match=re.escape(message)) as refused:
        declared(tmp_path, UPSTREAM.format(name="crm_d") + tools)

    assert str(tmp_path / "actions.toml") in str(refused.value) and "MCP upstream 'crm_d'" in str(refused.value)
