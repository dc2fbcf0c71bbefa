"""The read path under both isolation levels (docs/DESIGN.md §6; docs/reliability-scenarios.md scenarios 10, 11, 15).

Logs are built with the storage API the way producers and a coordinator would write
them (there is no Producer to drive here): `LogWriter` appends transactional batches
with per-producer epochs and sequences, and markers with the epoch bumped as under
transaction protocol v2. It also keeps a model of what each view must return, so the
property test compares `fetch` with an oracle that never looks at the `.txnindex`.
"""

from __future__ import annotations

import os
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import Store
from storage.compression import Compression
from storage.log_files import log_file
from storage.records import ControlType, RecordBatch, TimestampType, build_batch
from txlog.consumer_record import ConsumerRecord
from txlog.errors import OffsetOutOfRangeError
from txlog.fetch import FetchResult, IllegalArgumentError, IsolationLevel, fetch, read_batches


@contextmanager
def no_fsync():
    """What a reader sees does not depend on fsync (durability is the storage tests' subject);
    skipping it keeps these tests fast on a busy disk."""
    with mock.patch.object(os, "fsync", lambda fd: None), mock.patch.object(os, "fdatasync", lambda fd: None):
        yield


@pytest.fixture(autouse=True)
def fast_disk():
    with no_fsync():
        yield


RC = IsolationLevel.READ_COMMITTED
RU = IsolationLevel.READ_UNCOMMITTED
NOW = int(time.time() * 1000)


@dataclass
class LogWriter:
    """Writes one partition like producers + coordinator, and predicts what RC and RU must see."""

    log: object
    epochs: dict[int, int] = field(default_factory=dict)
    seqs: dict[int, int] = field(default_factory=dict)
    open_first: dict[int, int] = field(default_factory=dict)  # pid -> first offset of its open txn
    open_offsets: dict[int, list[int]] = field(default_factory=dict)  # pid -> data offsets of the open txn
    values: dict[int, bytes] = field(default_factory=dict)  # offset -> value of every data record
    aborted: set[int] = field(default_factory=set)  # data offsets of aborted transactions
    markers: list[int] = field(default_factory=list)
    counter: int = 0

    def _values(self, n: int) -> list[bytes]:
        out = [f"v{self.counter + i}".encode() for i in range(n)]
        self.counter += n
        return out

    def plain(self, n: int = 1, compression: Compression = Compression.NONE) -> list[int]:
        """A non-idempotent batch (producer id -1)."""
        vals = self._values(n)
        res = self.log.append(build_batch([(None, v, [], NOW) for v in vals], compression=compression))
        return self._note(res.base_offset, vals)

    def txn(
        self, pid: int, n: int = 1, compression: Compression = Compression.NONE, values: list[bytes] | None = None
    ) -> list[int]:
        """A transactional batch of `pid`; it opens the producer's transaction if none is open."""
        vals = values if values is not None else self._values(n)
        epoch, seq = self.epochs.setdefault(pid, 0), self.seqs.get(pid, 0)
        batch = build_batch(
            [(b"k", v, [("h", b"x")], NOW) for v in vals],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=True,
            compression=compression,
        )
        res = self.log.append(batch)
        self.seqs[pid] = seq + len(vals)
        offsets = self._note(res.base_offset, vals)
        self.open_first.setdefault(pid, offsets[0])
        self.open_offsets.setdefault(pid, []).extend(offsets)
        return offsets

    def end(self, pid: int, control: ControlType) -> int:
        """The coordinator's marker (epoch + 1, TV2); the producer's next txn starts at sequence 0."""
        epoch = self.epochs.setdefault(pid, 0)
        res = self.log.append_marker(control, pid, epoch + 1)
        self.epochs[pid], self.seqs[pid] = epoch + 1, 0
        self.open_first.pop(pid, None)
        done = self.open_offsets.pop(pid, [])
        if control == ControlType.ABORT:
            self.aborted.update(done)
        self.markers.append(res.base_offset)
        return res.base_offset

    def commit(self, pid: int) -> int:
        return self.end(pid, ControlType.COMMIT)

    def abort(self, pid: int) -> int:
        return self.end(pid, ControlType.ABORT)

    def _note(self, base: int, vals: list[bytes]) -> list[int]:
        offsets = list(range(base, base + len(vals)))
        self.values.update(zip(offsets, vals, strict=True))
        return offsets

    # ---- the oracle ------------------------------------------------------------------------

    @property
    def lso(self) -> int:
        return min(self.open_first.values(), default=self.log.log_end_offset)

    def expected(self, isolation: IsolationLevel, start: int = 0) -> list[tuple[int, bytes]]:
        if isolation is RU:
            return [(o, v) for o, v in sorted(self.values.items()) if o >= start]
        lso = self.lso
        return [(o, v) for o, v in sorted(self.values.items()) if start <= o < lso and o not in self.aborted]


def seen(result: FetchResult) -> list[tuple[int, bytes]]:
    return [(r.offset, r.value) for r in result.records]


def fetch_all(log, isolation, start=0, **kw) -> tuple[list[tuple[int, bytes]], int]:
    """Chained fetches until one makes no progress; returns what they saw and where they stopped."""
    out, pos = [], start
    while True:
        res = fetch(log, pos, isolation, **kw)
        assert res.next_offset >= pos, "positions never move backwards"
        out.extend(seen(res))
        if res.next_offset == pos:
            return out, pos
        pos = res.next_offset


@pytest.fixture
def log(store):
    store.create_topic("t", 2)
    return store.partition("t", 0)


@pytest.fixture
def w(log) -> LogWriter:
    return LogWriter(log)


# ---- docs/reliability-scenarios.md scenarios 10, 11, 15 ---------------------------------------


def test_scenario_10_commit_is_visible_to_rc_only_after_marker(store, log, w):
    p1 = LogWriter(store.partition("t", 1))
    w.txn(7, values=[b"a"]), w.txn(7, values=[b"b"])
    p1.txn(7, values=[b"c"])
    assert [r.value for r in fetch(log, 0, RU).records] == [b"a", b"b"]
    assert [r.value for r in fetch(p1.log, 0, RU).records] == [b"c"]
    res = fetch(log, 0, RC)
    assert res.records == [] and res.last_stable_offset == 0 and res.high_watermark == 2 and res.next_offset == 0

    assert w.commit(7) == 2  # the marker occupies offset 2
    res = fetch(log, 0, RC)
    assert seen(res) == [(0, b"a"), (1, b"b")]
    assert res.next_offset == 3 and res.last_stable_offset == res.high_watermark == 3
    assert fetch(p1.log, 0, RC).records == []  # P1's marker not written yet
    p1.commit(7)
    assert [r.value for r in fetch(p1.log, 0, RC).records] == [b"c"]


def test_scenario_11_aborted_data_is_never_rc_visible(store, log, w):
    p1 = LogWriter(store.partition("t", 1))
    w.txn(7, values=[b"a", b"b"])
    p1.txn(7, values=[b"c"])
    assert w.abort(7) == 2
    p1.abort(7)
    assert [r.value for r in fetch(log, 0, RU).records] == [b"a", b"b"]
    assert [r.value for r in fetch(p1.log, 0, RU).records] == [b"c"]
    for start in (0, 1, 2):
        res = fetch(log, start, RC)
        assert res.records == [] and res.next_offset == 3
    assert log.last_stable_offset == 3
    (entry,) = log.aborted_transactions(0, 3)
    assert (entry.producer_id, entry.first_offset, entry.last_offset) == (7, 0, 2)
    assert fetch(p1.log, 0, RC).records == []


def test_scenario_15_partition_holding_only_a_marker(log, w):
    w.abort(9)
    for iso in (RC, RU):
        res = fetch(log, 0, iso)
        assert res.records == [] and res.next_offset == 1
        assert res.last_stable_offset == 1 and res.high_watermark == 1
        assert fetch(log, 1, iso).records == []


def test_commit_marker_without_data_is_invisible_too(log, w):
    w.plain(1)
    w.commit(3)
    w.plain(1)
    for iso in (RC, RU):
        assert fetch_all(log, iso) == ([(0, b"v0"), (2, b"v1")], 3)


# ---- LSO and open transactions ---------------------------------------------------------------------


def test_rc_fetch_stops_at_the_lso_of_an_open_transaction(log, w):
    w.plain(2)
    w.txn(5, 2)  # offsets 2-3, open
    w.plain(2)  # 4-5: committed data, but behind the open transaction
    res = fetch(log, 0, RC)
    assert [r.offset for r in res.records] == [0, 1]
    assert res.next_offset == 2 and res.last_stable_offset == 2 and res.high_watermark == 6
    assert fetch(log, 2, RC).records == [] and fetch(log, 2, RC).next_offset == 2
    assert fetch(log, 5, RC).records == []  # starting past the LSO: nothing, no error
    assert [r.offset for r in fetch(log, 0, RU).records] == [0, 1, 2, 3, 4, 5]

    w.commit(5)  # marker at 6
    res = fetch(log, 2, RC)
    assert [r.offset for r in res.records] == [2, 3, 4, 5]
    assert res.next_offset == 7


def test_rc_waits_for_the_earliest_open_transaction_even_if_later_ones_end(log, w):
    w.txn(1, 1)  # 0
    w.txn(2, 1)  # 1
    w.commit(2)  # 2
    assert fetch(log, 0, RC).records == [] and log.last_stable_offset == 0
    w.abort(1)  # 3
    assert fetch_all(log, RC) == ([(1, b"v1")], 4)


def test_interleaved_producers_aborts_commits_plain_data_and_compression(log, w):
    w.plain(2, Compression.GZIP)
    w.txn(1, 3, Compression.ZSTD)
    w.txn(2, 2)
    w.plain(1)
    w.txn(1, 2, Compression.GZIP)
    w.abort(2)
    w.txn(3, 4, Compression.ZSTD)
    w.commit(1)
    w.txn(2, 1)  # pid 2's next transaction, committed below
    w.abort(3)
    w.plain(3, Compression.ZSTD)
    w.commit(2)
    w.txn(1, 2)  # open
    w.plain(1)
    for iso in (RC, RU):
        assert fetch_all(log, iso)[0] == w.expected(iso)
    assert [v for _, v in w.expected(RC)] == [
        b"v0",
        b"v1",
        b"v2",
        b"v3",
        b"v4",
        b"v7",
        b"v8",
        b"v9",
        b"v14",
        b"v15",
        b"v16",
        b"v17",
    ]
    assert fetch_all(log, RC)[1] == w.lso


def test_same_producer_aborted_then_committed_transactions(log, w):
    w.txn(4, 2)
    w.abort(4)
    w.txn(4, 2)
    w.commit(4)
    w.txn(4, 1)
    w.abort(4)
    assert fetch_all(log, RC) == ([(3, b"v2"), (4, b"v3")], log.log_end_offset)


def test_control_records_are_never_returned(log, w):
    w.txn(1, 1)
    w.commit(1)
    w.txn(2, 1)
    w.abort(2)
    for iso in (RC, RU):
        offsets = [o for o, _ in fetch_all(log, iso)[0]]
        assert not set(offsets) & set(w.markers)


# ---- partial batches, limits --------------------------------------------------------------------


def test_max_records_cuts_inside_a_batch_and_the_next_fetch_resumes_there(log, w):
    w.txn(1, 5)
    w.commit(1)  # 5
    w.plain(3)  # 6-8
    res = fetch(log, 0, RC, max_records=2)
    assert [r.offset for r in res.records] == [0, 1] and res.next_offset == 2
    res = fetch(log, 2, RC, max_records=3)
    assert [r.offset for r in res.records] == [2, 3, 4] and res.next_offset == 5  # batch end, marker not yet passed
    res = fetch(log, 5, RC, max_records=2)
    assert [r.offset for r in res.records] == [6, 7] and res.next_offset == 8
    assert [r.offset for r in fetch(log, 3, RU).records] == [3, 4, 6, 7, 8]


def test_chained_small_fetches_equal_one_big_one(log, w):
    w.plain(3)
    w.txn(1, 4, Compression.GZIP)
    w.txn(2, 3)
    w.abort(1)
    w.plain(2)
    w.commit(2)
    for iso in (RC, RU):
        whole = seen(fetch(log, 0, iso, max_records=1000))
        for n in (1, 2, 3, 5):
            assert fetch_all(log, iso, max_records=n)[0] == whole
        assert fetch_all(log, iso, max_bytes=1)[0] == whole


def test_max_bytes_returns_at_least_one_batch(log, w):
    w.plain(3)
    w.plain(3)
    res = fetch(log, 0, RU, max_bytes=1)
    assert [r.offset for r in res.records] == [0, 1, 2] and res.next_offset == 3


def test_a_fetch_whose_first_read_had_the_whole_byte_budget_reads_once(log, w, monkeypatch):
    """A record room larger than `max_bytes` holds (txlog consume's polls of lines) ends the fetch
    with its one read: the batch that did not fit the budget is not read again only to be dropped."""
    for _ in range(6):
        w.plain(3)
    size = log.read(0, 1)[0].size  # every batch holds three records of the same size
    reads = []
    real = type(log).read

    def counted(self, *args, **kwargs):
        reads.append(args)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(log), "read", counted)
    res = fetch(log, 0, RU, max_records=1000, max_bytes=2 * size + size // 2)
    assert [r.offset for r in res.records] == list(range(6)) and res.next_offset == 6
    assert len(reads) == 1
    reads.clear()
    res = fetch(log, 6, RU, max_records=1000, max_bytes=1 << 20)  # the whole rest: one read too
    assert res.next_offset == 18 and len(reads) == 1


def test_aborted_batches_are_skipped_without_decoding(log, w, monkeypatch):
    w.txn(1, 3, Compression.GZIP)
    w.plain(1)
    w.abort(1)
    decoded = []

    def spying(real):
        def spy(batch, *args):
            decoded.append(batch.base_offset)
            return real(batch, *args)

        return spy

    for decoder in ("records", "record_tuples", "consumer_records"):  # the ways to decode a batch's records
        monkeypatch.setattr(RecordBatch, decoder, spying(getattr(RecordBatch, decoder)))
    assert [r.offset for r in fetch(log, 0, RC).records] == [3]
    assert 0 not in decoded and 3 in decoded


def test_records_carry_batch_fields(log, w):
    w.txn(11, 2)
    w.commit(11)
    log.append(
        build_batch([(b"k", b"lat", [], NOW)], timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=NOW + 5)
    )
    recs = fetch(log, 0, RC).records
    first = recs[0]
    assert (first.topic, first.partition, first.key, first.headers) == ("t", 0, b"k", [("h", b"x")])
    assert (first.producer_id, first.producer_epoch, first.sequence, first.is_transactional) == (11, 0, 0, True)
    assert recs[1].sequence == 1
    assert recs[2].timestamp_type == TimestampType.LOG_APPEND_TIME and recs[2].timestamp == NOW + 5
    assert not recs[2].is_transactional and recs[2].producer_id == -1


def test_out_of_range_and_bad_arguments(log, w):
    w.plain(2)
    with pytest.raises(OffsetOutOfRangeError):
        fetch(log, 3, RU)
    assert fetch(log, 2, RU) == FetchResult([], 2, 2, 2)
    with pytest.raises(IllegalArgumentError):
        fetch(log, 0, "serializable")
    with pytest.raises(ValueError):  # IllegalArgumentError is also a ValueError
        fetch(log, 0, RC, max_records=0)
    assert fetch(log, 0, "read_uncommitted").records  # the config spelling works


def test_aborts_across_segments(store):
    store.create_topic("seg", 1, {"segment.bytes": 200, "retention.ms": -1})
    w = LogWriter(store.partition("seg", 0))
    w.txn(1, 1)
    for _ in range(6):
        w.plain(1)
        w.txn(2, 1)
    w.abort(1)
    w.commit(2)
    w.txn(1, 1)
    w.plain(1)
    w.abort(1)
    assert len(w.log.segments) > 3
    for iso in (RC, RU):
        assert fetch_all(w.log, iso)[0] == w.expected(iso)
        for start in range(w.log.log_end_offset + 1):
            assert fetch_all(w.log, iso, start=start, max_records=2)[0] == w.expected(iso, start)


# ---- property: RC == RU minus aborted minus what is not decided yet --------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("plain"), st.integers(1, 3), st.sampled_from([Compression.NONE, Compression.GZIP])),
        st.tuples(
            st.just("txn"), st.integers(1, 3), st.integers(1, 3), st.sampled_from([Compression.NONE, Compression.ZSTD])
        ),
        st.tuples(st.just("commit"), st.integers(1, 3)),
        st.tuples(st.just("abort"), st.integers(1, 3)),
    ),
    max_size=14,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=OPS,
    segment_bytes=st.sampled_from([250, 1 << 20]),
    max_records=st.integers(1, 4),
    max_bytes=st.sampled_from([1, 1 << 20]),
)
def test_property_rc_is_ru_minus_aborted_minus_undecided(ops, segment_bytes, max_records, max_bytes):
    with no_fsync(), tempfile.TemporaryDirectory() as tmp, Store.open(os.path.join(tmp, "s")) as store:
        store.create_topic("p", 1, {"segment.bytes": segment_bytes, "retention.ms": -1})
        w = LogWriter(store.partition("p", 0))
        for op in ops:
            if op[0] == "plain":
                w.plain(op[1], op[2])
            elif op[0] == "txn":
                w.txn(op[1], op[2], op[3])
            else:
                w.end(op[1], ControlType.COMMIT if op[0] == "commit" else ControlType.ABORT)
        log = w.log
        assert log.last_stable_offset == w.lso
        end = log.log_end_offset
        for iso in (RC, RU):
            for start in range(end + 1):
                got, stop = fetch_all(log, iso, start=start, max_records=max_records, max_bytes=max_bytes)
                assert got == w.expected(iso, start)
                assert stop == max(start, w.lso if iso is RC else end)
            one = fetch(log, 0, iso, max_records=10_000)
            assert seen(one) == w.expected(iso)
            assert all(r.offset < w.lso for r in one.records) or iso is RU


def test_fetched_bytes_are_the_sizes_of_the_batches_records_came_from(log, w):
    """What counts against the consumer's fetch_max_bytes: whole batches, as in Kafka, counted once
    per batch (not per record); hidden batches (aborted data, markers) count nothing."""
    w.plain(3)
    w.txn(1, 2)
    w.abort(1)
    w.plain(4, Compression.GZIP)
    sizes = [b.size for b in log.read(0, 1 << 20)]  # plain, txn, ABORT marker, gzip plain
    assert fetch(log, 0, RC).fetched_bytes == sizes[0] + sizes[3]
    assert fetch(log, 0, RU).fetched_bytes == sizes[0] + sizes[1] + sizes[3]
    cut = fetch(log, 1, RC, max_records=1)  # one record of a batch still counts the whole batch
    assert [r.offset for r in cut.records] == [1] and cut.fetched_bytes == sizes[0]
    assert fetch(log, log.log_end_offset, RC).fetched_bytes == 0


# ---- read_batches: the broker half alone (txlog serve's Fetch) ------------------------------------------


def test_read_batches_returns_stored_batches_and_the_aborts_they_overlap(tmp_path):
    with Store.open(str(tmp_path / "s")) as store:
        _check_read_batches(store)


def _check_read_batches(store: Store) -> None:
    store.create_topic("t", 1)
    log = store.partition("t", 0)
    log.append(build_batch([(None, b"x" * 3000, [], NOW)]))
    aborted = build_batch(
        [(None, b"y", [], NOW)], producer_id=8, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    log.append(aborted)
    log.append_marker(ControlType.ABORT, 8, 1, 0, NOW)
    whole = read_batches(log, 0, RC, 1 << 20)
    with open(log_file(log.directory, 0), "rb") as f:
        assert whole.data() == f.read()  # control and aborted batches too: the client drops them
    assert [(t.producer_id, t.first_offset) for t in whole.aborted] == [(8, 1)]
    assert read_batches(log, 0, RU, 1 << 20).aborted is None
    assert [b.base_offset for b in read_batches(log, 0, RU, 10).batches] == [0]  # the first batch, however large
    assert read_batches(log, 0, RU, 10, min_one=False).batches == []  # not the first partition: it waits
    with pytest.raises(OffsetOutOfRangeError):
        read_batches(log, 4, RU, 10)


def test_decode_batch_is_told_the_room_left_and_says_where_it_cut(log, w):
    """`decode_batch` makes the records of every visible batch in [start, end), at most the room
    left, and says whether it left some: the fetch ends inside the batch exactly as with `decode`."""
    w.plain(4)  # 0-3
    w.txn(1, 3)  # 4-6
    w.commit(1)  # 7
    w.plain(2)  # 8-9
    calls: list[tuple[int, int, int, int]] = []

    def decode_batch(log, batch, start, end, room):
        calls.append((batch.base_offset, start, end, room))
        records = batch.consumer_records(ConsumerRecord, log.topic, log.partition, start, end)
        return records[:room], len(records) > room

    for iso in (RC, RU):
        for start in range(10):
            for max_records in (1, 2, 3, 4, 5, 6, 7, 500):
                calls.clear()
                plain = fetch(log, start, iso, max_records=max_records)
                mine = fetch(log, start, iso, max_records=max_records, decode_batch=decode_batch)
                assert (seen(mine), mine.next_offset) == (seen(plain), plain.next_offset), (iso, start, max_records)
                assert calls and calls[0][3] == max_records and calls[0][1] == start
    calls.clear()
    assert seen(fetch(log, 2, RC, max_records=3, decode_batch=decode_batch)) == [(2, b"v2"), (3, b"v3"), (4, b"v4")]
    assert [(base, room) for base, _, _, room in calls] == [(0, 3), (4, 1)]


# ---- docs/reliability-scenarios.md scenario 88: a cleaning between a fetch's look and its read ----------

KEYS_88 = 10


def _write_round_88(log, rnd: int) -> None:
    for k in range(KEYS_88):
        log.append(build_batch([(b"k%d" % k, b"r%d" % rnd, None, NOW)]))
    log.roll()


def _cleaned_after_the_look(store, reader_log, *, rounds: int):
    """Make `reader_log` see `rounds` more rounds written and cleaned by `store`'s view right after its first
    look (`visible_bounds`), before its read: what another process's cleaner does to a descheduled reader."""
    writer_log = store.partition("c", 0)
    real = reader_log.visible_bounds
    looks = []

    def look_then_clean(**kwargs):
        bounds = real(**kwargs)
        if not looks:
            first = writer_log.log_end_offset // KEYS_88
            for rnd in range(first, first + rounds):
                _write_round_88(writer_log, rnd)
            store.compact("c", force=True)
        looks.append(bounds)
        return bounds

    reader_log.visible_bounds = look_then_clean
    return looks


@pytest.mark.parametrize("path", ["fetch", "read_batches"])
def test_scenario88_a_fetch_whose_cap_a_cleaning_left_behind_looks_again(store, store_path, path):
    """The cap (HW) came from the look before a cleaning that removed every record below it (their keys
    written again past it): the fetch read nothing below its cap, and answered "nothing before the HW"
    with a position that did not move. It must read the cleaned log under a new look's cap instead."""
    store.create_topic("c", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 1.0})
    writer_log = store.partition("c", 0)
    for rnd in range(2):
        _write_round_88(writer_log, rnd)
    reader = Store.open_for_reading(store_path)
    try:
        reader_log = reader.partition("c", 0)
        assert reader_log.high_watermark == 2 * KEYS_88  # the reader's view is the two rounds' log
        looks = _cleaned_after_the_look(store, reader_log, rounds=2)
        if path == "fetch":
            result = fetch(reader_log, 0, RU, max_records=1000)
            got = {r.key: (r.offset, r.value) for r in result.records}
            moved_to = result.next_offset
        else:
            found = read_batches(reader_log, 0, RU, 1 << 20)
            got = {r.key: (r.offset, r.value) for b in found.batches for r in b.records()}
            moved_to = found.batches[-1].next_offset if found.batches else 0
        assert looks[0][3] == 2 * KEYS_88, "the first look (its HW) was not taken before the cleaning"
        assert got == {b"k%d" % k: (3 * KEYS_88 + k, b"r3") for k in range(KEYS_88)}
        assert moved_to == 4 * KEYS_88
    finally:
        reader.close()
