"""The overview's charts: the numbers drawn (each mark's data-value, its bucket) are the sampled
levels and the ledger's event counts, the table says the same, and a fenced user sees only what
their tenants allow."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from alerts.models import EventCount, LevelSample
from alerts.sampling import COUNTED_KINDS, count_events, sample_levels
from console.selectors.charts import OUTCOME_KINDS, THROUGHPUT_KINDS
from ledger import services
from ledger.models import LedgerEvent
from reconciliation.passes import reconcile_until_idle
from tests.conftest import make_job
from tests.console.conftest import make_unknown_job, with_tenants
from tests.reconciliation.helpers import MAIL, send_message, unknown_job

pytestmark = pytest.mark.django_db

MARK = re.compile(r'<(?:rect|circle)[^>]*class="mark [^"]*"[^>]*data-series="([^"]+)" data-bucket="([^"]+)" '
                  r'data-value="([^"]+)"')


def _marks(html: str, chart: str) -> dict[tuple[str, str], float]:
    """(series, bucket start) -> value, for the marks of one chart."""
    figure = html.split(f'data-chart="{chart}"', 1)[1].split("</figure>", 1)[0]
    return {(series, bucket): float(value) for series, bucket, value in MARK.findall(figure)}


def _hour(at) -> str:
    return at.replace(minute=0, second=0, microsecond=0).isoformat()


def _sample(at, unknown: int, human: int, oldest: float | None) -> None:
    LevelSample.objects.create(sampled_at=at, unknown_work=unknown, waiting_for_human=human,
                               oldest_unknown_age_s=oldest)


def test_the_level_lines_draw_each_hour_s_highest_sample(client, auditor):
    now = timezone.now()
    earlier = now - timedelta(hours=3)
    _sample(earlier, 4, 1, 300)
    _sample(earlier.replace(minute=0, second=1, microsecond=0), 7, 2, 900)  # the same hour, higher
    _sample(now, 2, 1, 60)
    _sample(now - timedelta(days=2), 50, 50, 9000)  # outside the last 24 hours

    client.force_login(auditor)
    html = client.get("/").content.decode()
    assert _marks(html, "levels") == {
        ("unknown", _hour(earlier)): 7, ("human", _hour(earlier)): 2,
        ("unknown", _hour(now)): 2, ("human", _hour(now)): 1,
    }
    assert _marks(html, "oldest") == {("oldest", _hour(earlier)): 900, ("oldest", _hour(now)): 60}
    assert 'data-latest="unknown">2 unknown<' in html  # the latest value, labelled on the line itself
    assert 'data-latest="oldest">1 min oldest<' in html
    table = html.split('data-chart-table="levels"', 1)[1].split("</table>", 1)[0]
    assert f"<th scope=\"row\">{timezone.localtime(earlier):%H}:00</th><td class=\"num\">7</td><td class=\"num\">2</td>" \
        in table
    assert table.count("—") == 2 * 22  # the 22 hours without a sample are gaps, not zeros


def test_the_seven_day_window_draws_six_hour_buckets(client, auditor):
    two_days_ago = timezone.now() - timedelta(days=2)
    _sample(two_days_ago, 5, 3, 120)
    client.force_login(auditor)
    html = client.get("/?range=7d").content.decode()
    assert 'data-window="7d"' in html and "last 7 days" in html
    bucket = two_days_ago.replace(hour=two_days_ago.hour // 6 * 6, minute=0, second=0, microsecond=0)
    assert _marks(html, "levels") == {("unknown", bucket.isoformat()): 5, ("human", bucket.isoformat()): 3}
    assert "Reconciliation outcomes per 6 hours" in html


def test_outcomes_and_throughput_are_the_ledger_s_events_this_hour(client, auditor, provider):
    unknown_job("m1", "mail.send", MAIL)
    send_message(provider, "mail.send:m1")  # found as sent: confirmed
    unknown_job("m2", "mail.send", MAIL)
    send_message(provider, "mail.send:m2", {**MAIL, "subject": "Wrong"})  # found, but different: conflict
    assert sorted(d.outcome for d in reconcile_until_idle()) == ["confirmed", "conflict"]
    make_job("plain")
    services.claim_job(job_id="plain", worker="w")
    count_events()  # the sampling schedule's minute

    client.force_login(auditor)
    html = client.get("/").content.decode()
    hour = _hour(LedgerEvent.objects.filter(kind="reconciled_conflict").get().at)
    assert _marks(html, "outcomes") == {("confirmed", hour): 1, ("conflict", hour): 1}
    claimed = LedgerEvent.objects.filter(kind="claimed").count()
    assert claimed == 3
    throughput = _marks(html, "throughput")
    assert throughput[("claimed", hour)] == claimed
    assert sum(v for (series, _), v in throughput.items() if series == "claimed") == claimed  # zeros elsewhere
    assert 'fill="url(#outcomes-conflict)"' in html  # conflict is hatched, not only red
    assert ' style="' not in html  # the CSP allows no inline style


def test_a_user_fenced_to_some_tenants_sees_their_counts_and_no_ledger_wide_levels(client, auditor):
    _sample(timezone.now(), 9, 9, 600)
    make_job("ours", tenant="globex")
    services.claim_job(job_id="ours", worker="w")
    make_unknown_job("theirs", tenant="acme")
    count_events()
    client.force_login(with_tenants(auditor, "globex"))
    html = client.get("/").content.decode()
    assert 'data-chart="levels"' not in html and "shown to users who see all tenants" in html
    assert sum(_marks(html, "throughput").values()) == 1  # acme's claim is not counted


def test_the_charts_refresh_on_their_own_behind_the_login(client, auditor):
    assert client.get("/overview/charts/").status_code == 302
    client.force_login(auditor)
    html = client.get("/overview/charts/?range=7d").content.decode()
    assert html.lstrip().startswith('<section id="overview-charts"')
    assert 'hx-get="/overview/charts/?range=7d"' in html
    # Anything else shows the window last chosen (remembered), and a new session the last 24 hours.
    assert 'data-window="7d"' in client.get("/overview/charts/?range=nonsense").content.decode()
    assert 'data-window="7d"' in client.get("/").content.decode()
    client.force_login(auditor)
    client.logout()
    client.force_login(auditor)
    assert 'data-window="24h"' in client.get("/overview/charts/").content.decode()


def test_sampling_records_the_levels_now_and_forgets_old_samples(operator):
    from reconciliation import decisions
    from tests.console.conftest import latest_version, make_operator_job

    make_unknown_job("inv-1")
    make_operator_job("vault-1")
    make_operator_job("vault-2")
    decisions.mark_not_found(job_id="vault-2", version=latest_version("vault-2"), user=operator, note="none")
    _sample(timezone.now() - timedelta(days=9), 1, 1, 1)
    sample = sample_levels()
    assert (sample.unknown_work, sample.waiting_for_human) == (3, 2)
    assert 0 < sample.oldest_unknown_age_s < 60
    assert list(LevelSample.objects.all()) == [sample]


def test_events_are_counted_per_hour_and_tenant_and_recounted_for_late_commits():
    make_job("a", tenant="acme")
    services.claim_job(job_id="a", worker="w")
    first = count_events()
    assert first == (timezone.now() - timedelta(days=8)).replace(minute=0, second=0, microsecond=0)  # the backfill
    assert list(EventCount.objects.values_list("kind", "tenant", "count")) == [("claimed", "acme", 1)]
    make_job("b", tenant="acme")
    services.claim_job(job_id="b", worker="w")
    again = count_events()
    assert again == timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    assert list(EventCount.objects.values_list("kind", "tenant", "count")) == [("claimed", "acme", 2)]


def test_every_charted_kind_is_counted():
    assert set(OUTCOME_KINDS) | set(THROUGHPUT_KINDS) <= set(COUNTED_KINDS)


def _event_at(job, kind: str, at) -> None:
    """An event of `kind` stamped `at` (the history is append-only: inserted, never moved)."""
    LedgerEvent.objects.create(job=job, at=at, actor_type="worker", actor="w", kind=kind)


def _minute(at) -> str:
    return at.replace(second=0, microsecond=0).isoformat()


def test_the_last_hour_draws_per_minute_counts_of_the_ledger_s_events(client, auditor):
    acme, globex = make_job("a1"), make_job("g1", tenant="globex")
    now = timezone.now()
    five, thirty = now - timedelta(minutes=5), now - timedelta(minutes=30)
    five = five.replace(second=10)  # two events in one minute, ten seconds apart
    for job, kind, at in [
        (acme, "claimed", five), (acme, "succeeded", five + timedelta(seconds=10)),
        (globex, "claimed", five + timedelta(seconds=20)),
        (acme, "reconciled_confirmed", thirty), (globex, "reconciled_not_found", thirty),
        (acme, "claimed", now - timedelta(hours=2)),  # before the hour
        (acme, "failed", five),  # a kind the charts do not draw
    ]:
        _event_at(job, kind, at)
    client.force_login(auditor)
    html = client.get("/?range=1h").content.decode()
    assert 'data-window="1h"' in html and "Deliveries per minute" in html and "every 10s" in html
    throughput = _marks(html, "throughput")
    # The enqueue events of a1 and g1 are not deliveries; this minute's own events count live.
    assert {key: value for key, value in throughput.items() if value} == {
        ("claimed", _minute(five)): 2, ("succeeded", _minute(five)): 1}
    assert len({bucket for _, bucket in throughput}) == 60  # a point per minute, zeros included
    assert _marks(html, "outcomes") == {("confirmed", _minute(thirty)): 1, ("not_found", _minute(thirty)): 1}
    # The minute's row in the table says the same.
    table = html.split('data-chart-table="throughput"', 1)[1].split("</table>", 1)[0]
    assert f'<th scope="row">{timezone.localtime(five):%H:%M}</th><td class="num">2</td><td class="num">1</td>' in table

    # The charts' own refresh (htmx polls it) counts what happened since.
    _event_at(acme, "claimed", timezone.now())
    refreshed = client.get("/overview/charts/?range=1h").content.decode()
    assert sum(v for (series, _), v in _marks(refreshed, "throughput").items() if series == "claimed") == 3


def test_the_last_hour_keeps_the_tenant_fence(client, auditor):
    acme, globex = make_job("a1"), make_job("g1", tenant="globex")
    at = timezone.now() - timedelta(minutes=3)
    _event_at(acme, "claimed", at)
    _event_at(globex, "claimed", at)
    _event_at(globex, "claimed", at)
    client.force_login(with_tenants(auditor, "acme"))
    html = client.get("/?range=1h").content.decode()
    assert {k: v for k, v in _marks(html, "throughput").items() if v} == {("claimed", _minute(at)): 1}
