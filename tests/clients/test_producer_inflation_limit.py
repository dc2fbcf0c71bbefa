"""The producer meets the inflation limit (docs/kafka-formats.md §1.4; issue 23, item 4).

A record whose batch compresses far below max.message.bytes but inflates past 64 MiB would be a
batch every reader refuses, so the append refuses it and the producer's future fails with
RecordTooLargeError (Kafka's producer refuses a record over max.request.size the same way); the
producer goes on with the next record.
"""

from __future__ import annotations

import pytest

import txlog
from txlog.errors import RecordTooLargeError

MIB = 1 << 20


@pytest.mark.parametrize("compression", ["zstd", "gzip"])
def test_a_record_inflating_past_the_limit_is_too_large_and_the_next_one_goes(store, compression):
    store.create_topic("t", 1)
    producer = txlog.Producer(store, compression_type=compression)
    big = producer.send("t", value=bytes(65 * MIB))  # 65 MiB of zeros: a few KiB compressed
    with pytest.raises(RecordTooLargeError, match="inflates past 67108864 bytes"):
        big.get(timeout=120)
    assert producer.send("t", value=b"small").get(timeout=120).offset == 0
    producer.close()
    (batch,) = store.partition("t", 0).read(0)
    assert [r.value for r in batch.records()] == [b"small"]
