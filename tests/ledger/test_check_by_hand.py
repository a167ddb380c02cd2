"""An action's "how to check this by hand" text: declared in TOML or by the decorator, listed by
`manage.py actions`, refused when it is not text."""

import pytest
from django.core.management import call_command

from ledger.actions import _registry, action, get_action
from ledger.declarations import DeclarationError, load_actions_file

pytestmark = pytest.mark.django_db

DECLARED = '''
[actions."test.refund"]
executor = "external"
reversible = false
runbook_url = "https://wiki.example.com/refunds"
check_by_hand = """
Search the payment dashboard for the job's key.
One refund: confirm. None: mark not found."""
'''


@pytest.fixture
def forget():
    names: list[str] = []
    yield names
    for name in names:
        _registry.pop(name, None)


def test_the_actions_file_declares_it_and_the_command_lists_it(tmp_path, forget, capsys):
    path = tmp_path / "actions.toml"
    path.write_text(DECLARED)
    (refund,) = load_actions_file(path, required=True)
    forget.append(refund.name)
    assert refund.check_by_hand == ("Search the payment dashboard for the job's key.\n"
                                    "One refund: confirm. None: mark not found.")
    call_command("actions")
    out = capsys.readouterr().out
    assert "test.refund:\n  runbook: https://wiki.example.com/refunds\n" in out
    assert "  check by hand: Search the payment dashboard for the job's key.\n" in out
    assert "                 One refund: confirm. None: mark not found." in out


def test_a_check_that_is_not_text_stops_the_file(tmp_path):
    path = tmp_path / "actions.toml"
    path.write_text('[actions."test.bad"]\nexecutor = "external"\nreversible = true\ncheck_by_hand = 3\n')
    with pytest.raises(DeclarationError, match="check_by_hand"):
        load_actions_file(path, required=True)
    with pytest.raises(KeyError):
        _registry["test.bad"]


def test_the_decorator_takes_it_too(forget):
    @action("test.decorated", check_by_hand="Look in the audit log.")
    def run(job):  # pragma: no cover - never run
        raise AssertionError

    forget.append("test.decorated")
    assert get_action("test.decorated").check_by_hand == "Look in the audit log."
