"""Safe by default: debug off unless asked for, no weak secret key, no embedded database in production."""

import re

import pytest
from django.core.checks.security import base as django_security

from config import settings as reckon_settings
from config.settings import DEVELOPMENT_SECRET_KEY, secret_key_problem
from tests.processes import ROOT, database_url_of_tests, manage, production_env

SHOW_DEBUG = ["shell", "-c", "from django.conf import settings; print('DEBUG', settings.DEBUG)"]


@pytest.mark.django_db
def test_debug_is_off_unless_reckon_debug_says_otherwise():
    run = manage(*SHOW_DEBUG, env=production_env(RECKON_DEBUG=None, DATABASE_URL=database_url_of_tests()))
    assert run.returncode == 0, run.stderr
    assert "DEBUG False" in run.stdout


def _example_secret_keys() -> list[str]:
    text = (ROOT / ".env.example").read_text()
    return re.findall(r"^#?\s*RECKON_SECRET_KEY=(\S+)", text, flags=re.MULTILINE)


def test_every_secret_key_in_env_example_is_refused():
    keys = _example_secret_keys()
    assert keys, ".env.example shows no RECKON_SECRET_KEY"
    for key in keys:
        assert secret_key_problem(key), key


@pytest.mark.parametrize("key", [
    "",
    "change-me",
    "CHANGE-ME",
    DEVELOPMENT_SECRET_KEY,
    "django-insecure-" + "k3y" * 20,
    "a1b2c3d4e5" * 4,  # 40 characters
    "abab" * 20,  # 80 characters, two distinct
])
def test_a_missing_placeholder_or_weak_secret_key_is_named_as_a_problem(key):
    assert secret_key_problem(key)


def test_a_strong_secret_key_has_no_problem():
    assert secret_key_problem("Zq3-xv9_Lm2" * 5) is None


def test_the_secret_key_rule_is_djangos_own_w009():
    assert reckon_settings.SECRET_KEY_MIN_LENGTH == django_security.SECRET_KEY_MIN_LENGTH
    assert reckon_settings.SECRET_KEY_MIN_UNIQUE_CHARACTERS == django_security.SECRET_KEY_MIN_UNIQUE_CHARACTERS
    assert django_security.SECRET_KEY_INSECURE_PREFIX == "django-insecure-"


@pytest.mark.django_db
@pytest.mark.parametrize("key, problem", [
    (None, "RECKON_SECRET_KEY is not set"),
    ("change-me", "RECKON_SECRET_KEY is a published placeholder"),
    (DEVELOPMENT_SECRET_KEY, "RECKON_SECRET_KEY is a published placeholder"),
    ("short-but-random-Kq81", "RECKON_SECRET_KEY has 21 characters; it needs at least 50"),
])
def test_a_production_start_is_refused_without_a_strong_secret_key(key, problem):
    run = manage("check", env=production_env(RECKON_SECRET_KEY=key, DATABASE_URL=database_url_of_tests()))
    assert run.returncode != 0
    assert problem in run.stderr
    assert "secrets.token_urlsafe(50)" in run.stderr


def test_a_production_start_is_refused_on_the_embedded_database():
    run = manage("check", env=production_env(DATABASE_URL=None, RECKON_EMBEDDED_DB=None))
    assert run.returncode != 0
    assert "RECKON_DEBUG is false and DATABASE_URL is not set. Set DATABASE_URL=postgresql://" in run.stderr


def test_the_embedded_database_may_be_allowed_explicitly_in_production():
    port = ["shell", "-c", "from django.conf import settings; print('PORT', settings.DATABASES['default']['PORT'])"]
    run = manage(*port, env=production_env(DATABASE_URL=None, RECKON_EMBEDDED_DB="true"))
    assert run.returncode == 0, run.stderr
    assert re.search(r"PORT \d+", run.stdout)
