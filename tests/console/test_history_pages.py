"""Issue 28 in the console: an archived job is found and says when and where its history went;
the audit page says which periods are online."""

import pytest

from tests.console.conftest import with_tenants
from tests.ledger.test_history_retention import cut_here, finish, fresh_layout, retention_pass

pytestmark = pytest.mark.django_db


@pytest.fixture
def archived(settings, tmp_path):
    settings.RECKON_HISTORY_ARCHIVE_DIR = str(tmp_path / "archive")
    settings.RECKON_HISTORY_RETENTION_DAYS = 1.0
    settings.RECKON_HISTORY_RETENTION_BY_TENANT = {}
    fresh_layout()
    finish("inv-old-1", tenant="acme")
    finish("inv-old-2", tenant="globex")
    (checkpoint,) = retention_pass(cut_here()).archived
    finish("inv-new-1", tenant="acme")
    return checkpoint


def test_searching_an_archived_job_says_archived_when_and_in_which_file(client, auditor, archived):
    client.force_login(auditor)
    html = client.get("/search/", {"q": "inv-"}).content.decode()
    assert 'data-job="inv-new-1"' in html  # the live one, as always
    assert 'data-archived-job="inv-old-1"' in html and 'data-archived-job="inv-old-2"' in html
    assert archived.archive_file in html

    page = client.get("/jobs/inv-old-1/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "archived" in text and archived.archive_file in text and "succeeded" in text


def test_an_archived_job_stays_behind_the_tenant_fence(client, auditor, archived):
    with_tenants(auditor, "acme")
    client.force_login(auditor)
    html = client.get("/search/", {"q": "inv-old"}).content.decode()
    assert 'data-archived-job="inv-old-1"' in html and "inv-old-2" not in html
    assert client.get("/jobs/inv-old-2/").status_code == 404


def test_the_audit_page_says_which_periods_are_online(client, auditor, archived):
    client.force_login(auditor)
    html = client.get("/audit/").content.decode()
    assert "Which periods are online" in html
    assert f'data-archived-period="{archived.partition}"' in html and archived.archive_file in html
