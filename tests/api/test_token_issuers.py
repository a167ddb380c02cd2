"""Issue 40, finding 5: a person behind every token that can reach irreversible work.

A token whose actions reach an irreversible action (a "*", a named irreversible action, or a name
nothing declares here) is issued only by an active user, who then may not approve what its calls
and answers ask for; without one, nothing is written and the refusal says how. A token of
reversible actions alone may still be issued from the command line with nobody named."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from api import tokens
from api.models import WorkerToken
from console.models import AdminAuditEntry
from ledger.actions import _registry
from ledger.declarations import load_actions_file

pytestmark = pytest.mark.django_db


@pytest.fixture
def irreversible_action(tmp_path):
    path = tmp_path / "actions.toml"
    path.write_text('[actions."bank.wire"]\nexecutor = "external"\nreversible = false\n')
    load_actions_file(path, required=True)
    yield "bank.wire"
    _registry.pop("bank.wire")


def _create(*arguments: str) -> str:
    out = io.StringIO()
    call_command("worker_token", "create", "--name", "agent", "--tenant", "acme", *arguments,
                 stdout=out, stderr=io.StringIO())
    return out.getvalue().strip()


def _nothing_written() -> bool:
    return not WorkerToken.objects.exists() and not AdminAuditEntry.objects.exists()


@pytest.mark.parametrize(("actions", "reach"), [
    (["*"], 'every action ("*"'),
    (["reckon.echo", "bank.wire"], "the irreversible action(s) bank.wire"),
    (["nobody.declares.this"], "nobody.declares.this, which nothing declares here"),
])
def test_a_token_that_can_reach_irreversible_work_is_refused_without_a_person(irreversible_action, actions, reach):
    with pytest.raises(CommandError) as refused:
        _create(*[part for action in actions for part in ("--action", action)])

    said = str(refused.value)
    assert reach in said and "no person issues it" in said and "--by USERNAME" in said
    assert _nothing_written()
    with pytest.raises(tokens.IssuerRequired):  # the service refuses it too, whoever calls it
        tokens.worker_token_create(name="agent", tenants=["acme"], actions=actions)
    assert _nothing_written()


def test_an_inactive_user_cannot_stand_behind_one(irreversible_action):
    User.objects.create_user("gone", is_active=False)

    with pytest.raises(CommandError, match="gone is not an active user"):
        _create("--action", "bank.wire", "--by", "gone")
    assert _nothing_written()


def test_a_person_named_with_by_issues_it_and_is_recorded_as_its_issuer(irreversible_action):
    tess = User.objects.create_user("tess")

    token = _create("--action", "*", "--by", "tess")

    issued = WorkerToken.objects.get()
    assert tokens.authenticate(f"Bearer {token}") == issued
    assert (issued.created_by, issued.issued_by) == (tess, "tess")
    assert AdminAuditEntry.objects.get(object_type="api.workertoken").actor == "tess"


def test_a_token_of_reversible_actions_alone_needs_no_person():
    token = _create("--action", "reckon.echo")

    issued = WorkerToken.objects.get()
    assert tokens.authenticate(f"Bearer {token}") == issued
    assert issued.created_by is None and issued.issued_by.startswith("cli (os user ")


def test_the_admin_issues_it_as_the_signed_in_user(client, admin_user, irreversible_action):
    client.force_login(admin_user)

    client.post("/admin/api/workertoken/add/", {"name": "ops", "tenants_text": "*", "actions_text": "bank.wire"})

    assert WorkerToken.objects.get(name="ops").created_by == admin_user

