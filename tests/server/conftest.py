"""Fixtures: a `txlog serve` process on a fresh store, per test."""

from __future__ import annotations

import pytest

from tests.server.serve_process import ServeProcess


@pytest.fixture
def txlog_server(tmp_path):
    """A running `txlog serve` on a fresh store in tmp_path; killed at the end of the test."""
    server = ServeProcess(str(tmp_path / "store")).start()
    yield server
    server.kill()


@pytest.fixture
def bootstrap(txlog_server) -> str:
    return txlog_server.bootstrap
