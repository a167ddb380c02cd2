"""README, "Bring your own action": every command of the section, run as written.

The section's `sh` blocks run in order in bash (`set -euo pipefail`), each in the shell state the
previous ones left (exported variables); a `text` block right after an `sh` block is that block's
output, compared exactly. The one block that starts Reckon (`make run`) is replaced by a gunicorn
serving the test database with the environment the section exported, as `make run` would
serve it; the section's URL (http://127.0.0.1:8000) is replaced by that server's. The commands
run in a scratch folder that links the checkout's manage.py, .venv and examples, so the files
they write (actions.toml, outbox/) stay out of the checkout.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from ledger.models import Job
from tests.processes import ROOT, WebServer, database_url_of_tests, free_port
from tests.reconciliation.helpers import assert_ledger_clean

pytestmark = pytest.mark.django_db(transaction=True)

SECTION = "## Bring your own action"
README_URL = "http://127.0.0.1:8000"
START = "make run"
STATE = "reckon-readme-state.sh"


def section_blocks() -> list[tuple[str, str]]:
    """The section's fenced blocks, as (info string, text), in order."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index(SECTION)
    end = readme.index("\n## ", start + len(SECTION))
    return re.findall(r"^```(\w*)\n(.*?)^```$", readme[start:end], flags=re.MULTILINE | re.DOTALL)


def steps() -> list[tuple[str, str | None]]:
    """Each command block with the output the README shows for it (None: not shown)."""
    blocks = section_blocks()
    found = []
    for index, (kind, text) in enumerate(blocks):
        if kind == "sh":
            after = blocks[index + 1] if index + 1 < len(blocks) else ("", "")
            found.append((text, after[1] if after[0] == "text" else None))
    return found


def test_the_section_has_the_steps_a_new_user_follows():
    commands = "\n".join(text for text, _ in steps())
    for needed in ("actions.toml", START, "worker_token create", "/api/v1/jobs", "examples/pull_worker.py",
                   "client.effect(", "/api/v1/claims", "/lease/begin", "/lease/success"):
        assert needed in commands, needed
    assert sum(1 for text, _ in steps() if text.strip() == START) == 1


def test_every_command_of_the_section_works_as_written(tmp_path):
    for name in ("manage.py", ".venv", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    # What a new user's shell has; the database is the test database (the README's is the embedded one).
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp_path)),
           "LANG": "C.UTF-8", "DATABASE_URL": database_url_of_tests()}
    (tmp_path / STATE).write_text("")
    port, server = free_port(), None
    try:
        for number, (command, shown) in enumerate(steps(), start=1):
            if command.strip() == START:
                server = WebServer(env=_exported(tmp_path, env), port=port, inherit_env=False,
                                   log_name="readme-gunicorn").start()
                continue
            command = command.replace(README_URL, f"http://127.0.0.1:{port}")
            done = subprocess.run(
                ["bash", "-c", f"set -euo pipefail\nsource {STATE}\n{command}\nexport -p > {STATE}"],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
            )
            assert done.returncode == 0, f"step {number} failed:\n{command}\n{done.stdout}\n{done.stderr}"
            if shown is not None:
                assert done.stdout == shown, f"step {number} printed something else:\n{command}"
    finally:
        if server is not None:
            server.stop()
    assert set(Job.objects.values_list("job_id", "status")) == {
        ("note-1", "succeeded"), ("note-2", "succeeded"), ("note-3", "succeeded")}
    assert (tmp_path / "outbox" / "notes.write:note-1.txt").exists()
    assert_ledger_clean()


def _exported(folder, env: dict) -> dict:
    """The environment the section's shell has exported so far (what `make run` would be given)."""
    done = subprocess.run(["bash", "-c", f"source {STATE}; env -0"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=30, check=True)
    exported = dict(item.split("=", 1) for item in done.stdout.split("\0") if "=" in item)
    for name in ("PWD", "OLDPWD", "SHLVL", "_"):
        exported.pop(name, None)
    return exported
