"""The docs site builds from docs/ with every warning an error (mkdocs.yml: strict, every internal
link and anchor validated), renders the HTTP API from its OpenAPI document, and fetches nothing
from elsewhere when a page is read."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import yaml

from tests.processes import ROOT, ManagedProcess, free_port, wait_for


def _page(port: int, path: str) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:  # nosec B310  # the test's own server
            return answer.read().decode()
    except OSError:
        return ""


def test_the_site_builds_with_no_warning_and_nothing_fetched_from_elsewhere(tmp_path):
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARNING" not in done.stderr, done.stderr[-3000:]
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["strict"] is True and config["theme"]["font"] is False
    assert all(value == "warn" for value in config["validation"]["links"].values())

    pages = list(site.rglob("*.html"))
    assert len(pages) > 20
    for page in pages:
        html = page.read_text()
        external = re.findall(r'<(?:script|link)\b[^>]*\b(?:src|href)="(https?://[^"]+)"', html)
        assert external == [], f"{page.relative_to(site)} loads {external}"

    # Every path of the API's document is rendered on the reference page.
    api = (site / "reference" / "api" / "index.html").read_text()
    document = json.loads((ROOT / "docs" / "reference" / "openapi.json").read_text())
    for path in document["paths"]:
        rendered = re.sub(r"\{(\w+)\}", r'<span class="route-param">{\1}</span>', path)
        assert rendered in api, path
    assert (site / "search" / "search_index.json").exists()


def test_make_docs_serves_the_site_and_make_installs_its_tools():
    makefile = (ROOT / "Makefile").read_text()
    assert ",docs]" in makefile
    default = re.search(r"^DOCS_PORT \?= (\d+)$", makefile, flags=re.MULTILINE).group(1)
    for page in (ROOT / "README.md", ROOT / "docs" / "reference" / "commands.md"):
        assert re.findall(r"`make docs`[^\n]*?http://127\.0\.0\.1:(\d+)/", page.read_text()) == [default], page
    port = free_port()
    # `-o`: the checkout's .venv is installed already; make must not reinstall it here.
    with ManagedProcess(["make", "-o", ".venv/.installed", "docs", f"DOCS_PORT={port}"], log_name="make-docs",
                        env={"NO_MKDOCS_2_WARNING": "1"}) as served:
        wait_for(lambda: _page(port, "/") and _page(port, "/operating/alerting/"), timeout=120, interval=0.3,
                 message=f"make docs serving:\n{served.output()[-2000:]}")
        assert "When an alert fires" in _page(port, "/operating/alerting/")
    extra = {line.split("==")[0].strip(' "') for line in Path(ROOT / "pyproject.toml").read_text()
             .split("\ndocs = [", 1)[1].split("]", 1)[0].splitlines() if "==" in line}
    assert {"mkdocs", "mkdocs-material", "neoteroi-mkdocs"} <= extra
