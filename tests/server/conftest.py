"""Fixtures: a `txlog serve` process on a fresh store, per test; and `endpoint`, the same test
against the real Kafka 4.4 broker and against `txlog serve`.

`SERVER_KINDS` are the servers the `endpoint` tests run against. The environment variable
`TXLOG_SERVE_KINDS` (comma-separated, e.g. `TXLOG_SERVE_KINDS=kafka`) narrows them for a run;
the kinds it leaves out are skipped, with that reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.kafka_rig.broker import KafkaBroker
from tests.server.endpoints import Endpoint, KafkaEndpoint, TxlogEndpoint
from tests.server.serve_process import ServeProcess

SERVER_KINDS = ("kafka", "txlog")
KINDS_ENV = "TXLOG_SERVE_KINDS"


def selected_kinds() -> tuple[str, ...]:
    chosen = os.environ.get(KINDS_ENV)
    if not chosen:
        return SERVER_KINDS
    kinds = tuple(kind.strip() for kind in chosen.split(",") if kind.strip())
    unknown = set(kinds) - set(SERVER_KINDS)
    if unknown:
        raise pytest.UsageError(f"{KINDS_ENV} names {sorted(unknown)}; the kinds are {list(SERVER_KINDS)}")
    return kinds


@pytest.fixture
def txlog_server(tmp_path):
    """A running `txlog serve` on a fresh store in tmp_path; killed at the end of the test."""
    server = ServeProcess(str(tmp_path / "store")).start()
    yield server
    server.kill()


@pytest.fixture
def bootstrap(txlog_server) -> str:
    return txlog_server.bootstrap


@pytest.fixture(scope="session")
def shared_kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One real broker for the `endpoint` tests that do not stop it (each uses its own topics)."""
    broker = KafkaBroker(str(tmp_path_factory.mktemp("kafka-endpoint"))).start()
    yield broker
    broker.stop()


def _skip_unselected(kind: str) -> None:
    if kind not in selected_kinds():
        pytest.skip(f"{KINDS_ENV}={os.environ.get(KINDS_ENV)} leaves out {kind}")


@pytest.fixture(params=SERVER_KINDS)
def endpoint(request: pytest.FixtureRequest, tmp_path) -> Iterator[Endpoint]:
    """A server to test against: the session's Kafka broker, or a fresh `txlog serve`."""
    _skip_unselected(request.param)
    if request.param == "kafka":
        yield KafkaEndpoint(request.getfixturevalue("shared_kafka_broker"))
        return
    server = ServeProcess(str(tmp_path / "store")).start()
    try:
        yield TxlogEndpoint(server)
    finally:
        server.kill()


@pytest.fixture(params=SERVER_KINDS)
def own_endpoint(request: pytest.FixtureRequest, tmp_path) -> Iterator[Endpoint]:
    """A server of this test's own, which it may kill and start again: a fresh broker or `txlog serve`."""
    _skip_unselected(request.param)
    if request.param == "kafka":
        broker = KafkaBroker(str(tmp_path / "kafka")).start()
        try:
            yield KafkaEndpoint(broker)
        finally:
            broker.kill()
        return
    server = ServeProcess(str(tmp_path / "store")).start()
    try:
        yield TxlogEndpoint(server)
    finally:
        server.kill()
