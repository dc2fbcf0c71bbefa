"""ReplayedPartition: coordinator state kept in step with its partition (snapshot, then replay the tail).

Real stores in tmp_path. The state folded here is the coordinator's: `__transaction_state`
records (the real key/value schemas of docs/kafka-formats.md §4.1), last value per
transactional id, a tombstone deletes it. What is checked: every batch is applied once and
in order, across other writers and reopenings; a snapshot saves the replay of what it covers;
a torn, corrupt or stale snapshot (docs/reliability-scenarios.md rule 5) costs a full replay,
never a wrong state.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from storage import Store
from storage.records import build_batch
from txlog.coordinator.replayed_state import PART_SUFFIX, ReplayedPartition
from txlog.schemas.transaction_log import TxnLogValue, TxnState, decode_key, decode_value, encode_key, encode_value

TOPIC = "state"
NAME = "test-replay"
T0 = 1_700_000_000_000


def value(pid: int, epoch: int, state: TxnState = TxnState.ONGOING) -> TxnLogValue:
    return TxnLogValue(pid, epoch, 60000, state, (("t", 0),) if state is TxnState.ONGOING else (), T0, T0)


class CoordinatorState:
    """The fold the coordinator applies: transactional id -> last TxnLogValue."""

    def __init__(self) -> None:
        self.txns: dict[str, TxnLogValue] = {}
        self.applied: list[int] = []  # base offsets of the batches applied, in order
        self.loads: list[object] = []

    def apply(self, batch) -> None:
        self.applied.append(batch.base_offset)
        for record in batch.records():
            v = decode_value(record.value)
            if v is None:
                self.txns.pop(decode_key(record.key), None)
            else:
                self.txns[decode_key(record.key)] = v

    def dump(self) -> dict[str, str]:
        return {k: encode_value(v).hex() for k, v in self.txns.items()}

    def load(self, data) -> None:
        self.loads.append(data)
        self.txns = {} if data is None else {k: decode_value(bytes.fromhex(v)) for k, v in data.items()}


def replayed(log, *, snapshot_every: int = 1000) -> tuple[ReplayedPartition, CoordinatorState]:
    state = CoordinatorState()
    return ReplayedPartition(
        log, NAME, apply=state.apply, dump=state.dump, load=state.load, snapshot_every=snapshot_every
    ), state


def write(log, txn_id: str, v: TxnLogValue | None) -> int:
    data = build_batch([(encode_key(txn_id), None if v is None else encode_value(v), None, T0)])
    return log.append(data).base_offset


@pytest.fixture
def store_dir(tmp_path) -> str:
    path = str(tmp_path / "store")
    s = Store.open(path)
    s.create_topic(TOPIC, partitions=1, config={"retention.ms": -1})
    s.close()
    return path


@pytest.fixture
def store(store_dir):
    s = Store.open(store_dir)
    yield s
    s.close()


def snapshot_path(log) -> str:
    return os.path.join(log.directory, f"{NAME}.json")


# ---- replay -----------------------------------------------------------------------------------


def test_an_empty_partition_replays_nothing(store) -> None:
    replay, state = replayed(store.partition(TOPIC, 0))
    assert replay.catch_up() == 0
    assert replay.position == 0 and state.txns == {} and state.loads == [None]


def test_catch_up_applies_every_batch_once_in_order_and_keeps_the_last_value_per_id(store) -> None:
    log = store.partition(TOPIC, 0)
    write(log, "a", value(1, 0))
    write(log, "b", value(2, 0))
    write(log, "a", value(1, 1, TxnState.PREPARE_COMMIT))
    write(log, "a", value(1, 1, TxnState.COMPLETE_COMMIT))
    replay, state = replayed(log)
    assert replay.catch_up() == 4
    assert state.applied == [0, 1, 2, 3] and replay.position == 4
    assert state.txns == {"a": value(1, 1, TxnState.COMPLETE_COMMIT), "b": value(2, 0)}
    assert replay.catch_up() == 0 and state.applied == [0, 1, 2, 3]


def test_a_tombstone_removes_the_transactional_id(store) -> None:
    log = store.partition(TOPIC, 0)
    write(log, "a", value(1, 0, TxnState.COMPLETE_ABORT))
    write(log, "a", None)
    replay, state = replayed(log)
    replay.catch_up()
    assert state.txns == {}


def test_catch_up_sees_what_another_process_appended(store_dir, store) -> None:
    log = store.partition(TOPIC, 0)
    write(log, "a", value(1, 0))
    replay, state = replayed(log)
    replay.catch_up()
    other = Store.open(store_dir)
    write(other.partition(TOPIC, 0), "b", value(2, 0))
    write(other.partition(TOPIC, 0), "a", value(1, 0, TxnState.PREPARE_ABORT))
    other.close()
    assert replay.catch_up() == 2
    assert state.applied == [0, 1, 2]
    assert state.txns["a"].state is TxnState.PREPARE_ABORT and state.txns["b"] == value(2, 0)


def test_a_log_cut_back_below_the_replayed_position_starts_over(store) -> None:
    log = store.partition(TOPIC, 0)
    write(log, "a", value(1, 0))
    replay, state = replayed(log)
    replay.catch_up()
    replay.position = log.log_end_offset + 5  # what a power loss cutting the tail looks like from here
    assert replay.catch_up() == 1
    assert state.loads == [None, None] and state.applied == [0, 0]
    assert state.txns == {"a": value(1, 0)}


# ---- snapshots ----------------------------------------------------------------------------------


def test_no_snapshot_until_enough_was_replayed_unless_forced(store) -> None:
    log = store.partition(TOPIC, 0)
    for i in range(3):
        write(log, f"id{i}", value(i, 0))
    replay, _ = replayed(log, snapshot_every=5)
    replay.catch_up()
    replay.maybe_snapshot()
    assert not os.path.exists(snapshot_path(log))
    replay.maybe_snapshot(force=True)
    body = json.loads(Path(snapshot_path(log)).read_bytes())
    assert body["offset"] == 3 and set(body["state"]) == {"id0", "id1", "id2"}
    for i in range(3, 8):
        write(log, f"id{i}", value(i, 0))
    replay.catch_up()
    replay.maybe_snapshot()  # 5 batches since the last snapshot: written
    assert json.loads(Path(snapshot_path(log)).read_bytes())["offset"] == 8


def test_reopening_loads_the_snapshot_and_replays_only_the_tail(store_dir, store) -> None:
    log = store.partition(TOPIC, 0)
    write(log, "a", value(1, 0))
    write(log, "b", value(2, 0))
    replay, _ = replayed(log)
    replay.catch_up()
    replay.maybe_snapshot(force=True)
    write(log, "a", value(1, 1, TxnState.PREPARE_COMMIT))

    again, state = replayed(log)
    assert again.position == 2 and state.txns == {"a": value(1, 0), "b": value(2, 0)}
    assert again.catch_up() == 1
    assert state.applied == [2]
    assert state.txns["a"] == value(1, 1, TxnState.PREPARE_COMMIT)


@pytest.mark.parametrize("damage", ["torn", "crc", "not-json", "empty"])
def test_a_damaged_snapshot_is_ignored_and_the_log_replayed(store, damage) -> None:
    log = store.partition(TOPIC, 0)
    write(log, "a", value(1, 0))
    write(log, "b", value(2, 0))
    replay, _ = replayed(log)
    replay.catch_up()
    replay.maybe_snapshot(force=True)
    path = snapshot_path(log)
    raw = Path(path).read_bytes()
    if damage == "torn":
        raw = raw[: len(raw) // 2]
    elif damage == "crc":
        body = json.loads(raw)
        body["state"].pop("b")  # the state changed, the CRC did not
        raw = json.dumps(body).encode()
    elif damage == "not-json":
        raw = b"\x00\xff" * 10
    else:
        raw = b""
    with open(path, "wb") as f:
        f.write(raw)
    again, state = replayed(log)
    assert again.position == 0 and state.loads == [None]
    again.catch_up()
    assert state.applied == [0, 1] and set(state.txns) == {"a", "b"}


def test_a_snapshot_beyond_the_log_end_is_stale_and_ignored(store_dir) -> None:
    """Rule 5: a power loss cut the log below the snapshot's offset; the state is rebuilt from the log."""
    s = Store.open(store_dir)
    log = s.partition(TOPIC, 0)
    write(log, "a", value(1, 0))
    cut_at = os.path.getsize(os.path.join(log.directory, "00000000000000000000.log"))
    write(log, "a", value(1, 1, TxnState.PREPARE_ABORT))
    replay, _ = replayed(log)
    replay.catch_up()
    replay.maybe_snapshot(force=True)
    s.close()
    with open(os.path.join(s.partition_dir(TOPIC, 0), "00000000000000000000.log"), "r+b") as f:
        f.truncate(cut_at)

    s = Store.open(store_dir)
    log = s.partition(TOPIC, 0)
    assert log.log_end_offset == 1
    again, state = replayed(log)
    assert again.position == 0 and state.loads == [None]
    again.catch_up()
    assert state.txns == {"a": value(1, 0)}
    s.close()


def test_a_read_only_view_never_writes_a_snapshot(store_dir, store) -> None:
    write(store.partition(TOPIC, 0), "a", value(1, 0))
    ro = Store.open(store_dir, read_only=True)
    log = ro.partition(TOPIC, 0)
    replay, state = replayed(log, snapshot_every=1)
    replay.catch_up()
    replay.maybe_snapshot(force=True)
    assert state.txns == {"a": value(1, 0)}
    assert not os.path.exists(snapshot_path(log))
    ro.close()


def test_temp_files_of_dead_writers_are_removed_and_live_ones_kept(store) -> None:
    log = store.partition(TOPIC, 0)
    write(log, "a", value(1, 0))
    dead_pid = 2**22 + 12345  # above the default pid_max: no such process
    dead = f"{snapshot_path(log)}.{dead_pid}.deadbeef{PART_SUFFIX}"
    live = f"{snapshot_path(log)}.{os.getpid()}.cafef00d{PART_SUFFIX}"
    for path in (dead, live):
        with open(path, "wb") as f:
            f.write(b"{")
    replay, _ = replayed(log)
    replay.catch_up()
    replay.maybe_snapshot(force=True)
    assert not os.path.exists(dead) and os.path.exists(live)
    assert os.path.exists(snapshot_path(log))


def test_scenario88_a_cleaner_checkpoint_back_under_its_first_inode_mtime_and_size_is_read_again(
    tmp_path, inode_reuse
) -> None:
    """Every cleaned group rewrites `cleaner-offset-checkpoint`: a version with the first one's inode
    number, mtime and size hid the cleaner's progress, and the replay went on past a cleaned range."""
    from storage.log_cleaner import CLEANER_CHECKPOINT, write_checkpoint_entry

    with Store.open(str(tmp_path / "s")) as store:
        store.create_topic(TOPIC, 1)
        log = store.partition(TOPIC, 0)
        rp, _ = replayed(log)
        root = os.path.dirname(log.directory)
        written = [10]
        write_checkpoint_entry(root, TOPIC, 0, written[-1])
        path = os.path.join(root, CLEANER_CHECKPOINT)
        inode_reuse.stamp_ahead(path)
        assert rp.cleaned_up_to() == 10

        def clean_one_more_group() -> None:
            written.append(written[-1] + 1)
            write_checkpoint_entry(root, TOPIC, 0, written[-1])

        inode_reuse.rewrite_until_reused(path, clean_one_more_group)
        assert rp.cleaned_up_to() == written[-1] > 10
