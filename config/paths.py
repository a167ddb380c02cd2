"""Where Reckon's code is, and where it keeps its own files.

`CODE_DIR` holds Reckon's packages: the checkout, or site-packages when Reckon is installed from
its package (`pip install` of the wheel). `PROJECT_DIR` is where Reckon reads and writes its
files — `.env`, `actions.toml`, the embedded database's `.pgdata/`, `staticfiles/`: the checkout's
folder when it runs from a checkout (manage.py beside the packages, an editable install
included), otherwise the working directory the process starts in (a systemd unit's
`WorkingDirectory=`). A deployment can name every one of them explicitly instead
(RECKON_ACTIONS_FILE, RECKON_PGDATA_DIR, DATABASE_URL, the environment instead of a .env file).
"""

from __future__ import annotations

from pathlib import Path

CODE_DIR = Path(__file__).resolve().parent.parent
FROM_CHECKOUT = (CODE_DIR / "manage.py").is_file()
PROJECT_DIR = CODE_DIR if FROM_CHECKOUT else Path.cwd()
