"""The alerts: each figure is the count of the page its link opens (the same query, the bound to
the second), and the alerts page lists what fires, since when, with acknowledge and a bounded
silence whose who and why stay in the history."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client

from alerts.evaluate import evaluate_alerts
from alerts.models import AlertEvent, AlertState
from reconciliation import decisions
from tests.console.conftest import latest_version, make_operator_job, make_unknown_job, with_tenants
from tests.console.test_triage_blocked import blocked_post

pytestmark = pytest.mark.django_db


def _age(job_id: str, seconds: int) -> None:
    """Backdate a job and its approval requests (test setup only: time, not state)."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_job SET created_at = now() - make_interval(secs => %s) WHERE job_id = %s",
                       [seconds, job_id])
        cursor.execute("UPDATE approvals_approvalrequest SET created_at = now() - make_interval(secs => %s) "
                       "WHERE job_id = (SELECT id FROM ledger_job WHERE job_id = %s)", [seconds, job_id])


def _rows(client: Client, path: str) -> list[str]:
    return re.findall(r'<tr data-job="([^"]+)"', client.get(path).content.decode())


def test_each_figure_of_the_unknown_work_alert_is_the_count_of_the_queue_its_link_opens(
        channels, settings, client, operator, provider):
    settings.RECKON_ALERT_UNKNOWN_AGE_S = 90  # not a whole number of minutes: never rounded to 1 min
    for job_id in ("inv-old-1", "inv-old-2", "inv-70s"):
        make_unknown_job(job_id)
    make_operator_job("vault-old")
    blocked_post(provider, "post-old")
    for job_id in ("inv-old-1", "inv-old-2", "vault-old", "post-old"):
        _age(job_id, 300)
    _age("inv-70s", 70)  # older than a minute, younger than the bound: in no figure

    [fired] = evaluate_alerts()
    text = channels.texts[0]
    assert "4 unknown jobs older than 1 min 30 s (acme 4): 1 need a person, 2 reconciling, 1 blocked, nothing " \
           "sent" in text
    links = dict(re.findall(r"^(.+?) \(\d+\): https://reckon\.example\.com(\S+)$", text, re.MULTILINE))
    counts = {label: int(n) for label, n in re.findall(r"^(.+?) \((\d+)\): ", text, re.MULTILINE)}
    assert set(links) == {"Need a person", "Reconciling", "Blocked, nothing sent"}
    client.force_login(with_tenants(operator))
    shown = {label: _rows(client, path) for label, path in links.items()}
    assert {label: len(rows) for label, rows in shown.items()} == counts
    assert sorted(shown["Reconciling"]) == ["inv-old-1", "inv-old-2"]
    assert links["Reconciling"] == "/queue/?tab=reconciling&older_than_s=90"


def test_the_conflict_alert_counts_every_escalated_job_the_link_lists(channels, client, operator):
    make_unknown_job("inv-1")
    decisions.escalate(job_id="inv-1", version=latest_version("inv-1"), user=operator, note="odd")
    assert evaluate_alerts() == []  # escalated by a person, not by a conflict: the alert does not fire
    state = AlertState.objects.get(condition="reconciliation_conflict")
    assert not state.firing


def test_the_alerts_page_shows_what_fires_and_keeps_who_acknowledged_and_silenced_it_and_why(
        channels, settings, client, operator):
    settings.RECKON_ALERT_UNKNOWN_AGE_S = 0
    make_unknown_job("inv-1")
    evaluate_alerts()
    client.force_login(with_tenants(operator))
    page = client.get("/alerts/").content.decode()
    assert re.search(r"data-firing-count>1<", page)
    assert 'data-alert="unknown_too_old"' in page and "1 reconciling" in page
    assert 'href="/queue/?tab=reconciling&amp;older_than_s=0"' in page

    client.post("/alerts/unknown_too_old/act/", {"action": "acknowledge", "note": "on it, checking billing"})
    client.post("/alerts/unknown_too_old/act/", {"action": "silence", "hours": "4", "note": "billing is down"})
    state = AlertState.objects.get(condition="unknown_too_old")
    assert state.acknowledged_by == "olga" and state.silenced_until is not None
    history = list(AlertEvent.objects.order_by("id").values_list("kind", "actor", "note"))
    assert history[1:] == [("acknowledged", "olga", "on it, checking billing"), ("silenced", "olga", "billing is down")]
    page = client.get("/alerts/").content.decode()
    assert "by olga" in page and "silenced until" in page and "billing is down" in page

    # Silenced: a condition that clears and fires again tells nobody until the silence ends.
    decisions.cancel_job(job_id="inv-1", version=latest_version("inv-1"), user=operator, note="done")
    make_unknown_job("inv-2")
    assert evaluate_alerts() == [] and len(channels.messages) == 1
    AlertState.objects.filter(condition="unknown_too_old").update(silenced_until=None)  # the hours pass
    assert evaluate_alerts() == []  # what holds (firing) is what the channels were last told


def test_a_silence_beyond_the_bound_or_without_a_note_is_refused_and_changes_nothing(channels, settings, client,
                                                                                        operator):
    settings.RECKON_ALERT_UNKNOWN_AGE_S = 0
    make_unknown_job("inv-1")
    evaluate_alerts()
    client.force_login(with_tenants(operator))
    response = client.post("/alerts/unknown_too_old/act/", {"action": "silence", "hours": "48", "note": "weekend"},
                           follow=True)
    assert "a silence lasts more than 0 and at most 24 h, not 48 h" in response.content.decode()
    response = client.post("/alerts/unknown_too_old/act/", {"action": "acknowledge", "note": " "}, follow=True)
    assert "a note is required" in response.content.decode() or "This field is required" in response.content.decode()
    assert AlertState.objects.get(condition="unknown_too_old").silenced_until is None
    assert not AlertEvent.objects.exclude(kind="fired").exists()


def test_only_operators_act_and_only_with_the_csrf_token(channels, settings, operator, auditor):
    settings.RECKON_ALERT_UNKNOWN_AGE_S = 0
    make_unknown_job("inv-1")
    evaluate_alerts()
    reader = Client()
    reader.force_login(with_tenants(auditor))
    assert reader.get("/alerts/").status_code == 200
    assert "Only operators of every tenant can acknowledge" in reader.get("/alerts/").content.decode()
    assert reader.post("/alerts/unknown_too_old/act/", {"action": "acknowledge", "note": "x"}).status_code == 403
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(with_tenants(operator))
    assert strict.post("/alerts/unknown_too_old/act/", {"action": "acknowledge", "note": "x"}).status_code == 403
    assert Client().get("/alerts/").status_code == 302  # to the login page
    assert not AlertEvent.objects.exclude(kind="fired").exists()


def test_the_page_counts_only_the_persons_tenants_as_the_linked_queue_does(channels, settings, client, operator):
    settings.RECKON_ALERT_UNKNOWN_AGE_S = 0
    make_unknown_job("inv-a", tenant="acme")
    make_unknown_job("inv-g", tenant="globex")
    client.force_login(with_tenants(operator, "acme"))
    page = client.get("/alerts/").content.decode()
    [(path, count)] = re.findall(r'<a href="([^"]+)" data-alert-link="reconciling">(\d+) reconciling</a>', page)
    assert count == "1" and len(_rows(client, path.replace("&amp;", "&"))) == 1


def test_the_overview_says_what_fires_and_links_the_alerts_page(channels, settings, client, operator):
    settings.RECKON_ALERT_UNKNOWN_AGE_S = 0
    make_unknown_job("inv-1")
    evaluate_alerts()
    client.force_login(with_tenants(operator))
    page = client.get("/").content.decode()
    assert re.search(r'<a href="/alerts/">1 alert firing</a>: Unknown work older than its bound', page)



def test_every_page_links_the_alerts_page_and_marks_it_current_there(client, auditor):
    client.force_login(with_tenants(auditor))
    nav = re.compile(r'<nav aria-label="Console">(.*?)</nav>', re.DOTALL)
    [on_overview] = nav.findall(client.get("/").content.decode())
    assert '<a id="nav-alerts" href="/alerts/">Alerts</a>' in on_overview
    [on_alerts] = nav.findall(client.get("/alerts/").content.decode())
    assert '<a id="nav-alerts" href="/alerts/" aria-current="page">Alerts</a>' in on_alerts

def test_the_alerts_parts_of_unknown_work_are_the_queues_tabs():
    """The alert counts old unknown work by the queue's tabs, read from the one vocabulary the queue
    page reads too (alerts cannot import the console: a layer below it)."""
    from alerts.conditions import UNKNOWN_PARTS
    from console.selectors.queue import TABS
    from ledger.states import QUEUE_TABS, UNKNOWN_WORK

    assert TABS is QUEUE_TABS
    # The tabs of unknown work (the failed tab holds finished jobs: no alert counts them), each once.
    assert {tab: set(statuses) for _, tab, statuses in UNKNOWN_PARTS} == {
        tab: set(statuses) for tab, (_, statuses) in TABS.items() if set(statuses) <= set(UNKNOWN_WORK)}
    assert sorted(s for _, _, statuses in UNKNOWN_PARTS for s in statuses) == sorted(UNKNOWN_WORK)


def test_a_reader_of_another_tenant_reads_neither_the_historys_counts_nor_its_notes(
        channels, settings, client, operator, auditor):
    settings.RECKON_ALERT_UNKNOWN_AGE_S = 0
    for job_id in ("inv-a1", "inv-a2", "inv-a3"):
        make_unknown_job(job_id, tenant="acme")
    evaluate_alerts()
    client.force_login(with_tenants(operator))
    client.post("/alerts/unknown_too_old/act/", {"action": "acknowledge", "note": "acme's billing key expired"})
    assert "(acme 3)" in AlertEvent.objects.get(kind="fired").note

    reader = Client()
    reader.force_login(with_tenants(auditor, "globex"))
    page = reader.get("/alerts/").content.decode()
    assert "acme 3" not in page and "acme's billing key expired" not in page and "data-alert-history>" not in page
    assert "only readers of every tenant see it" in page
    whole = client.get("/alerts/").content.decode()  # a reader of every tenant reads it all
    assert "acme 3" in whole and "acme&#x27;s billing key expired" in whole
