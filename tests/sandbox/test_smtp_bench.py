"""`smtp_bench`: its figures come from real sends, and it checks the archive for duplicates."""

import re

import pytest
from django.core.management import CommandError, call_command

from ledger.models import Job

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
