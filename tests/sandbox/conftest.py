"""Fixtures for the sandbox provider tests: one real server process per session, reset per test.

These tests never touch Reckon's database."""

import pytest

from sandbox.testing import SandboxProcess


@pytest.fixture(scope="session")
def sandbox_process():
    with SandboxProcess() as process:
        yield process


@pytest.fixture
def sandbox(sandbox_process):
    """The running sandbox provider, wiped clean (data, profiles, fault configuration)."""
    if sandbox_process.process is None or sandbox_process.process.poll() is not None:
        sandbox_process.start()  # a test killed it on purpose
    sandbox_process.reset()
    return sandbox_process
