"""A real OpenID Connect provider for the tests: tests/oidc/provider.mjs (the `oidc-provider`
package, installed by `make test` with `npm ci`) in a process of its own, with static clients and
users that a test may change while it runs (the provider reads its users at every sign-in)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from tests.processes import ROOT, ManagedProcess, free_port, wait_for

PROVIDER_SCRIPT = ROOT / "tests" / "oidc" / "provider.mjs"
CLIENT_ID = "reckon"
CLIENT_SECRET = "reckon-test-client-secret"  # nosec B105  # the test provider's static client


class IdentityProvider:
    def __init__(self, folder: Path, *, redirect_uris: list[str], users: dict):
        self.folder = folder
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.users_file = folder / "users.json"
        self.set_users(users)
        (folder / "provider.json").write_text(json.dumps({
            "issuer": self.issuer, "port": self.port, "users_file": "users.json",
            "clients": [{"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET, "redirect_uris": redirect_uris}],
        }))
        self.process: ManagedProcess | None = None

    def set_users(self, users: dict) -> None:
        self.users_file.write_text(json.dumps(users))

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.issuer}/.well-known/openid-configuration", timeout=2) as response:  # nosec B310  # the test's own provider on loopback
                return response.status == 200
        except OSError:
            return False

    def start(self) -> IdentityProvider:
        if not (ROOT / "tests" / "oidc" / "node_modules" / "oidc-provider").is_dir():
            raise AssertionError("the test provider is not installed: run `make test` (or `cd tests/oidc && npm ci`)")
        self.process = ManagedProcess(["node", str(PROVIDER_SCRIPT), str(self.folder / "provider.json")],
                                      log_name=f"oidc-provider-{self.port}").start()
        wait_for(self.answers, timeout=30, message=f"the test identity provider on {self.issuer}")
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None
