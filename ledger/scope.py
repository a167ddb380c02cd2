"""What a caller may act for: the tenants and actions of an API token, a worker's filter."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True)
class Scope:
    """Tenants and actions a caller may act for; None: all."""

    tenants: Collection[str] | None = None
    actions: Collection[str] | None = None

    def covers(self, *, tenant: str, action: str) -> bool:
        return ((self.tenants is None or tenant in self.tenants)
                and (self.actions is None or action in self.actions))

    def params(self) -> dict:
        return {"tenants": None if self.tenants is None else list(self.tenants),
                "actions": None if self.actions is None else list(self.actions)}


EVERYTHING = Scope()
