"""Fetch, ListOffsets, OffsetForLeaderEpoch over the wire (docs/serve.md §4), through real clients.

Data is written by txlog's embedded producer on the server's own store directory (the
server is one more process on it), so these tests read what another process appended:
the long-poll test also shows that a fetch waiting for data notices such an append.
A few answers no client exposes (the raw batch bytes, the aborted list, session and epoch
rules) are checked with requests sent by `RawClient`.
"""

from __future__ import annotations

import os
import struct
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError
from confluent_kafka import TopicPartition as CKTopicPartition

import txlog
from storage.log_files import log_file
from tests.server.raw_client import RawClient

POLL_S = 60.0  # a ceiling for clients' waits, never a measurement


# ---- writing with the embedded clients --------------------------------------------------------------------


def create_topic(data_dir: str, name: str, partitions: int = 1) -> None:
    admin = txlog.Admin(data_dir)
    try:
        admin.create_topic(name, partitions)
    finally:
        admin.close()


def produce_txn(data_dir: str, topic: str, values: list[bytes], *, commit: bool, tid: str | None = None) -> None:
    """One transaction of `values` to partition 0, written to the log before it is ended."""
    p = txlog.Producer(data_dir, transactional_id=tid or f"tid-{uuid.uuid4().hex[:8]}")
    try:
        p.init_transactions()
        p.begin_transaction()
        for v in values:
            p.send(topic, value=v, partition=0)
        p.flush()  # in the log before the abort: a producer drops unsent batches when it aborts
        if commit:
            p.commit_transaction()
        else:
            p.abort_transaction()
    finally:
        p.close()


def produce_plain(
    data_dir: str, topic: str, values: list[bytes], *, compression: str | None = None, partition: int = 0
) -> None:
    p = txlog.Producer(data_dir, compression_type=compression)
    try:
        for v in values:
            p.send(topic, value=v, partition=partition, timestamp_ms=1_000)
        p.flush()
    finally:
        p.close()


def interleaved_topic(data_dir: str, topic: str) -> None:
    """c0 c1 | a0 | c2 | a1 | c3 ...: an aborted transaction's batches between two committed ones'."""
    create_topic(data_dir, topic)
    committed = txlog.Producer(data_dir, transactional_id="committer")
    aborted = txlog.Producer(data_dir, transactional_id="aborter")
    try:
        for p in (committed, aborted):
            p.init_transactions()
            p.begin_transaction()
        for i in range(3):
            committed.send(topic, value=b"c%d" % i, partition=0)
            committed.flush()
            aborted.send(topic, value=b"a%d" % i, partition=0)
            aborted.flush()
        aborted.abort_transaction()
        committed.send(topic, value=b"c3", partition=0)
        committed.commit_transaction()
    finally:
        committed.close()
        aborted.close()


# ---- reading with the clients --------------------------------------------------------------------------------


def ck_consumer(bootstrap: str, isolation: str, **extra: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            **extra,
        }
    )


def ck_read_to_end(bootstrap: str, topic: str, isolation: str, **extra: Any) -> list[bytes]:
    """Every value a confluent-kafka consumer sees from offset 0 until it reports the partition's end."""
    c = ck_consumer(bootstrap, isolation, **extra)
    try:
        c.assign([CKTopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + POLL_S
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    return values
                raise AssertionError(f"consumer error: {m.error()}")
            values.append(m.value())
        raise AssertionError(f"no end of partition within {POLL_S}s; got {values}")
    finally:
        c.close()


def kp_read_all(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        values: list[bytes] = []
        deadline = time.monotonic() + POLL_S
        while time.monotonic() < deadline and c.position(tp) < c.end_offsets([tp])[tp]:
            for records in c.poll(timeout_ms=500).values():
                values.extend(r.value for r in records)
        assert len(values) == expected, values
        return values
    finally:
        c.close()


# ---- raw requests, for what no client shows ----------------------------------------------------------------


def raw_fetch(
    bootstrap: str, topic: str, offset: int, *, isolation: int = 0, session_epoch: int = -1, **kw: Any
) -> Any:
    limit = kw.get("max_bytes", 1 << 20)
    with RawClient(bootstrap) as c:
        part = c.nested(1, 12, "FetchPartition", partition=0, fetch_offset=offset, partition_max_bytes=limit)
        return c.send(
            1,
            12,
            replica_id=-1,
            max_wait=0,
            min_bytes=0,
            max_bytes=limit,
            isolation_level=isolation,
            session_id=0,
            session_epoch=session_epoch,
            topics=(c.nested(1, 12, "FetchTopic", topic=topic, partitions=(part,)),),
            forgotten_topics_data=(),
        )


def one_partition(response: Any) -> Any:
    (topic,) = response.responses
    (partition,) = topic.partitions
    return partition


# ---- Fetch ------------------------------------------------------------------------------------------------


def test_read_committed_drops_an_aborted_transaction_interleaved_with_committed_ones(txlog_server):
    interleaved_topic(txlog_server.data_dir, "mixed")
    assert ck_read_to_end(txlog_server.bootstrap, "mixed", "read_uncommitted") == [
        b"c0", b"a0", b"c1", b"a1", b"c2", b"a2", b"c3",
    ]  # fmt: skip
    assert ck_read_to_end(txlog_server.bootstrap, "mixed", "read_committed") == [b"c0", b"c1", b"c2", b"c3"]
    assert kp_read_all(txlog_server.bootstrap, "mixed", "read_committed", 4) == [b"c0", b"c1", b"c2", b"c3"]
    assert len(kp_read_all(txlog_server.bootstrap, "mixed", "read_uncommitted", 7)) == 7


def test_the_aborted_list_names_the_aborted_producer_under_read_committed_only(txlog_server):
    interleaved_topic(txlog_server.data_dir, "mixed")
    committed = one_partition(raw_fetch(txlog_server.bootstrap, "mixed", 0, isolation=1))
    uncommitted = one_partition(raw_fetch(txlog_server.bootstrap, "mixed", 0, isolation=0))
    assert committed.error_code == 0 and uncommitted.error_code == 0
    assert [t.first_offset for t in committed.aborted_transactions] == [1]  # a0 follows c0
    assert uncommitted.aborted_transactions is None
    assert committed.records == uncommitted.records  # the same batches: the client drops the aborted ones
    assert committed.high_watermark == committed.last_stable_offset == 9  # 7 records, 2 markers


def test_a_topic_of_only_aborted_data_reads_empty_under_read_committed_without_hanging(txlog_server):
    """librdkafka's test 0129: the consumer reaches the end of a partition holding nothing it may show."""
    create_topic(txlog_server.data_dir, "aborted")
    produce_txn(txlog_server.data_dir, "aborted", [b"x%d" % i for i in range(10)], commit=False)
    assert ck_read_to_end(txlog_server.bootstrap, "aborted", "read_committed") == []
    assert len(ck_read_to_end(txlog_server.bootstrap, "aborted", "read_uncommitted")) == 10


def test_read_committed_stops_at_an_open_transaction(txlog_server):
    d = txlog_server.data_dir
    create_topic(d, "open")
    produce_txn(d, "open", [b"before"], commit=True)
    p = txlog.Producer(d, transactional_id="open-txn")
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send("open", value=b"undecided", partition=0)
        p.flush()
        assert ck_read_to_end(txlog_server.bootstrap, "open", "read_committed") == [b"before"]
        assert ck_read_to_end(txlog_server.bootstrap, "open", "read_uncommitted") == [b"before", b"undecided"]
        p.commit_transaction()
        assert ck_read_to_end(txlog_server.bootstrap, "open", "read_committed") == [b"before", b"undecided"]
    finally:
        p.close()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_come_back_byte_identical(txlog_server, codec):
    d = txlog_server.data_dir
    create_topic(d, codec)
    values = [b"%s-%d" % (codec.encode(), i) * 20 for i in range(200)]
    produce_plain(d, codec, values, compression=codec)
    fetched = one_partition(raw_fetch(txlog_server.bootstrap, codec, 0))
    with open(log_file(os.path.join(d, f"{codec}-0"), 0), "rb") as f:
        assert fetched.records == f.read()
    assert ck_read_to_end(txlog_server.bootstrap, codec, "read_uncommitted") == values


def test_max_bytes_still_returns_the_first_batch_whole(txlog_server):
    d = txlog_server.data_dir
    create_topic(d, "big")
    produce_plain(d, "big", [os.urandom(5000)])
    produce_plain(d, "big", [os.urandom(5000)])
    answer = one_partition(raw_fetch(txlog_server.bootstrap, "big", 0, max_bytes=100))
    with open(log_file(os.path.join(d, "big-0"), 0), "rb") as f:
        segment = f.read()
    first = struct.unpack_from(">i", segment, 8)[0] + 12
    assert answer.records == segment[:first]  # one batch, larger than the limits, and nothing more
    rest = one_partition(raw_fetch(txlog_server.bootstrap, "big", 1, max_bytes=100))
    assert rest.records == segment[first:]


def test_only_the_first_partition_with_data_may_pass_the_response_limit(txlog_server):
    d = txlog_server.data_dir
    create_topic(d, "two", partitions=2)
    for partition in (0, 1):
        produce_plain(d, "two", [os.urandom(5000)], partition=partition)
    with RawClient(txlog_server.bootstrap) as c:
        parts = tuple(
            c.nested(1, 12, "FetchPartition", partition=p, fetch_offset=0, partition_max_bytes=1 << 20) for p in (0, 1)
        )
        response = c.send(
            1,
            12,
            replica_id=-1,
            max_wait=0,
            min_bytes=0,
            max_bytes=100,
            isolation_level=0,
            topics=(c.nested(1, 12, "FetchTopic", topic="two", partitions=parts),),
            forgotten_topics_data=(),
        )
    first, second = response.responses[0].partitions
    assert len(first.records) > 5000  # the one batch however large: the consumer progresses
    assert (second.error_code, second.records, second.high_watermark) == (0, b"", 1)  # its turn comes next fetch


def test_a_fetch_out_of_range_or_of_an_unknown_partition_gets_the_partition_error(txlog_server):
    create_topic(txlog_server.data_dir, "small")
    produce_plain(txlog_server.data_dir, "small", [b"v"])
    past = one_partition(raw_fetch(txlog_server.bootstrap, "small", 5))
    assert past.error_code == 1 and past.records == b""  # OFFSET_OUT_OF_RANGE
    at_end = one_partition(raw_fetch(txlog_server.bootstrap, "small", 1))
    assert at_end.error_code == 0 and at_end.records == b"" and at_end.high_watermark == 1
    unknown = one_partition(raw_fetch(txlog_server.bootstrap, "no-such-topic", 0))
    assert unknown.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_no_fetch_session_is_kept_and_an_incremental_fetch_is_refused(txlog_server):
    create_topic(txlog_server.data_dir, "s")
    new_session = raw_fetch(txlog_server.bootstrap, "s", 0, session_epoch=0)
    assert new_session.error_code == 0 and new_session.session_id == 0  # full answer, no session made
    incremental = raw_fetch(txlog_server.bootstrap, "s", 0, session_epoch=1)
    assert incremental.error_code == 70 and incremental.responses == ()  # FETCH_SESSION_ID_NOT_FOUND


def test_a_long_poll_returns_when_another_process_appends(txlog_server):
    """The consumer would wait fetch.wait.max.ms (200 s, its request timeout longer still) for its
    first record if the fetch did not notice the append: the test gives up far sooner, so the
    record arriving is the proof."""
    d = txlog_server.data_dir
    create_topic(d, "waiting")
    c = ck_consumer(
        txlog_server.bootstrap, "read_uncommitted", **{"fetch.wait.max.ms": 200_000, "socket.timeout.ms": 300_000}
    )
    try:
        c.assign([CKTopicPartition("waiting", 0, 0)])
        first = c.poll(5.0)  # connects and sends the fetch that now waits on the empty partition
        assert first is None or first.error().code() == KafkaError._PARTITION_EOF
        produce_plain(d, "waiting", [b"hello"])
        deadline = time.monotonic() + POLL_S
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None or (m.error() and m.error().code() == KafkaError._PARTITION_EOF):
                continue
            assert m.error() is None and m.value() == b"hello"
            return
        raise AssertionError("the waiting fetch never answered with the appended record")
    finally:
        c.close()


# ---- ListOffsets --------------------------------------------------------------------------------------------


def test_list_offsets_earliest_latest_and_by_time_for_both_isolation_levels(txlog_server):
    from kafka import KafkaConsumer, TopicPartition

    d = txlog_server.data_dir
    create_topic(d, "times")
    p = txlog.Producer(d)
    for i, ts in enumerate((1_000, 2_000, 3_000)):
        p.send("times", value=b"%d" % i, partition=0, timestamp_ms=ts)
    p.close()
    t = txlog.Producer(d, transactional_id="holds-lso")
    try:
        t.init_transactions()
        t.begin_transaction()
        t.send("times", value=b"open", partition=0, timestamp_ms=4_000)
        t.flush()  # offset 3: read_committed's latest stays at 3, read_uncommitted's is 4
        tp = CKTopicPartition("times", 0)
        for isolation, latest in (("read_committed", 3), ("read_uncommitted", 4)):
            c = ck_consumer(txlog_server.bootstrap, isolation)
            try:
                assert c.get_watermark_offsets(tp, timeout=POLL_S, cached=False) == (0, latest)
                found = c.offsets_for_times([CKTopicPartition("times", 0, 1_500)], timeout=POLL_S)
                assert found[0].offset == 1 and found[0].error is None
                past = c.offsets_for_times([CKTopicPartition("times", 0, 9_000)], timeout=POLL_S)
                assert past[0].offset == -1  # nothing at or after it: Kafka answers offset -1
            finally:
                c.close()
            kc = KafkaConsumer(bootstrap_servers=txlog_server.bootstrap, isolation_level=isolation)
            try:
                ktp = TopicPartition("times", 0)
                assert kc.end_offsets([ktp])[ktp] == latest
                assert kc.beginning_offsets([ktp])[ktp] == 0
                at = kc.offsets_for_times({ktp: 2_000})[ktp]
                assert (at.offset, at.timestamp) == (1, 2_000)
            finally:
                kc.close()
        t.abort_transaction()
    finally:
        t.close()


def test_list_offsets_max_timestamp_and_the_tiered_storage_specs(txlog_server):
    from confluent_kafka.admin import AdminClient, OffsetSpec

    d = txlog_server.data_dir
    create_topic(d, "newest")
    p = txlog.Producer(d)
    for ts in (3_000, 9_000, 5_000):
        p.send("newest", value=b"v", partition=0, timestamp_ms=ts)
        p.flush()  # one batch each
    p.close()
    admin = AdminClient({"bootstrap.servers": txlog_server.bootstrap})
    (future,) = admin.list_offsets({CKTopicPartition("newest", 0): OffsetSpec.max_timestamp()}).values()
    info = future.result(POLL_S)
    assert (info.offset, info.timestamp) == (1, 9_000)
    answers = {spec: list_offset(txlog_server.bootstrap, "newest", spec) for spec in (-3, -4, -5)}
    assert {spec: (a.error_code, a.offset) for spec, a in answers.items()} == {-3: (0, 1), -4: (0, 0), -5: (0, -1)}


def list_offset(bootstrap: str, topic: str, timestamp: int, version: int = 10) -> Any:
    with RawClient(bootstrap) as c:
        part = c.nested(2, version, "ListOffsetsPartition", partition_index=0, timestamp=timestamp)
        topics = (c.nested(2, version, "ListOffsetsTopic", name=topic, partitions=(part,)),)
        response = c.send(2, version, replica_id=-1, isolation_level=0, timeout=30_000, topics=topics)
    (answer,) = response.topics[0].partitions
    return answer


def test_list_offsets_of_an_unknown_partition_is_a_partition_error(txlog_server):
    part = list_offset(txlog_server.bootstrap, "nowhere", -1)
    assert (part.error_code, part.offset) == (3, -1)


# ---- OffsetForLeaderEpoch -----------------------------------------------------------------------------------


def offset_for_epoch(bootstrap: str, topic: str, epoch: int, current: int = -1) -> Any:
    with RawClient(bootstrap) as c:
        part = c.nested(
            23, 4, "OffsetForLeaderPartition", partition=0, current_leader_epoch=current, leader_epoch=epoch
        )
        topics = (c.nested(23, 4, "OffsetForLeaderTopic", topic=topic, partitions=(part,)),)
        (result,) = c.send(23, 4, replica_id=-1, topics=topics).topics[0].partitions
    return result


def test_offset_for_leader_epoch_follows_kafkas_rules_for_the_one_epoch(txlog_server):
    create_topic(txlog_server.data_dir, "epochs")
    produce_plain(txlog_server.data_dir, "epochs", [b"a", b"b", b"c"])
    current = offset_for_epoch(txlog_server.bootstrap, "epochs", 0)
    assert (current.error_code, current.leader_epoch, current.end_offset) == (0, 0, 3)
    later = offset_for_epoch(txlog_server.bootstrap, "epochs", 4)
    assert (later.error_code, later.leader_epoch, later.end_offset) == (0, -1, -1)
    undefined = offset_for_epoch(txlog_server.bootstrap, "epochs", -1)
    assert (undefined.leader_epoch, undefined.end_offset) == (-1, -1)
    assert offset_for_epoch(txlog_server.bootstrap, "epochs", 0, current=3).error_code == 75  # UNKNOWN_LEADER_EPOCH
    assert offset_for_epoch(txlog_server.bootstrap, "nowhere", 0).error_code == 3


# ---- DeleteRecords ------------------------------------------------------------------------------------------


def test_delete_records_moves_the_log_start_and_a_fetch_below_it_is_out_of_range(txlog_server):
    from confluent_kafka.admin import AdminClient

    d = txlog_server.data_dir
    create_topic(d, "trim")
    produce_plain(d, "trim", [b"v%d" % i for i in range(10)])
    admin = AdminClient({"bootstrap.servers": txlog_server.bootstrap})
    (future,) = admin.delete_records([CKTopicPartition("trim", 0, 4)], request_timeout=POLL_S).values()
    assert future.result(POLL_S).low_watermark == 4
    assert one_partition(raw_fetch(txlog_server.bootstrap, "trim", 2)).error_code == 1  # OFFSET_OUT_OF_RANGE
    # A consumer positioned below the log start resets (auto.offset.reset=earliest) to it.
    assert ck_read_to_end(txlog_server.bootstrap, "trim", "read_uncommitted") == [b"v%d" % i for i in range(4, 10)]
    c = ck_consumer(txlog_server.bootstrap, "read_committed")
    try:
        assert c.get_watermark_offsets(CKTopicPartition("trim", 0), timeout=POLL_S, cached=False) == (4, 10)
    finally:
        c.close()
    (past,) = admin.delete_records([CKTopicPartition("trim", 0, 11)], request_timeout=POLL_S).values()
    with pytest.raises(Exception, match="OFFSET_OUT_OF_RANGE|out of range"):
        past.result(POLL_S)
    (everything,) = admin.delete_records([CKTopicPartition("trim", 0, -1)], request_timeout=POLL_S).values()
    assert everything.result(POLL_S).low_watermark == 10  # -1: up to the high watermark
