"""Every ledger module imports first, with only the ledger app installed (issue 43: `import
ledger.fastpath` once raised ImportError from an import circle through ledger.services, and the
shipped configuration worked only because another app's ready() imported ledger.services first).

One process sets Django up with the ledger alone, then forks once per module: each child imports
that module before any other of the ledger's (beyond what django.setup() itself imports: the app
and its models)."""

import os
import subprocess
import sys
import textwrap

from tests.processes import ROOT

CHILDREN = textwrap.dedent("""
    import os, sys, traceback
    from pathlib import Path

    import django

    django.setup()  # DJANGO_SETTINGS_MODULE: Reckon's settings with the ledger app alone
    from django.apps import apps
    assert [a.name for a in apps.get_app_configs() if not a.name.startswith("django")] == ["pgtrigger", "ledger"]
    root = Path("ledger")
    names = sorted(".".join(path.with_suffix("").parts).removesuffix(".__init__") for path in root.rglob("*.py")
                   if not {"migrations", "management"} & set(path.parts))
    failed = []
    for name in names:
        pid = os.fork()
        if pid == 0:
            try:
                __import__(name)
            except BaseException:
                traceback.print_exc()
                os._exit(1)
            os._exit(0)
        if os.waitpid(pid, 0)[1]:
            failed.append(name)
    print("modules", len(names))
    print("failed", failed)
""")
ONLY_LEDGER = """from config.settings import *  # noqa: F403
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "pgtrigger", "django_q", "ledger"]
"""


def test_every_ledger_module_imports_first_with_only_the_ledger_installed(tmp_path):
    (tmp_path / "only_ledger.py").write_text(ONLY_LEDGER)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "only_ledger", "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    done = subprocess.run([sys.executable, "-c", CHILDREN], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "failed []" in done.stdout, done.stdout + done.stderr[-3000:]
    count = int(done.stdout.split("modules ", 1)[1].split()[0])
    assert count > 30, done.stdout  # every module was walked, not none
