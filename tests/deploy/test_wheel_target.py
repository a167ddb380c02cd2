"""`make wheel`, as docs/deploying/several-hosts.md says to build the package: the wheel in dist/,
and nothing else left in the checkout (setuptools builds in it: build/ and an .egg-info)."""

from __future__ import annotations

import shutil
import subprocess

from tests.deploy.test_install import NOT_SOURCES
from tests.processes import ROOT


def test_make_wheel_leaves_only_the_wheel(tmp_path):
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT, checkout, ignore=NOT_SOURCES, symlinks=True)
    (checkout / ".venv").symlink_to(ROOT / ".venv")
    before = {path.name for path in checkout.iterdir()}
    # `-o`: the linked .venv is the checkout's own; make here must not reinstall it.
    done = subprocess.run(["make", "-o", ".venv/.installed", "wheel"], cwd=checkout, capture_output=True, text=True,  # nosec B603, B607  # make from PATH, fixed argv
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert [path.name for path in (checkout / "dist").iterdir()] == ["reckon_ledger-0.1.0-py3-none-any.whl"]
    assert {path.name for path in checkout.iterdir()} - before == {"dist"}
