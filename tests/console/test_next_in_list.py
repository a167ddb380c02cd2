"""Next means the next row of the list the job was opened from: its tab, filter and order kept,
skipping rows where the viewer can decide nothing; "Back to the queue" goes back to that list."""

import re

import pytest
from django.contrib.auth.models import Group

from reconciliation import decisions
from tests.console.conftest import htmx, latest_version, make_operator_job

pytestmark = pytest.mark.django_db
LIST = "tab=human&tenant=acme"


@pytest.fixture
def human_tab(operator2):
    """Four jobs needing a human, oldest first: vault-2 waits for an approver, vault-3 is globex's."""
    operator2.groups.add(Group.objects.get_or_create(name="operators")[0])
    make_operator_job("vault-1")
    make_operator_job("vault-2")
    make_operator_job("vault-3", tenant="globex")
    make_operator_job("vault-4")
    decisions.mark_not_found(job_id="vault-2", version=latest_version("vault-2"), user=operator2, note="none")


def _next(html: str) -> str:
    return re.search(r'<a href="([^"]*)" data-next-job', html).group(1)


def test_the_queue_links_carry_the_list(client, operator, human_tab):
    client.force_login(operator)
    html = client.get(f"/queue/?{LIST}").content.decode()
    assert '<a href="/jobs/vault-1/?tab=human&amp;tenant=acme" class="job-id">vault-1</a>' in html


def test_an_operator_goes_to_the_next_row_of_the_filtered_list_skipping_approvals(client, operator, human_tab):
    client.force_login(operator)
    html = client.get(f"/jobs/vault-1/?{LIST}").content.decode()
    assert _next(html) == "/jobs/vault-4/?tab=human&amp;tenant=acme"  # not vault-2 (an approver's), not globex's
    assert '<a href="/queue/?tab=human&amp;tenant=acme" data-back-to-queue' in html
    last = client.get(f"/jobs/vault-4/?{LIST}").content.decode()
    assert _next(last) == "/queue/?tab=human&amp;tenant=acme"
    assert "End of the list: open the queue" in last


def test_an_approver_goes_to_the_next_request_and_the_order_is_kept(client, approver, human_tab):
    client.force_login(approver)
    assert _next(client.get(f"/jobs/vault-1/?{LIST}").content.decode()).startswith("/jobs/vault-2/")
    newest = client.get(f"/jobs/vault-4/?{LIST}&sort=newest").content.decode()
    assert _next(newest) == "/jobs/vault-2/?tab=human&amp;tenant=acme&amp;sort=newest"


def test_after_a_decision_next_is_the_row_after_the_decided_one(client, operator, human_tab):
    client.force_login(operator)
    data = {"decision": "confirm_effect", "version": latest_version("vault-1"), "note": "seen in the vault log"}
    html = client.post(f"/jobs/vault-1/decide/?{LIST}", data, **htmx()).content.decode()
    assert "Confirm effect: recorded." in html and _next(html) == "/jobs/vault-4/?tab=human&amp;tenant=acme"
    # Without JavaScript the answer is a redirect to the job, the list kept.
    data = {"decision": "escalate", "version": latest_version("vault-4"), "note": "vault team"}
    response = client.post(f"/jobs/vault-4/decide/?{LIST}", data)
    assert response.status_code == 302 and response["Location"] == f"/jobs/vault-4/?{LIST}"


def test_without_a_list_next_is_the_next_row_of_the_jobs_own_tab(client, operator, human_tab):
    client.force_login(operator)
    html = client.get("/jobs/vault-3/").content.decode()
    assert _next(html) == "/jobs/vault-4/?tab=human"
