"""Issue 40 through the real gateway: a call whose job succeeded and whose history was archived is
refused as archived when it is made again (a reversible tool, whose new keys take the one-statement
enqueue, and an irreversible one, which takes enqueue_job), the upstream is not called, the ledger
is untouched, and the next retention pass runs as before."""

import uuid

import pytest

from api.tokens import worker_token_create
from ledger.models import Job, JobTombstone, LedgerEvent
from ledger.partitions import EVENTS
from tests.conftest import token_issuer
from tests.gateway.conftest import call, text
from tests.ledger.test_history_retention import (
    broken,
    cut_here,
    fresh_layout,
    restore_standard_partitions,
    retention_pass,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def retention(settings, tmp_path, transactional_db):
    settings.RECKON_HISTORY_ARCHIVE_DIR = str(tmp_path / "archive")
    settings.RECKON_HISTORY_RETENTION_DAYS = 1.0
    settings.RECKON_HISTORY_RETENTION_BY_TENANT = {}
    fresh_layout()
    yield
    restore_standard_partitions()


@pytest.mark.parametrize("tool", ["notes_create_note", "ledgerbook_create_note"], ids=["reversible", "irreversible"])
def test_an_archived_call_made_again_is_refused_as_archived_and_the_next_pass_runs(gateway, upstream, retention,
                                                                                   tool):
    token, name = worker_token_create(name="coder", tenants=["acme"], actions=["*"], created_by=token_issuer()).token, f"note-{uuid.uuid4().hex[:8]}"
    done = call(gateway.url, token, tool, {"title": name, "body": "once"})
    assert not done.is_error and upstream.notes(name) == 1
    job_id = done.meta["reckon/job"]
    (checkpoint,) = retention_pass(cut_here()).archived
    tombstone = JobTombstone.objects.get(job_id=job_id)
    assert tombstone.status == "succeeded" and not Job.objects.filter(job_id=job_id).exists()
    events = LedgerEvent.objects.count()

    again = call(gateway.url, token, tool, {"title": name, "body": "once"})

    assert again.is_error
    assert text(again) == (f"archived: this call of {tool} was made before: job '{job_id}' succeeded on "
                           f"{tombstone.finished_at:%Y-%m-%d %H:%M} UTC and its history was archived on "
                           f"{checkpoint.archived_at:%Y-%m-%d} in {EVENTS}_t0.jsonl.gz: a job id is never run again; "
                           "not repeated, nothing called")
    assert upstream.notes(name) == 1
    assert not Job.objects.filter(job_id=job_id).exists() and LedgerEvent.objects.count() == events
    # The next pass archives the next period as before: no second job under the key, no second tombstone.
    assert not call(gateway.url, token, tool, {"title": f"{name}-next", "body": "next"}).is_error
    later = retention_pass(cut_here())
    assert [c.partition for c in later.archived] == [f"{EVENTS}_t1"] and later.archived_again == []
    assert JobTombstone.objects.count() == 2 and broken() == {}
