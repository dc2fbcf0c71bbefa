"""Log compaction through PartitionLog.compact / Store.compact: each of Kafka's retain rules, the bounds of
the dirty section, multi-pass cleaning, and the files a cleaning leaves (storage/log_cleaner.py)."""

from __future__ import annotations

import os
from dataclasses import replace
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import Store
from storage.checkpoint import read_offset_checkpoint
from storage.config import CONFIG_NAMES, TopicConfig
from storage.errors import InvalidConfigurationError, InvalidRecordError, UnknownTopicOrPartitionError
from storage.file_check import Findings, PartitionFileCheck
from storage.log_cleaner import CLEANER_CHECKPOINT, SWAP_STEPS, segments_overlapping
from storage.records import ControlType, build_batch

T0 = 1_700_000_000_000
DAY = 86_400_000


class Clock:
    def __init__(self, now: int = T0):
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(store_path, clock):
    s = Store.open(store_path, clock=clock)
    yield s
    s.close()


def compact_topic(store, name="c", **config):
    """A compacted topic; its automatic cleaning after a roll is off unless the test sets the ratio
    (a dirty ratio is never above 1.0 and max.compaction.lag.ms is Long.MAX by default)."""
    config = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 1.0, **config}
    store.create_topic(name, 1, config)
    return store.partition(name, 0)


def put(log, key, value, ts=T0, **producer):
    """One record as its own batch; returns its offset."""
    data = build_batch([(key, value, None, ts)], **producer)
    return log.append(data).base_offset


def records(log, *, with_batches=False):
    """Every record from the log start (offset, key, value), reading batch by batch."""
    out, batches = [], []
    offset = log.log_start_offset
    end = log.log_end_offset
    while offset < end:
        got = log.read(offset)
        if not got:
            break
        for batch in got:
            batches.append(batch)
            out.extend((r.offset, r.key, r.value) for r in batch.records())
        offset = got[-1].last_offset + 1
    return (out, batches) if with_batches else out


def file_findings(store, topic="c"):
    findings = Findings()
    check = PartitionFileCheck(
        findings, store.partition_dir(topic, 0), topic, 0, store.topic_config(topic), now=T0, gaps_allowed=True
    )
    check.run()
    check.against_the_log(store.partition(topic, 0))
    return list(findings)


# ---- the configs ---------------------------------------------------------------------------------------


def test_compact_configs_have_kafkas_defaults_and_are_normalised(store):
    store.create_topic("p", 1, {"cleanup.policy": "delete, compact"})
    config = store.topic_config("p")
    assert config.cleanup_policy == "compact,delete" and config.compact and config.delete
    assert (config.min_cleanable_dirty_ratio, config.min_compaction_lag_ms) == (0.5, 0)
    assert (config.max_compaction_lag_ms, config.delete_retention_ms) == (2**63 - 1, 86_400_000)
    store.alter_topic_config("p", {"max.compaction.lag.ms": 5000, "segment.ms": 60_000})
    assert store.topic_config("p").max_segment_ms == 5000  # a compact topic rolls at the smaller
    store.alter_topic_config("p", {"cleanup.policy": "delete"})
    assert store.topic_config("p").max_segment_ms == 60_000
    with pytest.raises(InvalidConfigurationError):
        store.alter_topic_config("p", {"min.compaction.lag.ms": 6000, "max.compaction.lag.ms": 5000})


def test_the_policy_flags_follow_cleanup_policy_and_are_no_setting_of_their_own():
    """compact/delete are parsed once from cleanup.policy (storage/config.py): a copy with another
    policy gets its own flags, and the flags are neither shown, compared nor a config name."""
    both, same = (
        TopicConfig.from_overrides({"cleanup.policy": "delete,compact"}),
        TopicConfig(cleanup_policy="compact,delete"),
    )
    assert both == same and hash(both) == hash(same) and "_compact=" not in repr(both)
    assert list(both.to_dict()) == list(CONFIG_NAMES)
    copies = (both, replace(both, cleanup_policy="delete"), TopicConfig(cleanup_policy=""))
    flags = [(c.compact, c.delete) for c in copies]
    assert flags == [(True, True), (False, True), (False, False)]


def test_a_compacted_topic_refuses_records_without_a_key(store):
    log = compact_topic(store)
    with pytest.raises(InvalidRecordError, match="without key"):
        log.append(build_batch([(b"k", b"v", None, T0), (None, b"v", None, T0)]))
    assert log.log_end_offset == 0
    store.create_topic("d", 1)
    put(store.partition("d", 0), None, b"v")  # a delete topic takes them


def test_store_compact_refuses_unknown_topics_and_non_compact_policies(store):
    store.create_topic("d", 1)
    with pytest.raises(InvalidConfigurationError, match="cleanup.policy"):
        store.compact("d")
    with pytest.raises(UnknownTopicOrPartitionError):
        store.compact("absent")
    compact_topic(store)
    with pytest.raises(UnknownTopicOrPartitionError):
        store.compact("c", 3)
    assert store.partition("d", 0).compact(force=True) is None


def test_retention_by_time_applies_only_with_delete_in_the_policy(store, clock):
    log = compact_topic(store, **{"retention.ms": 1000})
    put(log, b"a", b"1")
    log.roll()
    put(log, b"b", b"2")
    clock.now += DAY
    assert log.enforce_retention() == 0
    store.alter_topic_config("c", {"cleanup.policy": "compact,delete"})
    assert log.enforce_retention() == 1


def test_an_empty_cleanup_policy_keeps_everything(store, clock):
    """Kafka 4.x (TopicConfig's cleanup.policy doc): an empty list means infinite retention, neither
    deletion by time or size nor compaction; a DeleteRecords' log start still applies."""
    store.create_topic("e", 1, {"cleanup.policy": "", "retention.ms": 1000, "retention.bytes": 1})
    config = store.topic_config("e")
    assert (config.cleanup_policy, config.compact, config.delete) == ("", False, False)
    log = store.partition("e", 0)
    put(log, None, b"1")  # no key needed: the topic is not compacted
    put(log, b"a", b"2")
    log.roll()
    put(log, b"a", b"3")
    clock.now += DAY
    assert log.enforce_retention() == 0
    with pytest.raises(InvalidConfigurationError, match="cleanup.policy"):
        store.compact("e")
    assert [v for _, _, v in records(log)] == [b"1", b"2", b"3"]
    store.alter_topic_config("e", {"cleanup.policy": " "})
    assert store.topic_config("e").cleanup_policy == ""
    with pytest.raises(InvalidConfigurationError, match="cleanup.policy"):
        store.alter_topic_config("e", {"cleanup.policy": "compact,,delete"})


# ---- what survives -------------------------------------------------------------------------------------


def test_the_latest_record_per_key_survives_with_its_offset(store):
    log = compact_topic(store)
    for i in range(12):
        put(log, f"k{i % 3}".encode(), f"v{i}".encode())
        if i % 4 == 3:
            log.roll()
    put(log, b"k0", b"active")  # the active segment is never cleaned
    stats = log.compact(force=True)
    assert stats is not None and (stats.first_dirty_offset, stats.cleaned_up_to) == (0, 12)
    assert stats.records_read == 12 and stats.records_retained == 3 and stats.passes == 1
    assert stats.segments_before == 4 and stats.segments_after == 2
    assert records(log) == [(9, b"k0", b"v9"), (10, b"k1", b"v10"), (11, b"k2", b"v11"), (12, b"k0", b"active")]
    assert log.log_end_offset == 13 and log.log_start_offset == 0
    assert file_findings(store) == []


def test_the_cleaned_up_to_offset_is_checkpointed_in_kafkas_format(store, store_path):
    log = compact_topic(store)
    put(log, b"a", b"1")
    put(log, b"a", b"2")
    log.roll()
    put(log, b"a", b"3")
    log.compact(force=True)
    path = os.path.join(store_path, CLEANER_CHECKPOINT)
    assert read_offset_checkpoint(path) == {("c", 0): 2}
    with open(path) as f:
        assert f.read() == "0\n1\nc 0 2\n"
    assert log.compact(force=True) is None  # nothing dirty below the active segment


def test_a_tombstone_survives_until_its_delete_horizon(store, clock):
    log = compact_topic(store, **{"delete.retention.ms": 1000})
    put(log, b"a", b"1")
    put(log, b"a", None)
    put(log, b"b", b"2")
    log.roll()
    put(log, b"b", b"3")
    log.compact(force=True)
    kept, batches = records(log, with_batches=True)
    assert kept == [(1, b"a", None), (2, b"b", b"2"), (3, b"b", b"3")]
    tomb = batches[0]
    # KIP-534: the first pass that keeps it sets the bit and the horizon as the base timestamp.
    assert tomb.has_delete_horizon and tomb.base_timestamp == clock.now + 1000
    assert tomb.records()[0].timestamp == T0  # the record's own timestamp is unchanged
    clock.now += 999
    put(log, b"c", b"4")  # something dirty, so that a round runs (and recopies the clean part too)
    log.roll()
    log.compact(force=True)
    assert (1, b"a", None) in records(log)
    clock.now += 1
    put(log, b"c", b"5")
    log.roll()
    log.compact(force=True)
    assert [r for r in records(log) if r[1] == b"a"] == []
    assert file_findings(store) == []


def test_aborted_data_goes_and_its_marker_stays_until_its_horizon(store, clock):
    log = compact_topic(store, **{"delete.retention.ms": 1000})
    pid, epoch = 7, 0
    put(log, b"x", b"aborted", producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True)
    log.append_marker(ControlType.ABORT, pid, epoch, timestamp=T0)
    put(log, b"x", b"committed-before", producer_id=8, producer_epoch=0, base_sequence=0, is_transactional=True)
    log.append_marker(ControlType.COMMIT, 8, 0, timestamp=T0)
    put(log, b"y", b"plain")
    log.roll()
    put(log, b"z", b"active")
    log.compact(force=True)
    kept, batches = records(log, with_batches=True)
    values = [v for _, _, v in kept]
    assert b"aborted" not in values and b"committed-before" in values
    abort = [b for b in batches if b.is_control and b.producer_id == pid]
    assert len(abort) == 1  # data was in the log when this pass read the marker: kept, no horizon yet
    assert log.aborted_transactions(0, 10)[0].producer_id == pid
    log.compact(force=True)  # nothing dirty: no second round
    put(log, b"z", b"2")
    log.roll()
    # The data batch stays as an empty batch (the producer's last), so the marker stays too.
    stats = log.compact(force=True)
    assert stats is not None
    _, batches = records(log, with_batches=True)
    data = [b for b in batches if b.producer_id == pid and not b.is_control]
    assert [(b.base_offset, b.records_count, b.base_sequence) for b in data] == [(0, 0, 0)]
    assert file_findings(store) == []


def test_a_batch_emptied_by_cleaning_keeps_its_producer_state(store):
    log = compact_topic(store)
    put(log, b"k", b"old", producer_id=5, producer_epoch=2, base_sequence=0)
    put(log, b"k", b"new")
    log.roll()
    put(log, b"other", b"v")
    log.compact(force=True)
    kept, batches = records(log, with_batches=True)
    assert kept == [(1, b"k", b"new"), (2, b"other", b"v")]
    empty = batches[0]
    assert (empty.base_offset, empty.records_count, empty.producer_id, empty.producer_epoch) == (0, 0, 5, 2)
    assert (empty.base_sequence, empty.last_offset_delta) == (0, 0)
    assert log.producer_states()[5]["last_sequence"] == 0


def test_nothing_at_or_past_the_first_unstable_offset_is_cleaned(store):
    log = compact_topic(store)
    put(log, b"a", b"1")
    put(log, b"a", b"2")
    log.roll()
    put(log, b"t", b"open", producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True)
    put(log, b"a", b"3")
    log.roll()
    put(log, b"a", b"4")
    log.roll()
    stats = log.compact(force=True)
    assert stats is not None and stats.cleaned_up_to == 2  # the open transaction's segment starts at 2
    assert [v for _, k, v in records(log) if k == b"a"] == [b"2", b"3", b"4"]


def test_nothing_at_or_past_the_high_watermark_is_cleaned(store, store_path, clock, monkeypatch):
    """Kafka's cleanableOffsets stops at the LSO, which is never past the HW: with no transaction open
    the HW alone. Sealed records are durable (a roll syncs them), but the HW file can lag behind them
    when its publish failed (a full disk, storage/high_watermark.py); the records past it, which no
    reader may see yet, were cleaned up to the active segment, past the cap a reader then read under."""
    from storage.high_watermark import HighWatermarkFile

    with Store.open(store_path, clock=clock) as cleaner_store:
        log = compact_topic(store)
        cleaner = cleaner_store.partition("c", 0)  # its view knows the HW from the file only
        put(log, b"a", b"1")
        put(log, b"a", b"2")
        log.roll()
        monkeypatch.setattr(HighWatermarkFile, "publish", lambda self, high_watermark: None)
        put(log, b"a", b"3")
        log.roll()
        put(log, b"a", b"4")
        log.roll()
        stats = cleaner.compact(force=True)
        assert stats is not None and stats.cleaned_up_to == 2  # the HW the file holds: the end of the first segment
        assert [v for _, k, v in records(cleaner) if k == b"a"] == [b"2", b"3", b"4"]


def test_segments_younger_than_min_compaction_lag_are_not_cleaned(store, clock):
    log = compact_topic(store, **{"min.compaction.lag.ms": 10_000})
    put(log, b"a", b"1", ts=T0 - 20_000)
    log.roll()
    put(log, b"a", b"2", ts=T0 - 1_000)
    log.roll()
    put(log, b"a", b"3", ts=T0)
    stats = log.compact(force=True)
    assert stats is not None and stats.cleaned_up_to == 1
    assert [v for _, _, v in records(log)] == [b"1", b"2", b"3"]  # nothing dirty before it is older


def test_the_dirty_ratio_decides_without_force(store):
    log = compact_topic(store, **{"min.cleanable.dirty.ratio": 0.99})
    put(log, b"a", b"1")
    put(log, b"a", b"2")
    log.roll()
    log.compact(force=True)  # the segment [0, 2) is now clean
    put(log, b"a", b"3")
    log.roll()
    assert log.compact() is None  # half dirty, under 0.99
    store.alter_topic_config("c", {"min.cleanable.dirty.ratio": 0.1})
    assert log.compact() is not None


def test_cleaning_runs_after_a_roll_when_due(store):
    log = compact_topic(store, **{"segment.bytes": 200, "min.cleanable.dirty.ratio": 0.01})
    for i in range(60):
        put(log, f"k{i % 2}".encode(), b"v" * 20)
    assert len(records(log)) < 20  # the appends' rolls cleaned it
    assert file_findings(store) == []


def test_a_tiny_dedupe_buffer_makes_more_passes_with_the_same_result(store_path, clock):
    def run(name, dedupe):
        with Store.open(os.path.join(store_path, name), clock=clock) as s:
            log = compact_topic(s)
            for i in range(200):
                put(log, f"k{(i * 7) % 23}".encode(), f"{i}".encode())
                if i % 40 == 39:
                    log.roll()
            stats = log.compact(force=True, dedupe_buffer_size=dedupe)
            return stats, records(log)

    one, expected = run("one", None)
    many, got = run("many", 10 * 24)  # room for 9 keys per pass
    assert one.passes == 1 and many.passes > 1
    assert got == expected and len(expected) == 23  # every key once, at its latest offset
    assert many.cleaned_up_to == one.cleaned_up_to == 200


def test_cleaned_segments_reopen_with_right_indexes(store_path, clock):
    with Store.open(store_path, clock=clock) as s:
        log = compact_topic(s, **{"index.interval.bytes": 100})
        for i in range(300):
            put(log, f"k{i % 50}".encode(), b"x" * 30)
            if i % 100 == 99:
                log.roll()
        log.compact(force=True)
        before = records(log)
    with Store.open(store_path, clock=clock) as s:
        log = s.partition("c", 0)
        for seg in log.segments:
            seg.full_index_check()
            assert seg.offset_index.entries() or seg.size <= 100
        assert records(log) == before
        for offset, _, _ in before[::7]:
            assert log.read(offset, 1)[0].base_offset == offset
        assert file_findings(s) == []


def test_swap_steps_are_named_in_order():
    import storage.log_cleaner as cleaner

    assert SWAP_STEPS == (
        "write_cleaned",
        "rename_to_swap",
        "write_checkpoint",
        "delete_replaced",
        "rename_swap_to_log",
    )
    assert all(callable(getattr(cleaner, name)) for name in SWAP_STEPS)


def test_an_abort_marker_stays_while_its_data_does_then_until_its_horizon(store, clock):
    log = compact_topic(store, **{"delete.retention.ms": 1000})
    txn = {"producer_id": 7, "producer_epoch": 0, "is_transactional": True}
    put(log, b"x", b"aborted", base_sequence=0, **txn)
    log.append_marker(ControlType.ABORT, 7, 0, timestamp=T0)
    put(log, b"y", b"committed", base_sequence=1, **txn)  # the producer's last data: 0 is no longer kept
    log.append_marker(ControlType.COMMIT, 7, 0, timestamp=T0)

    def markers():
        _, batches = records(log, with_batches=True)
        return [(b.base_offset, b.has_delete_horizon) for b in batches if b.is_control]

    def round_(advance=0):
        clock.now += advance
        put(log, b"z", b"dirty")
        log.roll()
        assert log.compact(force=True) is not None

    round_()  # the aborted batch goes; its marker read it this round, so it stays as it was
    assert markers() == [(1, False), (3, False)] and b"aborted" not in [v for _, _, v in records(log)]
    assert log.aborted_transactions(0, 10) == []  # none of the transaction's batches is left to skip
    round_()  # no data of the abort left: the marker gets its delete horizon
    assert markers() == [(1, True), (3, False)]
    round_(999)
    assert markers() == [(1, True), (3, False)]
    round_(1)  # past the horizon: gone; the commit marker stays while its data does
    assert markers() == [(3, False)]
    assert file_findings(store) == []


# Transaction protocol v1 markers keep the producer's epoch; v2 markers (KIP-890, txlog's own
# producer) bump it, which clears the producer's batch metadata (Kafka's
# ProducerStateEntry.maybeUpdateProducerEpoch): the marker, not the last data batch, then holds
# the producer's state. The real-broker oracle (tests/kafka_rig/test_compaction_oracle.py) checks v1.
MARKER_EPOCH_BUMP = pytest.mark.parametrize("bump", [0, 1], ids=["protocol-v1", "protocol-v2"])


@MARKER_EPOCH_BUMP
def test_an_aborted_batch_stays_empty_while_it_is_its_producers_last_data(store, bump):
    log = compact_topic(store)
    put(log, b"x", b"live")
    put(log, b"x", b"aborted", producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    log.append_marker(ControlType.ABORT, 7, bump, timestamp=T0)
    log.roll()
    put(log, b"z", b"active")
    log.compact(force=True)
    kept, batches = records(log, with_batches=True)
    assert (0, b"x", b"live") in kept and b"aborted" not in [v for _, _, v in kept]
    shapes = [(b.base_offset, b.is_control, b.records_count) for b in batches if b.producer_id == 7]
    # v1: the data batch is the producer's last data (the marker kept its epoch): kept, emptied
    assert shapes == ([(1, False, 0), (2, True, 1)] if bump == 0 else [(2, True, 1)])
    assert file_findings(store) == []


@MARKER_EPOCH_BUMP
def test_a_commit_marker_is_stamped_only_by_a_cleaning_that_read_none_of_its_batches(store, clock, bump):
    log = compact_topic(store)
    put(log, b"s", b"committed", producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    log.append_marker(ControlType.COMMIT, 7, bump, timestamp=T0)
    put(log, b"s", b"overwritten")

    def marker_and_data():
        _, batches = records(log, with_batches=True)
        return [(b.base_offset, b.is_control, b.has_delete_horizon) for b in batches if b.producer_id == 7][:2]

    def round_():
        put(log, b"z", b"dirty")
        log.roll()
        assert log.compact(force=True) is not None

    round_()  # the data's records go; the marker read a batch of its transaction: no horizon
    if bump == 0:  # v1: the emptied batch stays, the producer's last data
        assert marker_and_data() == [(0, False, False), (1, True, False)]
    else:
        assert marker_and_data() == [(1, True, False)]
    # the producer's next transaction: the emptied batch is no longer its last data
    put(log, b"t", b"next", producer_id=7, producer_epoch=bump, base_sequence=1 - bump, is_transactional=True)
    log.append_marker(ControlType.COMMIT, 7, 2 * bump, timestamp=T0)
    round_()
    # v1: this cleaning drops the empty batch but read it, so the marker still waits (as the broker's does);
    # v2: the transaction had no batch left to read: the marker gets its delete horizon
    assert marker_and_data()[0] == (1, True, bump == 1)
    round_()
    assert marker_and_data()[0] == (1, True, True)
    assert file_findings(store) == []


# ---- recovery of a swap cut short (the files as each step leaves them) --------------------------------


def _dirty_log(store):
    log = compact_topic(store)
    for i in range(30):
        put(log, f"k{i % 4}".encode(), f"v{i}".encode())
        if i % 10 == 9:
            log.roll()  # three segments of 10, merged into one group by the cleaner
    put(log, b"k0", b"active")
    return log


EXPECTED_CLEAN = [(26, b"k2", b"v26"), (27, b"k3", b"v27"), (28, b"k0", b"v28"), (29, b"k1", b"v29")]
EXPECTED_DIRTY = [(i, f"k{i % 4}".encode(), f"v{i}".encode()) for i in range(30)]


class Interrupted(Exception):
    pass


def _interrupt_before(monkeypatch, step):
    import storage.log_cleaner as cleaner

    def crash(*args, **kwargs):
        raise Interrupted(step)

    monkeypatch.setattr(cleaner, step, crash)


def _reopen_and_check(store_path, clock, expected, after_next_cleaning=EXPECTED_CLEAN):
    with Store.open(store_path, clock=clock) as s:
        log = s.partition("c", 0)
        names = os.listdir(s.partition_dir("c", 0))
        assert [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))] == []
        assert records(log) == expected + [(30, b"k0", b"active")]
        for seg in log.segments:
            seg.full_index_check()
        assert file_findings(s) == []
        log.compact(force=True)  # the next cleaning completes (or finds the range checkpointed)
        assert records(log) == after_next_cleaning + [(30, b"k0", b"active")]
        assert file_findings(s) == []


@pytest.mark.parametrize(
    ("step", "expected", "after_next_cleaning"),
    [
        ("rename_to_swap", EXPECTED_DIRTY, EXPECTED_CLEAN),  # only .cleaned files: removed; cleaned again
        # every .cleaned renamed to .swap, the checkpoint not yet raised: recovery raises it and completes
        ("write_checkpoint", EXPECTED_CLEAN, EXPECTED_CLEAN),
        ("delete_replaced", EXPECTED_CLEAN, EXPECTED_CLEAN),  # .swap beside the replaced segments: completes
        ("rename_swap_to_log", EXPECTED_CLEAN, EXPECTED_CLEAN),  # .swap alone: it takes its name
    ],
)
def test_a_swap_interrupted_before_each_step_recovers_at_open(
    store_path, clock, monkeypatch, step, expected, after_next_cleaning
):
    with Store.open(store_path, clock=clock) as s:
        log = _dirty_log(s)
        _interrupt_before(monkeypatch, step)
        with pytest.raises(Interrupted):
            log.compact(force=True)
        monkeypatch.undo()
        s._logs.clear()  # a crash: no clean close of the partition
    _reopen_and_check(store_path, clock, expected, after_next_cleaning)


def _crash_after(monkeypatch, step):
    import storage.log_cleaner as cleaner

    real = getattr(cleaner, step)

    def crash(*args, **kwargs):
        real(*args, **kwargs)
        raise Interrupted(step)

    monkeypatch.setattr(cleaner, step, crash)


@pytest.mark.parametrize(
    "crash",
    ["before delete_replaced", "before rename_swap_to_log", "after rename_swap_to_log"],
)
def test_a_cleaning_that_can_be_seen_has_checkpointed_past_what_it_recopied(store_path, clock, monkeypatch, crash):
    """State replayed up to N is extended only while the checkpoint is at or below N
    (txlog/coordinator/replayed_state.py): a tombstone goes in a second cleaning of its batch, and the
    first must have moved the checkpoint past it. So a cleaning whose output survives a crash must
    have written its checkpoint entry already; else a snapshot below the tombstone would still be
    extended after the tombstone is gone, and the deleted key would come back."""
    with Store.open(store_path, clock=clock) as s:
        log = compact_topic(s, **{"delete.retention.ms": 1000})
        put(log, b"gone", b"v")
        tombstone = put(log, b"gone", None)
        put(log, b"kept", b"v")
        log.roll()
        put(log, b"kept", b"active")
        when, step = crash.split(" ")
        (_interrupt_before if when == "before" else _crash_after)(monkeypatch, step)
        with pytest.raises(Interrupted):
            log.compact(force=True)
        monkeypatch.undo()
        s._logs.clear()
    with Store.open(store_path, clock=clock) as s:
        log = s.partition("c", 0)
        _, batches = records(log, with_batches=True)
        stamped = [b for b in batches if b.base_offset == tombstone]
        assert stamped and stamped[0].has_delete_horizon  # the crashed cleaning's output is what the log holds
        checkpoint = read_offset_checkpoint(os.path.join(store_path, CLEANER_CHECKPOINT)).get(("c", 0))
        assert checkpoint == 3 and checkpoint > tombstone
        clock.now += 1000
        put(log, b"x", b"dirty")
        log.roll()
        log.compact(force=True)
        assert b"gone" not in [k for _, k, _ in records(log)]
        assert read_offset_checkpoint(os.path.join(store_path, CLEANER_CHECKPOINT))[("c", 0)] == 5


def _stop_before_delete(store_path, clock, monkeypatch) -> str:
    with Store.open(store_path, clock=clock) as s:
        _dirty_log(s)
        log = s.partition("c", 0)
        _interrupt_before(monkeypatch, "delete_replaced")
        with pytest.raises(Interrupted):
            log.compact(force=True)
        monkeypatch.undo()
        s._logs.clear()
        return s.partition_dir("c", 0)


def test_a_swap_whose_renames_to_swap_were_not_all_done_is_dropped(store_path, clock, monkeypatch):
    directory = _stop_before_delete(store_path, clock, monkeypatch)
    # As if the crash came between the `.log` and the `.index` renames of rename_to_swap.
    os.rename(
        os.path.join(directory, "00000000000000000000.index.swap"),
        os.path.join(directory, "00000000000000000000.index.cleaned"),
    )
    _reopen_and_check(store_path, clock, EXPECTED_DIRTY, EXPECTED_DIRTY)  # checkpointed before the renames


def test_a_swap_midway_through_deleting_the_replaced_segments_completes(store_path, clock, monkeypatch):
    directory = _stop_before_delete(store_path, clock, monkeypatch)
    for suffix in (".log", ".index", ".timeindex"):  # the first replaced segment already renamed
        name = "00000000000000000000" + suffix
        if os.path.exists(os.path.join(directory, name)):
            os.rename(os.path.join(directory, name), os.path.join(directory, name + ".deleted"))
    os.unlink(os.path.join(directory, "00000000000000000010.log"))  # the second one's log already unlinked
    _reopen_and_check(store_path, clock, EXPECTED_CLEAN)


def test_a_swap_midway_through_taking_its_names_completes(store_path, clock, monkeypatch):
    directory = _stop_before_delete(store_path, clock, monkeypatch)
    import storage.log_cleaner as cleaner

    cleaner.delete_replaced(directory, [0, 10, 20])
    # The indexes took their names, the `.log` did not yet.
    for suffix in (".index", ".timeindex"):
        os.rename(
            os.path.join(directory, "00000000000000000000" + suffix + ".swap"),
            os.path.join(directory, "00000000000000000000" + suffix),
        )
    _reopen_and_check(store_path, clock, EXPECTED_CLEAN)


def test_txnindex_entries_naming_offsets_cleaning_removed_stay_valid(store_path, clock):
    """An abort's entry records the LSO of its time: another producer's transaction start, whose
    batch cleaning may remove. The entry stays (readers skip by it), and no check takes it for damage."""
    with Store.open(store_path, clock=clock) as s:
        log = compact_topic(s)
        a = {"producer_id": 1, "producer_epoch": 0, "is_transactional": True}
        b = {"producer_id": 2, "producer_epoch": 0, "is_transactional": True}
        put(log, b"k", b"a0", base_sequence=0, **a)  # offset 0: A's transaction starts
        put(log, b"j", b"b1", base_sequence=0, **b)  # offset 1: B's only data
        log.append_marker(ControlType.ABORT, 2, 0, timestamp=T0)  # offset 2, entry LSO 0
        put(log, b"k", b"a3", base_sequence=1, **a)  # offset 3 supersedes 0, and is A's last
        log.append_marker(ControlType.COMMIT, 1, 0, timestamp=T0)
        log.roll()
        put(log, b"z", b"active")
        log.compact(force=True)
        _, batches = records(log, with_batches=True)
        assert 0 not in [b.base_offset for b in batches]  # A's first batch went
        assert [
            (t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset) for t in log.aborted_transactions(0, 6)
        ] == [(2, 1, 2, 0)]
        txnindex = os.path.join(s.partition_dir("c", 0), "00000000000000000000.txnindex")
        before = os.stat(txnindex)
        assert file_findings(s) == []
    with Store.open(store_path, clock=clock) as s:
        log = s.partition("c", 0)
        # Not rewritten from the log as if it disagreed with it (the rewrite would record LSO 3).
        assert [tuple(t) for t in log.aborted_transactions(0, 6)] == [(2, 1, 2, 0)]
        assert os.stat(txnindex).st_mtime_ns == before.st_mtime_ns
        assert file_findings(s) == []


def test_a_dirty_record_past_max_compaction_lag_makes_the_roll_clean(store, clock):
    log = compact_topic(store, **{"max.compaction.lag.ms": 60_000})
    put(log, b"a", b"1", ts=T0 - 120_000)
    put(log, b"a", b"2", ts=T0 - 120_000)
    put(log, b"b", b"3", ts=T0)  # a record past the (max lag) segment age: the append rolls first
    assert [v for _, _, v in records(log)] == [b"2", b"3"]  # the ratio (1.0) alone never says so


def test_progress_is_reported_per_segment_up_to_the_total(store):
    log = compact_topic(store)
    for i in range(9):
        put(log, f"k{i % 2}".encode(), b"v")
        if i % 3 == 2:
            log.roll()
    seen = []
    stats = store.compact("c", progress=lambda done, total: seen.append((done, total)))
    assert [s.partition for s in stats] == [0]
    assert len(seen) == 3 and seen[-1][0] == seen[-1][1] > 0
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    seen.clear()
    for i in range(9):
        put(log, f"k{i}".encode(), b"v")
        if i % 3 == 2:
            log.roll()
    stats = [log.compact(force=True, dedupe_buffer_size=3 * 24, progress=lambda d, t: seen.append((d, t)))]
    assert stats[0] is not None and stats[0].passes > 1
    ends = [i for i, (d, t) in enumerate(seen) if d == t]
    assert len(ends) == stats[0].passes and ends[-1] == len(seen) - 1  # every pass reaches its total


def test_a_producer_snapshot_inside_a_cleaned_segment_stays_usable(store_path, clock):
    with Store.open(store_path, clock=clock) as s:
        log = compact_topic(s)
        for i in range(30):
            put(log, f"k{i % 4}".encode(), f"{i}".encode(), producer_id=3, producer_epoch=0, base_sequence=i)
            if i % 10 == 9:
                log.roll()
        log.compact(force=True)
        directory = s.partition_dir("c", 0)
        s._logs.clear()  # no clean close: no snapshot at the log end
    os.unlink(os.path.join(directory, "00000000000000000030.snapshot"))
    # 20 now lies in a gap of the cleaned segment [0, 30): the replay starts at the next batch.
    with Store.open(store_path, clock=clock) as s:
        log = s.partition("c", 0)
        assert os.path.exists(os.path.join(directory, "00000000000000000020.snapshot"))
        assert log.producer_states()[3]["last_sequence"] == 29
        put(log, b"k0", b"next", producer_id=3, producer_epoch=0, base_sequence=30)


def test_a_delete_retention_of_long_max_keeps_tombstones(store, clock):
    log = compact_topic(store, **{"delete.retention.ms": 2**63 - 1})
    put(log, b"a", None)
    log.roll()
    put(log, b"b", b"1")
    log.compact(force=True)
    _, batches = records(log, with_batches=True)
    assert batches[0].has_delete_horizon and batches[0].base_timestamp == 2**63 - 1
    put(log, b"b", b"2")
    log.roll()
    log.compact(force=True)
    assert (0, b"a", None) in records(log)


@settings(max_examples=300, deadline=None)
@given(
    bases=st.lists(st.integers(0, 200), min_size=1, max_size=30, unique=True).map(sorted),
    start=st.integers(-5, 210),
    end=st.integers(-5, 210),
)
def test_segments_overlapping_is_kafkas_log_segments_of_a_range(bases, start, end) -> None:
    """The bisection (issue 26) against the definition: a segment holds [its base, the next base)."""
    segments = [SimpleNamespace(base_offset=b) for b in bases]
    following = [*bases[1:], None]
    expected = [
        seg
        for seg, after in zip(segments, following, strict=True)
        if end > start and seg.base_offset < end and (after is None or after > start)
    ]
    assert segments_overlapping(segments, start, end) == expected
