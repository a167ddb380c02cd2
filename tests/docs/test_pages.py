"""Every page is executable: the README and each page under docs/, every fenced block saying how it
is checked, and checked.

The convention: the line before each fenced block is `<!-- check: KIND -->`, one of

- `run`: a shell block, run in bash (`set -euo pipefail`) in a scratch folder that links the
  checkout's files (so actions.toml and outbox/ stay out of the checkout). Each page is a new
  terminal: its blocks run in page order in one shell whose exported variables carry from block to
  block, and nothing carries from one page to the next, so a page says what its terminal needs. The
  pages run in the site's order (README first, then mkdocs.yml's nav). The first block that is
  exactly `make run` starts a real `make run PORT=<free port>` there, with the environment its page
  exported, on the test database, the sandboxes and the gateway moved off their ports by their
  settings (as a user whose ports are taken would); it keeps running for the pages after it, and a
  later `make run` block restarts it (Ctrl-C, then the same command in the same terminal).
  http://127.0.0.1:8000 and :8300 become its ports.
- `output`: what the `run` block before it prints, compared exactly.
- `make-targets`: each line's `make TARGET` exists, and `make test` runs what the line says.
- `actions-toml`: every action in it goes through the declarations loader.
- `python-action`: executed; it must register its action.
- `python-webhook`: the handler, called with requests signed the way Reckon signs them.
- `diagram`: every function, state and file it names exists in the code.
- `drawing`: every file it names exists.
- `layers`: the layer drawing, held to the import contract by tests/docs/test_layers.py.
- `chaos-table`: printed again by the chaos command's own formatter from its rows: it must match.
- `syntax`: a sample with nothing in Reckon to run it against (another tool's configuration, a
  framework's code): it must parse as its language says (`python`, `json`, `toml`, `yaml`, `sh`, `js`).
- `prometheus-scrape`: a Prometheus scrape job: it reads the path `/metrics` is served at, with a
  bearer token, as `/metrics` asks with debug off.
- `ha-run`: a block of docs/deploying/high-availability.md's "Try it on one machine", run in order
  by tests/docs/test_high_availability.py (a Patroni cluster of its own).
- `mcp-json`: Claude Code's `.mcp.json` (docs/agents/frameworks/claude-code.md): its server's
  tool names, with Claude Code's prefix, fit the model APIs' pattern (tests/frameworks/test_names.py).
- `mcp-client-config`: an MCP client's configuration (JSON): it points at the gateway `make run`
  starts, with the token from the environment.
- `oidc-env`: identity-provider settings (`NAME=value` lines): each is a declared setting, Reckon
  starts with them, and a person signs in with them through the tests' real provider (its issuer
  and secret in place of the sample's) and gets the roles and tenants the mapping gives.

A block with no check, or an unknown one, fails the suite. Beyond the blocks, every page is held to
the code: each `RECKON_…` setting it names is declared, each `manage.py` command and `make` target
exists, and the references (commands, metrics, the actions file's keys, statuses, decisions,
alerts) list what the code has.
"""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from chaos.management.commands.chaos import table as chaos_table
from chaos.scenarios import SCENARIOS
from ledger.actions import _registry, get_action
from ledger.declarations import parse_action
from ledger.models import Job
from tests.processes import ROOT, database_url_of_tests, free_port, wait_for
from tests.reconciliation.helpers import assert_ledger_clean

README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_URL = "http://127.0.0.1:8000"
GATEWAY_URL = "http://127.0.0.1:8300"
CHECK = re.compile(r"^<!-- check: ([a-z-]+) -->$")
KINDS = {"run", "output", "make-targets", "actions-toml", "python-action", "python-webhook", "diagram", "drawing",
         "layers", "chaos-table", "mcp-client-config", "oidc-env", "prometheus-scrape", "syntax", "mcp-json", "ha-run"}
STATE = "reckon-page-state.sh"
# What `make run` links to in the scratch folder: enough for the Makefile, manage.py and the examples.
LINKED = ("Makefile", "pyproject.toml", "clients", "manage.py", ".venv", "examples")


def _nav_pages(entries) -> list[str]:
    found = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        found += _nav_pages(value) if isinstance(value, list) else [value]
    return found


def pages() -> list[Path]:
    """The README, then the site's pages in its navigation's order, then any page not in it."""
    nav = [DOCS / name for name in _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])]
    rest = sorted(path for path in DOCS.rglob("*.md") if path not in nav)
    return [README, *nav, *rest]


def where(path: Path) -> str:
    return str(path.relative_to(ROOT))


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    info: str
    text: str
    check: str | None

    @property
    def at(self) -> str:
        return f"{where(self.page)}:{self.line}"


def page_blocks(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    found, index = [], 0
    while index < len(lines):
        if lines[index].startswith("```"):
            end = lines.index("```", index + 1)
            check = CHECK.match(lines[index - 1])
            found.append(Block(page, index + 1, lines[index][3:].strip(), "\n".join(lines[index + 1:end]) + "\n",
                               check.group(1) if check else None))
            index = end + 1
        else:
            index += 1
    return found


def all_blocks() -> list[Block]:
    return [block for page in pages() for block in page_blocks(page)]


def of_kind(kind: str) -> list[Block]:
    return [block for block in all_blocks() if block.check == kind]


def run_steps(page: Path) -> list[tuple[Block, str | None]]:
    """Each `run` block of a page with the output the page shows for it (None: not shown)."""
    blocks = page_blocks(page)
    return [(block, blocks[i + 1].text if i + 1 < len(blocks) and blocks[i + 1].check == "output" else None)
            for i, block in enumerate(blocks) if block.check == "run"]


def test_every_block_of_every_page_says_how_it_is_checked():
    blocks = all_blocks()
    assert len(blocks) > 25
    unchecked = [f"{b.at} ({b.info or 'no language'})" for b in blocks if b.check not in KINDS]
    assert unchecked == [], f"add `<!-- check: KIND -->` before these blocks ({', '.join(sorted(KINDS))})"
    for page in pages():
        blocks = page_blocks(page)
        for index, block in enumerate(blocks):
            if block.check == "output":
                assert blocks[index - 1].check == "run", f"{block.at}: an output follows a run block"
            if block.check == "run":
                assert block.info == "sh", f"{block.at}: a run block is sh"
    starts = [b for b in of_kind("run") if b.text.strip() == "make run"]
    assert starts and starts[0].page == DOCS / "agents" / "first-action.md"


def test_every_drawing_names_files_that_exist():
    blocks = of_kind("drawing")
    assert blocks
    for block in blocks:
        named = re.findall(r"\b([a-z_]+\.py)\b", block.text)
        missing = [name for name in named if not any(ROOT.glob(f"*/{name}")) and not any(ROOT.glob(f"*/*/{name}"))]
        assert missing == [], f"{block.at}: {missing}"


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
            action = parse_action(name, table, source=block.at)
            assert action.name == name and action.external == (table["executor"] == "external")
            assert action.reversible == table["reversible"]


def test_the_action_sample_registers_its_action():
    (block,) = of_kind("python-action")
    name = re.search(r'@action\("([^"]+)"', block.text).group(1)
    assert name not in _registry
    try:
        namespace: dict = {}
        exec(compile(block.text, block.at, "exec"), namespace)  # nosec B102  # the docs' own sample
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
    exec(compile(block.text, block.at, "exec"), namespace)  # nosec B102  # the docs' own sample
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


def test_the_mcp_client_configuration_points_at_the_gateway_make_run_starts():
    (block,) = of_kind("mcp-client-config")
    server = json.loads(block.text)["mcpServers"]["reckon"]
    assert server["type"] == "http" and server["url"] == f"{GATEWAY_URL}/mcp"
    assert "export RECKON_MCP_TOKEN=" in block.page.read_text()
    assert server["headers"] == {"Authorization": "Bearer ${RECKON_MCP_TOKEN}"}
    from config.env import DECLARED

    assert DECLARED["RECKON_MCP_GATEWAY_URL"].default == f"{GATEWAY_URL}/mcp"


def test_every_syntax_block_parses_as_its_language():
    parse = {"python": lambda text, at: compile(text, at, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT), "json": lambda text, at: json.loads(text),
             "toml": lambda text, at: tomllib.loads(text), "yaml": lambda text, at: yaml.safe_load(text),
             "sh": lambda text, at: subprocess.run(["bash", "-n"], input=text, text=True, check=True, timeout=30),
             "js": lambda text, at: subprocess.run(["node", "--input-type=module", "--check"], input=text, text=True,
                                                   check=True, timeout=30)}
    assert of_kind("syntax")
    for block in of_kind("syntax"):
        assert block.info in parse, f"{block.at}: a syntax block names its language ({', '.join(parse)})"
        parse[block.info](block.text, block.at)


def test_the_prometheus_scrape_job_reads_metrics_with_a_bearer_token():
    from django.urls import reverse

    (block,) = of_kind("prometheus-scrape")
    (job,) = yaml.safe_load(block.text)["scrape_configs"]
    assert job["metrics_path"] == reverse("metrics")
    assert set(job["authorization"]) == {"credentials_file"}  # type defaults to Bearer
    assert job["static_configs"][0]["targets"]


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


def _stopped(stack: Stack, children: dict[str, int]) -> None:
    """Ctrl-C stopped every child it started, each saying so."""
    # make, interrupted too, re-raises SIGINT once its child (runstack) has stopped everything.
    assert stack.interrupt() in (0, -signal.SIGINT), stack.output()[-3000:]
    for name in children:
        assert f"stopped {name}\n" in stack.output(), name
    wait_for(lambda: not any(_alive(pid) for pid in children.values()), timeout=15,
             message="every child gone after Ctrl-C")


def _console(port: int):
    """A signed-in console session (the demo's admin) on the stack's web process."""
    import requests

    from sandbox.demo_users import DEMO_PASSWORDS

    browser = requests.Session()
    browser.get(f"http://127.0.0.1:{port}/accounts/login/", timeout=30)
    browser.post(f"http://127.0.0.1:{port}/accounts/login/", timeout=30,
                 data={"csrfmiddlewaretoken": browser.cookies["csrftoken"], "username": "admin",
                       "password": DEMO_PASSWORDS["admin"]})
    return browser


@pytest.mark.django_db(transaction=True)
def test_every_command_of_every_page_runs_as_written_beside_make_run(tmp_path):
    for name in LINKED:
        (tmp_path / name).symlink_to(ROOT / name)
    port = free_port()
    gateway = f"http://127.0.0.1:{free_port()}"
    # A new user's shell, on the test database, with the sandboxes' and the gateway's ports moved
    # by their settings (8765, 8025, 8026 and 8300 may be taken on this machine).
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp_path)), "LANG": "C.UTF-8",
           "DATABASE_URL": database_url_of_tests(), "RECKON_SANDBOX_URL": f"http://127.0.0.1:{free_port()}",
           "RECKON_SMTP_PORT": str(free_port()), "RECKON_SMTP_LOOKUP_URL": f"http://127.0.0.1:{free_port()}",
           "RECKON_MCP_GATEWAY_URL": f"{gateway}/mcp",
           # A new host, as a new user's is: the ledger watch's memory of this checkout's earlier runs
           # (on a test database made anew since) would rightly read the fresh ledger as history lost.
           "RECKON_LEDGER_WATCH_DIR": str(tmp_path / "ledger-watch")}
    stack, stack_env, first_start, children, ran = None, None, None, {}, 0
    try:
        for page in pages():
            (tmp_path / STATE).write_text("")  # a new terminal
            for block, shown in run_steps(page):
                ran += 1
                if block.text.strip() == "make run":
                    if stack is None:
                        stack_env = _exported(tmp_path, env)
                        stack = Stack(tmp_path, stack_env, port)
                        first_start = stack.started_at
                    else:  # Ctrl-C in make run's terminal, then make run again there
                        _stopped(stack, stack.children())
                        stack = Stack(tmp_path, stack_env, port)
                    children = stack.children()
                    continue
                command = block.text.replace(README_URL, f"http://127.0.0.1:{port}").replace(GATEWAY_URL, gateway)
                done = subprocess.run(
                    ["bash", "-c", f"set -euo pipefail\nsource {STATE}\n{command}\nexport -p > {STATE}"],
                    cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                )
                assert done.returncode == 0, f"{block.at} failed:\n{command}\n{done.stdout}\n{done.stderr}"
                if shown is not None:
                    assert done.stdout == shown, f"{block.at} printed something else:\n{command}"
        assert stack is not None and ran > 10

        # "Within a minute the overview shows succeeded and failed work."
        demo = Job.objects.filter(job_id__startswith="sim-")
        wait_for(lambda: {"succeeded", "failed"} <= set(demo.values_list("status", flat=True)),
                 timeout=max(1.0, 60 - (time.monotonic() - first_start)), interval=0.5,
                 message="succeeded and failed demo work within the first minute")

        # The MCP walkthrough's job page shows the tool as declared (its web process read the upstream).
        # Its search link finds the call, and the page has the arguments with api_key redacted.
        mcp_job = Job.objects.get(action="mcp:notes.create_note")
        console = _console(port)
        found = console.get(f"http://127.0.0.1:{port}/search/?q=groceries", timeout=30)
        assert f"/jobs/{mcp_job.job_id}/" in found.text
        page = console.get(f"http://127.0.0.1:{port}/jobs/{mcp_job.job_id}/", timeout=30)
        assert page.status_code == 200 and "not declared in this deployment" not in page.text
        assert "mcp:notes.create_note" in page.text and "groceries" in page.text and "sk-123" not in page.text

        # What runs is what the README's table lists; Ctrl-C stops every one of them.
        assert sorted(children) == sorted(_readme_children())
        _stopped(stack, children)
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
    """The environment the page's shell has exported so far (what `make run` is given)."""
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


# -- Every page held to the code ------------------------------------------------------------------

# Variables a page names that are not Reckon's settings: the walkthroughs' shell variables and the
# client's, and the test suite's browser.
NOT_SETTINGS = {"RECKON_URL", "RECKON_API_TOKEN", "RECKON_MCP_TOKEN", "RECKON_TEST_CHROMIUM", "RECKON_TEST_LOGS"}


def _text(page: Path) -> str:
    return page.read_text()


def test_every_setting_a_page_names_is_declared():
    from config.env import DECLARED

    for page in pages():
        named = set(re.findall(r"\b(RECKON_[A-Z0-9_]*[A-Z0-9])\b", _text(page))) - NOT_SETTINGS
        undeclared = sorted(name for name in named if name not in DECLARED)
        assert undeclared == [], f"{where(page)} names settings config/settings.py does not declare"


def _commands() -> dict[str, str]:
    from django.core.management import get_commands

    return get_commands()


def test_every_command_a_page_names_exists_and_every_make_target_too():
    commands, makefile = _commands(), (ROOT / "Makefile").read_text()
    for page in pages():
        text = _text(page)
        named = set(re.findall(r"(?:manage\.py|\breckon) ([a-z][a-z_]+)\b", text))
        missing = sorted(name for name in named if name not in commands)
        assert missing == [], f"{where(page)} names commands that do not exist"
        targets = set(re.findall(r"`make ([a-z][\w-]*)", text))
        missing = sorted(t for t in targets if not re.search(rf"^{re.escape(t)}:", makefile, flags=re.MULTILINE))
        assert missing == [], f"{where(page)} names make targets the Makefile lacks"


def test_the_commands_page_lists_every_command_of_reckon_and_every_make_target():
    page = _text(DOCS / "reference" / "commands.md")
    ours = {name for name, app in _commands().items()
            if app.split(".")[0] in {"api", "alerts", "approvals", "bench", "chaos", "config", "console", "gateway",
                                     "ledger", "reconciliation", "sandbox", "sso"}}
    listed = set(re.findall(r"^\| `manage\.py ([a-z_]+)", page, flags=re.MULTILINE))
    assert sorted(ours - listed) == [], "commands missing from docs/reference/commands.md"
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), flags=re.MULTILINE))
    assert sorted(targets - set(re.findall(r"`make ([a-z][\w-]*)", page))) == []


@pytest.mark.django_db
def test_the_metrics_page_lists_every_family_metrics_exposes_with_its_type_and_labels():
    from api.metrics import exposition

    text = exposition()
    exposed = dict(re.findall(r"^# TYPE (\w+) (\w+)$", text, flags=re.MULTILINE))
    rows = re.findall(r"^\| `(reckon_\w+)` \| (\w+) \|([^|]*)\|", _text(DOCS / "reference" / "metrics.md"),
                      flags=re.MULTILINE)
    assert {name: kind for name, kind, _ in rows} == exposed
    for name, _, labels in rows:
        samples = re.findall(rf"^{name}(?:\{{([^}}]*)\}})? ", text, flags=re.MULTILINE)
        shown = {pair.split("=")[0] for sample in samples for pair in sample.split(",") if sample}
        documented = {label.strip(" `") for label in labels.split(",") if label.strip()}
        assert shown <= documented, name


def test_the_actions_file_page_lists_every_key_the_loaders_take():
    from gateway.config import TOOL_KEYS, UPSTREAM_KEYS
    from ledger.declarations import KEYS

    page = _text(DOCS / "reference" / "actions-file.md")
    sections = {title: body for title, body in re.findall(r"^## (.+?)\n(.*?)(?=^## |\Z)", page, re.MULTILINE | re.DOTALL)}

    def keys(title: str) -> set[str]:
        return {key for cell in re.findall(r"^\| ([^|]+) \|", sections[title], flags=re.MULTILINE)
                for key in re.findall(r"`(\w+)`", cell)}

    assert keys('`[actions."name"]`') == set(KEYS)
    assert keys("`[[mcp.upstreams]]`") == UPSTREAM_KEYS
    assert keys("`[mcp.upstreams.tools.<tool>]`") == TOOL_KEYS


def test_the_console_page_explains_every_status_and_every_decision_and_the_alerts_page_every_alert():
    from alerts.models import AlertCondition
    from ledger.states import JobStatus
    from reconciliation.registry import REGISTRY

    console = _text(DOCS / "operating" / "index.md")
    statuses = set(re.findall(r"^\| `(\w+)` \|", console.split("## Every status", 1)[1].split("\n## ", 1)[0],
                              flags=re.MULTILINE))
    assert statuses == set(JobStatus.values)
    decisions = console.split("## Every decision", 1)[1].split("\n## ", 1)[0]
    for decision in (REGISTRY.values() if isinstance(REGISTRY, dict) else REGISTRY):
        row = re.search(rf'^\| "{re.escape(decision.label)}" \|([^|]*)\| (\w+) \|', decisions, flags=re.MULTILINE)
        assert row, decision.label
        assert row.group(1).strip(" `") == decision.key and row.group(2) == decision.role, decision.label
    from ledger.states import QUEUE_TABS

    tab_keys = re.search(r"^\| queue \| ((?:`\w` ?)+) \| the tabs", console, flags=re.MULTILINE).group(1)
    assert tab_keys.replace("`", "").split() == [key[:1] for key in QUEUE_TABS]
    readme = _text(README)
    assert set(re.findall(r"^\| `(\w+)` \|", readme.split("## What a job's status means", 1)[1], re.MULTILINE)) \
        == set(JobStatus.values)
    # Each alert has its runbook: a section under "When an alert fires" naming it.
    operating = "\n".join(_text(page).split("## When an alert fires", 1)[-1] for page in (DOCS / "operating").glob("*.md"))
    runbooks = re.split(r"^### ", operating, flags=re.MULTILINE)[1:]
    rules = set(re.findall(r"- alert: (\w+)", (ROOT / "deploy" / "prometheus" / "reckon-alerts.yml").read_text()))
    for name in [*AlertCondition.values, *rules]:
        assert any(f"`{name}`" in runbook.split("\n\n", 2)[1] for runbook in runbooks), name


def test_the_api_reference_is_the_document_the_api_serves():
    done = subprocess.run([sys.executable, "manage.py", "api_reference", "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_every_link_of_the_readme_leads_to_a_page_and_its_heading():
    """The site's build checks the pages' links; the README is not in the site, so here."""
    from markdown.extensions.toc import slugify

    links = re.findall(r"\]\(((?!https?://)[^)#]+)(?:#([\w-]+))?\)", _text(README))
    assert len(links) > 15
    for target, anchor in links:
        page = ROOT / target
        assert page.is_file(), target
        if anchor:
            headings = {slugify(heading, "-") for heading in re.findall(r"^#+ (.+)$", page.read_text(), re.MULTILINE)}
            assert anchor in headings, f"{target}#{anchor}"


def test_the_api_reference_has_every_path_and_schema_the_running_api_serves(client):
    served = client.get("/api/v1/openapi.json").json()
    written = json.loads((DOCS / "reference" / "openapi.json").read_text())
    assert sorted(written["paths"]) == sorted(served["paths"])
    for path, operations in served["paths"].items():
        assert sorted(written["paths"][path]) == sorted(operations), path
    assert sorted(written["components"]["schemas"]) == sorted(served["components"]["schemas"])


def test_every_option_the_commands_page_gives_a_command_is_one_it_takes():
    from django.core.management import load_command_class

    commands = _commands()
    page = _text(DOCS / "reference" / "commands.md")
    rows = re.findall(r"^\| `manage\.py ([a-z_]+)([^|]*(?:\\\|[^|]*)*)` \|(.*)\|$", page, flags=re.MULTILINE)
    assert len(rows) > 20
    for name, usage, meaning in rows:
        parsers = [load_command_class(commands[name], name).create_parser("manage.py", name)]
        for parser in parsers:  # with its subcommands' (worker_token create, revoke, list)
            parsers += [sub for action in parser._actions if action.choices and isinstance(action.choices, dict)
                        for sub in action.choices.values()]
        takes = {option for parser in parsers for action in parser._actions for option in action.option_strings}
        given = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", usage + meaning))
        assert sorted(given - takes) == [], name


def test_every_default_a_page_shows_for_a_setting_is_its_declared_default():
    from config.env import DECLARED

    shown = 0
    for page in pages():
        if page == DOCS / "configuration.md":  # generated from the declarations
            continue
        for names, defaults in re.findall(r"^\| ((?:`RECKON_\w+`(?:, )?)+) \| ([^|]+) \|", _text(page), re.MULTILINE):
            names, defaults = re.findall(r"`(RECKON_\w+)`", names), [d.strip(" `") for d in defaults.split(",")]
            for name, default in zip(names, defaults, strict=True):
                declared = DECLARED[name].default.strip("`")
                assert default == declared or (default == "unset" and declared in ("", "(unset)")), f"{where(page)}: {name}"
                shown += 1
    assert shown > 5
