"""A window's markers appended in one call (`WriterHold.mark`) against the same markers one by one (issue 26).

With nobody watching WriteTxnMarkers (the plain transport), the coordinator hands a held window's markers
to the hold in one call, the marker encoded once and stamped with each partition's offset. A transport
that overrides `write_txn_markers` (as a fault plan's does) still gets one call per marker. The same
transactions (commits, aborts with `.txnindex` entries, another producer's transaction open across them
so the LSO and each entry's LSO move, a segment small enough to roll under the markers, a roll-forward
of a decided end) written both ways must leave the same bytes in every file of every partition,
`__transaction_state` included, and the same HW, LSO, open transactions and producer state
(docs/reliability-scenarios.md scenario 82 (i); the window path under kill -9 and power loss is
scenario 79's, whose worker uses the plain transport).
"""

from __future__ import annotations

import os

from storage import Store
from storage.partition_log import WriterHold
from storage.records import build_batch
from storage.topic_name import TRANSACTION_STATE_TOPIC
from tests.coordinator.direct_txn import DirectTxn
from txlog.transport import Transport

TOPIC = "data"
PARTITIONS = 5
NOW_MS = 1_700_000_000_000
SEGMENT_BYTES = 1200  # a few batches: rolls happen under the markers too


class MarkerByMarker(Transport):
    """Sees every WriteTxnMarkers, as a wrapper would: the coordinator's per-partition path."""

    def write_txn_markers(self, *args, **kwargs):
        return super().write_txn_markers(*args, **kwargs)


class StampedTxn(DirectTxn):
    """DirectTxn whose records carry the fixed clock's timestamp, so two stores get the same bytes."""

    timestamp = NOW_MS


def _run(store_path: str, transport_class: type[Transport]) -> Store:
    """The same history on a fresh store: ends of several widths, aborts, another producer's open
    transaction across them, a plain append, rolls."""
    store = Store.open(store_path, clock=lambda: NOW_MS)
    store.create_topic(TOPIC, PARTITIONS, {"segment.bytes": SEGMENT_BYTES})
    transport = transport_class(store, clock=lambda: NOW_MS)
    main = StampedTxn(transport, "main", TOPIC)
    other = StampedTxn(transport, "other", TOPIC)
    other.send_to(range(3), b"other-open")  # open across the next ends: the LSO and the entries' LSOs
    everywhere = range(PARTITIONS)
    main.send_to(everywhere, b"first")
    main.commit()
    main.send_to(everywhere, b"aborted")
    main.abort()
    store.partition(TOPIC, 4).append(build_batch([(None, b"plain", None, NOW_MS)]), sync=False)
    other.commit()
    main.send_to(range(1, 4), b"narrow")
    main.commit()
    for _ in range(3):  # markers over the segment size: a roll under them
        main.send_to(everywhere, b"x" * 200)
        main.commit()
    main.send_to(everywhere, b"again")
    main.abort()
    return store


def _files(directory: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            out[name] = f.read()
    return out


def _partition_view(store: Store, topic: str, partition: int):
    """(HW, LSO, log end, open transactions, producer state, files); the files first, before a read of the
    HW could sync a tail left unsynced and publish it (their HW file is the one the ends published)."""
    log = store.partition(topic, partition)
    files = _files(log.directory)
    return (
        log.high_watermark,
        log.last_stable_offset,
        log.log_end_offset,
        log.open_transactions(),
        log.producer_states(),
        files,
    )


def test_a_window_of_markers_in_one_call_writes_what_one_call_per_marker_writes(tmp_path, monkeypatch):
    calls: list[int] = []
    real_mark = WriterHold.mark

    def mark(self, logs, *args, **kwargs):
        calls.append(len(logs))
        return real_mark(self, logs, *args, **kwargs)

    monkeypatch.setattr(WriterHold, "mark", mark)
    one_call = _run(str(tmp_path / "window"), Transport)
    window_calls, calls[:] = list(calls), []
    by_marker = _run(str(tmp_path / "by-marker"), MarkerByMarker)
    assert calls == []  # an overriding transport saw every marker
    assert window_calls and all(n > 1 for n in window_calls)  # the window path did run
    state_partitions = one_call.partitions(TRANSACTION_STATE_TOPIC)
    assert state_partitions == by_marker.partitions(TRANSACTION_STATE_TOPIC)
    wanted = [(TOPIC, p) for p in range(PARTITIONS)] + [(TRANSACTION_STATE_TOPIC, p) for p in state_partitions]
    for topic, partition in wanted:
        got = _partition_view(one_call, topic, partition)
        expected = _partition_view(by_marker, topic, partition)
        assert got[:5] == expected[:5], (topic, partition)
        assert got[5].keys() == expected[5].keys(), (topic, partition)
        for name in got[5]:
            assert got[5][name] == expected[5][name], (topic, partition, name)
    assert any(name.endswith(".txnindex") for name in _files(one_call.partition(TOPIC, 0).directory))
    assert len([n for n in _files(one_call.partition(TOPIC, 0).directory) if n.endswith(".log")]) > 1  # rolled
    one_call.close()
    by_marker.close()
