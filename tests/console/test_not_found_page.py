"""A console address with nothing behind it answers the console's own "Not found", with debug on as
`make run` and the tests run (Django's debug page would list every URL pattern), while the worker
API keeps its JSON 404 and an address without its trailing slash is still redirected."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def debug_on(settings):
    settings.DEBUG = True  # as `make run` runs (pytest-django turns it off for tests)

OWN = "There is nothing at this address that your account may see"


def test_it_is_reckons_page_for_an_address_no_pattern_takes(client, operator):
    client.force_login(operator)
    for path in ("/jobs/", "/no-such-page/", "/jobs/nope/extra/"):
        answer = client.get(path)
        assert answer.status_code == 404, path
        text = answer.content.decode()
        assert OWN in text and "URLconf" not in text and "Using the URLconf" not in text, path


def test_it_is_reckons_page_for_a_job_that_does_not_exist(client, operator):
    client.force_login(operator)
    answer = client.get("/jobs/no-such-job/")
    assert answer.status_code == 404 and OWN in answer.content.decode()
    assert "Raised by" not in answer.content.decode()


def test_the_api_keeps_its_json_404_and_a_missing_slash_still_redirects(client, operator):
    answer = client.get("/api/v1/no-such-endpoint")
    assert answer.status_code == 404 and OWN not in answer.content.decode()
    client.force_login(operator)
    assert client.get("/queue").status_code == 301
