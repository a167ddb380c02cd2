"""The simulated workload is the demo's: it says so when the demo's actions are not configured."""

import pytest
from django.core.management import CommandError, call_command

from ledger.models import Job


@pytest.mark.django_db
def test_simulate_refuses_when_the_demo_actions_are_not_configured(settings):
    settings.RECKON_ACTION_MODULES = []
    with pytest.raises(CommandError, match="set RECKON_DEMO=true"):
        call_command("simulate", jobs=4)
    assert not Job.objects.exists()
