"""A round trip store -> Kafka cluster -> store (`txlog mirror --to`, then `--from`) against the
rig's real broker gives the same records per partition: keys, values, headers, timestamps and
order, with nothing of the aborted transactions (docs/mirror.md)."""

from __future__ import annotations

import itertools
from typing import Any

from storage.store import Store
from tests.kafka_rig.broker import KafkaBroker
from tests.mirror.store_data import committed_rows, write_mixed
from txlog.mirror.from_cluster import mirror_from
from txlog.mirror.to_cluster import mirror_to

_names = itertools.count()


def test_store_to_cluster_to_store_keeps_every_partition(kafka_broker: KafkaBroker, tmp_path: Any) -> None:
    topic = f"round-trip-{next(_names)}"
    source = Store.open(str(tmp_path / "source"))
    target = Store.open(str(tmp_path / "target"))
    try:
        source.create_topic(topic, 2)
        write_mixed(source, topic)
        there = mirror_to(source, kafka_broker.bootstrap, [topic])
        back = mirror_from(target, kafka_broker.bootstrap, [topic])
        expected = committed_rows(source, topic)
        assert sum(map(len, expected.values())) > 0
        got = committed_rows(target, topic)
        assert got == expected
        assert back.records == there.records == sum(map(len, expected.values()))
        assert back.topics_created == [topic]
        assert not any(v is not None and v.startswith(b"aborted") for rows in got.values() for _, v, _, _ in rows)
    finally:
        source.close()
        target.close()
