"""`smtp_bench`: its figures come from real sends, and it checks the archive for duplicates."""

import re
import sys

import pytest
from django.core.management import CommandError, call_command

from ledger.models import Job
from sandbox.management.commands.smtp_bench import other_reckon_processes
from tests.processes import ROOT, ManagedProcess, database_url_of_tests, wait_for

pytestmark = pytest.mark.django_db


def test_it_prints_sends_per_second_and_the_unknown_share_and_reconciles_them(capsys):
    call_command("smtp_bench", jobs=12, drop_after_data_rate=0.5, seed=3)
    out = capsys.readouterr().out
    assert re.search(r"through the worker loop: [\d.]+ sends/s", out), out
    unknown = int(re.search(r"ended unknown: (\d+) of 12", out).group(1))
    assert 0 < unknown < 12
    assert f"confirmed: {unknown}" in out
    assert "archive: 12 messages; jobs succeeded: 12/12; delivered twice: 0; never delivered: 0" in out
    assert Job.objects.filter(action="smtp.send_mail", status="succeeded").count() == 12


def test_it_refuses_without_the_demo_actions(settings):
    settings.RECKON_ACTION_MODULES = []
    with pytest.raises(CommandError, match="RECKON_DEMO=true"):
        call_command("smtp_bench", jobs=2)
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_it_refuses_to_start_beside_a_running_stack_and_says_why():
    """A stack's reconciler on the same database would take the bench's unknown jobs and send them
    again (12 duplicate mails, measured): with a real reconciler loop connected, the bench writes
    nothing and says why."""
    reconciler = ManagedProcess([sys.executable, str(ROOT / "manage.py"), "reconcile", "--loop"],
                                env={"DATABASE_URL": database_url_of_tests()}, log_name="bench-neighbour")
    with reconciler:
        wait_for(lambda: reconciler.pid in other_reckon_processes(), timeout=60,
                 message=f"the reconciler's connection\n{reconciler.output()[-1000:]}")
        with pytest.raises(CommandError) as refused:
            call_command("smtp_bench", jobs=2)
    assert f"pids {reconciler.pid}" in str(refused.value)
    assert "a running stack (`make run`)?" in str(refused.value) and "send them again" in str(refused.value)
    assert not Job.objects.exists()
