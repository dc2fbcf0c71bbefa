"""kcat's `-o e@MS` where `txlog consume` makes its lines in the fetch, against the ConsumerRecords reference.

With e@MS each partition's output ends before its first record whose timestamp is at or past MS
(kcat's "stop at timestamp"), and a `--group` commits that record's offset, not past it. The lines
are made in the fetch straight from the batches (cli/console_lines.py `LinesTransport`, the stop
checked natively in storage/native/src/bindings/format.rs); the reference is the Python writers
over ConsumerRecords with cli/consume.py `_before`. The log: three partitions whose timestamps go
up and down inside batches, a LogAppendTime batch, and committed and aborted transactions whose
timestamps are themselves stop points (an aborted record must not stop a read_committed reader,
and does stop a read_uncommitted one).
"""

from __future__ import annotations

import json

import pytest

from cli import consume as consume_cli
from storage.records import TimestampType, build_batch
from tests.cli.cli_helpers import txlog
from tests.cli.test_cli_consume_native_format import _no_lines

TOPIC = "stops"
WRITERS = (consume_cli._KafkaFormatter, consume_cli._Rows, consume_cli._KcatJson, consume_cli._KcatFormatter)
T0 = 1_700_000_000_000
# Per partition, the timestamps (ms after T0) of its batches' records, in log order.
BATCHES = {
    0: [(5, 1, 9, 3), (2, 8), (12, 4, 30)],
    1: [(20, 25), (7, 6, 40, 1), (3,)],
    2: [(1, 2, 3), (4, 5, 6)],
}
# Each output with the partition and offset in its lines (cli output is compared line by line, sorted).
OUTPUTS = (
    ["--property", "print.partition=true", "--property", "print.offset=true", "--property", "print.timestamp=true"],
    ["--output", "jsonl"],
    ["--output", "csv"],
    ["-J"],
    ["-f", "%p %o %T %s\\n"],
)
# e@ points: before everything, between records, at a committed record, at an aborted one, past everything.
STOPS = (0, T0 + 2, T0 + 4, T0 + 6, T0 + 9, T0 + 15, T0 + 27, T0 + 50, 2**63 - 1, 2**63, 10**30)


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory) -> str:
    import txlog as client
    from storage import Store

    path = str(tmp_path_factory.mktemp("native-stop") / "store")
    with Store.open(path) as store:
        store.create_topic(TOPIC, 3, {"retention.ms": -1})
        for partition, batches in BATCHES.items():
            log = store.partition(TOPIC, partition)
            for n, deltas in enumerate(batches):
                rows = [(b"k", f"p{partition}b{n}r{i}".encode(), [], T0 + d) for i, d in enumerate(deltas)]
                log.append(build_batch(rows, base_offset=log.log_end_offset))
        log = store.partition(TOPIC, 2)  # every record of a LogAppendTime batch carries its time: T0 + 15
        append_time = [(b"k", f"lat{i}".encode(), [], T0) for i in range(3)]
        log.append(
            build_batch(
                append_time,
                base_offset=log.log_end_offset,
                timestamp_type=TimestampType.LOG_APPEND_TIME,
                log_append_time=T0 + 15,
            )
        )
        txn = client.Producer(store, transactional_id="stops")
        txn.init_transactions()
        for outcome, ts in (("aborted", 4), ("committed", 6), ("aborted", 9)):
            txn.begin_transaction()
            for partition in range(3):
                txn.send(TOPIC, value=f"{outcome}{ts}".encode(), partition=partition, timestamp_ms=T0 + ts)
            txn.flush()
            txn.commit_transaction() if outcome == "committed" else txn.abort_transaction()
        txn.close()
        tail = client.Producer(store)
        for partition in range(3):
            tail.send(TOPIC, value=b"tail", partition=partition, timestamp_ms=T0 + 2)
        tail.close()
    return path


def _consume(path: str, args: list[str], native: bool, monkeypatch: pytest.MonkeyPatch):
    """consume's run with the lines made in the fetch (`native`), or with the Python writers over ConsumerRecords."""
    made = []
    with monkeypatch.context() as patch:
        for writer in WRITERS:
            if native:
                patch.setattr(writer, "line_transport", _noted(writer.line_transport, made))
            else:
                patch.setattr(writer, "line_transport", _no_lines)
                if hasattr(writer, "write_reference"):
                    patch.setattr(writer, "write", writer.write_reference)
        proc = txlog("consume", "-t", TOPIC, *args, data_dir=path, text=False)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr
    if native:
        assert made and made[0] is not None, "the lines were not made in the fetch"
    return proc


def _noted(line_transport, made: list):
    return lambda self, store, topic, stop_at=None: made.append(line_transport(self, store, topic, stop_at)) or made[-1]


def _same_lines(path: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The lines both ways, sorted: which partition a poll serves first may differ (the reference's polls
    take records past MS and drop them), each partition's lines may not (they carry their offsets)."""
    reference = _consume(path, args, False, monkeypatch)
    native = _consume(path, args, True, monkeypatch)
    assert native.stderr == reference.stderr
    lines = sorted(native.stdout.splitlines())
    assert lines == sorted(reference.stdout.splitlines())
    return lines


def _cases() -> list[list[str]]:
    cases = []
    for i, stop in enumerate(STOPS):
        for j, output in enumerate(OUTPUTS):
            isolation = ("read_committed", "read_uncommitted")[(i + j) % 2]
            cases.append([*output, "-o", f"e@{stop}", "--isolation-level", isolation])
    # One partition, a start inside a batch, -c cutting before and after the stop, the tail.
    cuts = (["-p", "1"], ["-p", "0", "-o", "2"], ["-p", "0", "-c", "2"], ["-p", "1", "-c", "4"], ["-o", "-3"])
    for stop in (T0 + 6, T0 + 9, T0 + 27):
        cases += [[*OUTPUTS[4], "-o", f"e@{stop}", *cut] for cut in cuts]
    for stop in (0, T0 + 6, T0 + 9):  # --follow ends once every partition has reached MS (kcat's exit)
        cases.append([*OUTPUTS[4], "-o", f"e@{stop}", "--follow"])
    return cases


@pytest.mark.parametrize("args", _cases(), ids=" ".join)
def test_lines_stop_where_the_records_stop(store_dir, args, monkeypatch):
    _same_lines(store_dir, args, monkeypatch)


def test_the_stops_hold_what_the_comparison_is_about(store_dir, monkeypatch):
    """Each partition ends before its first record at or past MS, mid-batch, whatever comes after it;
    an aborted record stops only a read_uncommitted reader; LogAppendTime stops at the batch's time."""

    def values(stop: int, *extra: str, isolation: str = "read_committed") -> dict[int, list[str]]:
        args = ["-f", "%p %o %s\\n", "-o", f"e@{stop}", "--isolation-level", isolation, *extra]
        shown: dict[int, list[str]] = {0: [], 1: [], 2: []}
        for line in _same_lines(store_dir, args, monkeypatch):
            partition, offset, value = line.decode().split(" ")
            shown[int(partition)].append((int(offset), value))
        return {partition: [value for _, value in sorted(rows)] for partition, rows in shown.items()}

    shown = values(T0 + 6)
    assert shown[0] == ["p0b0r0", "p0b0r1"]  # 9 stops it mid-batch: the 3 after it is not shown
    assert shown[1] == []  # 20 stops partition 1 at its first record
    assert shown[2] == ["p2b0r0", "p2b0r1", "p2b0r2", "p2b1r0", "p2b1r1"]
    assert values(T0 + 10)[0] == ["p0b0r0", "p0b0r1", "p0b0r2", "p0b0r3", "p0b1r0", "p0b1r1"]  # 9 then 3: on to 12
    assert values(T0 + 1) == {0: [], 1: [], 2: []}
    assert values(T0 + 15, "-p", "2", "-o", "6") == {0: [], 1: [], 2: []}  # the LogAppendTime batch: all at T0 + 15
    assert values(T0 + 16, "-p", "2", "-o", "6")[2] == ["lat0", "lat1", "lat2", "committed6", "tail"]
    assert values(T0 + 8, "-p", "2", "-o", "9")[2] == ["committed6", "tail"]  # the aborted 4 and 9: not seen
    assert values(T0 + 8, "-p", "2", "-o", "9", isolation="read_uncommitted")[2] == ["aborted4", "committed6"]


def test_a_group_commits_the_offset_it_stopped_at(store_dir, monkeypatch):
    """-g with e@MS: each partition's committed offset is the record it stopped at, both ways."""
    committed = {}
    for native in (False, True):
        group = f"stop-{native}"
        proc = _consume(store_dir, ["-g", group, "-o", f"e@{T0 + 6}", "-q"], native, monkeypatch)
        assert proc.stdout
        rows = txlog("groups", "describe", "-g", group, "--output", "jsonl", data_dir=store_dir)
        committed[native] = {(r["partition"], r["currentOffset"]) for r in map(json.loads, rows.stdout.splitlines())}
    assert committed[True] == committed[False] == {(0, 2), (1, 0), (2, 5)}
