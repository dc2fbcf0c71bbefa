"""Log compaction against a model written from Kafka's cleaner rules (issue 25), not from txlog's code.

Hypothesis draws histories on one partition of a `cleanup.policy=compact` topic with small
segments: idempotent, transactional (commits, aborts, transactions still open at the end) and
plain producers writing keyed records over a few keys (so keys are re-used), tombstones (null
values), rolls, reopens, and `PartitionLog.compact(force=True, now=...)` at random points with a
clock the test moves (so `delete.retention.ms` horizons pass or not), sometimes with a dedupe
buffer too small for one pass (72 or 120 bytes: 2 or 4 keys at Kafka's 24 bytes per entry and
0.9 load factor, against 5 keys). Cleaning the roll triggers on its own (the dirty ratio) is noticed
through the cleaner checkpoint and counted as a pass at the clock's time.

The model (Kafka's core/src/main/scala/kafka/log/LogCleaner.scala, `Cleaner.doClean`,
`cleanInto`, `shouldRetainRecord`, and KIP-534's delete horizon) says, for each record written,
whether it must be there, must be gone, or may be either (only where Kafka's own cleaner and a
cleaner that stops exactly at its cleaned offset could differ):

* below the cleaned offset C (the cleaner checkpoint): a record of an aborted transaction is
  gone; a record whose key has a later committed or non-transactional record below C is gone;
  the latest such record is kept when it has a value; a tombstone is kept until a pass that
  covers it runs at or after its horizon, the time of the first pass that processed it plus
  delete.retention.ms (the first pass only stamps the horizon: it always keeps the tombstone);
* at or above C nothing is removed, except that Kafka may already drop records of aborted
  transactions in the segment that holds C (it cleans whole segments);
* offsets never change; the read_uncommitted view shows what is kept, the read_committed view
  what is kept of committed and non-transactional records below the LSO; once gone, a record
  never comes back.

Each history then ends with a reopen that rebuilds producer state from the log alone (the
`.snapshot` files deleted): the retry of every idempotent producer's last batch is still
answered as a duplicate with its original offsets (Kafka keeps a producer's last batch, emptied
if need be) and the views are unchanged; a second test runs the same histories and asks the
store check (txlog verify's checks) to find no error in the cleaned files.

Examples: 25 by default; `--big` or TXLOG_COMPACTION_EXAMPLES=N for more.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import Store
from storage.checkpoint import read_offset_checkpoint
from storage.file_check import Severity
from storage.records import ControlType, build_batch
from txlog.fetch import IsolationLevel, fetch
from txlog.tools.store_check import check_store

TOPIC = "t"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"  # Kafka's file name, at the log dir's root
START = 1_700_000_000_000
KEYS = [f"k{i}".encode() for i in range(5)]
IDEMPOTENT = {"i0": 1000, "i1": 1001}
TRANSACTIONAL = {"t0": 2000, "t1": 2001, "t2": 2002}
PRODUCERS = ["plain", *IDEMPOTENT, *TRANSACTIONAL]
EPOCH = 0
RC = IsolationLevel.READ_COMMITTED
RU = IsolationLevel.READ_UNCOMMITTED
#: What the histories exercised (printed at the end, with -s): a model run that never removes a
#: record, or never sees a tombstone go, proves little.
COVERAGE: Counter[str] = Counter()


class Need(Enum):
    PRESENT = "present"
    ABSENT = "absent"
    EITHER = "either"


@dataclass
class Rec:
    offset: int
    key: bytes
    value: bytes | None
    txn: tuple[str, int] | None  # (producer, its n-th transaction)
    written_at_pass: int  # how many passes ran before it was written


@dataclass
class Pass:
    """One cleaning pass: its time, and the cleaned offset after it (a range when unknown)."""

    now: int
    c_lo: int  # certainly cleaned below this
    c_hi: int  # possibly cleaned below this
    bases: list[int]  # segment base offsets when the pass began


@dataclass
class Model:
    delete_retention_ms: int
    recs: list[Rec] = field(default_factory=list)
    passes: list[Pass] = field(default_factory=list)
    status: dict[tuple[str, int], str] = field(default_factory=dict)  # open / commit / abort
    ended_at_pass: dict[tuple[str, int], int] = field(default_factory=dict)
    txn_count: dict[str, int] = field(default_factory=dict)
    open_txn: dict[str, int] = field(default_factory=dict)  # producer -> its open transaction's number
    gone: set[int] = field(default_factory=set)  # offsets once seen removed

    @property
    def cleaned(self) -> int:
        return self.passes[-1].c_lo if self.passes else 0

    def aborted(self, r: Rec) -> bool:
        return r.txn is not None and self.status[r.txn] == "abort"

    def committed_or_plain(self, r: Rec) -> bool:
        return r.txn is None or self.status[r.txn] == "commit"

    def lso(self, end: int) -> int:
        firsts = [r.offset for r in self.recs if r.txn is not None and self.status[r.txn] == "open"]
        return min(firsts, default=end)

    def need(self, r: Rec) -> Need:
        """What Kafka's cleaner rules say about record `r` after every pass so far."""
        c = self.cleaned
        if r.txn is not None and self.status[r.txn] == "open":
            return Need.PRESENT
        if self.aborted(r):
            if r.offset < c:
                return Need.ABSENT
            after = self.passes[self.ended_at_pass[r.txn] :]
            processed = any(_base(p.bases, r.offset) < p.c_hi for p in after)
            return Need.EITHER if processed else Need.PRESENT
        if r.offset >= c:
            return Need.PRESENT
        later = any(
            o.key == r.key and o.offset > r.offset and o.offset < c and self.committed_or_plain(o) for o in self.recs
        )
        if later:
            return Need.ABSENT
        if r.value is not None:
            return Need.PRESENT
        return self._tombstone(r)

    def _tombstone(self, r: Rec) -> Need:
        """KIP-534: the first pass that processes a tombstone stamps horizon = its time + delete.retention.ms
        and keeps it; a later pass that covers it at or after the horizon removes it. Kafka stamps the
        batch when it first processes its segment; a cleaner may stamp only once the tombstone is below
        its cleaned offset: between the two the model allows either."""
        after = list(enumerate(self.passes))[r.written_at_pass :]
        may_stamp = [i for i, p in after if _base(p.bases, r.offset) < p.c_hi]
        must_stamp = [i for i, p in after if r.offset < p.c_lo]
        d = self.delete_retention_ms
        if must_stamp:
            j = must_stamp[0]
            t = self.passes[j].now
            if any(i > j and r.offset < p.c_lo and p.now >= t + d for i, p in after):
                return Need.ABSENT
        if may_stamp:
            e = may_stamp[0]
            t = self.passes[e].now
            if any(i > e and r.offset < p.c_hi and p.now >= t + d for i, p in after):
                return Need.EITHER
        return Need.PRESENT


def _base(bases: list[int], offset: int) -> int:
    """Base offset of the segment holding `offset`."""
    return max((b for b in bases if b <= offset), default=0)


# ---- the histories --------------------------------------------------------------------------------

_records = st.lists(st.tuples(st.integers(0, len(KEYS) - 1), st.integers(0, 3)), min_size=1, max_size=4)
_send = st.tuples(st.just("send"), st.sampled_from(PRODUCERS), _records)
_op = st.one_of(
    _send,
    _send,
    _send,
    _send,
    st.tuples(st.just("end"), st.sampled_from(sorted(TRANSACTIONAL)), st.booleans()),
    st.tuples(st.just("roll")),
    st.tuples(st.just("compact"), st.sampled_from([0, 1, 999, 1000, 60_000]), st.sampled_from([None, None, 72, 120])),
    st.tuples(st.just("reopen")),
)
_history = st.fixed_dictionaries(
    {
        "segment_bytes": st.sampled_from([250, 250, 600, 2000]),
        "delete_retention_ms": st.sampled_from([0, 1000, 60_000]),
        "dirty_ratio": st.sampled_from(["0.01", "0.5", "1.0"]),
        "ops": st.lists(_op, min_size=10, max_size=70),
    }
)


class Run:
    """One history against a real store, checked against the model after every pass."""

    def __init__(self, root: str, h: dict):
        self.root = root
        self.now = START
        self.model = Model(h["delete_retention_ms"])
        self.seq = dict.fromkeys(PRODUCERS, 0)
        self.last_batch: dict[str, tuple[bytes, int, int]] = {}  # idempotent producer -> (bytes, base, last)
        self.counter = 0
        self.store = Store.open(root, clock=lambda: self.now)
        self.store.create_topic(
            TOPIC,
            1,
            {
                "cleanup.policy": "compact",
                "segment.bytes": h["segment_bytes"],
                "delete.retention.ms": h["delete_retention_ms"],
                "min.cleanable.dirty.ratio": h["dirty_ratio"],
            },
        )

    @property
    def log(self):
        return self.store.partition(TOPIC, 0)

    def checkpoint(self) -> int:
        return read_offset_checkpoint(os.path.join(self.root, CLEANER_CHECKPOINT)).get((TOPIC, 0), 0)

    def bases(self) -> list[int]:
        return [s.base_offset for s in self.log.segments]

    def step(self, op: tuple) -> None:
        kind = op[0]
        bases, before = self.bases(), self.checkpoint()
        if kind == "send":
            self.send(op[1], op[2])
        elif kind == "end":
            self.end(op[1], op[2])
        elif kind == "roll":
            self.log.roll()
        elif kind == "reopen":
            self.store.close()
            self.store = Store.open(self.root, clock=lambda: self.now)
        elif kind == "compact":
            self.compact(op[1], op[2])
            return
        after = self.checkpoint()
        if after != before:  # a roll trigger cleaned on its own, at the clock's time
            assert after > before, f"the cleaner checkpoint went back from {before} to {after}"
            m = self.model
            # It may have run several passes: a D=0 tombstone may then already be gone.
            m.passes.append(Pass(self.now, before, after, bases))
            m.passes.append(Pass(self.now, after, after, bases))
            COVERAGE["roll-triggered cleanings"] += 1
            self.check()

    def send(self, producer: str, records: list[tuple[int, int]]) -> None:
        m = self.model
        values = []
        for k, kind in records:
            self.counter += 1
            values.append((KEYS[k], None if kind == 0 else f"v{self.counter}".encode()))
        txn = None
        if producer in TRANSACTIONAL:
            if producer not in m.open_txn:
                m.txn_count[producer] = m.txn_count.get(producer, 0) + 1
                m.open_txn[producer] = m.txn_count[producer]
                m.status[(producer, m.open_txn[producer])] = "open"
            txn = (producer, m.open_txn[producer])
        pid = IDEMPOTENT.get(producer, TRANSACTIONAL.get(producer, -1))
        data = build_batch(
            [(key, value, None, self.now) for key, value in values],
            producer_id=pid,
            producer_epoch=EPOCH if pid >= 0 else -1,
            base_sequence=self.seq[producer] if pid >= 0 else -1,
            is_transactional=txn is not None,
        )
        result = self.log.append(data)
        assert not result.duplicate
        if pid >= 0:
            self.seq[producer] += len(values)
        if producer in IDEMPOTENT:
            self.last_batch[producer] = (data, result.base_offset, result.last_offset)
        for i, (key, value) in enumerate(values):
            m.recs.append(Rec(result.base_offset + i, key, value, txn, len(m.passes)))

    def end(self, producer: str, commit: bool) -> None:
        m = self.model
        if producer not in m.open_txn:
            return
        n = m.open_txn.pop(producer)
        control = ControlType.COMMIT if commit else ControlType.ABORT
        self.log.append_marker(control, TRANSACTIONAL[producer], EPOCH)
        m.status[(producer, n)] = "commit" if commit else "abort"
        m.ended_at_pass[(producer, n)] = len(m.passes)

    def compact(self, advance: int, dedupe: int | None) -> None:
        self.now += advance
        bases, before = self.bases(), self.checkpoint()
        end = self.log.log_end_offset
        stats = self.log.compact(force=True, now=self.now, dedupe_buffer_size=dedupe)
        after = self.checkpoint()
        assert self.log.log_end_offset == end, "cleaning moved the log end offset"
        if stats is not None:
            assert stats.cleaned_up_to == after, f"stats say cleaned up to {stats.cleaned_up_to}, checkpoint {after}"
            assert stats.cleaned_up_to <= self.model.lso(end), "cleaned at or past the LSO"
            assert stats.cleaned_up_to <= max(bases), "cleaned into the active segment"
            passes = max(1, stats.passes)
        else:
            assert after == before, "compact() returned None but the checkpoint moved"
            return
        assert after >= before, f"the cleaner checkpoint went back from {before} to {after}"
        m = self.model
        COVERAGE["multi-pass cleanings"] += passes > 1
        for _ in range(passes - 1):
            m.passes.append(Pass(self.now, before, after, bases))
        m.passes.append(Pass(self.now, after, after, bases))
        self.check()

    def view(self, isolation: IsolationLevel) -> list[tuple[int, bytes | None, bytes | None]]:
        out: list[tuple[int, bytes | None, bytes | None]] = []
        log = self.log
        pos = log.log_start_offset
        while True:
            result = fetch(log, pos, isolation, max_records=1000)
            out += [(r.offset, r.key, r.value) for r in result.records]
            if result.next_offset == pos and not result.records:
                return out
            pos = result.next_offset

    def check(self) -> None:
        m = self.model
        end = self.log.log_end_offset
        lso = m.lso(end)
        assert self.log.log_start_offset == 0, "compaction moved the log start offset"
        by_offset = {r.offset: r for r in m.recs}
        needs = {r.offset: m.need(r) for r in m.recs}
        for isolation in (RU, RC):
            got = self.view(isolation)
            offsets = [o for o, _, _ in got]
            assert offsets == sorted(set(offsets)), f"{isolation.value}: offsets repeated or out of order: {offsets}"
            for o, key, value in got:
                r = by_offset.get(o)
                assert r is not None, f"{isolation.value}: offset {o} was never a data record"
                assert (key, value) == (r.key, r.value), f"{isolation.value}: offset {o} changed"
                assert needs[o] is not Need.ABSENT, f"{isolation.value}: offset {o} ({r}) must be cleaned away"
                assert o not in m.gone, f"{isolation.value}: offset {o} came back after it was cleaned away"
                if isolation is RC:
                    assert m.committed_or_plain(r) and o < lso, f"read_committed returned {r} (LSO {lso})"
            seen = set(offsets)
            for r in m.recs:
                visible = isolation is RU or (m.committed_or_plain(r) and r.offset < lso)
                if visible and needs[r.offset] is Need.PRESENT:
                    assert r.offset in seen, f"{isolation.value}: {r} must survive (cleaned up to {m.cleaned})"
            if isolation is RU:
                m.gone |= {r.offset for r in m.recs} - seen
        COVERAGE["checks"] += 1
        COVERAGE["records removed"] += len(m.gone)
        COVERAGE["tombstones removed"] += sum(1 for r in m.recs if r.value is None and r.offset in m.gone)
        COVERAGE["aborted removed"] += sum(1 for r in m.recs if m.aborted(r) and r.offset in m.gone)
        COVERAGE["tombstones kept past a pass"] += sum(
            1 for r in m.recs if r.value is None and r.offset < m.cleaned and r.offset not in m.gone
        )
        COVERAGE["either"] += sum(1 for n in needs.values() if n is Need.EITHER)

    def finish(self, *, verify: bool) -> None:
        """Producer state from the cleaned log alone: snapshots deleted, then each idempotent retry;
        with `verify`, the store check (txlog verify's checks) on the cleaned files."""
        self.check()
        self.store.close()
        part = os.path.join(self.root, f"{TOPIC}-0")
        for name in os.listdir(part):
            if name.endswith(".snapshot"):
                os.unlink(os.path.join(part, name))
        self.store = Store.open(self.root, clock=lambda: self.now)
        self.check()
        for producer, (data, base, last) in sorted(self.last_batch.items()):
            retry = self.log.append(data)
            assert retry.duplicate, f"{producer}'s retried last batch was appended again after cleaning"
            assert (retry.base_offset, retry.last_offset) == (base, last), f"{producer}: retry answered {retry}"
        if verify:
            # Without a coordinator, a transaction left open is "hanging" to the store check: end
            # them as the coordinator's timeout would, then check the files.
            for producer in sorted(self.model.open_txn):
                self.end(producer, commit=False)
            found = check_store(self.store, TOPIC, now=self.now).findings
            errors = [f for f in found if f.severity is Severity.ERROR]
            assert not errors, f"the store check found: {errors}"
        self.store.close()


def _examples(big: bool) -> int:
    return int(os.environ.get("TXLOG_COMPACTION_EXAMPLES") or (400 if big else 25))


def _run_histories(tmp_path, examples: int, *, verify: bool) -> None:
    @settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
    @given(_history)
    def run(h: dict) -> None:
        root = tempfile.mkdtemp(dir=tmp_path)
        try:
            r = Run(root, h)
            for op in h["ops"]:
                r.step(op)
            # A last pass far past every horizon, so every history also ends cleaned.
            r.compact(2 * h["delete_retention_ms"] + 1, None)
            r.compact(2 * h["delete_retention_ms"] + 1, None)
            r.finish(verify=verify)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    with mock.patch.object(os, "fsync", lambda fd: None), mock.patch.object(os, "fdatasync", lambda fd: None):
        run()


def test_compaction_matches_the_model(big, tmp_path):
    _run_histories(tmp_path, _examples(big), verify=False)
    print(f"\ncompaction model coverage: {dict(COVERAGE)}")


def test_the_store_check_passes_on_cleaned_histories(big, tmp_path):
    """`txlog verify`'s checks find no error in what the cleaner wrote (docs: compaction's gaps,
    emptied batches and the `.txnindex` entries it keeps are normal in a compacted topic)."""
    _run_histories(tmp_path, _examples(big), verify=True)


def test_the_store_check_passes_after_an_abort_whose_first_batch_was_cleaned(tmp_path):
    """A history 2,000 random ones found: the abort at the end rolls, the roll trigger cleans the
    transaction's first batch away and keeps its last one (the producer's last batch, emptied), and
    the `.txnindex` entry keeps the transaction's original first offset, as Kafka's cleaner keeps it
    (CleanedTransactionMetadata appends the AbortedTxn it collected). The store check replayed the
    cleaned log, saw the transaction start at its kept batch and reported ".txnindex entry (producer
    2000, first 3, last 7): the aborted transaction starts at 4"."""
    h = {"segment_bytes": 250, "delete_retention_ms": 0, "dirty_ratio": "0.01"}
    r = Run(str(tmp_path / "s"), h)
    tombstone = [(0, 0)]
    ops = [("send", "plain", tombstone)] * 3 + [("send", "t0", tombstone)] * 2
    ops += [("roll",), ("roll",), ("send", "plain", tombstone), ("send", "t1", tombstone)]
    for op in ops:
        r.step(op)
    r.compact(1, None)
    r.compact(1, None)
    r.finish(verify=True)


def test_model_catches_a_cleaner_that_keeps_everything(tmp_path):
    """The model is not vacuous: a key written twice and cleaned must lose its first record."""
    r = Run(str(tmp_path / "s"), {"segment_bytes": 250, "delete_retention_ms": 0, "dirty_ratio": "1.0"})
    r.step(("send", "plain", [(0, 1)]))
    r.step(("send", "plain", [(0, 1)]))
    r.step(("roll",))
    r.step(("send", "plain", [(1, 1)]))
    r.compact(1, None)
    assert r.model.need(r.model.recs[0]) is Need.ABSENT
    assert 0 not in {o for o, _, _ in r.view(RU)}
    r.store.close()
