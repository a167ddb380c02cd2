"""The demo's published passwords: created only for a local demo, never reset, and never in production."""

import subprocess

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from sandbox.checks import demo_passwords_left
from sandbox.demo_users import DEMO_USERS, ensure_demo_users
from sandbox.stack import stack_children
from tests.processes import database_url_of_tests, manage, production_env

# Production hashes passwords with Django's default hasher; a check run in another process must
# recognise what the test stored (the suite's MD5 hasher is for speed only).
DEFAULT_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]


@pytest.mark.django_db
def test_demo_users_are_created_once_and_a_changed_password_stays_changed(settings):
    rows = ensure_demo_users()
    assert [(name, password) for name, password, _ in rows] == [(u[0], u[1]) for u in DEMO_USERS]
    operator = User.objects.get(username="operator")
    operator.set_password("a-password-of-my-own")
    operator.groups.clear()
    operator.save()

    again = dict((name, password) for name, password, _ in ensure_demo_users())

    operator.refresh_from_db()
    assert operator.check_password("a-password-of-my-own")
    assert not operator.groups.exists()  # an existing account is not touched at all
    assert again["operator"] == "(changed; kept)"
    assert again["approver"] == "approver-demo-pw"  # still the demo one: shown as it is


@pytest.mark.django_db
def test_seed_demo_creates_no_demo_user_with_debug_off(settings):
    settings.DEBUG = False
    with pytest.raises(CommandError, match="RECKON_DEBUG=true only"):
        call_command("seed_demo")
    assert not User.objects.filter(username__in=[u[0] for u in DEMO_USERS]).exists()


@pytest.mark.django_db
def test_with_debug_off_the_checks_fail_while_a_demo_account_keeps_its_demo_password(settings):
    settings.PASSWORD_HASHERS = DEFAULT_HASHERS
    User.objects.create_user("approver", password="approver-demo-pw")
    admin = User.objects.create_superuser("admin", password="admin-demo-pw")
    User.objects.create_user("operator", password="not-the-demo-one")

    settings.DEBUG = True
    assert demo_passwords_left() == []  # a local demo may keep them

    settings.DEBUG = False
    [error] = demo_passwords_left()
    assert error.id == "sandbox.E001" and error.is_serious()
    assert "admin, approver" in error.msg and "operator" not in error.msg

    admin.set_password("a-real-password-now")
    admin.save()
    User.objects.filter(username="approver").delete()
    assert demo_passwords_left() == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_production_start_is_refused_while_a_demo_password_is_left(settings):
    settings.PASSWORD_HASHERS = DEFAULT_HASHERS
    User.objects.create_superuser("admin", password="admin-demo-pw")
    env = production_env(DATABASE_URL=database_url_of_tests())

    for command in (["runstack", "--no-demo"], ["qcluster"], ["check", "--deploy"]):
        run = manage(*command, env=env)
        assert run.returncode != 0, command
        assert "sandbox.E001" in run.stderr and "admin" in run.stderr, (command, run.stderr[-2000:])

    web = stack_children(host="127.0.0.1", port=1, workers=1, demo=False)[0]
    assert web.name == "web"
    gunicorn = subprocess.run(web.argv + ["--check-config"], env=env, capture_output=True, text=True, timeout=120,
                              cwd=settings.BASE_DIR)
    assert gunicorn.returncode != 0
    assert "sandbox.E001" in gunicorn.stdout + gunicorn.stderr


@pytest.mark.django_db(transaction=True)
def test_runstack_runs_the_demo_with_debug_on_only():
    run = manage("runstack", env=production_env(DATABASE_URL=database_url_of_tests()))
    assert run.returncode != 0
    assert "runs with RECKON_DEBUG=true only" in run.stderr
    assert not User.objects.filter(username__in=[u[0] for u in DEMO_USERS]).exists()
