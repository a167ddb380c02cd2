"""The configuration reference is the declarations: docs/configuration.md and .env.example are
generated from config/settings.py, and no module reads an environment variable declared nowhere."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from config.env import DECLARED, Bool, load_dotenv, setting
from config.management.commands.config_reference import generated
from tests.processes import ROOT

# Variables of the operating system, Python and Django that the code reads or sets for a child.
STANDARD = {"HOME", "PATH", "PYTHONPATH", "DJANGO_SETTINGS_MODULE", "DJANGO_ALLOW_ASYNC_UNSAFE", "XDG_CONFIG_HOME",
            "XDG_CACHE_HOME"}
READ = re.compile(r"""(?:os\.environ(?:\.get|\.setdefault|\.pop)?\s*[\[(]|os\.getenv\()\s*["']([A-Za-z0-9_]+)["']""")


THIS_FILE = ROOT / "tests" / "config" / "test_env_reference.py"  # its samples are not reads


def project_sources():
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if (parts[0].startswith(".") or parts[0] in ("build", "staticfiles") or path == THIS_FILE
                or {".venv", "node_modules"} & set(parts)):  # e.g. examples/frameworks/vercel-ai/node_modules
            continue
        yield path


def test_the_generated_reference_and_env_example_match_the_declarations():
    for path, text in generated().items():
        assert path.read_text() == text, f"{path.name} is stale: run `python manage.py config_reference`"


def test_every_declared_setting_is_in_the_reference_and_env_example_lists_the_public_ones():
    reference = (ROOT / "docs" / "configuration.md").read_text()
    example = (ROOT / ".env.example").read_text()
    assert len(DECLARED) > 60
    for name, declaration in DECLARED.items():
        assert f"| `{name}` |" in reference, name
        assert (f"# {name}=" in example) is not declaration.internal, name
        assert declaration.help.strip(), name


def test_no_module_reads_an_undeclared_variable():
    undeclared = {}
    for path in project_sources():
        for name in READ.findall(path.read_text()):
            if name not in DECLARED and name not in STANDARD:
                undeclared.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert undeclared == {}, "declare these in config/settings.py (config.env.setting or declare)"


def test_the_scan_finds_reads_of_every_form():
    sample = 'os.environ.get("A_1") os.environ["B"] os.getenv("C") os.environ.setdefault("D", "x")'
    assert READ.findall(sample) == ["A_1", "B", "C", "D"]


def test_a_setting_parses_its_value_and_refuses_a_bad_one(monkeypatch):
    name = "RECKON_TEST_ONLY_FLAG"
    monkeypatch.setenv(name, "yes")
    try:
        assert setting(name, False, Bool, "a test's own flag", group="test", internal=True) is True
        DECLARED.pop(name)
        monkeypatch.setenv(name, "maybe")
        with pytest.raises(ValueError, match=f"{name} must be a boolean"):
            setting(name, False, Bool, "a test's own flag", group="test", internal=True)
        DECLARED.pop(name)
        with pytest.raises(ValueError, match="declared twice"):
            setting("RECKON_DEBUG", True, Bool, "declared again, differently", group="test")
    finally:
        DECLARED.pop(name, None)


def test_dotenv_fills_what_the_environment_does_not_set_and_the_environment_wins(tmp_path, monkeypatch):
    env_file = tmp_path / ".env"
    env_file.write_text('# a comment\n\nexport RECKON_A=from-file\nRECKON_B="quoted # not a comment"\n'
                        "RECKON_C=plain   # a comment\nRECKON_D=file\n")
    for name in ("RECKON_A", "RECKON_B", "RECKON_C"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RECKON_D", "environment")
    try:
        assert load_dotenv(env_file) == ["RECKON_A", "RECKON_B", "RECKON_C"]
        assert (os.environ["RECKON_A"], os.environ["RECKON_B"], os.environ["RECKON_C"], os.environ["RECKON_D"]) == (
            "from-file", "quoted # not a comment", "plain", "environment")
    finally:
        for name in ("RECKON_A", "RECKON_B", "RECKON_C"):
            os.environ.pop(name, None)
    env_file.write_text("not a setting\n")
    with pytest.raises(ValueError, match=r"\.env:1: expected NAME=value"):
        load_dotenv(env_file)
    assert load_dotenv(tmp_path / "missing") == []


def test_the_command_check_mode_passes_on_a_clean_checkout():
    done = subprocess.run([sys.executable, "manage.py", "config_reference", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "docs/configuration.md: up to date" in done.stdout
