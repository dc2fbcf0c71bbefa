"""Stores for the mirror's tests, and what read_committed shows of them (the expected copy).

`write_mixed` writes, in every codec, committed and aborted transactions spanning two
partitions, plain (non-transactional) records, null keys and values, empty values and
headers (a null header value too), with explicit timestamps: everything a mirror must carry.
"""

from __future__ import annotations

import time

from txlog import Producer
from txlog.fetch import fetch

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
BASE_TS = int(time.time() * 1000) - 3_600_000  # recent: older records would fall to retention.ms

Row = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def record(i: int, tag: str) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]:
    """Record i: every 7th key null, every 5th value null, every 11th value empty, headers on even ones."""
    key = None if i % 7 == 3 else f"{tag}-k{i}".encode()
    value = None if i % 5 == 2 else b"" if i % 11 == 4 else f"{tag}-v{i}".encode()
    headers: list[tuple[str, bytes | None]] = [("h", f"{i}".encode()), ("nul", None)] if i % 2 == 0 else []
    return key, value, headers, BASE_TS + i


def write_transactions(
    store, topic: str, start: int, count: int, *, tid: str, codec: str = "none", abort_every: int = 3, lopsided=False
):
    """`count` transactions of 4 records over partitions 0 and 1; every `abort_every`-th aborted (tag 'aborted').

    `lopsided` puts 1 record of each in partition 0 and 3 in partition 1, so the partitions' bytes (and a
    mirror's per-partition read budget) do not keep step with the transactions."""
    producer = Producer(store, transactional_id=tid, compression_type=None if codec == "none" else codec)
    producer.init_transactions()
    for n in range(start, start + count):
        aborted = abort_every and n % abort_every == abort_every - 1
        producer.begin_transaction()
        for j in range(4):
            key, value, headers, ts = record(n * 4 + j, "aborted" if aborted else f"{codec}-t")
            partition = min(j, 1) if lopsided else j % 2
            producer.send(topic, value, key=key, partition=partition, headers=headers, timestamp_ms=ts)
        if aborted:
            producer.flush()  # the aborted records reach the log (unflushed ones would just be dropped)
            producer.abort_transaction()
        else:
            producer.commit_transaction()
    producer.close()


def write_plain(store, topic: str, count: int, codec: str) -> None:
    producer = Producer(store, compression_type=None if codec == "none" else codec)
    for i in range(count):
        key, value, headers, ts = record(i, f"{codec}-plain")
        producer.send(topic, value, key=key, partition=i % 2, headers=headers, timestamp_ms=ts)
    producer.flush()
    producer.close()


def write_mixed(store, topic: str, transactions_per_codec: int = 6) -> None:
    """Every codec: plain records, then committed and aborted two-partition transactions (even, then lopsided)."""
    for codec in CODECS:
        write_plain(store, topic, 5, codec)
        write_transactions(store, topic, 0, transactions_per_codec, tid=f"w-{codec}", codec=codec)
        write_transactions(store, topic, 100, transactions_per_codec, tid=f"w-{codec}", codec=codec, lopsided=True)


def committed_rows(store, topic: str) -> dict[int, list[Row]]:
    """What read_committed shows of each partition of the store, in order (txlog.fetch, the one definition)."""
    out: dict[int, list[Row]] = {}
    for p in store.partitions(topic):
        log = store.partition(topic, p)
        position, rows = log.log_start_offset, []
        while True:
            result = fetch(log, position, "read_committed", max_records=10_000)
            rows += [(r.key, r.value, list(r.headers or []), r.timestamp) for r in result.records]
            if result.next_offset == position:
                break
            position = result.next_offset
        out[p] = rows
    return out


def transaction_parts(store, topic: str) -> dict[tuple[int, int], dict[int, tuple[int, int]]]:
    """Each committed transaction, (producer id, epoch) -> partition -> (first offset, offset past its marker).

    Read from the batch headers (storage's reader); under transaction protocol v2 a transaction's
    (producer id, epoch) is its own, so its parts in different partitions share the key.
    """
    parts: dict[tuple[int, int], dict[int, tuple[int, int]]] = {}
    for p in store.partitions(topic):
        log = store.partition(topic, p)
        open_: dict[int, tuple[tuple[int, int], int]] = {}
        position = log.log_start_offset
        while position < log.log_end_offset:
            batches = log.read(position, 1 << 20)
            for batch in batches:
                if batch.is_control:
                    key, first = open_.pop(batch.producer_id)
                    if not batch.is_abort_marker():  # an aborted transaction is not mirrored at all
                        parts.setdefault(key, {})[p] = (first, batch.next_offset)
                elif batch.is_transactional and batch.producer_id not in open_:
                    open_[batch.producer_id] = ((batch.producer_id, batch.producer_epoch), batch.base_offset)
            position = batches[-1].next_offset
    return parts


def split_transactions(parts: dict[tuple[int, int], dict[int, tuple[int, int]]], positions: dict[int, int]) -> list:
    """The transactions a set of mirror positions splits: mirrored in one partition and not (or half) in another.

    A part is mirrored when the position is past its marker, not mirrored when the position is at
    or before its first offset; anything else (a position inside a part) splits it too.
    """
    split = []
    for key, by_partition in parts.items():
        states = set()
        for p, (first, end) in by_partition.items():
            position = positions.get(p, -1)
            position = 0 if position < 0 else position
            states.add("done" if position >= end else "not" if position <= first else "inside")
        if len(states) > 1 or "inside" in states:
            split.append((key, by_partition, positions))
    return split
