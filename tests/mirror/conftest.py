"""The real-Kafka rig's fixtures (tests/kafka_rig/conftest.py) for the mirror's tests: one session broker."""

from tests.kafka_rig.conftest import kafka_broker, kafka_topic  # noqa: F401  (fixtures, used by name)
