"""The exactly-once consume-transform-produce loop, in one process.

docs/reliability-scenarios.md scenario 60 runs it under kill -9 (tests/crash/test_exactly_once_e2e.py).
"""

from __future__ import annotations

import random

import pytest

import txlog
from txlog.coordinator.group_offsets import GroupOffsets
from txlog.fetch import IsolationLevel, fetch
from txlog.tools.transform_loop import AbortRequested, TransformLoop


def _seed(store, topic, values, partitions=1):
    store.create_topic(topic, partitions)
    p = txlog.Producer(store)
    for i, v in enumerate(values):
        p.send(topic, value=v, partition=i % partitions)
    p.flush()


def _committed_values(store, topic):
    out = []
    for part in range(store.partition_count(topic)):
        log = store.partition(topic, part)
        pos = log.log_start_offset
        while True:
            r = fetch(log, pos, IsolationLevel.READ_COMMITTED, max_records=10_000)
            out.extend(x.value for x in r.records)
            if r.next_offset == pos or r.next_offset >= r.last_stable_offset:
                break
            pos = r.next_offset
    return out


def test_random_aborts_still_give_each_output_once_in_order(store):
    values = [b"%d" % i for i in range(500)]
    _seed(store, "in", values)
    store.create_topic("out", 1)
    rnd = random.Random(3)
    with TransformLoop(
        store,
        input_topic="in",
        output_topic="out",
        group_id="g",
        transactional_id="copier",
        transform=lambda rs: [r.value.upper() for r in rs],
        transaction_size=37,
        abort_if=lambda rs: rnd.random() < 0.4,
    ) as loop:
        stats = loop.run()
    assert stats.transactions_aborted > 0
    assert _committed_values(store, "out") == values
    assert GroupOffsets(store).committed("g")[txlog.TopicPartition("in", 0)].offset == 500
    raw = store.partition("out", 0)
    assert raw.last_stable_offset == raw.log_end_offset


def test_a_failing_transform_aborts_and_the_next_instance_resumes(store):
    _seed(store, "in", [b"%d" % i for i in range(100)], partitions=2)
    store.create_topic("out", 3)
    calls = []

    def flaky(records):
        calls.append(len(records))
        if len(calls) == 2:
            raise RuntimeError("transform crashed")
        return [(r.value, r.value) for r in records]

    loop = TransformLoop(
        store,
        input_topic="in",
        output_topic="out",
        group_id="g",
        transactional_id="t1",
        transform=flaky,
        transaction_size=20,
    )
    with pytest.raises(RuntimeError):
        loop.run()
    loop.close()
    # a new instance (same transactional id) picks up from the committed offsets
    with TransformLoop(
        store,
        input_topic="in",
        output_topic="out",
        group_id="g",
        transactional_id="t1",
        transform=lambda rs: [(r.value, r.value) for r in rs],
        transaction_size=20,
    ) as loop2:
        loop2.run()
    assert sorted(_committed_values(store, "out"), key=int) == [b"%d" % i for i in range(100)]


def test_abort_requested_from_the_transform_is_retried(store):
    _seed(store, "in", [b"a", b"b", b"c"])
    store.create_topic("out", 1)
    seen = []

    def once_abort(records):
        seen.append([r.value for r in records])
        if len(seen) == 1:
            raise AbortRequested("first attempt")
        return [r.value for r in records]

    with TransformLoop(
        store, input_topic="in", output_topic="out", group_id="g", transactional_id="t", transform=once_abort
    ) as loop:
        stats = loop.run()
    assert seen == [[b"a", b"b", b"c"], [b"a", b"b", b"c"]]  # sought back to the committed offset
    assert (stats.transactions_aborted, stats.transactions_committed) == (1, 1)
    assert _committed_values(store, "out") == [b"a", b"b", b"c"]


def test_a_new_instance_fences_the_old_one(store):
    _seed(store, "in", [b"%d" % i for i in range(10)])
    store.create_topic("out", 1)
    old = TransformLoop(
        store,
        input_topic="in",
        output_topic="out",
        group_id="g",
        transactional_id="same",
        transform=lambda rs: [r.value for r in rs],
        transaction_size=5,
    )
    new = TransformLoop(
        store,
        input_topic="in",
        output_topic="out",
        group_id="g",
        transactional_id="same",
        transform=lambda rs: [r.value for r in rs],
        transaction_size=5,
    )
    with pytest.raises(txlog.errors.ProducerFencedError):
        old.run()
    new.run()
    assert _committed_values(store, "out") == [b"%d" % i for i in range(10)]
