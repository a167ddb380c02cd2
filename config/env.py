"""Every environment variable Reckon reads, declared once with its default and meaning.

`config/settings.py` reads each setting through `setting(...)`, which parses the value and
records the declaration; `manage.py config_reference` writes docs/configuration.md and
.env.example from those records, and a test fails when the files differ from the declarations
or when any module reads a variable that is not declared. Adding a setting is one line:

    RECKON_THING = setting("RECKON_THING", 5, Int, "What it does; when to change it.", group=WORKERS)

Variables read outside the settings (the embedded database's, the fault points', the examples')
are declared with `declare(...)` in the settings too, so the reference lists them as well.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Parser = Callable[[str, str], Any]


def Str(name: str, raw: str) -> str:
    return raw


def Bool(name: str, raw: str) -> bool:
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name} must be a boolean (true/false), got {raw!r}")


def Int(name: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None


def Float(name: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None


def Share(name: str, raw: str) -> float:
    """A fraction above 0, at most 1."""
    value = Float(name, raw)
    if not 0 < value <= 1:
        raise ValueError(f"{name} must be above 0 and at most 1, got {raw!r}")
    return value


def List(name: str, raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


def Url(name: str, raw: str) -> str:
    return raw.rstrip("/")


def Networks(name: str, raw: str) -> list[str]:
    """A comma-separated list of IP addresses or networks (`10.0.0.5`, `10.0.0.0/8`, `::1`)."""
    networks = []
    for item in List(name, raw):
        try:
            networks.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise ValueError(f"{name} must list IP addresses or networks (10.0.0.0/8, ::1), got {item!r}") from None
    return networks


def Rates(name: str, raw: str) -> dict[str, float]:
    """`billing=100,mail=50` -> {"billing": 100.0, "mail": 50.0} (positive rates only)."""
    rates = {}
    for item in List(name, raw):
        key, _, value = item.rpartition("=")
        try:
            rate = float(value)
        except ValueError:
            rate = 0.0
        if not key.strip() or not rate > 0:
            raise ValueError(f"{name} takes NAME=REQUESTS_PER_S items separated by commas, got {item!r}")
        rates[key.strip()] = rate
    return rates


def Pairs(name: str, raw: str) -> dict[str, str]:
    """`corp=https://sso.example.com,partner=https://id.partner.test` -> {"corp": "https://…", …}: a
    value per name (the value may itself hold `=`)."""
    pairs = {}
    for item in List(name, raw):
        key, equals, value = item.partition("=")
        if not equals or not key.strip() or not value.strip():
            raise ValueError(f"{name} takes NAME=VALUE items separated by commas, got {item!r}")
        pairs[key.strip()] = value.strip()
    return pairs


def Sets(name: str, raw: str) -> dict[str, frozenset[str]]:
    """`reckon-ops=operators,reckon-leads=operators|approvers` -> {"reckon-ops": {"operators"}, …}."""
    return {key: frozenset(v.strip() for v in value.split("|") if v.strip()) for key, value in Pairs(name, raw).items()}


@dataclass(frozen=True)
class Declaration:
    name: str
    default: str  # as the reference shows it
    help: str
    group: str
    internal: bool = False  # for the tests and the harnesses: listed apart, left out of .env.example
    example: str | None = None  # a value worth showing in .env.example instead of the default
    secret: bool = False  # Reckon's own secret: never handed to an upstream (gateway/config.py refuses it)


DECLARED: dict[str, Declaration] = {}


def declare(name: str, default: Any, help: str, *, group: str, internal: bool = False,
            example: str | None = None, shown_default: str | None = None, secret: bool = False) -> None:
    """Record a variable read elsewhere (or read here by `setting`). The same declaration again is
    fine (Django imports the settings a second time after a failed first import); a different one
    is a mistake."""
    declaration = Declaration(name, shown_default if shown_default is not None else _show(default), help, group,
                              internal, example, secret)
    if DECLARED.setdefault(name, declaration) != declaration:
        raise ValueError(f"{name} is declared twice, differently")


def setting(name: str, default: Any, parse: Parser, help: str, *, group: str, internal: bool = False,
            example: str | None = None, shown_default: str | None = None, secret: bool = False) -> Any:
    """Declare `name` and return its value from the environment, parsed, or `default` when unset
    or empty (an empty value means "not set", as an empty line in .env would)."""
    declare(name, default, help, group=group, internal=internal, example=example, shown_default=shown_default,
            secret=secret)
    raw = os.environ.get(name, "")
    if raw == "":
        return default() if callable(default) else default
    return parse(name, raw)


def secret_names() -> frozenset[str]:
    """The variables declared as Reckon's own secrets."""
    return frozenset(declaration.name for declaration in DECLARED.values() if declaration.secret)


def _show(default: Any) -> str:
    if default is None or default == "" or default == [] or default == {}:
        return ""
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, list):
        return ",".join(default)
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


def load_dotenv(path: Path) -> list[str]:
    """Put `path`'s KEY=VALUE lines into the environment, except where a variable is already set:
    the real environment wins, so that a one-off `RECKON_DEBUG=false make …`, a process manager's
    or a test's explicit value is never overridden by a file someone left in the checkout.
    Blank lines and `#` comments are skipped; a value may be quoted. Returns the names it set."""
    if not path.is_file():
        return []
    loaded = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        name, equals, value = line.partition("=")
        name = name.strip()
        if not equals or not name.isidentifier():
            raise ValueError(f"{path}:{number}: expected NAME=value, got {line!r}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif " #" in value:  # a comment after an unquoted value
            value = value.split(" #", 1)[0].rstrip()
        if name not in os.environ:
            os.environ[name] = value
            loaded.append(name)
    return loaded


# -- The generated reference ---------------------------------------------------------------------

def _groups(internal: bool) -> dict[str, list[Declaration]]:
    groups: dict[str, list[Declaration]] = {}
    for declaration in DECLARED.values():
        if declaration.internal == internal:
            groups.setdefault(declaration.group, []).append(declaration)
    return groups


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def reference_markdown() -> str:
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated from the declarations in config/settings.py by `python manage.py config_reference`;",
        "     do not edit by hand (tests/config/test_env_reference.py compares the two). -->",
        "",
        "Reckon reads its settings from the environment. A `.env` file in the project folder (the",
        "checkout; installed from the package, the working directory: `config/paths.py`) is read at",
        "start-up when it exists (`KEY=value` lines, `#` comments); a variable already set in the",
        "environment wins over the file. An unset or empty variable takes its default. `.env.example`",
        "lists the same settings.",
        "",
    ]
    for internal, heading in ((False, None), (True, "For the tests and the harnesses")):
        groups = _groups(internal)
        if heading:
            lines += [f"## {heading}", "",
                      "Set by the test suite, the failure-injection harness or the benchmark for the processes "
                      "they start; a deployment leaves them unset.", ""]
        for group, declarations in groups.items():
            lines += [f"{'###' if internal else '##'} {group}", "", "| variable | default | meaning |", "|---|---|---|"]
            for d in declarations:
                default = f"`{_cell(d.default)}`" if d.default else "(unset)"
                lines.append(f"| `{d.name}` | {default} | {_cell(d.help)} |")
            lines.append("")
    return "\n".join(lines)


def env_example() -> str:
    lines = [
        "# Every setting Reckon reads (docs/configuration.md explains each), generated from",
        "# config/settings.py by `python manage.py config_reference`. Copy this file to .env and",
        "# uncomment what you change: Reckon reads .env at start-up; the real environment wins over it.",
        "# Debug is off unless RECKON_DEBUG=true; with debug off RECKON_SECRET_KEY and DATABASE_URL are",
        "# required (placeholders such as change-me are refused as keys). `make run` and `make test` set",
        "# what local development needs.",
    ]
    for group, declarations in _groups(False).items():
        lines += ["", f"# -- {group}"]
        for d in declarations:
            value = d.example if d.example is not None else d.default
            summary = d.help.split(". ")[0].rstrip(".")
            lines.append(f"# {d.name}={value}   # {summary}")
    return "\n".join(lines) + "\n"
