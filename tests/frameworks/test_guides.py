"""The framework guides show the code their tests run: each block after `<!-- file: PATH -->` on a
page under docs/agents/frameworks/ is that file of the checkout, exactly."""

from __future__ import annotations

import re

import pytest

from tests.processes import ROOT

GUIDES = ROOT / "docs" / "agents" / "frameworks"
SHOWN = re.compile(r"<!-- file: (?P<path>\S+) -->\n(?:<!-- check: [a-z-]+ -->\n)?```\w*\n(?P<text>.*?)```\n", re.DOTALL)
PAGES = ["pydantic-ai.md", "openai-agents.md", "langgraph.md", "vercel-ai.md", "claude-code.md", "index.md"]


def test_there_is_a_page_for_each_framework_and_the_index_links_each():
    assert sorted(path.name for path in GUIDES.glob("*.md")) == sorted(PAGES)
    index = (GUIDES / "index.md").read_text()
    assert all(f"]({page})" in index for page in PAGES if page != "index.md")


@pytest.mark.parametrize("page", [page for page in PAGES if page not in {"claude-code.md", "index.md"}])
def test_the_guide_shows_the_file_its_test_runs(page):
    shown = list(SHOWN.finditer((GUIDES / page).read_text()))

    assert shown, f"{page} shows no file"
    for block in shown:
        assert block["path"].startswith("examples/frameworks/")
        assert block["text"] == (ROOT / block["path"]).read_text(), f"{page} shows another {block['path']}"
