"""`txlog verify [--topic T]`: a read-only integrity check of a whole store, one table of findings.

Per partition (every topic, internal ones too, or just `--topic T`) it scans every segment
file byte by byte and checks:

* every batch frames and has a valid CRC, and offsets increase across segments (and are
  dense, in a txlog store: a Kafka log dir has gaps after compaction). Bad bytes at the very end of the *active* segment, with no valid batch after
  them, are a torn/unflushed tail (a writer died mid-write; the next writer cuts it): a
  `warning`. Bad bytes followed by valid data, or anywhere in a sealed segment: an `error`;
* `.index` / `.timeindex`: the broker's sanity check, then every entry against the log
  (`.index` with kafka-dump-log's check from `cli.dump_log`; `.timeindex` for what Kafka
  writes: a batch holds the entry's offset, anywhere inside it, and has its timestamp);
* `.txnindex` entries against the ABORT markers replayed from the log, both ways: every
  entry names an ABORT of its producer at `lastOffset` whose transaction starts at
  `firstOffset`, and every ABORT that closed a transaction with data has its entry (a
  missing one is only a warning where Kafka rebuilds the index at its next start: the
  index is a cache of the markers);
* in a Kafka log dir, the log end against the offsets the broker checkpointed at the root
  (recovery point, high watermark, log start): a log ending before one of them lost data;
* producer state replayed from the log against what the partition reports
  (`PartitionLog.producer_states()`, i.e. its snapshot plus catch-up): epoch, last sequence,
  open transaction;
* log end offset against the scan, and the last stable offset: ≤ the log end and equal to
  the first offset of the earliest open transaction;
* every open transaction belongs to an Ongoing coordinator transaction that lists this
  partition ("hanging" otherwise) and is within its timeout ("expired" otherwise).

Then the coordinator itself: no transaction left in PrepareCommit/PrepareAbort (decided
but not completed) and no Ongoing one past its timeout.

The store is opened read-only (no locks, nothing written, nothing repaired), so verify is
safe beside running writers and on a real Kafka log directory. Exit 3 on any finding,
warnings included (a torn tail is harmless to readers but still a fact about the files);
stderr then ends with the summary line (`-q` drops it) and one `Error: ...` line.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli import dump_log
from cli.context import CommandError, complete_topic_names, open_store
from cli.formats import RowFormat, emit, pretty_print_table
from cli.output import absent_note, error_line, status

if TYPE_CHECKING:  # pragma: no cover
    from storage import Store

VERIFICATION_FAILED = 3
ERROR = "error"
WARNING = "warning"
TORN_TAIL = "unflushed/torn tail"

COLUMNS = [("SEVERITY", "severity"), ("TOPIC", "topic"), ("PARTITION", "partition"), ("FILE", "file"),
           ("OFFSET", "offset"), ("FINDING", "finding")]


class VerifyOutput(str, Enum):
    table = "table"
    json = "json"
    jsonl = "jsonl"
    csv = "csv"


@dataclass(frozen=True, slots=True)
class Finding:
    severity: str
    topic: str
    partition: int | None
    file: str | None
    offset: int | None
    finding: str


@dataclass
class Report:
    findings: list[Finding]
    partitions: int = 0
    batches: int = 0
    absent: dict[str, list[int]] = field(default_factory=dict)  # partitions a Kafka log dir does not hold

    def add(self, severity: str, topic: str, partition: int | None, file: str | None, offset: int | None,
            text: str) -> None:
        self.findings.append(Finding(severity, topic, partition,
                                     None if file is None else os.path.basename(file), offset, text))


def _now_ms() -> int:
    return int(time.time() * 1000)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:  # read-only, like cli.dump_log
        return f.read()


def _valid_batch_after(data: bytes, position: int) -> int | None:
    """Position of a CRC-valid batch starting after `position` (LogSegment.find_valid_batch_after, on bytes)."""
    from storage.errors import CorruptRecordError
    from storage.records import MAGIC, RecordBatch

    for candidate in range(position + 1, len(data) - 60):
        if data[candidate + 16] != MAGIC:
            continue
        try:
            RecordBatch.parse(data, candidate)
        except CorruptRecordError:
            continue
        return candidate
    return None


# ---- a Kafka log dir's checkpoint files --------------------------------------------------------------

CHECKPOINT_MEANINGS = {  # file -> what its offset is, for the finding
    "recovery-point-offset-checkpoint": "recovery point (flushed to disk)",
    "replication-offset-checkpoint": "high watermark (acknowledged, visible to consumers)",
    "log-start-offset-checkpoint": "log start offset",
}
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


@dataclass
class LogDirCheckpoints:
    """What a Kafka broker recorded at the log dir's root about each partition's offsets."""

    offsets: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)  # file name -> entries
    clean_shutdown: bool = True  # Kafka trusts every index after a clean shutdown

    def recovered_from(self, topic: str, partition: int) -> int | None:
        """Where Kafka's next start rebuilds this partition's segments and indexes from; None: it will not.

        Without a clean-shutdown marker the broker recovers every segment holding offsets at
        or past the recovery point (0 when the checkpoint does not list the partition).
        """
        if self.clean_shutdown:
            return None
        return self.offsets.get("recovery-point-offset-checkpoint", {}).get((topic, partition), 0)


def load_checkpoints(report: Report, store: Store) -> LogDirCheckpoints:
    """The root's checkpoint files, where present (a txlog store has none); a malformed one is a finding."""
    from storage.checkpoint import read_offset_checkpoint
    from storage.errors import KafkaError

    found = LogDirCheckpoints(clean_shutdown=not store.kafka_layout
                              or os.path.exists(os.path.join(store.root, CLEAN_SHUTDOWN_FILE)))
    for name in CHECKPOINT_MEANINGS:
        path = os.path.join(store.root, name)
        if not os.path.exists(path):
            continue
        try:
            found.offsets[name] = read_offset_checkpoint(path)
        except KafkaError as exc:
            report.add(ERROR, "-", None, path, None, f"cannot read the checkpoint: {exc}")
    return found


# ---- one partition --------------------------------------------------------------------------------


class _PartitionCheck:
    """The file-level scan of one partition directory, replaying producer state as it goes."""

    def __init__(self, report: Report, store: Store, topic: str, partition: int, now: int,
                 checkpoints: LogDirCheckpoints | None = None):
        from storage.config import TopicConfig
        from storage.producer_state import ProducerStateManager

        self.report = report
        self.topic = topic
        self.partition = partition
        self.now = now
        self.directory = store.partition_dir(topic, partition)
        try:
            self.config = store.topic_config(topic)
        except Exception:  # noqa: BLE001  a Kafka dir's topics have no txlog metadata: defaults
            self.config = TopicConfig()
        self.state = ProducerStateManager(expiration_ms=self.config.producer_id_expiration_ms,
                                          max_producers=self.config.max_producer_ids)
        self.complete_base = True  # the replay saw (or restored) every producer from offset 0
        self.log_damaged = False
        self.next_offset: int | None = None  # the offset the next batch must have
        # Kafka leaves offset gaps (compaction, a log start offset moved inside a segment);
        # txlog never compacts, so in its stores a gap is lost data.
        self.gaps_allowed = store.kafka_layout
        self.checkpoints = checkpoints or LogDirCheckpoints()

    def add(self, severity: str, file: str | None, offset: int | None, text: str) -> None:
        if severity == ERROR and file is not None and file.endswith(".log"):
            self.log_damaged = True
        self.report.add(severity, self.topic, self.partition, file, offset, text)

    def bases(self) -> list[int]:
        names = os.listdir(self.directory)
        return sorted(int(n[:-4]) for n in names if n.endswith(".log") and n[:-4].isdigit())

    def run(self) -> None:
        bases = self.bases()
        if not bases:
            self.add(ERROR, None, None, "the partition directory holds no log segments")
            return
        self._restore(bases[0])
        for i, base in enumerate(bases):
            self._segment(base, active=i == len(bases) - 1)

    def _restore(self, start: int) -> None:
        """Start the replay at the log start: empty state at 0, else the snapshot taken there."""
        from storage.errors import CorruptSnapshotError
        from storage.producer_snapshot import list_snapshots, read_snapshot

        self.state.reset(start)
        self.next_offset = start
        if start == 0:
            return
        self.complete_base = False
        for offset, path in list_snapshots(self.directory):
            if offset == start:
                try:
                    self.state.load(read_snapshot(path), start, now_ms=0)
                    self.complete_base = True
                except (CorruptSnapshotError, FileNotFoundError):
                    pass

    def _path(self, base: int, suffix: str) -> str:
        return os.path.join(self.directory, f"{base:020d}{suffix}")

    # ---- .log ----------------------------------------------------------------------------------

    def _segment(self, base: int, *, active: bool) -> None:
        from storage.errors import UnsupportedForMessageFormatError
        from storage.partition_log import abort_replayer
        from storage.transaction_index import AbortedTxn

        path = self._path(base, ".log")
        data = _read(path)
        aborts: list[AbortedTxn] = []
        replay = abort_replayer(self.state, aborts.append)
        if self.next_offset is None:
            self.next_offset = base  # resynchronise after bytes that could not be framed
        bad_crc: list[Any] = []
        spans: list[tuple[int, int, int]] = []  # (base, last offset, max timestamp) of each valid batch
        end = 0
        try:
            for batch in dump_log.iter_log_batches(data, path):
                end = batch.position + batch.size
                if not dump_log._batch_valid(data, batch):
                    bad_crc.append(batch)
                    self.next_offset = None
                    continue
                self.report.batches += 1
                spans.append((batch.base_offset, batch.last_offset, batch.max_timestamp))
                self._check_offsets(path, base, batch)
                replay(batch)
                self.next_offset = batch.last_offset + 1
        except dump_log.DumpError as exc:
            self._bad_bytes(path, data, end, active, f"bytes that are not a batch ({exc})")
            self.next_offset = None
        except UnsupportedForMessageFormatError as exc:  # pre-0.11 data: not damage, but nothing here reads it
            self.add(ERROR, path, None, str(exc))
            self.next_offset = None
        else:
            if end < len(data):
                self._bad_bytes(path, data, end, active,
                                f"{len(data) - end} bytes at the end are not a whole batch")
        for batch in bad_crc:
            tail = active and _valid_batch_after(data, batch.position) is None
            self.add(WARNING if tail else ERROR, path, batch.base_offset,
                     f"{TORN_TAIL}: batch at byte {batch.position} has an invalid CRC" if tail else
                     f"batch at byte {batch.position} has an invalid CRC"
                     + (" in a sealed segment" if not active else "; valid batches follow it"))
        self._indexes(base, spans)
        self._txn_index(base, aborts, active, self.next_offset)

    def _bad_bytes(self, path: str, data: bytes, position: int, active: bool, what: str) -> None:
        following = _valid_batch_after(data, position)
        if active and following is None:
            self.add(WARNING, path, None, f"{TORN_TAIL}: {what} at byte {position} (a writer died mid-write; "
                     "the next writer cuts it)")
        elif following is not None:
            self.add(ERROR, path, None, f"{what} at byte {position}, followed by a valid batch at byte {following}")
        else:
            self.add(ERROR, path, None, f"{what} at byte {position} of a sealed segment")

    def _check_offsets(self, path: str, base: int, batch: Any) -> None:
        expected = self.next_offset
        if batch.base_offset < base:
            self.add(ERROR, path, batch.base_offset,
                     f"batch at byte {batch.position} starts at offset {batch.base_offset}, "
                     f"below the segment's base offset {base}")
        elif expected is not None and batch.base_offset < expected:
            self.add(ERROR, path, batch.base_offset,
                     f"offsets go backwards: batch at byte {batch.position} starts at {batch.base_offset}, "
                     f"expected {expected}")
        elif expected is not None and batch.base_offset > expected and not self.gaps_allowed:
            self.add(ERROR, path, expected,
                     f"offsets {expected}..{batch.base_offset - 1} are missing before byte {batch.position}")

    # ---- .index / .timeindex (kafka-dump-log's checks) -------------------------------------------

    def _indexes(self, base: int, batches: list[tuple[int, int, int]]) -> None:
        """The broker's sanity check of both indexes, then every entry against the log.

        `.index` entries get kafka-dump-log's check (each names the last offset of the batch
        at its position). `.timeindex` entries are checked for what Kafka writes, no more:
        since 3.6 an entry may name any offset inside a batch (the record with the largest
        timestamp), so an entry is right when a batch holds its offset and that batch's max
        timestamp is the entry's, with timestamps increasing (TimeIndex only appends larger ones).
        """
        from storage.errors import KafkaError

        for suffix, sanity in ((".index", dump_log.offset_index_sanity), (".timeindex", dump_log.time_index_sanity)):
            path = self._path(base, suffix)
            if os.path.exists(path):  # derived data: Kafka and txlog rebuild a missing index
                reason = sanity(path, _read(path), base)
                if reason is not None:
                    self.add(ERROR, path, None, f"fails the broker's sanity check: {reason}")
        path = self._path(base, ".index")
        if os.path.exists(path):
            problems = dump_log.Problems()
            try:
                for _ in dump_log.dump_index(path, dump_log.Options(verify_only=True), problems):
                    pass
            except (dump_log.DumpError, KafkaError) as exc:
                self.add(ERROR, path, None, f"an entry points at no batch boundary ({exc})")
            for name, pairs in problems.index_mismatches.items():
                for index_offset, log_offset in reversed(pairs):
                    at = f"a batch ending at {log_offset}" if log_offset >= 0 else "no batch"
                    self.add(ERROR, name, index_offset, f"index entry for offset {index_offset} points at {at}")
            for message in problems.other:
                self.add(ERROR, None, None, message)
        path = self._path(base, ".timeindex")
        if os.path.exists(path):
            self._time_index(path, base, batches)

    def _time_index(self, path: str, base: int, batches: list[tuple[int, int, int]]) -> None:
        """Each entry against the batch holding its offset; `batches` is (base, last, max timestamp)."""
        import bisect

        starts = [b[0] for b in batches]
        previous: int | None = None
        for i, (timestamp, offset) in enumerate(dump_log.time_index_entries(_read(path), base)):
            if offset == base and i > 0:
                return  # the zero-filled tail of a preallocated index, as Kafka stops there
            at = bisect.bisect_right(starts, offset) - 1
            batch = batches[at] if at >= 0 and batches[at][1] >= offset else None
            if batch is None:
                self.add(ERROR, path, offset, f"time index entry ({timestamp}, offset {offset}) names an offset "
                         "no batch of the segment holds")
            elif batch[2] != timestamp:
                self.add(ERROR, path, offset, f"time index timestamp {timestamp} for offset {offset}, but the batch "
                         f"holding it (offsets {batch[0]}..{batch[1]}) has max timestamp {batch[2]}")
            if previous is not None and timestamp <= previous:
                self.add(ERROR, path, offset, f"time index timestamp {timestamp} is not after the previous {previous}")
            previous = timestamp

    # ---- .txnindex against the ABORT markers -----------------------------------------------------

    def _txn_index(self, base: int, aborts: list, active: bool, log_end: int | None) -> None:
        path = self._path(base, ".txnindex")
        problems = dump_log.Problems()
        entries = list(dump_log.dump_txn_index(path, dump_log.Options(), problems)) if os.path.exists(path) else []
        for message in problems.other:
            self.add(ERROR, path, None, message)
        by_marker = {a.last_offset: a for a in aborts}
        matched: set[int] = set()
        previous = -1
        for e in entries:
            pid, first, last, lso = e["producerId"], e["firstOffset"], e["lastOffset"], e["lastStableOffset"]
            desc = f".txnindex entry (producer {pid}, first {first}, last {last})"
            if last <= previous:
                self.add(ERROR, path, last, f"{desc} is not after the previous entry's last offset {previous}")
            previous = max(previous, last)
            abort = by_marker.get(last)
            if abort is None or abort.producer_id != pid:
                if active and log_end is not None and last >= log_end:
                    self.add(WARNING, path, last, f"{desc} lies past the log end: a writer died before its "
                             "ABORT marker (the next writer drops the entry)")
                else:
                    self.add(ERROR, path, last, f"{desc} does not name an ABORT marker of its producer")
                continue
            matched.add(last)
            if abort.first_offset != first:
                self.add(ERROR, path, last, f"{desc}: the aborted transaction starts at {abort.first_offset}")
            elif self.complete_base and abort.last_stable_offset != lso:
                self.add(ERROR, path, last,
                         f"{desc} records LSO {lso}; replaying the log gives {abort.last_stable_offset}")
        rebuilt_from = self.checkpoints.recovered_from(self.topic, self.partition)
        for a in aborts:
            if a.last_offset in matched:
                continue
            what = (f"ABORT marker of producer {a.producer_id} at {a.last_offset} (transaction from "
                    f"{a.first_offset}) has no .txnindex entry")
            if rebuilt_from is not None and log_end is not None and log_end > rebuilt_from:
                # The index is a cache of the markers, and this one is rebuilt before anyone reads.
                self.add(WARNING, path, a.last_offset,
                         f"{what}; the index is rebuilt from the markers when Kafka next starts (no clean "
                         f"shutdown, segment past the recovery point {rebuilt_from}): a repair, not exposed data")
            else:
                self.add(ERROR, path, a.last_offset,
                         f"{what}, and nothing rebuilds the index before a read: read_committed readers "
                         "would see the aborted data")


def _check_partition(report: Report, store: Store, topic: str, p: int, coord: dict[int, Any],
                     expired: set[str], now: int, checkpoints: LogDirCheckpoints | None = None) -> None:
    from storage.errors import KafkaError, UnsupportedForMessageFormatError

    report.partitions += 1
    check = _PartitionCheck(report, store, topic, p, now, checkpoints)
    try:
        log = store.partition(topic, p)
    except UnsupportedForMessageFormatError:
        log = None  # the scan below reports where the pre-0.11 messages are
    except KafkaError as exc:
        check.add(ERROR, None, None, f"the partition cannot be opened: {exc}")
        log = None
    if os.path.isdir(check.directory):
        check.run()
    if log is None:
        _open_transactions(check, check.state.open_transactions(), coord, expired)
        return
    try:
        _against_the_log(check, log)
    except KafkaError as exc:
        check.add(ERROR, None, None, f"reading the partition failed: {exc}")
    else:
        _against_checkpoints(check, log.log_end_offset)
        _open_transactions(check, log.open_transactions(), coord, expired)


def _against_checkpoints(check: _PartitionCheck, log_end: int) -> None:
    """A log ending before an offset the broker checkpointed lost data it had (or was copied mid-write)."""
    for name, meaning in CHECKPOINT_MEANINGS.items():
        offset = check.checkpoints.offsets.get(name, {}).get((check.topic, check.partition))
        if offset is not None and log_end < offset:
            check.add(ERROR, None, log_end,
                      f"the log ends at offset {log_end}, before the {meaning} {offset} that {name} records: "
                      "the log directory was copied while the broker was writing, or data was lost")


def _against_the_log(check: _PartitionCheck, log: Any) -> None:
    """What the store's view reports (snapshot + catch-up) against what the scan replayed."""
    leo, lso, start = log.log_end_offset, log.last_stable_offset, log.log_start_offset
    if lso > leo:
        check.add(ERROR, None, lso, f"last stable offset {lso} is past the log end offset {leo}")
    if check.log_damaged or check.next_offset is None:
        return  # the view and the scan stop at different places in damaged data: nothing more to compare
    if leo != check.next_offset:
        check.add(ERROR, None, leo, f"log end offset {leo}, but the last whole batch ends before {check.next_offset}")
    first = check.state.first_unstable_offset()
    want = leo if first is None else max(min(first, leo), start)
    if lso != want:
        check.add(ERROR, None, lso, f"last stable offset {lso}, but the log says {want} "
                  + ("(the log end: no transaction is open)" if first is None else
                     f"(the first open transaction starts at {first})"))
    mine = check.state.producers
    theirs = log.producer_states()
    for pid, s in sorted(theirs.items()):
        m = mine.get(pid)
        if m is None:
            if check.complete_base:
                check.add(ERROR, None, None, f"producer {pid}: in the partition's producer state "
                          f"(epoch {s['producer_epoch']}, last sequence {s['last_sequence']}) but not in the log")
            continue
        got = (s["producer_epoch"], s["last_sequence"], s["current_txn_start_offset"])
        replayed = (m.epoch, m.last_seq, m.current_txn_first_offset)
        if got != replayed:
            check.add(ERROR, None, None,
                      f"producer {pid}: producer state says epoch {got[0]}, last sequence {got[1]}, open transaction "
                      f"at {got[2]}; the log says epoch {replayed[0]}, last sequence {replayed[1]}, "
                      f"open transaction at {replayed[2]}")
    for pid, m in sorted(mine.items()):
        if pid not in theirs and (m.has_open_txn or check.now - m.last_timestamp < check.state.expiration_ms):
            check.add(ERROR, None, None, f"producer {pid} (epoch {m.epoch}, last sequence {m.last_seq}) is in the "
                      "log but missing from the partition's producer state")


def _open_transactions(check: _PartitionCheck, open_txns: dict[int, int], coord: dict[int, Any],
                       expired: set[str]) -> None:
    from txlog.transaction_log import TxnState

    tp = (check.topic, check.partition)
    for pid, first in sorted(open_txns.items()):
        d = coord.get(pid)
        v = None if d is None else d.state
        if v is not None and tp in v.partitions and v.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            continue  # reported once, at the coordinator
        if v is None or v.state != TxnState.ONGOING or tp not in v.partitions:
            check.add(ERROR, None, first,
                      f"hanging: producer {pid}'s transaction open since offset {first}; no Ongoing coordinator "
                      "transaction lists this partition (`txlog transactions abort --start-offset`)")
        elif v.start_ms >= 0 and check.now - v.start_ms > v.timeout_ms:
            expired.add(d.transactional_id)
            check.add(ERROR, None, first,
                      f"expired: transaction '{d.transactional_id}' (producer {pid}) open since offset {first} for "
                      f"{check.now - v.start_ms} ms, past its timeout of {v.timeout_ms} ms")


def _check_coordinator(report: Report, descriptions: list, topic: str | None, expired: set[str], now: int) -> None:
    from txlog.internal_topics import TRANSACTION_STATE_TOPIC
    from txlog.transaction_log import TxnState

    for d in descriptions:
        v = d.state
        if topic is not None and topic != TRANSACTION_STATE_TOPIC and all(t != topic for t, _ in v.partitions):
            continue
        where = f"transaction '{d.transactional_id}' (producer {v.producer_id})"
        if v.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            name = "PrepareCommit" if v.state == TxnState.PREPARE_COMMIT else "PrepareAbort"
            report.add(ERROR, TRANSACTION_STATE_TOPIC, d.coordinator_partition, None, None,
                       f"{where} is {name}: decided but not completed — any writer will roll it forward")
        elif (v.state == TxnState.ONGOING and d.transactional_id not in expired and v.start_ms >= 0
              and now - v.start_ms > v.timeout_ms):
            report.add(ERROR, TRANSACTION_STATE_TOPIC, d.coordinator_partition, None, None,
                       f"expired: {where} Ongoing for {now - v.start_ms} ms, past its timeout of {v.timeout_ms} ms")


def verify_store(store: Store, topic: str | None = None, *, now: int | None = None) -> Report:
    """Every check above over the store (or one topic); never writes."""
    from txlog.coordinator import TransactionCoordinator

    now = _now_ms() if now is None else now
    report = Report([])
    try:
        descriptions = TransactionCoordinator(store).list_transactions()
    except Exception as exc:  # noqa: BLE001  a damaged coordinator partition is itself a finding
        from txlog.internal_topics import TRANSACTION_STATE_TOPIC

        report.add(ERROR, TRANSACTION_STATE_TOPIC, None, None, None, f"cannot replay the coordinator: {exc}")
        descriptions = []
    coord = {d.state.producer_id: d for d in descriptions}
    expired: set[str] = set()
    checkpoints = load_checkpoints(report, store)
    for name in ([topic] if topic is not None else store.list_topics(include_internal=True)):
        for p in store.partitions(name):  # a Kafka log dir may hold only some: those are what there is to check
            _check_partition(report, store, name, p, coord, expired, now, checkpoints)
        if store.absent_partitions(name):
            report.absent[name] = store.absent_partitions(name)
    _check_coordinator(report, descriptions, topic, expired, now)
    return report


# ---- the verb --------------------------------------------------------------------------------------


def verify(
    ctx: typer.Context,
    topic: Annotated[str | None, typer.Option(
        "--topic", "-t", metavar="TOPIC", autocompletion=complete_topic_names, show_default=False,
        help="Only this topic's partitions (default: every topic, internal ones included).",
    )] = None,
    output: Annotated[VerifyOutput, typer.Option(
        "--output", "-o", case_sensitive=False, help="table, json, jsonl or csv.",
    )] = VerifyOutput.table,
) -> None:
    """Check the whole store: CRCs, offsets, indexes, txn indexes, producer state, transactions, LSO.

    Read-only: nothing is locked, written or repaired, so it is safe on a live store and on a
    Kafka log directory. Prints one row per finding and exits 3 if there is any (warnings too).
    """
    store = open_store(ctx, read_only=True)
    try:
        if topic is not None and not store.has_topic(topic):
            raise CommandError(f"unknown topic '{topic}'")
        report = verify_store(store, topic)
    finally:
        store.close()
    rows = [asdict(f) for f in report.findings]
    emit(rows, COLUMNS, RowFormat(output.value), text=pretty_print_table, missing="-")
    n = len(report.findings)
    for name, absent in report.absent.items():
        status(ctx, absent_note(name, absent))
    status(ctx, f"checked {report.partitions} partition{'s' * (report.partitions != 1)}, "
                f"{report.batches} batch{'es' * (report.batches != 1)}: {n} finding{'s' * (n != 1)}")
    if report.findings:
        error_line(f"verify found {n} problem{'s' * (n != 1)} (see the table)")
        raise typer.Exit(VERIFICATION_FAILED)
