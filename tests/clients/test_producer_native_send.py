"""`Producer.send`'s native path (storage.records.SendFastPath, issue 26): the usual record in
one native call, every other call handed to the Python `send`, the reference.

What must hold: the usual record does not run the Python `send` at all (only a batch's first
record does), every call gives the outcome the reference gives (the same records in the log,
the same metadata, the same errors), and whatever the native path cannot decide - a callable
partitioner, a producer that may not send now - goes to the reference.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import txlog
from storage import Store
from txlog.clients.producer import Producer
from txlog.errors import RecordTooLargeError, TransactionAbortableError
from txlog.fetch import IsolationLevel, fetch

TS = 1_700_000_000_000


@contextmanager
def python_sends() -> Iterator[list[int]]:
    """Counts the calls of the Python `Producer.send` made inside the block."""
    calls: list[int] = []
    code = Producer.send.__code__

    def profile(frame: Any, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is code:
            calls.append(1)

    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(None)


@pytest.mark.parametrize("partition", [None, 0])
def test_the_usual_record_does_not_run_the_python_send(store, partition):
    """500 records in one batch: only the first (no batch open yet) goes through Python."""
    store.create_topic("t", 1)
    p = txlog.Producer(store, linger_ms=60_000, batch_size=1 << 20)
    with python_sends() as calls:
        futures = [p.send("t", b"v%d" % i, b"k", partition) for i in range(500)]
    p.flush()
    assert len(calls) == 1
    assert [f.get().offset for f in futures] == list(range(500))
    p.close()


def test_a_batch_opened_for_the_next_record_does_not_run_the_python_send(store):
    """Each record durable before the next (a get() after each takes its batch, so every record
    opens one), then records that fill their batch (each full batch's successor opens one): only
    the topic's first record, the one that looks the topic up, goes through Python."""
    store.create_topic("t", 1)
    p = txlog.Producer(store, linger_ms=60_000, batch_size=200)
    with python_sends() as calls:
        offsets = [p.send("t", b"v%d" % i, b"k").get().offset for i in range(20)]
        futures = [p.send("t", b"w" * 50, b"k", 0) for _ in range(20)]  # about 3 to a batch
    p.flush()
    assert len(calls) == 1
    assert offsets == list(range(20)) and [f.get().offset for f in futures] == list(range(20, 40))
    p.close()


def _calls() -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Every spelling of send: those the native path takes and those it hands over."""
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    for i in range(40):
        calls += [
            (("one", b"v%d" % i, b"k"), {}),
            (("one", b"v", None), {}),
            (("one", None, b"k%d" % i), {}),  # a tombstone
            (("three", b"v%d" % i, b"k%d" % i), {}),  # hashed by key
            (("three", b"v", b"k", 2), {}),
            (("three", b"v", None, 1, None, TS + i), {}),
            (("three", b"v", b"k", 0), {}),  # then partition 0 of another topic
            ((), {"topic": "one", "value": b"kw", "key": b"k", "partition": 0, "timestamp_ms": TS}),
            (("three", b"v", b"k", 1, [("h", b"x"), ("n", None)], TS), {}),
            (("one", "text", "key", None, None, TS), {}),  # str key and value: converted
            (("one", bytearray(b"ba"), memoryview(b"mv"), 0, None, TS), {}),
            (("one", b"v", b"k", None, None, float(TS + 0.7)), {}),  # a float timestamp: int()
            (("".join(["th", "ree"]), b"v", b"k", 0), {}),  # an equal topic, another str object
        ]
    return calls


def _bad_calls() -> list[tuple[Any, ...]]:
    return [
        ("three", b"v", b"k", True),  # True == 1, but not a partition
        ("three", b"v", b"k", 3),
        ("one", 123, b"k"),
        ("missing", b"v", b"k"),
        ("three", b"v", b"k", 1.0),
        ("one", b"v", b"k", None, "not headers"),
    ]


def _outcome(root: str, send: Callable[..., Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """(each future's metadata, each bad call's error, every record in the log) of the calls
    made through `send(producer, *args, **kwargs)`."""
    with Store.open(root) as store:
        store.create_topic("one", 1)
        store.create_topic("three", 3)
        p = txlog.Producer(store, linger_ms=60_000, batch_size=700)
        futures = [send(p, *args, **kwargs) for args, kwargs in _calls()]
        errors = []
        for args in _bad_calls():
            with pytest.raises(Exception) as raised:
                send(p, *args)
            errors.append((type(raised.value), str(raised.value)))
        p.flush()
        metadata = []
        for future in futures:
            m = future.get()
            metadata.append((m.topic, m.partition, m.offset, m.serialized_key_size, m.serialized_value_size))
            if m.timestamp < TS + 1000:  # given by the call (the others are the wall clock's)
                metadata.append(m.timestamp)
        p.close()
        with pytest.raises(Exception) as raised:  # closed: both refuse
            send(p, "one", b"v", b"k")
        errors.append((type(raised.value), str(raised.value)))
        records = []
        for topic, partitions in (("one", 1), ("three", 3)):
            for partition in range(partitions):
                log = store.partition(topic, partition)
                for r in fetch(log, 0, IsolationLevel.READ_UNCOMMITTED, max_records=10_000).records:
                    ts = r.timestamp if r.timestamp < TS + 1000 else None
                    records.append((topic, partition, r.offset, r.key, r.value, list(r.headers), ts))
        return metadata, errors, records


def test_every_spelling_has_the_outcome_of_the_python_send(tmp_path):
    native = _outcome(str(tmp_path / "native"), lambda p, *a, **kw: p.send(*a, **kw))
    reference = _outcome(str(tmp_path / "python"), lambda p, *a, **kw: Producer.send(p, *a, **kw))
    assert len(native[2]) == len(_calls()) and len(native[1]) == len(_bad_calls()) + 1
    assert native == reference


def test_a_callable_partitioner_sees_every_record(store):
    """A one-partition topic skips the named partitioners, never a callable one."""
    store.create_topic("t", 1)
    seen: list[bytes | None] = []
    p = txlog.Producer(store, linger_ms=60_000, partitioner=lambda key, count: seen.append(key) or 0)
    for i in range(50):
        p.send("t", b"v", b"k%d" % i)
    p.flush()
    p.close()
    assert seen == [b"k%d" % i for i in range(50)]


def test_a_transaction_that_must_abort_takes_no_record_into_an_open_batch(store):
    """The producer's state is read on every send: after a failed batch made the transaction
    abortable, a partition whose batch is still open refuses the next record as the reference does."""
    store.create_topic("t", 2)
    store.create_topic("small", 1, {"max.message.bytes": 1000})
    p = txlog.Producer(store, transactional_id="native-send", linger_ms=60_000)
    p.init_transactions()
    p.begin_transaction()
    p.send("t", b"v", partition=1)  # opens partition 1's batch, left lingering
    p.send("t", b"v", partition=1)  # the native path's record
    with pytest.raises(RecordTooLargeError):
        p.send("small", b"x" * 2000).get()  # too large for the topic: the transaction must abort
    with pytest.raises(TransactionAbortableError):
        p.send("t", b"v", partition=1)
    p.abort_transaction()
    p.close()
