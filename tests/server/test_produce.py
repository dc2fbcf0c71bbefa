"""Produce over the wire: real producers' batches land in the store as sent, with Kafka's per-partition errors."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Producer

from storage import Store
from storage.records import build_batch
from tests.server.raw_client import RawClient
from tests.server.store_reads import read_values
from txlog.server.broker import Broker
from txlog.server.socket_server import ListenerSpec, SocketServer
from txlog.topic_partition import TopicPartition

PRODUCE = 0
NONE, CORRUPT_MESSAGE, UNKNOWN_TOPIC_OR_PARTITION, MESSAGE_TOO_LARGE = 0, 2, 3, 10
INVALID_TOPIC_EXCEPTION, INVALID_REQUIRED_ACKS, OUT_OF_ORDER_SEQUENCE_NUMBER = 17, 21, 45
INVALID_TXN_STATE = 48
NOT_ENOUGH_REPLICAS = 19
INVALID_RECORD = 87
KAFKA_STORAGE_ERROR = 56


def _create_topic(data_dir: str, name: str, partitions: int = 1, **config) -> None:
    with Store.open(data_dir) as store:
        store.create_topic(name, partitions, config or None)


def _produce(
    client: RawClient,
    topic: str,
    partition: int,
    records: bytes,
    *,
    acks: int = -1,
    version: int = 9,
    transactional_id: str | None = None,
    expect_answer: bool = True,
):
    data = client.nested(
        PRODUCE,
        version,
        "TopicProduceData",
        name=topic,
        partition_data=(client.nested(PRODUCE, version, "PartitionProduceData", index=partition, records=records),),
    )
    response = client.send(
        PRODUCE,
        version,
        expect_answer=expect_answer,
        transactional_id=transactional_id,
        acks=acks,
        timeout=30000,
        topic_data=(data,),
    )
    if response is None:
        return None
    (answer,) = response.responses[0].partition_responses
    return answer


def _batch(values: list[bytes], **fields) -> bytes:
    return build_batch([(None, v, None, None) for v in values], **fields)


def test_idempotent_confluent_kafka_producer_with_acks_all_lands_every_record_once_in_order(txlog_server):
    _create_topic(txlog_server.data_dir, "orders", 2)
    producer = Producer(
        {"bootstrap.servers": txlog_server.bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5}
    )
    failures: list = []
    for i in range(400):
        producer.produce(
            "orders", value=b"%d" % i, partition=i % 2, on_delivery=lambda e, m: failures.append(e) if e else None
        )
    assert producer.flush(60) == 0
    assert failures == []
    for p in (0, 1):
        values = read_values(txlog_server.data_dir, TopicPartition("orders", p), "read_uncommitted")
        assert values == [b"%d" % i for i in range(p, 400, 2)]


def test_a_retried_idempotent_batch_is_answered_with_its_first_offsets_and_written_once(txlog_server):
    _create_topic(txlog_server.data_dir, "t")
    with RawClient(txlog_server.bootstrap) as client:
        first = _produce(client, "t", 0, _batch([b"a", b"b"], producer_id=7, producer_epoch=0, base_sequence=0))
        second = _produce(client, "t", 0, _batch([b"c"], producer_id=7, producer_epoch=0, base_sequence=2))
        retry = _produce(client, "t", 0, _batch([b"a", b"b"], producer_id=7, producer_epoch=0, base_sequence=0))
        gap = _produce(client, "t", 0, _batch([b"x"], producer_id=7, producer_epoch=0, base_sequence=9))
    assert (first.error_code, first.base_offset) == (NONE, 0)
    assert (second.error_code, second.base_offset) == (NONE, 2)
    assert (retry.error_code, retry.base_offset) == (NONE, 0)
    assert gap.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER and gap.base_offset == -1
    assert read_values(txlog_server.data_dir, TopicPartition("t", 0), "read_uncommitted") == [b"a", b"b", b"c"]


def test_produce_errors_are_per_partition_kafka_codes_and_never_create_a_topic(txlog_server):
    _create_topic(txlog_server.data_dir, "t", **{"max.message.bytes": "200"})
    good = _batch([b"ok"])
    corrupt = bytearray(_batch([b"bad"]))
    corrupt[-1] ^= 0xFF  # the CRC no longer matches
    with RawClient(txlog_server.bootstrap) as client:
        assert _produce(client, "nowhere", 0, good).error_code == UNKNOWN_TOPIC_OR_PARTITION
        assert _produce(client, "t", 5, good).error_code == UNKNOWN_TOPIC_OR_PARTITION
        assert _produce(client, "t", 0, bytes(corrupt)).error_code == CORRUPT_MESSAGE
        assert _produce(client, "t", 0, _batch([b"x" * 500])).error_code == MESSAGE_TOO_LARGE
        assert _produce(client, "t", 0, good, acks=2).error_code == INVALID_REQUIRED_ACKS
        assert _produce(client, "__consumer_offsets", 0, good).error_code == INVALID_TOPIC_EXCEPTION
        transactional = _batch([b"t"], producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True)
        assert _produce(client, "t", 0, transactional, transactional_id="nobody").error_code != NONE
        ok = _produce(client, "t", 0, good)
        assert (ok.error_code, ok.base_offset, ok.log_start_offset) == (NONE, 0, 0)
    with Store.open(txlog_server.data_dir, read_only=True) as store:
        assert not store.has_topic("nowhere")
    assert read_values(txlog_server.data_dir, TopicPartition("t", 0), "read_uncommitted") == [b"ok"]


def test_a_compacted_topic_refuses_a_clients_keyless_record(txlog_server):
    """Kafka's LogValidator rule for a client's batch (storage/partition_log.py's key check): a record
    without a key fails the whole batch with INVALID_RECORD, a keyed one is written."""
    _create_topic(txlog_server.data_dir, "c", **{"cleanup.policy": "compact"})
    mixed = build_batch([(b"k", b"a", None, None), (None, b"b", None, None)])
    with RawClient(txlog_server.bootstrap) as client:
        assert _produce(client, "c", 0, mixed).error_code == INVALID_RECORD
        assert _produce(client, "c", 0, build_batch([(b"k", b"c", None, None)])).error_code == NONE
    assert read_values(txlog_server.data_dir, TopicPartition("c", 0), "read_uncommitted") == [b"c"]


def test_min_insync_replicas_above_one_refuses_acks_all_but_not_acks_one(tmp_path):
    """One replica cannot meet min.insync.replicas=2: acks=all is refused before anything is written,
    as Kafka refuses it, while acks=1 (which asks for the leader's copy alone) is written."""
    from tests.server.serve_process import ServeProcess

    server = ServeProcess(str(tmp_path / "store"), args=["--config", "min.insync.replicas=2"]).start()
    try:
        _create_topic(server.data_dir, "t")
        with RawClient(server.bootstrap) as client:
            refused = _produce(client, "t", 0, _batch([b"all"]), acks=-1)
            written = _produce(client, "t", 0, _batch([b"one"]), acks=1)
        assert (refused.error_code, refused.base_offset) == (NOT_ENOUGH_REPLICAS, -1)
        assert "min.isr requirement of 2" in refused.error_message
        assert (written.error_code, written.base_offset) == (NONE, 0)
        assert read_values(server.data_dir, TopicPartition("t", 0), "read_uncommitted") == [b"one"]
    finally:
        server.kill()


def test_acks_zero_gets_no_answer_but_is_written(txlog_server):
    _create_topic(txlog_server.data_dir, "t")
    with RawClient(txlog_server.bootstrap) as client:
        assert _produce(client, "t", 0, _batch([b"quiet"]), acks=0, expect_answer=False) is None
        after = _produce(client, "t", 0, _batch([b"loud"]), acks=1)  # answered in order: the first was served
    assert (after.error_code, after.base_offset) == (NONE, 1)
    assert read_values(txlog_server.data_dir, TopicPartition("t", 0), "read_uncommitted") == [b"quiet", b"loud"]


@pytest.mark.parametrize("version", [3, 12])
def test_every_served_produce_version_appends(txlog_server, version):
    _create_topic(txlog_server.data_dir, "t")
    with RawClient(txlog_server.bootstrap) as client:
        answer = _produce(client, "t", 0, _batch([b"v"]), version=version)
    assert (answer.error_code, answer.base_offset) == (NONE, 0)


class _CountingExecutor(ThreadPoolExecutor):
    """The server's store thread, counting the work handed to it (what the test waits on)."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="txlog-store")
        self.submitted = 0

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[override]
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


def test_produce_requests_arriving_during_an_fdatasync_share_the_next_one(tmp_path, monkeypatch):
    """Group commit: three connections' requests that arrive while the partition's fdatasync runs
    are appended before any of them syncs, so one fdatasync makes all three durable.

    In-process server: the test holds the first fdatasync until the three requests have reached the
    store thread's queue, then counts the fdatasyncs the answers took (a server syncing each request
    in the same turn as its append takes three)."""
    data_dir = str(tmp_path / "store")
    _create_topic(data_dir, "t")
    server = SocketServer(Broker(Store.open(data_dir)), [ListenerSpec("127.0.0.1", 0)], log=lambda _: None)
    server.store_thread = counting = _CountingExecutor()
    held, release = threading.Event(), threading.Event()
    syncs: list[int] = []
    submitted_when_held: list[int] = []
    real_fdatasync = os.fdatasync

    def fdatasync(fd: int) -> None:
        syncs.append(fd)
        if len(syncs) == 1:
            submitted_when_held.append(counting.submitted)
            held.set()
            release.wait(60)
        real_fdatasync(fd)

    with _serving(server) as bootstrap:
        monkeypatch.setattr(os, "fdatasync", fdatasync)
        clients = [RawClient(bootstrap) for _ in range(4)]
        try:
            with ThreadPoolExecutor(4) as pool:
                first = pool.submit(_produce, clients[0], "t", 0, _batch([b"first"]))
                assert held.wait(60), "the first request never reached its fdatasync"
                others = [pool.submit(_produce, c, "t", 0, _batch([b"other"])) for c in clients[1:]]
                deadline = time.monotonic() + 60  # a wait for the server to read them, not a timed assertion
                while counting.submitted < submitted_when_held[0] + 3 and time.monotonic() < deadline:
                    time.sleep(0.01)
                release.set()
                answers = [first.result(60), *(f.result(60) for f in others)]
        finally:
            release.set()
            for client in clients:
                client.close()
    assert [a.error_code for a in answers] == [0, 0, 0, 0]
    assert sorted(a.base_offset for a in answers) == [0, 1, 2, 3]
    assert len(syncs) == 2, f"{len(syncs)} fdatasyncs for the first request and the three that waited"


# ---- a Produce over many partitions: one sync round (docs/DESIGN.md §3) ----------------------------------

WIDE = 8  # partitions of one request: at least storage.durable.SYNCFS_MIN_FILES


@contextlib.contextmanager
def _in_process_server(data_dir: str) -> Iterator[str]:
    """A server on `data_dir` in this process (so the test's patches of os and storage.durable reach its
    syncs); its bootstrap address while the block runs."""
    with _serving(SocketServer(Broker(Store.open(data_dir)), [ListenerSpec("127.0.0.1", 0)], log=lambda _: None)) as at:
        yield at


@contextlib.contextmanager
def _serving(server: SocketServer) -> Iterator[str]:
    """`server` serving on a thread of this process; its bootstrap address while the block runs."""
    loop = asyncio.new_event_loop()
    started = threading.Event()

    async def serve() -> None:
        await server.start()
        started.set()
        await server.serve_until_stopped()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    assert started.wait(60)
    try:
        yield f"127.0.0.1:{server.endpoints[0].port}"
    finally:
        loop.call_soon_threadsafe(server.stop)
        thread.join(60)


def _produce_wide(client: RawClient, topic: str) -> list:
    """One acks=all Produce request with a batch for each of WIDE partitions; the partitions' answers."""
    data = client.nested(
        PRODUCE,
        9,
        "TopicProduceData",
        name=topic,
        partition_data=tuple(
            client.nested(PRODUCE, 9, "PartitionProduceData", index=p, records=_batch([b"v%d" % p]))
            for p in range(WIDE)
        ),
    )
    response = client.send(PRODUCE, 9, transactional_id=None, acks=-1, timeout=30000, topic_data=(data,))
    return list(response.responses[0].partition_responses)


def _watch_wide_syncs(monkeypatch, fail: int | None) -> tuple[list[int], list[int]]:
    """(partition of each data fdatasync, one entry per syncfs); `fail`: that partition's fdatasync and
    any syncfs raise EIO (a lost page of that file fails the syncfs too)."""
    from storage import durable

    fdatasyncs: list[int] = []
    syncfs_calls: list[int] = []
    real_fdatasync, real_syncfs = os.fdatasync, durable.syncfs

    def fdatasync(fd: int) -> None:
        name = os.path.basename(os.path.dirname(os.readlink(f"/proc/self/fd/{fd}")))
        if name.startswith("wide-"):
            partition = int(name.rsplit("-", 1)[1])
            fdatasyncs.append(partition)
            if partition == fail:
                raise OSError(errno.EIO, "Input/output error")
        real_fdatasync(fd)

    def syncfs(fd: int) -> None:
        syncfs_calls.append(fd)
        if fail is not None:
            raise OSError(errno.EIO, "Input/output error")
        real_syncfs(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(durable, "syncfs", syncfs)
    return fdatasyncs, syncfs_calls


def test_a_produce_over_many_partitions_is_one_syncfs(tmp_path, monkeypatch):
    """With syncfs allowed (`auto`, nothing else dirty), the WIDE partitions one request wrote are made
    durable by one syncfs(2), no fdatasync each, before the answer."""
    from storage import durable

    if not durable.syncfs_usable():
        pytest.skip("syncfs(2) reports no writeback error here")
    monkeypatch.setenv(durable.SYNC_METHOD_ENV, "auto")
    monkeypatch.setattr(durable, "dirty_bytes", lambda: 0)
    data_dir = str(tmp_path / "store")
    _create_topic(data_dir, "wide", WIDE)
    with _in_process_server(data_dir) as bootstrap, RawClient(bootstrap) as client:
        _produce_wide(client, "wide")  # the server opens the partitions (a first open syncs what it finds)
        fdatasyncs, syncfs_calls = _watch_wide_syncs(monkeypatch, None)
        answers = _produce_wide(client, "wide")
    monkeypatch.undo()
    assert len(syncfs_calls) == 1 and fdatasyncs == []
    assert [(a.error_code, a.base_offset) for a in answers] == [(0, 1)] * WIDE
    with Store.open(data_dir, read_only=True) as store:
        assert [store.partition("wide", p).high_watermark for p in range(WIDE)] == [2] * WIDE


def test_a_failed_sync_in_a_wide_produce_fails_only_its_partition(tmp_path, monkeypatch, sync_method):
    data_dir = str(tmp_path / "store")
    _create_topic(data_dir, "wide", WIDE)
    with _in_process_server(data_dir) as bootstrap, RawClient(bootstrap) as client:
        _produce_wide(client, "wide")  # the server opens the partitions (a first open syncs what it finds)
        fdatasyncs, syncfs_calls = _watch_wide_syncs(monkeypatch, 3)
        answers = _produce_wide(client, "wide")
    monkeypatch.undo()
    assert len(syncfs_calls) == (1 if sync_method == "syncfs" else 0)
    assert sorted(fdatasyncs) == list(range(WIDE))  # every partition's own fdatasync ran, in one round
    assert [a.error_code for a in answers] == [0, 0, 0, KAFKA_STORAGE_ERROR, 0, 0, 0, 0]
    assert [a.base_offset for a in answers] == [1, 1, 1, -1, 1, 1, 1, 1]
