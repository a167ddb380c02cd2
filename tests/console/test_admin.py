import pytest

from tests.console.conftest import make_operator_job

pytestmark = pytest.mark.django_db

MODELS = [
    "ledger/job",
    "ledger/attempt",
    "ledger/ledgerevent",
    "reconciliation/reconciliationcheck",
    "approvals/approvalrequest",
]


@pytest.mark.parametrize("model", MODELS)
def test_the_ledger_is_read_only_in_admin(client, admin_user, model):
    make_operator_job("vault-1")
    client.force_login(admin_user)
    listing = client.get(f"/admin/{model}/")
    assert listing.status_code == 200
    assert client.get(f"/admin/{model}/add/").status_code == 403
    html = listing.content.decode()
    assert f'href="/admin/{model}/add/"' not in html and 'name="action"' not in html  # no add, no delete


def test_a_detail_page_shows_without_a_save_button(client, admin_user):
    from ledger.models import Job

    job = make_operator_job("vault-1")
    client.force_login(admin_user)
    response = client.get(f"/admin/ledger/job/{job.pk}/change/")
    assert response.status_code == 200 and b'name="_save"' not in response.content
    assert client.post(f"/admin/ledger/job/{job.pk}/delete/").status_code == 403
    assert Job.objects.filter(pk=job.pk).exists()
