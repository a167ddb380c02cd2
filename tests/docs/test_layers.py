"""The layer contract covers every package Reckon installs, and docs/architecture.md draws it as
it stands. (`make test` runs `lint-imports`, which checks the code against the contract.)"""

from __future__ import annotations

import re
import tomllib

from tests.processes import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
LINTER = PYPROJECT["tool"]["importlinter"]
(LAYERS,) = [c["layers"] for c in LINTER["contracts"] if c["type"] == "layers"]


def floors(layers: list[str]) -> list[set[str]]:
    return [{name.strip() for name in re.split(r"[|:]", layer)} for layer in layers]


def test_every_installed_package_is_on_one_floor_of_the_contract():
    installed = {pattern.rstrip("*") for pattern in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]}
    on_floors = [name for floor in floors(LAYERS) for name in floor]
    assert sorted(on_floors) == sorted(set(on_floors)), "a package on two floors"
    assert set(on_floors) == installed == set(LINTER["root_packages"])
    assert all(":" not in layer for layer in LAYERS), "siblings that may import each other can form a circle"


def test_the_architecture_page_draws_the_floors_of_the_contract_in_its_order():
    page = (ROOT / "docs" / "architecture.md").read_text()
    drawing = page.split("### The layers", 1)[1].split("```", 2)[1]
    drawn = [match.group(1) for match in re.finditer(r"^ (\w+(?: \| \w+)*)\s{2,}", drawing, flags=re.MULTILINE)]
    assert drawn == LAYERS
