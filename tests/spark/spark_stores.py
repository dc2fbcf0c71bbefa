"""Stores for the Spark tests, built through txlog's public API.

`mixed_store` holds every kind of log a reader must get right: plain and idempotent
records, committed, aborted and still-open transactions interleaved on the same
partitions, compressed batches, headers, null keys and values, and a second topic.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import txlog
from txlog.topic_partition import TopicPartition

TOPICS = {"orders": 3, "audit": 1}


def mixed_store(path: str, *, records: int = 60, segment_bytes: int | None = None) -> str:
    """Build the mixed store at `path`; returns the path. One transaction is left open."""
    with txlog.Admin(path) as admin:
        config = {"segment.bytes": segment_bytes} if segment_bytes else None
        for topic, partitions in TOPICS.items():
            admin.create_topic(topic, partitions, config)
    # batch_size=1: a batch per record (the next send seals the last), the layout these tests assume
    plain = txlog.Producer(path, enable_idempotence=False, batch_size=1)
    idem = txlog.Producer(path, compression_type="gzip")
    committer = txlog.Producer(path, transactional_id="committer", compression_type="lz4")
    aborter = txlog.Producer(path, transactional_id="aborter")
    # the longest timeout allowed (15 min): tests must not see it aborted by its timeout mid-run
    opener = txlog.Producer(path, transactional_id="opener", transaction_timeout_ms=900_000)
    committer.init_transactions()
    aborter.init_transactions()
    opener.init_transactions()
    for i in range(records):
        partition = i % TOPICS["orders"]
        plain.send(
            "orders",
            f"plain-{i}".encode(),
            key=None if i % 5 == 0 else f"k{i}".encode(),
            partition=partition,
            headers=[("h", f"{i}".encode()), ("n", None)] if i % 4 == 0 else None,
        )
        idem.send("orders", None if i % 7 == 0 else f"idem-{i}".encode(), key=f"k{i}".encode(), partition=partition)
        if i % 10 == 0:
            plain.flush()
            idem.flush()
            _transaction(committer, i, commit=True)
            _transaction(aborter, i, commit=False)
    plain.flush()
    idem.flush()
    idem.send("audit", b"audit-1", key=b"a")
    idem.flush()
    opener.begin_transaction()
    opener.send("orders", b"open-0", partition=1)
    opener.send("audit", b"open-audit", partition=0)
    opener.flush()
    _transaction(committer, records, commit=True)  # committed, after the open one: above the LSO
    for producer in (plain, idem, committer, aborter):
        producer.close()
    return path


def _transaction(producer: txlog.Producer, i: int, *, commit: bool) -> None:
    producer.begin_transaction()
    for j in range(4):
        producer.send(
            "orders",
            f"{'c' if commit else 'a'}-{i}-{j}".encode(),
            key=f"t{j}".encode(),
            partition=j % TOPICS["orders"],
            headers=[("txn", producer.transactional_id.encode())],
        )
    producer.send("audit", f"{'c' if commit else 'a'}-{i}".encode())
    producer.flush()  # an abort drops records not yet sent; these must reach the log first
    if commit:
        producer.commit_transaction()
    else:
        producer.abort_transaction()


def consumer_rows(
    path: str, topic_partitions, isolation: str, starts: dict | None = None, ends: dict | None = None
) -> list[tuple]:
    """What txlog.Consumer returns, as (topic, partition, offset, key, value) rows in offset order."""
    # Read-only, as the Spark source reads: a writable Consumer may abort timed-out transactions.
    store = txlog.Store.open(path, read_only=True)
    consumer = txlog.Consumer(store, isolation_level=isolation, enable_auto_commit=False)
    tps = [TopicPartition(t, p) for t, p in topic_partitions]
    consumer.assign(tps)
    for tp in tps:
        if starts and (tp.topic, tp.partition) in starts:
            consumer.seek(tp, starts[(tp.topic, tp.partition)])
        else:
            consumer.seek_to_beginning(tp)
    rows = []
    while True:
        batch = consumer.poll(max_records=1000)
        if not batch:
            break
        rows.extend(batch)
    consumer.close(autocommit=False)
    store.close()
    out = []
    for r in rows:
        end = (ends or {}).get((r.topic, r.partition))
        if end is None or r.offset < end:
            out.append(r)
    return sorted(out, key=lambda r: (r.topic, r.partition, r.offset))


# ---- more stores and helpers for the source's tests (tests/test_spark_*.py) ------------------------------

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
#: Record index -> CreateTime given by the producer in `codec_store` (1 ms after the epoch; 2100-01-01 + 123 ms).
EXPLICIT_TIMESTAMPS = {7: 1, 9: 4102444800123}


@contextmanager
def no_fsync():
    """Skip fsync while a test store is built: durability is not what these stores test, and
    a segment roll costs several fsyncs. Readers are unaffected (they never fsync)."""
    saved = os.fsync, os.fdatasync
    os.fsync = os.fdatasync = lambda fd: None
    try:
        yield
    finally:
        os.fsync, os.fdatasync = saved


def codec_store(path: str, *, records: int = 12) -> str:
    """One topic per codec (`codec-<name>`, 2 partitions): multi-record batches of plain idempotent
    data, two committed and one aborted transaction, headers (null and empty values), null keys, an
    empty value and explicit timestamps, all compressed with it."""
    with txlog.Admin(path) as admin:
        for codec in CODECS:
            admin.create_topic(f"codec-{codec}", 2)
    for codec in CODECS:
        topic = f"codec-{codec}"
        idem = txlog.Producer(path, compression_type=codec, linger_ms=1000)
        for i in range(records):  # one flush: a batch of `records` records per partition
            value = b"" if i == 5 else f"{codec}-{i}".encode() * (i + 1)  # empty is not null
            idem.send(
                topic,
                value,
                key=None if i % 3 == 0 else f"k{i}".encode(),
                partition=i % 2,
                headers=[("i", str(i).encode()), ("nil", None), ("empty", b"")] if i % 2 else None,
                timestamp_ms=EXPLICIT_TIMESTAMPS.get(i),
            )
        idem.flush()
        idem.close()
        txn = txlog.Producer(path, transactional_id=f"txn-{codec}", compression_type=codec, linger_ms=1000)
        txn.init_transactions()
        for commit in (True, False, True):
            txn.begin_transaction()
            for j in range(6):
                txn.send(topic, f"{codec}-{'c' if commit else 'a'}-{j}".encode(), key=b"t", partition=j % 2)
            txn.flush()
            if commit:
                txn.commit_transaction()
            else:
                txn.abort_transaction()
        txn.close()
    return path


def retention_store(path: str, *, records: int = 40) -> str:
    """Topic `ret` (1 partition) whose oldest segments were deleted by retention.bytes:
    its log start offset is above 0. Returns the path."""
    with txlog.Admin(path) as admin:
        admin.create_topic("ret", 1, {"segment.bytes": 300, "retention.bytes": 600})
    # batch_size=1: a batch per record (the next send seals the last), the layout these tests assume
    producer = txlog.Producer(path, enable_idempotence=False, batch_size=1)
    for i in range(records):
        producer.send("ret", f"ret-{i}".encode() * 3, key=f"k{i}".encode(), partition=0)
        producer.flush()
    producer.close()
    from storage import Store

    with Store.open(path) as store:
        deleted = store.enforce_retention()
        assert deleted > 0 and store.partition("ret", 0).log_start_offset > 0, "retention deleted nothing"
    return path


def add_empty_topic(path: str, topic: str = "empty", partitions: int = 2) -> str:
    """Create a topic with no records in an existing store."""
    with txlog.Admin(path) as admin:
        admin.create_topic(topic, partitions)
    return path


def log_bounds(path: str, topic: str, partition: int) -> tuple[int, int, int]:
    """(log start, last stable offset, log end) of one partition, from a read-only look."""
    from storage import Store

    store = Store.open(path, read_only=True)
    try:
        return store.partition(topic, partition).bounds()
    finally:
        store.close()


def record_tuple(r) -> tuple:
    """A ConsumerRecord as the row the source's full schema gives (timestamp in epoch ms,
    headers as a tuple of (key, value) pairs; an empty header list compares as no headers)."""
    return (
        r.topic,
        r.partition,
        r.offset,
        r.key,
        r.value,
        r.timestamp,
        int(r.timestamp_type),
        tuple(tuple(h) for h in r.headers),
        r.producer_id,
        r.producer_epoch,
        r.sequence,
        bool(r.is_transactional),
    )


def spanning_store(path: str, *, rounds: int = 3) -> str:
    """Topic `span` (1 partition, ~400-byte segments) where transactions cross segment boundaries:
    an aborted and a committed transaction are open at once, each written as several batches
    interleaved with plain records, so data, markers and `.txnindex` entries fall in different segments."""
    with txlog.Admin(path) as admin:
        admin.create_topic("span", 1, {"segment.bytes": 400})
    # batch_size=1: a batch per record (the next send seals the last), the layout these tests assume
    plain = txlog.Producer(path, enable_idempotence=False, batch_size=1)
    aborter = txlog.Producer(path, transactional_id="span-aborter", batch_size=1)
    committer = txlog.Producer(path, transactional_id="span-committer", batch_size=1, compression_type="gzip")
    aborter.init_transactions()
    committer.init_transactions()
    for r in range(rounds):
        aborter.begin_transaction()
        committer.begin_transaction()
        for i in range(4):
            for producer, tag in ((aborter, "a"), (plain, "p"), (committer, "c")):
                for j in range(2):  # two records: multi-record batches for the transactional producers
                    producer.send("span", f"{tag}-{r}-{i}-{j}".encode() * 4, key=tag.encode(), partition=0)
                producer.flush()
        aborter.abort_transaction()
        plain.send("span", f"p-{r}-between".encode(), partition=0)
        plain.flush()
        committer.commit_transaction()
    for producer in (plain, aborter, committer):
        producer.close()
    return path


def compacted_store(path: str, *, records: int = 48) -> str:
    """Topic `c` (1 partition, cleanup.policy=compact, 300-byte segments) holding `records` plain
    records over 5 keys, a batch each, with a committed and an aborted transaction every 12 records
    (keys too): many sealed segments, all dirty. Its automatic cleaning is off (a dirty ratio is
    never above 1.0): the tests clean it with Store.compact when they want."""
    with txlog.Admin(path) as admin:
        admin.create_topic(
            "c", 1, {"cleanup.policy": "compact", "segment.bytes": 300, "min.cleanable.dirty.ratio": 1.0}
        )
    plain = txlog.Producer(path, batch_size=1)
    committer = txlog.Producer(path, transactional_id="c-committer")
    aborter = txlog.Producer(path, transactional_id="c-aborter")
    committer.init_transactions()
    aborter.init_transactions()
    for i in range(records):
        plain.send("c", f"v{i}".encode(), key=f"k{i % 5}".encode())
        if i % 12 == 5:
            plain.flush()
            for producer, commit in ((committer, True), (aborter, False)):
                producer.begin_transaction()
                producer.send("c", f"{'t' if commit else 'a'}{i}".encode(), key=f"k{i % 3}".encode())
                producer.flush()
                if commit:
                    producer.commit_transaction()
                else:
                    producer.abort_transaction()
    plain.flush()
    for producer in (plain, committer, aborter):
        producer.close()
    return path


def clean_compacted(path: str, *, merge: bool) -> None:
    """Clean `compacted_store`'s topic now. With `merge`, segment.bytes is raised first, so the
    cleaning merges its sealed segments into one file under the first one's name (the others'
    files are gone); without, each segment is replaced by a cleaned file of its own."""
    with txlog.Store.open(path) as store:
        if merge:
            store.alter_topic_config("c", {"segment.bytes": 1 << 20})
        stats = store.compact("c", 0)
        assert stats and stats[0].records_retained < stats[0].records_read, "the cleaning removed nothing"
        assert (stats[0].segments_after < stats[0].segments_before) == merge, stats
