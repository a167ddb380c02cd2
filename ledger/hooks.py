"""What the ledger asks of the apps above it, without importing them.

The ledger imports nothing above it (the layer contract in pyproject.toml, checked by
`lint-imports`). Where it needs an app above to act, it calls a hook here, and that app registers
its function from its AppConfig.ready (reconciliation/apps.py). A hook nobody registered does
nothing: the ledger works on its own, and the schedules (config/schedules.py) still run.
"""

from __future__ import annotations

from collections.abc import Callable


class Hook:
    """One function an app above lends a layer below it; calling the hook calls that function."""

    def __init__(self, purpose: str):
        self.purpose = purpose
        self._function: Callable[..., object] | None = None

    def register(self, function: Callable[..., object]) -> None:
        self._function = function

    def __call__(self, *args) -> object:
        """The lent function's answer; None when nobody lent one."""
        if self._function is not None:
            return self._function(*args)
        return None

    def __repr__(self) -> str:
        return f"<Hook {self.purpose}: {getattr(self._function, '__qualname__', None)}>"


# Work became unknown and its change has committed: a reconciliation pass should run soon (the
# schedule fires only once a minute).
reconciliation_due = Hook("queue a reconciliation pass")

# A worker's call to its provider may have changed this process's provider budget (ledger.budget):
# publish it for the console.
provider_called = Hook("publish this process's provider budgets")
