"""The overview's figures say what they are: the minute in progress is a count so far (drawn apart,
never as a drop), the window chosen is remembered, and "Unknown work" leaves out blocked jobs,
which sent nothing."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from ledger import services
from ledger.models import LedgerEvent
from tests.conftest import make_job
from tests.console.conftest import make_unknown_job

pytestmark = pytest.mark.django_db
POINT = re.compile(r'<(?:rect|circle) [^>]*class="mark point series-claimed( partial)?"[^>]*data-bucket="([^"]+)"')


def _blocked(job_id: str) -> None:
    make_job(job_id, identity={"account": "a"})
    lease = services.claim_job(job_id=job_id, worker="w1")
    with pytest.raises(services.IdentityMismatch):
        services.verify_identity(lease=lease, observed={"account": "b"})


def test_unknown_work_does_not_count_blocked_jobs(client, auditor):
    make_unknown_job("inv-1")
    _blocked("post-1")
    client.force_login(auditor)
    html = client.get("/").content.decode()
    assert 'data-figure="unknown_total">1<' in html and 'data-figure="blocked">1<' in html
    assert 'data-unknown="blocked"' not in html  # counted apart, under "Blocked, nothing sent"


def test_the_minute_in_progress_is_drawn_apart_as_so_far(client, auditor):
    job = make_job("a1")
    now = timezone.now()
    for at in (now - timedelta(minutes=3), now - timedelta(minutes=2), now):
        LedgerEvent.objects.create(job=job, at=at, actor_type="worker", actor="w", kind="claimed")
    client.force_login(auditor)
    html = client.get("/?range=1h").content.decode()
    figure = html.split('data-chart="throughput"', 1)[1].split("</figure>", 1)[0]
    points = POINT.findall(figure)
    assert len(points) == 60 and [partial for partial, _ in points].count(" partial") == 1
    assert points[-1][0] == " partial"  # the last bucket, the one holding this moment
    # The claimed line stops before it: no segment of the polyline reaches the last bucket's x.
    last_x = re.findall(r'data-series="claimed" data-bucket="[^"]+" data-value="[^"]+" data-partial', figure)
    assert last_x and "so far (in progress)" in figure
    lines = re.findall(r'<polyline points="([^"]+)" class="line series-claimed"', figure)
    assert lines and all(len(segment.split()) <= 59 for segment in lines)
    table = html.split('data-chart-table="throughput"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r'<th scope="row">([^<]+)</th>', table)
    assert len(rows) == 60 and rows[-1].endswith(" (so far)") and not any("so far" in r for r in rows[:-1])


def test_the_window_chosen_is_remembered(client, auditor):
    client.force_login(auditor)
    assert 'data-window="24h"' in client.get("/").content.decode()
    client.get("/?range=1h")
    assert 'data-window="1h"' in client.get("/").content.decode()
    assert 'hx-get="/overview/charts/?range=1h"' in client.get("/overview/charts/").content.decode()
