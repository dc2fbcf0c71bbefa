"""Shared fixtures. `--big` turns soak and crash-matrix tests up to full size."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
KAFKA_REAL = os.path.join(SHARED, "fixtures", "kafka-real")

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--big", action="store_true", default=False, help="run soak and crash-matrix tests at full size (slow)"
    )


@pytest.fixture
def big(request: pytest.FixtureRequest) -> bool:
    """True when the run asked for full-size soak/crash runs."""
    return bool(request.config.getoption("--big"))


@pytest.fixture
def store_path(tmp_path) -> str:
    return str(tmp_path / "store")


@pytest.fixture
def store(store_path):
    from storage import Store

    s = Store.open(store_path)
    yield s
    s.close()


@pytest.fixture(params=["fdatasync", "syncfs"])
def sync_method(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each way a sync round over several files can make them durable (storage.durable.sync_round):
    one fdatasync per file, or one syncfs(2) (skipped where the kernel cannot report errors through it).
    Set in the environment (`TXLOG_SYNC_METHOD`), so worker processes the test starts use it too."""
    from storage.durable import SYNC_METHOD_ENV, syncfs_usable

    if request.param == "syncfs" and not syncfs_usable():
        pytest.skip("syncfs(2) reports no writeback error here (Linux before 5.8, or not Linux)")
    monkeypatch.setenv(SYNC_METHOD_ENV, str(request.param))
    return str(request.param)


@pytest.fixture
def kafka_real_copy(tmp_path) -> str:
    """A writable copy of the real Kafka segment fixture (the original is read-only)."""
    if not os.path.isdir(KAFKA_REAL):
        pytest.skip("shared/fixtures/kafka-real is not beside the repository")
    dst = tmp_path / "kafka-real"
    shutil.copytree(KAFKA_REAL, dst, ignore=shutil.ignore_patterns("README.md"))
    return str(dst)


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of the test run (local[2], UI off), with the txlog source registered."""
    from txlog.spark import local_session  # pyspark is a test dependency: a missing one must fail

    session = local_session("local[2]", app_name="txlog-tests")
    yield session
    session.stop()
