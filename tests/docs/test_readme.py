"""The README is executable: every fenced block says how it is checked, and is.

The convention: the line before each fenced block is `<!-- check: KIND -->`, one of

- `run`: a shell block, run in bash (`set -euo pipefail`) in README order, in one shell whose
  exported variables carry from block to block (what a user's terminal keeps), in a scratch
  folder that links the checkout's files (so actions.toml and outbox/ stay out of the checkout).
  The block that is exactly `make run` starts a real `make run PORT=<free port>` there, with the
  environment the blocks exported, on the test database, the sandboxes moved off their ports by
  their settings (as the README tells a user whose ports are taken); the README's
  http://127.0.0.1:8000 becomes that port.
- `output`: what the `run` block before it prints, compared exactly.
- `make-targets`: each line's `make TARGET` exists, and `make test` runs what the line says.
- `actions-toml`: every action in it goes through the declarations loader.
- `python-action`: executed; it must register its action.
- `python-webhook`: the handler, called with requests signed the way Reckon signs them.
- `diagram`: every function, state and file it names exists in the code.
- `chaos-table`: printed again by the chaos command's own formatter from its rows: it must match.
- `mcp-client-config`: an MCP client's configuration (JSON): it points at the gateway the `run`
  blocks start, with the token from the environment.
- `oidc-env`: identity-provider settings (`NAME=value` lines): each is a declared setting, Reckon
  starts with them, and a person signs in with them through the tests' real provider (its issuer
  and secret in place of the sample's) and gets the roles and tenants the mapping gives.

A block with no check, or an unknown one, fails the suite.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass

import pytest

from chaos.management.commands.chaos import table as chaos_table
from chaos.scenarios import SCENARIOS
from ledger.actions import _registry, get_action
from ledger.declarations import parse_action
from ledger.models import Job
from tests.processes import ROOT, database_url_of_tests, free_port, wait_for
from tests.reconciliation.helpers import assert_ledger_clean

README = ROOT / "README.md"
README_URL = "http://127.0.0.1:8000"
CHECK = re.compile(r"^<!-- check: ([a-z-]+) -->$")
KINDS = {"run", "output", "make-targets", "actions-toml", "python-action", "python-webhook", "diagram", "chaos-table",
         "mcp-client-config", "oidc-env"}
STATE = "reckon-readme-state.sh"
# What `make run` links to in the scratch folder: enough for the Makefile, manage.py and the examples.
LINKED = ("Makefile", "pyproject.toml", "clients", "manage.py", ".venv", "examples")


@dataclass(frozen=True)
class Block:
    line: int
    info: str
    text: str
    check: str | None


def readme_blocks() -> list[Block]:
    lines = README.read_text().splitlines()
    found, index = [], 0
    while index < len(lines):
        if lines[index].startswith("```"):
            end = lines.index("```", index + 1)
            check = CHECK.match(lines[index - 1])
            found.append(Block(index + 1, lines[index][3:].strip(), "\n".join(lines[index + 1:end]) + "\n",
                               check.group(1) if check else None))
            index = end + 1
        else:
            index += 1
    return found


def of_kind(kind: str) -> list[Block]:
    return [block for block in readme_blocks() if block.check == kind]


def run_steps() -> list[tuple[Block, str | None]]:
    """Each `run` block with the output the README shows for it (None: not shown)."""
    blocks = readme_blocks()
    return [(block, blocks[i + 1].text if i + 1 < len(blocks) and blocks[i + 1].check == "output" else None)
            for i, block in enumerate(blocks) if block.check == "run"]


def test_every_block_says_how_it_is_checked():
    blocks = readme_blocks()
    assert len(blocks) > 15
    unchecked = [f"README.md:{b.line} ({b.info or 'no language'})" for b in blocks if b.check not in KINDS]
    assert unchecked == [], f"add `<!-- check: KIND -->` before these blocks ({', '.join(sorted(KINDS))})"
    for index, block in enumerate(blocks):
        if block.check == "output":
            assert blocks[index - 1].check == "run", f"README.md:{block.line}: an output follows a run block"
        if block.check == "run":
            assert block.info == "sh", f"README.md:{block.line}: a run block is sh"
    assert [b.text.strip() for b, _ in run_steps()].count("make run") == 1


def test_the_make_targets_exist_and_make_test_runs_what_the_readme_says():
    makefile = (ROOT / "Makefile").read_text()
    for block in of_kind("make-targets"):
        for line in block.text.splitlines():
            target = re.match(r"make (\w[\w-]*)", line).group(1)
            assert re.search(rf"^{target}:", makefile, flags=re.MULTILINE), target
    test_recipe = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    for tool in ("ruff check", "lint-imports", "manage.py check", "bandit", "pytest"):
        assert tool in test_recipe, tool
    assert "runstack --port $(PORT)" in makefile and "PORT ?= 8000" in makefile


def test_the_toml_blocks_load_through_the_declarations_loader(monkeypatch):
    blocks = of_kind("actions-toml")
    assert len(blocks) >= 2
    for block in blocks:
        document = tomllib.loads(block.text)
        for name, table in document["actions"].items():
            for variable in table.get("webhook_secrets", []):
                monkeypatch.setenv(variable, "a-signing-secret-of-forty-characters-xx")
            action = parse_action(name, table, source=f"README.md:{block.line}")
            assert action.name == name and action.external == (table["executor"] == "external")
            assert action.reversible == table["reversible"]


def test_the_action_sample_registers_its_action():
    (block,) = of_kind("python-action")
    name = re.search(r'@action\("([^"]+)"', block.text).group(1)
    assert name not in _registry
    try:
        namespace: dict = {}
        exec(compile(block.text, f"README.md:{block.line}", "exec"), namespace)  # nosec B102  # the README's own sample
        action = get_action(name)
        assert action.executor is namespace["send_newsletter"] and action.reversible and action.queryable
        assert action.reconciler == "myapp.reconcilers.newsletter"
    finally:
        _registry.pop(name, None)


def test_the_webhook_handler_sample_answers_signed_requests_and_refuses_others():
    from reckon_client import WEBHOOK_SIGNATURE_HEADER, sign_webhook, verify_answer

    (block,) = of_kind("python-webhook")
    secret = "notes-webhook-secret-of-forty-characters"
    namespace = {"json": json, "NOTES_WEBHOOK_SECRET": secret, "note_exists": lambda key: key == "notes.write:note-1"}
    exec(compile(block.text, f"README.md:{block.line}", "exec"), namespace)  # nosec B102  # the README's own sample
    handle = namespace["handle"]

    def ask(key: str, question_id: str, secrets: list[str], header: object = None) -> tuple[int, dict]:
        body = json.dumps({"question_id": question_id, "job_id": key.split(":")[1], "idempotency_key": key}).encode()
        status, data, headers = handle(body, {WEBHOOK_SIGNATURE_HEADER: header or sign_webhook(body, secrets)})
        if status == 200:  # what Reckon checks before it takes the answer
            verify_answer(data, headers[WEBHOOK_SIGNATURE_HEADER], question_id, [secret])
        return status, json.loads(data)

    assert ask("notes.write:note-1", "q_1", [secret]) == (
        200, {"outcome": "confirmed", "reason": "the note is there", "result_ref": "…"})
    status, answer = ask("notes.write:note-9", "q_2", [secret])
    assert status == 200 and answer["outcome"] == "not_found" and answer["reason"]
    assert ask("notes.write:note-1", "q_1", [secret]) == (401, {"error": "question q_1 was already asked: a replay"})
    status, answer = ask("notes.write:note-1", "q_3", ["another-secret-of-forty-characters-xxxxx"])
    assert status == 401 and answer["error"]
    status, answer = ask("notes.write:note-1", "q_4", [secret], header="t=²,v1=" + "0" * 64)
    assert status == 401 and "malformed" in answer["error"]
    assert handle(b"{}", {})[0] == 401  # no signature at all


def test_every_name_in_the_diagram_exists():
    (block,) = of_kind("diagram")
    code = "\n".join(path.read_text() for folder in ("ledger", "reconciliation", "api")
                     for path in (ROOT / folder).rglob("*.py"))
    names = set(re.findall(r"\b[a-z]+(?:_[a-z]+)+\b", block.text))
    assert {"enqueue_job", "claim_job", "begin_side_effect", "record_unknown", "needs_reconciliation"} <= names
    missing = [n for n in sorted(names) if not re.search(rf"\bdef {n}\b|[\"']{n}[\"']|\b{n.upper()}\b", code)]
    assert missing == []
    for path in re.findall(r"[\w/]+\.py", block.text):
        assert (ROOT / path).is_file(), path


def test_the_mcp_client_configuration_points_at_the_gateway_the_readme_starts():
    (block,) = of_kind("mcp-client-config")
    server = json.loads(block.text)["mcpServers"]["reckon"]
    started = re.search(r"manage.py mcp_gateway --port (\d+)", README.read_text()).group(1)
    assert server["type"] == "http" and server["url"] == f"http://127.0.0.1:{started}/mcp"
    assert server["headers"] == {"Authorization": "Bearer ${RECKON_MCP_TOKEN}"}
    assert "export RECKON_MCP_TOKEN=" in README.read_text()


def test_the_chaos_table_has_the_shape_the_chaos_command_prints():
    (block,) = of_kind("chaos-table")
    lines = block.text.rstrip("\n").splitlines()
    rows = []
    for line in lines[2:]:
        m = re.match(r"^(.+?)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+) / ([\d.]+)$", line)
        assert m, line
        scenario = m.group(1)
        assert scenario.removesuffix(" (30 min)") in SCENARIOS, scenario
        rows.append({"scenario": scenario, "runs": int(m.group(2)), "passed": int(m.group(3)),
                     "duplicate_effects": int(m.group(4)), "lost_jobs": int(m.group(5)),
                     "stale_writes_accepted": int(m.group(6)), "recover_median_s": float(m.group(7)),
                     "recover_max_s": float(m.group(8))})
    assert [line.rstrip() for line in chaos_table(rows).splitlines()] == lines


# -- The run blocks, in order, beside a real `make run` ------------------------------------------

class Stack:
    """`make run PORT=…` in the scratch folder, in its own process group as a terminal runs it."""

    def __init__(self, folder, env: dict, port: int):
        self.port = port
        self.log = folder / "make-run.log"
        # `-o`: the linked .venv is the checkout's, installed editable from the checkout; make in
        # the scratch folder never reinstalls it (an install from here would point it at this folder).
        self.process = subprocess.Popen(["make", "-o", ".venv/.installed", "run", f"PORT={port}"], cwd=folder, env=env,  # nosec B603, B607  # make from PATH, fixed argv
                                        stdout=self.log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(self._serving, timeout=120, interval=0.2, message="make run serving")
        self.started_at = time.monotonic()

    def output(self) -> str:
        return self.log.read_text()

    def _serving(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"make run exited:\n{self.output()[-3000:]}")
        return "Reckon is running at" in self.output()

    def children(self) -> dict[str, int]:
        return {name: int(pid) for name, pid in re.findall(r"^started (\w+)\s+pid (\d+)", self.output(), re.MULTILINE)}

    def interrupt(self) -> int:
        """Ctrl-C: SIGINT to the terminal's foreground group (make and runstack)."""
        os.killpg(self.process.pid, signal.SIGINT)
        return self.process.wait(timeout=60)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _readme_children() -> list[str]:
    text = README.read_text()
    rows = text.split("| child | what it is |", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^\| `(\w+)` \|", rows, flags=re.MULTILINE)


@pytest.mark.django_db(transaction=True)
def test_every_command_runs_as_written_beside_make_run(tmp_path):
    for name in LINKED:
        (tmp_path / name).symlink_to(ROOT / name)
    port = free_port()
    # A new user's shell, on the test database, with the sandboxes' ports moved the way the README
    # says (8765, 8025 and 8026 may be taken on this machine).
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp_path)), "LANG": "C.UTF-8",
           "DATABASE_URL": database_url_of_tests(), "RECKON_SANDBOX_URL": f"http://127.0.0.1:{free_port()}",
           "RECKON_SMTP_PORT": str(free_port()), "RECKON_SMTP_LOOKUP_URL": f"http://127.0.0.1:{free_port()}",
           "RECKON_MCP_GATEWAY_URL": f"http://127.0.0.1:{free_port()}/mcp"}
    (tmp_path / STATE).write_text("")
    stack = None
    try:
        for block, shown in run_steps():
            if block.text.strip() == "make run":
                stack = Stack(tmp_path, _exported(tmp_path, env), port)
                continue
            command = block.text.replace(README_URL, f"http://127.0.0.1:{port}")
            done = subprocess.run(
                ["bash", "-c", f"set -euo pipefail\nsource {STATE}\n{command}\nexport -p > {STATE}"],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
            )
            assert done.returncode == 0, f"README.md:{block.line} failed:\n{command}\n{done.stdout}\n{done.stderr}"
            if shown is not None:
                assert done.stdout == shown, f"README.md:{block.line} printed something else:\n{command}"
        assert stack is not None

        # "Within a minute the overview shows succeeded and failed work."
        demo = Job.objects.filter(job_id__startswith="sim-")
        wait_for(lambda: {"succeeded", "failed"} <= set(demo.values_list("status", flat=True)),
                 timeout=max(1.0, 60 - (time.monotonic() - stack.started_at)), interval=0.5,
                 message="succeeded and failed demo work within the first minute")

        # What runs is what the README's table lists; Ctrl-C stops every one of them.
        children = stack.children()
        assert sorted(children) == sorted(_readme_children())
        # make, interrupted too, re-raises SIGINT once its child (runstack) has stopped everything.
        assert stack.interrupt() in (0, -signal.SIGINT), stack.output()[-3000:]
        for name in children:
            assert f"stopped {name}\n" in stack.output(), name
        wait_for(lambda: not any(_alive(pid) for pid in children.values()), timeout=15,
                 message="every child gone after Ctrl-C")
        stack = None
    finally:
        if stack is not None and stack.process.poll() is None:
            stack.interrupt()

    finished = dict(Job.objects.filter(job_id__in=["note-1", "note-2", "note-3", "mail-42", "mail-43", "mail-44"])
                    .values_list("job_id", "status"))
    assert finished == {job_id: "succeeded" for job_id in ("note-1", "note-2", "note-3", "mail-42", "mail-43",
                                                           "mail-44")}
    for sent in ("notes.write:note-1.txt", "mail.external:mail-42.eml", "mail.external:mail-43.eml"):
        assert (tmp_path / "outbox" / sent).exists(), sent
    assert_ledger_clean()


def _exported(folder, env: dict) -> dict:
    """The environment the README's shell has exported so far (what `make run` is given)."""
    done = subprocess.run(["bash", "-c", f"source {STATE}; env -0"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=30, check=True)
    exported = dict(item.split("=", 1) for item in done.stdout.split("\0") if "=" in item)
    for name in ("PWD", "OLDPWD", "SHLVL", "_"):
        exported.pop(name, None)
    return exported


def _oidc_settings(block: Block) -> dict[str, str]:
    values = {}
    for line in block.text.splitlines():
        name, _, value = line.partition("=")
        values[name] = value
    return values


def test_the_identity_provider_settings_start_reckon():
    (block,) = of_kind("oidc-env")
    values = _oidc_settings(block)
    from config.env import DECLARED

    assert set(values) <= set(DECLARED), set(values) - set(DECLARED)
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "RECKON_DEBUG": "true", **values})
    assert done.returncode == 0, done.stderr


@pytest.mark.django_db(transaction=True)
def test_a_person_signs_in_with_the_readme_settings_through_a_real_provider(live_server, settings, tmp_path):
    import requests
    from django.contrib.auth.models import User

    from config.env import Bool, List, Pairs, Sets
    from config.settings import oidc_apps
    from console.models import TenantScope
    from tests.oidc.harness import CLIENT_ID, CLIENT_SECRET, IdentityProvider

    values = _oidc_settings(of_kind("oidc-env")[0])
    (provider_id,) = Pairs("P", values["RECKON_OIDC_PROVIDERS"])
    assert Pairs("C", values["RECKON_OIDC_CLIENT_IDS"]) == {provider_id: CLIENT_ID}
    provider = IdentityProvider(tmp_path, redirect_uris=[f"{live_server.url}/accounts/oidc/{provider_id}/login/callback/"],
                                users={"olivia": {"password": "olivia-at-the-idp", "groups": ["reckon-operators"]}})
    provider.start()
    try:
        settings.RECKON_OIDC_PROVIDERS = {provider_id: provider.issuer}
        settings.RECKON_OIDC_NAMES = Pairs("N", values["RECKON_OIDC_NAMES"])
        settings.RECKON_OIDC_CLIENT_IDS = Pairs("C", values["RECKON_OIDC_CLIENT_IDS"])
        settings.RECKON_OIDC_CLIENT_SECRETS = {provider_id: CLIENT_SECRET}
        settings.RECKON_OIDC_GROUP_ROLES = Sets("R", values["RECKON_OIDC_GROUP_ROLES"])
        settings.RECKON_OIDC_GROUP_TENANTS = Sets("T", values["RECKON_OIDC_GROUP_TENANTS"])
        settings.RECKON_SSO_ONLY = Bool("S", values["RECKON_SSO_ONLY"])
        settings.SOCIALACCOUNT_PROVIDERS = {"openid_connect": {
            "OAUTH_PKCE_ENABLED": True, "SCOPE": List("S", values["RECKON_OIDC_SCOPES"]),
            "APPS": oidc_apps(settings.RECKON_OIDC_PROVIDERS, settings.RECKON_OIDC_NAMES,
                              settings.RECKON_OIDC_CLIENT_IDS, settings.RECKON_OIDC_CLIENT_SECRETS)}}
        with requests.Session() as browser:
            page = browser.get(f"{live_server.url}/accounts/login/", timeout=30)
            assert "Sign in with Acme SSO" in page.text
            form = browser.post(f"{live_server.url}/accounts/oidc/{provider_id}/login/", timeout=30,
                                data={"csrfmiddlewaretoken": browser.cookies["csrftoken"], "next": "/queue/"})
            assert form.url.startswith(f"{provider.issuer}/interaction/"), form.url
            back = browser.post(form.url, data={"login": "olivia", "password": "olivia-at-the-idp"}, timeout=30)
            assert back.url == f"{live_server.url}/queue/" and back.status_code == 200
        olivia = User.objects.get(username="olivia")
        assert set(olivia.groups.values_list("name", flat=True)) == {"operators"}
        assert TenantScope.objects.get(user=olivia).tenants == ["acme", "globex"]
    finally:
        provider.stop()
