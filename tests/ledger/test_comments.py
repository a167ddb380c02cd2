"""Comments on a job: an event of its history, written under the job lock, refused with a reason
(and nothing written) when empty, too long, or not by a person who may comment."""

import pytest

from ledger import services
from ledger.models import LedgerEvent
from ledger.services.comments import COMMENT_MAX_LENGTH
from ledger.states import ActorType
from tests.conftest import latest_attempt, make_job

pytestmark = pytest.mark.django_db


def test_it_is_an_event_that_changes_no_state():
    make_job("c-1")
    version = latest_attempt("c-1").version
    event = services.comment_on_job(job_id="c-1", author="otto", actor_type=ActorType.OPERATOR,
                                    text="  The customer says the mail arrived twice last week.\n")
    stored = LedgerEvent.objects.get(pk=event.pk)
    assert (stored.kind, stored.actor, stored.actor_type, stored.note) == (
        "job_commented", "otto", "operator", "The customer says the mail arrived twice last week.")
    assert stored.before == stored.after == {"job": "pending", "attempt": 1, "delivery": "queued",
                                             "execution": "not_started", "side_effect": "not_attempted"}
    assert stored.hash and stored.attempt == latest_attempt("c-1")
    assert latest_attempt("c-1").version == version  # nobody's decision goes stale


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "a comment needs some text"),
        (" \n\t ", "a comment needs some text"),
        (None, "a comment needs some text"),
        ("x" * (COMMENT_MAX_LENGTH + 1), f"at most {COMMENT_MAX_LENGTH} characters; this one has {COMMENT_MAX_LENGTH + 1}"),
    ],
)
def test_an_empty_or_too_long_comment_is_refused_and_nothing_is_written(text, reason):
    make_job("c-1")
    events = LedgerEvent.objects.count()
    with pytest.raises(services.CommentRefused, match=reason):
        services.comment_on_job(job_id="c-1", author="otto", actor_type=ActorType.OPERATOR, text=text)
    assert LedgerEvent.objects.count() == events


def test_the_longest_comment_allowed_is_kept_whole():
    make_job("c-1")
    event = services.comment_on_job(job_id="c-1", author="ann", actor_type=ActorType.APPROVER,
                                    text="y" * COMMENT_MAX_LENGTH)
    assert len(LedgerEvent.objects.get(pk=event.pk).note) == COMMENT_MAX_LENGTH


def test_only_people_comment_and_only_on_a_job_that_exists():
    make_job("c-1")
    events = LedgerEvent.objects.count()
    with pytest.raises(services.CommentRefused, match="only operators and approvers comment on jobs, not a worker"):
        services.comment_on_job(job_id="c-1", author="w1", actor_type=ActorType.WORKER, text="hello")
    with pytest.raises(services.LedgerError, match="no job with id 'nope'"):
        services.comment_on_job(job_id="nope", author="otto", actor_type=ActorType.OPERATOR, text="hello")
    assert LedgerEvent.objects.count() == events
