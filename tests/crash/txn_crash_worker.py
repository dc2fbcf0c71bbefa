"""Worker process for the transaction crash tests, plus the checks both test modules share.

Not a test module (no `test_` prefix). Run as a script it opens a store, works through
the public API (Producer, TransactionCoordinator) and prints one flushed line per step,
so the parent knows exactly how far it got before it was killed:

    IDS <pid> <epoch>            after init_transactions
    WARM <i> <end> <offset>      a warm-up transaction ended (offset -1: it sent no group offset)
    TARGET <pid> <epoch>         the transaction under test begins with these ids
    DATA / OFFSETS               its records / its group offsets were appended (acknowledged)
    KILL <point>                 about to SIGKILL itself at the chosen point
    ENDING <pid> <epoch>         about to call EndTxn (mode `late`; it then SIGSTOPs itself)
    RESULT <word> ...            what an operation returned (ok / fenced / invalid / error)
    DONE                         the script ran to its end

Modes (first argument):

    txn      the crash matrix (docs/reliability-scenarios.md scenarios 23, 26, 28-35): optional warm-up transactions,
             then one transaction over `--parts` (and optionally group offsets) that is
             committed or aborted (its records sent by a flush() first, or by the commit
             itself with `--sent-by commit`), with a real SIGKILL of the process itself at `--kill`:
               register      right after the coordinator registered the partitions, before data
               data          after the records (and offsets) were appended, before EndTxn
               prepare-torn  in the middle of writing PREPARE_* (part of the batch is on disk)
               prepare       right after PREPARE_* is durable, before any marker
               markers       after the `--kill-n`-th marker of the transaction end
               none          no kill: run to the end
    late     docs/reliability-scenarios.md scenario 25: a transaction whose commit request SIGSTOPs the process just
             before it reaches the coordinator; after SIGCONT it reports what EndTxn said.
    race     docs/reliability-scenarios.md scenario 38: init on GO, one transaction, then another on GO2,
             reporting each.
    recover  a fresh process running one coordinator operation (`--how`) after a crash.

The helpers at the bottom decode a store independently of the code under test: kafka-python
parses every batch of every segment, RC/RU are recomputed from the raw batches, and every
`__transaction_state` record is decoded and its state transitions checked.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import crash_worker  # noqa: E402  (the shared worker driver; this directory is on sys.path)

TXN_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
CONTROL_BATCH_SIZE = 78


# =====================================================================================================
# the worker side
# =====================================================================================================


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _die(point: str) -> None:
    """A real kill -9 of this very process: no finally blocks, no clean close, no buffered output."""
    _say(f"KILL {point}")
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # not reached


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def _arm(point: str, kill_n: int, torn_frac: float) -> dict:
    """How the process kills itself at `point` once armed.

    A request of the client-to-log seam (`register`: AddPartitionsToTxn; `markers`: the
    coordinator's WriteTxnMarkers) is a step fault of the producer's fault plan, armed in
    `run_txn` (`state["fault"]`); a write inside the coordinator (`prepare*`) is patched here.
    """
    from txlog.coordinator import transaction_coordinator as co
    from txlog.schemas.transaction_log import TxnState
    from txlog.tools.fault_injection import Action, Step, StepFault

    state = {"armed": False, "tear": False, "fault": None, "label": point}
    prepare = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    if point == "register":
        state["fault"] = StepFault(Step.ADD_PARTITIONS_TO_TXN, Action.KILL_AFTER, 1)
    elif point in ("prepare", "prepare-torn"):
        real_write = co.TransactionCoordinator._write

        def _write(self, part, transactional_id, value):
            deciding = state["armed"] and value is not None and value.state in prepare
            if deciding and point == "prepare-torn":
                state["tear"] = True  # os.write below writes part of the batch, then dies
            result = real_write(self, part, transactional_id, value)
            if deciding:
                _die(point)
            return result

        co.TransactionCoordinator._write = _write
        if point == "prepare-torn":
            real_os_write = os.write

            def write(fd, data):
                if state["tear"]:
                    path = _fd_path(fd)
                    if f"/{TXN_TOPIC}-" in path and path.endswith(".log"):
                        view = memoryview(data)
                        cut = min(max(1, int(len(view) * torn_frac)), len(view) - 1)
                        real_os_write(fd, view[:cut])
                        _die(point)
                return real_os_write(fd, data)

            os.write = write
    elif point == "markers":
        state["fault"] = StepFault(Step.WRITE_TXN_MARKERS, Action.KILL_AFTER, kill_n)
        state["label"] = f"{point}-{kill_n}"
    return state


def txn_values(tag: str, parts: list) -> list[tuple[str, int, bytes]]:
    """(topic, partition, value) of the records a `txn` worker sends in its transaction tagged `tag`."""
    return [(t, p, f"{tag}:{t}-{p}:{i}".encode()) for (t, p) in parts for i in range(1 + (p % 2))]


def run_txn(args) -> None:
    from storage import Store
    from txlog.clients.producer import Producer
    from txlog.tools.fault_injection import FaultInjectingTransport, FaultPlan
    from txlog.topic_partition import TopicPartition
    from txlog.transport import Transport

    parts = [tuple(x) for x in json.loads(args.parts)]
    offsets = json.loads(args.offsets) if args.offsets else None
    warm_parts = [tuple(x) for x in json.loads(args.warm_parts)] if args.warm_parts else parts
    rng = random.Random(args.seed)
    state = _arm(args.kill, args.kill_n, args.torn_frac)
    store = Store.open(args.store)
    plan = FaultPlan()
    transport = FaultInjectingTransport(Transport(store), plan, kill=lambda fault: _die(state["label"]))
    producer = Producer(
        store, transactional_id=args.tid, transaction_timeout_ms=args.timeout_ms, linger_ms=10**9, transport=transport
    )
    producer.init_transactions()
    _say(f"IDS {producer.producer_id} {producer.producer_epoch}")
    for i in range(args.warmup):
        producer.begin_transaction()
        chosen = rng.sample(warm_parts, rng.randint(1, len(warm_parts)))
        for t, p, v in txn_values(f"warm{i}", chosen):
            producer.send(t, v, partition=p)
        sent = offsets["warm"][i] if offsets and rng.random() < 0.5 else -1
        if sent >= 0:
            producer.send_offsets_to_transaction({TopicPartition(*offsets["tp"]): sent}, offsets["group"])
        commit = i % 2 == 0
        (producer.commit_transaction if commit else producer.abort_transaction)()
        _say(f"WARM {i} {'commit' if commit else 'abort'} {sent}")
    _say(f"TARGET {producer.producer_id} {producer.producer_epoch}")
    producer.begin_transaction()
    for t, p, v in txn_values(args.tag, parts):
        producer.send(t, v, partition=p)
    state["armed"] = True
    if state["fault"] is not None:
        plan.arm(state["fault"])  # counted from here: the target transaction's requests only
    if args.sent_by == "flush":
        producer.flush()
        _say("DATA")
    # else the commit registers and sends them itself, on this thread (its flush's rounds,
    # RecordAccumulator.flush): a kill at `register` or `prepare` then lands inside commit_transaction
    if offsets:
        producer.send_offsets_to_transaction({TopicPartition(*offsets["tp"]): offsets["offset"]}, offsets["group"])
        _say("OFFSETS")
    if args.kill == "data":
        _die("data")
    if args.end == "commit":
        producer.commit_transaction()
    elif args.end == "abort":
        producer.abort_transaction()
    _say(f"RESULT ok {producer.producer_id} {producer.producer_epoch}")
    state["armed"] = False
    _say("DONE")
    if args.exit == "crash":
        os._exit(0)
    producer.close()
    store.close()


def run_late(args) -> None:
    """docs/reliability-scenarios.md scenario 25: EndTxn is held back by a SIGSTOP just before it reaches the
    coordinator."""
    from storage import Store
    from txlog.clients.producer import Producer
    from txlog.errors import KafkaError
    from txlog.transport import Transport

    class LateEndTxn(Transport):
        """The EndTxn request is held up in the network: the process stops just before sending it."""

        def end_txn(self, transactional_id, producer_id, epoch, commit):
            _say(f"ENDING {producer_id} {epoch}")
            os.kill(os.getpid(), signal.SIGSTOP)  # the parent re-inits the id, then sends SIGCONT
            return super().end_txn(transactional_id, producer_id, epoch, commit)

    store = Store.open(args.store)
    producer = Producer(store, transactional_id=args.tid, linger_ms=10**9, transport=LateEndTxn(store))
    producer.init_transactions()
    _say(f"IDS {producer.producer_id} {producer.producer_epoch}")
    producer.begin_transaction()
    for t, p in [tuple(x) for x in json.loads(args.parts)]:
        producer.send(t, f"{args.tag}:{t}-{p}".encode(), partition=p)
    producer.flush()
    _say("DATA")
    try:
        if args.end == "commit":
            producer.commit_transaction()
        else:
            producer.abort_transaction()
        _say(f"RESULT ok {producer.producer_id} {producer.producer_epoch}")
    except KafkaError as exc:
        _say(f"RESULT {_word(exc)} {type(exc).__name__}")
    _say("DONE")
    os._exit(0)  # a clean close would try to abort: the late process just goes away


def _word(exc: BaseException) -> str:
    from txlog.errors import InvalidProducerEpochError, InvalidTxnStateError, ProducerFencedError

    if isinstance(exc, (ProducerFencedError, InvalidProducerEpochError)):
        return "fenced"
    if isinstance(exc, InvalidTxnStateError):
        return "invalid"
    return "error"


def run_race(args) -> None:
    """docs/reliability-scenarios.md scenario 38: two of these init the same transactional id at once and each
    writes."""
    from storage import Store
    from txlog.clients.producer import Producer
    from txlog.errors import KafkaError

    store = Store.open(args.store)
    producer = Producer(store, transactional_id=args.tid, linger_ms=10**9)
    parts = [tuple(x) for x in json.loads(args.parts)]
    _say("READY")
    if sys.stdin.readline().strip() != "GO":
        sys.exit(2)
    for round_ in (1, 2):
        if round_ == 2:
            _say("WAIT")
            if sys.stdin.readline().strip() != "GO2":
                sys.exit(2)
        try:
            if round_ == 1:
                producer.init_transactions()
                _say(f"IDS {producer.producer_id} {producer.producer_epoch}")
            producer.begin_transaction()
            for t, p in parts:
                producer.send(t, f"{args.tag}-{round_}:{t}-{p}".encode(), partition=p)
            producer.flush()
            producer.commit_transaction()
            _say(f"RESULT{round_} ok {producer.producer_id} {producer.producer_epoch}")
        except KafkaError as exc:
            _say(f"RESULT{round_} {_word(exc)} {type(exc).__name__} {' '.join(str(exc).split())}")
    _say("DONE")
    producer.close()
    store.close()


def run_recover(args) -> None:
    """One coordinator operation in a fresh process, as a rerun CLI invocation would do it."""
    from storage import Store
    from txlog.coordinator.transaction_coordinator import TransactionCoordinator
    from txlog.errors import KafkaError

    store = Store.open(args.store)
    offset = args.clock_offset_ms
    coordinator = TransactionCoordinator(store, clock=lambda: int(time.time() * 1000) + offset)
    try:
        if args.how == "sweep":
            coordinator.sweep_all()
            _say("RESULT ok")
        elif args.how == "init":
            ids = coordinator.init_producer_id(args.tid, args.timeout_ms)
            _say(f"RESULT ok {ids.producer_id} {ids.epoch}")
        elif args.how in ("commit", "abort"):
            ids = coordinator.end_transaction(
                args.tid,
                args.pid if args.pid >= 0 else None,
                args.epoch if args.pid >= 0 else None,
                args.how == "commit",
            )
            _say(f"RESULT ok {ids.producer_id} {ids.epoch}")
    except KafkaError as exc:
        _say(f"RESULT {_word(exc)} {type(exc).__name__}")
    store.close()
    _say("DONE")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["txn", "late", "race", "recover"])
    ap.add_argument("--store", required=True)
    ap.add_argument("--tid", default="tx")
    ap.add_argument("--tag", default="v")
    ap.add_argument("--parts", default='[["t", 0]]', help="JSON list of [topic, partition]")
    ap.add_argument("--warm-parts", default="")
    ap.add_argument("--offsets", default="", help='JSON {"group", "tp": [t, p], "offset", "warm": [...]}')
    ap.add_argument("--end", choices=["commit", "abort", "none"], default="commit")
    ap.add_argument(
        "--kill", default="none", choices=["none", "register", "data", "prepare", "prepare-torn", "markers"]
    )
    ap.add_argument("--kill-n", type=int, default=1)
    ap.add_argument(
        "--sent-by", choices=["flush", "commit"], default="flush", help="who sends the target's records (txn mode)"
    )
    ap.add_argument("--torn-frac", type=float, default=0.5)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout-ms", type=int, default=60_000)
    ap.add_argument("--exit", choices=["close", "crash"], default="close")
    ap.add_argument("--how", default="sweep", choices=["sweep", "init", "commit", "abort"])
    ap.add_argument("--pid", type=int, default=-1)
    ap.add_argument("--epoch", type=int, default=-1)
    ap.add_argument("--clock-offset-ms", type=int, default=0)
    args = ap.parse_args(argv)
    {"txn": run_txn, "late": run_late, "race": run_race, "recover": run_recover}[args.mode](args)


# =====================================================================================================
# the parent side: spawning workers
# =====================================================================================================

WORKER = os.path.abspath(__file__)


class Worker(crash_worker.Worker):
    """A txn_crash_worker subprocess, driven like the storage crash workers."""

    SCRIPT = WORKER

    def line(self, prefix: str) -> str | None:
        return next((line for line in self.lines if line.startswith(prefix)), None)


def wait_stopped(pid: int, timeout: float = 30.0) -> None:
    """Until the process is in state T (stopped by SIGSTOP)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        if state in ("T", "t"):
            return
        time.sleep(0.002)
    raise AssertionError(f"process {pid} never stopped")


# =====================================================================================================
# independent checks of a store
# =====================================================================================================


def make_store(root: str, topics: dict[str, int]) -> None:
    """A store with `topics` and both internal topics already created (their default partition counts)."""
    from storage import Store
    from txlog.coordinator.group_offsets import GroupOffsets
    from txlog.coordinator.transaction_coordinator import TransactionCoordinator

    with Store.open(root) as s:
        for name, count in topics.items():
            s.create_topic(name, partitions=count)
        TransactionCoordinator(s).partition_for("x")
        GroupOffsets(s).partition_for("g")


def clone_store(template: str, root: str) -> None:
    """A fresh store as a copy of a template made by `make_store` (cheaper than creating 20 partitions)."""
    import shutil

    shutil.copytree(template, root)


def partition_dirs(root: str) -> list[tuple[str, int, str]]:
    """(topic, partition, directory) of every partition directory of a store, internal topics included."""
    out = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        topic, _, p = name.rpartition("-")
        if os.path.isdir(path) and topic and p.isdigit():
            out.append((topic, int(p), path))
    return out


def kafka_python_batches(directory: str, *, allow_torn_tail: bool = False) -> list:
    """Every batch of every segment of a partition, parsed by kafka-python (the independent oracle).

    Checks magic, CRC-32C, dense offsets across segments, control batches of exactly 78 bytes
    holding one COMMIT/ABORT record, and that data records decode. Returns (batch, records) pairs.
    """
    from kafka.record.default_records import DefaultRecordBatch

    logs = sorted(n for n in os.listdir(directory) if n.endswith(".log") and n[:-4].isdigit())
    out = []
    expected = None
    for i, name in enumerate(logs):
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        base = int(name[:-4])
        if expected is not None:
            assert base == expected, f"{directory}/{name}: segment starts at {base}, previous ended at {expected}"
        expected = base
        pos = 0
        while pos < len(data):
            if len(data) - pos < 61:
                break
            length = int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True)
            if pos + 12 + length > len(data):
                break
            b = DefaultRecordBatch(data[pos : pos + 12 + length])
            where = f"{directory}/{name}@{pos}"
            assert b.magic == 2, f"{where}: magic {b.magic}"
            assert b.validate_crc(), f"{where}: CRC mismatch"
            assert b.base_offset == expected, f"{where}: batch at {b.base_offset}, expected {expected}"
            records = list(b)
            assert len(records) == b.records_count, f"{where}: {len(records)} records of {b.records_count}"
            if b.is_control_batch:
                assert 12 + length == CONTROL_BATCH_SIZE, f"{where}: control batch of {12 + length} bytes"
                assert b.is_transactional and b.base_sequence == -1 and len(records) == 1, where
                assert records[0].type in (0, 1), f"{where}: control type {records[0].type}"
            out.append((b, records))
            expected = b.next_offset
            pos += 12 + length
        rest = len(data) - pos
        assert rest == 0 or (allow_torn_tail and i == len(logs) - 1), (
            f"{directory}/{name}: {rest} bytes after the last batch"
        )
    return out


def all_batches(log) -> list:
    """Every batch of a partition through the storage API (dense offsets)."""
    pos, end = log.log_start_offset, log.log_end_offset
    out = []
    while pos < end:
        got = log.read(pos, 1 << 22)
        assert got, f"read({pos}) of {log} returned nothing below the log end {end}"
        for b in got:
            assert b.base_offset == pos, f"{log}: batch at {b.base_offset}, expected {pos}"
            out.append(b)
            pos = b.last_offset + 1
    return out


def model(batches: list) -> dict:
    """RU, RC, LSO, markers and aborted ranges recomputed from the raw batches of one partition.

    A transactional batch is committed when the next marker of its producer is a COMMIT,
    aborted when it is an ABORT, and open while no marker followed; the LSO is the first
    offset of the earliest open transaction, else the log end.
    """
    end = batches[-1].last_offset + 1 if batches else 0
    open_txn: dict[int, list] = {}
    fate: dict[int, str] = {}
    markers: list[tuple[int, int, str, int]] = []  # (pid, epoch, COMMIT/ABORT, offset)
    aborted: list[tuple[int, int, int]] = []  # (pid, first offset, marker offset)
    for b in batches:
        if b.is_control:
            kind = "COMMIT" if b.control_marker().is_commit else "ABORT"
            markers.append((b.producer_id, b.producer_epoch, kind, b.base_offset))
            txn = open_txn.pop(b.producer_id, [])
            for d in txn:
                fate[d.base_offset] = kind
            if txn and kind == "ABORT":
                aborted.append((b.producer_id, txn[0].base_offset, b.base_offset))
        elif b.is_transactional:
            open_txn.setdefault(b.producer_id, []).append(b)
    lso = min((txn[0].base_offset for txn in open_txn.values()), default=end)
    ru, rc = [], []
    for b in batches:
        if b.is_control:
            continue
        values = [(r.offset, r.value) for r in b.records()]
        ru.extend(values)
        if b.last_offset < lso and (not b.is_transactional or fate.get(b.base_offset) == "COMMIT"):
            rc.extend(values)
    return {
        "ru": ru,
        "rc": rc,
        "lso": lso,
        "end": end,
        "markers": markers,
        "aborted": aborted,
        "open": {pid: txn[0].base_offset for pid, txn in open_txn.items()},
    }


def fetch_all(log, isolation: str) -> list[tuple[int, bytes]]:
    """(offset, value) of every record `fetch` returns from the log start under `isolation`."""
    from txlog.fetch import fetch

    out = []
    pos = log.log_start_offset
    while True:
        r = fetch(log, pos, isolation, max_records=100_000)
        out.extend((rec.offset, rec.value) for rec in r.records)
        if r.next_offset == pos:
            return out
        pos = r.next_offset


def txn_log_records(store, *, check: bool = True) -> list[tuple[int, int, str, object]]:
    """(coordinator partition, offset, transactional id, TxnLogValue | None) of every record, decoded
    with `txlog.schemas.transaction_log`; with `check`, every record is also checked for sane fields."""
    from txlog.schemas.transaction_log import TxnState, decode_key, decode_value

    out = []
    if not store.has_topic(TXN_TOPIC):
        return out
    for p in range(store.partition_count(TXN_TOPIC)):
        log = store.partition(TXN_TOPIC, p)
        for b in all_batches(log):
            assert not b.is_control and not b.is_transactional and b.producer_id == -1, f"{TXN_TOPIC}-{p}: {b}"
            for r in b.records():
                tid = decode_key(r.key)
                value = decode_value(r.value)
                if check and value is not None:
                    assert 0 <= value.producer_epoch <= 32767, f"{tid}@{r.offset}: epoch {value.producer_epoch}"
                    assert value.producer_id >= 0, f"{tid}@{r.offset}: producer id {value.producer_id}"
                    assert value.state not in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE), f"{tid}@{r.offset}"
                    assert value.state != TxnState.EMPTY or not value.partitions, f"{tid}@{r.offset}"
                    assert value.next_producer_epoch == -1 or value.next_producer_epoch >= 0
                out.append((p, r.offset, tid, value))
    return out


_LEGAL_FROM = {
    "EMPTY": {None, "EMPTY", "COMPLETE_COMMIT", "COMPLETE_ABORT"},
    "ONGOING": {"ONGOING", "EMPTY", "COMPLETE_COMMIT", "COMPLETE_ABORT"},
    "PREPARE_COMMIT": {"ONGOING"},
    # TV2 lets a client abort when unsure, from Empty or Complete* too (docs/kafka-formats.md §5.3 [newer])
    "PREPARE_ABORT": {"ONGOING", "EMPTY", "COMPLETE_COMMIT", "COMPLETE_ABORT"},
    "COMPLETE_COMMIT": {"PREPARE_COMMIT"},
    "COMPLETE_ABORT": {"PREPARE_ABORT"},
    "TOMBSTONE": {"EMPTY", "COMPLETE_COMMIT", "COMPLETE_ABORT"},
}


def txn_histories(store) -> dict[str, list]:
    """Every transactional id's values in log order, after checking the state machine and epochs.

    Epochs never go down under one producer id; a new producer id appears only as the
    rotation announced by NextProducerId (or at an init past the exhausted epoch, which
    names the old id as PreviousProducerId); every init (EMPTY) has a larger epoch than the
    last one of the same producer id.
    """
    from txlog.schemas.transaction_log import TxnState

    hist: dict[str, list] = {}
    for _, _, tid, value in txn_log_records(store):
        hist.setdefault(tid, []).append(value)
    for tid, values in hist.items():
        prev = None
        last_init: dict[int, int] = {}
        for i, v in enumerate(values):
            name = "TOMBSTONE" if v is None else v.state.name
            # the first record may be any state: compaction (or a test) can start a history anywhere
            assert i == 0 or (None if prev is None else prev.state.name) in _LEGAL_FROM[name], (
                f"{tid}: illegal transition {None if prev is None else prev.state.name} -> {name}"
            )
            if v is not None and prev is not None:
                if v.producer_id == prev.producer_id:
                    assert v.producer_epoch >= prev.producer_epoch, (
                        f"{tid}: epoch went down {prev.producer_epoch} -> {v.producer_epoch}"
                    )
                else:
                    assert v.producer_id == prev.next_producer_id or v.previous_producer_id == prev.producer_id, (
                        f"{tid}: producer id {prev.producer_id} -> {v.producer_id} without a rotation"
                    )
            if v is not None and v.state == TxnState.EMPTY:
                assert last_init.get(v.producer_id, -1) < v.producer_epoch, (
                    f"{tid}: init epoch {v.producer_epoch} not above {last_init.get(v.producer_id)}"
                )
                last_init[v.producer_id] = v.producer_epoch
            if v is not None:
                prev = v
            else:
                prev = None
    return hist


def decisions(store) -> dict[tuple[int, int], str]:
    """(producer id, marker epoch) -> COMMIT/ABORT of every PREPARE_* in the transaction log."""
    from txlog.schemas.transaction_log import TxnState

    out = {}
    for _, _, tid, v in txn_log_records(store):
        if v is not None and v.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            kind = "COMMIT" if v.state == TxnState.PREPARE_COMMIT else "ABORT"
            assert out.get((v.producer_id, v.producer_epoch), kind) == kind, f"{tid}: two decisions for {v}"
            out[(v.producer_id, v.producer_epoch)] = kind
    return out


def check_store(root: str, *, settled: bool = True, allow_torn: bool = False) -> dict:
    """Every invariant of a store at rest (docs/reliability-scenarios.md scenario 60's checker, transaction part).

    * kafka-python parses every batch of every partition (internal topics included), control
      batches are exactly 78 bytes;
    * RC/RU from `fetch` equal the model recomputed from raw batches; the LSO agrees;
    * at most one marker per (producer id, epoch) in a partition, the same decision on every
      partition, and each matching the PREPARE_* record of the transaction log;
    * every aborted transaction with data is in the aborted-transaction index;
    * every `__transaction_state` record decodes and the state machine is legal;
    * `settled`: nothing Ongoing or Prepare*, every LSO at the log end, no open transaction.

    Returns {(topic, partition): model} plus "_txn" -> histories.
    """
    from storage import Store
    from txlog.schemas.transaction_log import TxnState

    store = Store.open(root, read_only=True)  # a checker must not repair what it checks
    try:
        decided = decisions(store)
        out: dict = {}
        seen_decisions: dict[tuple[int, int], set] = {}
        for topic, p, directory in partition_dirs(root):
            kafka_python_batches(directory, allow_torn_tail=allow_torn)
            log = store.partition(topic, p)
            m = model(all_batches(log))
            assert log.last_stable_offset == m["lso"], f"{topic}-{p}: LSO {log.last_stable_offset} != {m['lso']}"
            if topic != TXN_TOPIC:
                assert fetch_all(log, "read_uncommitted") == m["ru"], f"{topic}-{p}: RU differs from the model"
                assert fetch_all(log, "read_committed") == m["rc"], f"{topic}-{p}: RC differs from the model"
            keys = [(pid, epoch) for pid, epoch, _, _ in m["markers"]]
            assert len(keys) == len(set(keys)), f"{topic}-{p}: two markers for one transaction end: {m['markers']}"
            for pid, epoch, kind, offset in m["markers"]:
                seen_decisions.setdefault((pid, epoch), set()).add(kind)
                assert decided.get((pid, epoch)) == kind, (
                    f"{topic}-{p}: {kind} marker of ({pid}, {epoch}) at {offset}, the txn log decided "
                    f"{decided.get((pid, epoch))}"
                )
            indexed = {(a.producer_id, a.first_offset, a.last_offset) for a in log.aborted_transactions(0, m["end"])}
            for entry in m["aborted"]:
                assert entry in indexed, f"{topic}-{p}: aborted txn {entry} missing from the txn index {indexed}"
            crash_worker.check_segment_indexes(log)
            if settled:
                assert m["lso"] == m["end"] and not m["open"], f"{topic}-{p}: open transactions {m['open']}"
                assert not log.open_transactions(), f"{topic}-{p}: {log.open_transactions()}"
            out[(topic, p)] = m
        for key, kinds in seen_decisions.items():
            assert len(kinds) == 1, f"transaction end {key} has both COMMIT and ABORT markers"
        hist = txn_histories(store)
        if settled:
            for tid, values in hist.items():
                last = values[-1]
                assert last is None or last.state not in (
                    TxnState.ONGOING,
                    TxnState.PREPARE_COMMIT,
                    TxnState.PREPARE_ABORT,
                ), f"{tid} left {last}"
        out["_txn"] = hist
        return out
    finally:
        store.close()


if __name__ == "__main__":
    main()
