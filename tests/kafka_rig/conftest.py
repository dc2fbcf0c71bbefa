"""Fixtures of the real-Kafka rig: one broker per test session, a fresh topic per test.

The broker is a real Apache Kafka 4.4 (tests/kafka_rig/broker.py). It is not optional: these tests
are the differential oracle, so a machine that cannot fetch or run it fails them rather than
skipping (CI installs a JDK and Maven comes with the machine).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator

import pytest

from tests.kafka_rig.broker import KafkaBroker

_topic_numbers = itertools.count()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """The session's broker; tests that must stop a broker start their own KafkaBroker instead."""
    broker = KafkaBroker(str(tmp_path_factory.mktemp("kafka-broker"))).start()
    yield broker
    broker.stop()


@pytest.fixture
def kafka_topic(kafka_broker: KafkaBroker, request: pytest.FixtureRequest) -> Callable[..., str]:
    """Create a topic named after the test on the session broker: `kafka_topic(partitions=1, **configs)`."""

    def create(partitions: int = 1, **configs: str) -> str:
        base = re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:180]
        name = f"{base}-{next(_topic_numbers)}"
        kafka_broker.create_topic(name, partitions, {key.replace("_", "."): v for key, v in configs.items()})
        return name

    return create


@pytest.fixture(scope="session")
def broker_dataset(tmp_path_factory: pytest.TempPathFactory):
    """Data a real broker of its own wrote (tests/kafka_rig/broker_data.py), the broker stopped
    by a controlled shutdown; `.log_dir` is a copy of its log directory for the tests to read."""
    from tests.kafka_rig.broker_data import write_dataset

    return write_dataset(str(tmp_path_factory.mktemp("broker-dataset")))
