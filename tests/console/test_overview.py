import pytest

from tests.conftest import make_job

pytestmark = pytest.mark.django_db


def test_it_requires_login(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/"


def test_it_shows_counts_of_jobs_by_status(client, auditor):
    make_job("a")
    make_job("b")
    from ledger import services

    services.claim_job(job_id="b", worker="w")
    client.force_login(auditor)
    response = client.get("/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-status="pending">1<' in html
    assert 'data-status="running">1<' in html
    assert 'data-status="succeeded">0<' in html
    assert "2 in all" in html


def test_healthz_answers_without_login(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"ok": True, "database": "ok"}


def test_the_login_page_logs_a_demo_user_in(client):
    from console.demo_users import ensure_demo_users

    ensure_demo_users()
    page = client.get("/accounts/login/")
    assert page.status_code == 200 and b'name="username"' in page.content
    response = client.post("/accounts/login/", {"username": "operator", "password": "operator-demo-pw"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_a_wrong_password_is_refused_with_a_message(client):
    from console.demo_users import ensure_demo_users

    ensure_demo_users()
    response = client.post("/accounts/login/", {"username": "operator", "password": "nope"})
    assert response.status_code == 200
    assert b"didn't match" in response.content
