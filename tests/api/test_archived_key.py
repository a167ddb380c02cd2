"""Issue 28 over HTTP: enqueueing an archived job id is refused with its final state, and says
nothing of it to a token that may not see its tenant."""

import pytest

from tests.api.conftest import ApiClient, event_count, issue
from tests.ledger.test_history_retention import cut_here, finish, fresh_layout, retention_pass

pytestmark = pytest.mark.django_db


def test_an_archived_job_id_is_refused_with_its_final_state(settings, tmp_path):
    settings.RECKON_HISTORY_ARCHIVE_DIR = str(tmp_path)
    settings.RECKON_HISTORY_RETENTION_DAYS = 1.0
    settings.RECKON_HISTORY_RETENTION_BY_TENANT = {}
    fresh_layout()
    finish("inv-1", tenant="acme")
    retention_pass(cut_here())
    events = event_count()

    mine = ApiClient(issue(["acme"], ["*"])).post(
        "/api/v1/jobs", {"job_id": "inv-1", "tenant": "acme", "action": "reckon.echo", "payload": {"n": 1}})
    other = ApiClient(issue(["beta"], ["*"])).post(
        "/api/v1/jobs", {"job_id": "inv-1", "tenant": "beta", "action": "reckon.echo", "payload": {"n": 1}})

    assert mine.status == 409 and mine.json["error"]["code"] == "job_archived"
    assert mine.json["error"]["final_status"] == "succeeded" and "never run again" in mine.json["error"]["message"]
    assert str(tmp_path) not in mine.json["error"]["message"]  # the file's name, not where the server keeps it
    assert (other.status, other.json["error"]["code"]) == (409, "job_id_unavailable")
    assert event_count() == events
