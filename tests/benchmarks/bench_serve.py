"""`txlog serve` against a real Kafka 4.4 broker, through the same librdkafka (confluent-kafka) clients.

    python tests/benchmarks/bench_serve.py [--only kafka|txlog] [--records N] [--reps R] [--big] [--dir D]

Three targets, one after the other in the same run, each fresh (a new store / a new KRaft log dir):

* `kafka`: Apache Kafka 4.4 from tests/kafka_rig at its defaults, which do not fsync per write
  (the page cache and replication are its durability);
* `kafka-fsync`: the same broker with `log.flush.interval.messages=1`, an fsync after every
  append: the durability txlog gives every acknowledged write;
* `txlog`: `txlog serve` on a fresh store (tests/server/serve_process.py).

Against each, with the same client settings:

* produce: an idempotent producer (acks=all, linger.ms=5), `--records` records of a 100-byte value
  (no key) to a one-partition topic, produce() then flush(); messages per second (the producer's
  first record is sent and flushed before the clock starts: connecting is not throughput);
* consume: a read_committed consumer (assign from the beginning, no group rebalance) reading
  those records back; messages per second from its first message to its last;
* commit latency: a transactional producer running begin / produce N / flush / commit at
  N = 1, 100 and 10,000 records; only commit_transaction() is timed (the records were already
  sent by flush(), so this is EndTxn and the markers), p50 and p99.

Each throughput measurement is repeated `--reps` times on a fresh topic; the first (cold) one is
dropped and the median of the rest printed. The first transaction of each size is dropped too.
Besides the client's numbers the script prints the CPU the server process used in each phase
(from /proc), which says whether a server is short of CPU or waiting on the disk.

The ratios are txlog's speed against each Kafka target (throughput txlog/Kafka, latency
Kafka/txlog): above 1.0 txlog is faster. A target that cannot start or a measurement that fails
(a client error, a timeout) is reported as `failed` with its error under the table, and the
other targets' numbers are still measured.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import pstats
import statistics
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [ROOT, HERE]

from benchutil import after_cold, scratch_dir  # noqa: E402
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from storage.records import build_batch  # noqa: E402
from tests.kafka_rig.broker import KafkaBroker  # noqa: E402
from tests.kafka_rig.kafka_dist import KAFKA_VERSION  # noqa: E402
from tests.server.raw_client import RawClient  # noqa: E402
from tests.server.serve_process import ServeProcess  # noqa: E402
from txlog.server.socket_server import PROFILE_ENV  # noqa: E402

VALUE = b"v" * 100
TXN_SIZES = (1, 100, 10_000)
# transactions per size (the first of each dropped): default, and --big
TXN_COUNTS = {1: 41, 100: 41, 10_000: 11}
TXN_COUNTS_BIG = {1: 501, 100: 201, 10_000: 51}
# How long a client may go without progress before the measurement is declared failed: long
# enough for a loaded machine, short enough that a server lacking an API fails in under a minute.
STALL_S = 45.0
# librdkafka retries a failing request until the message times out: bound that too.
CLIENT_TIMEOUT_MS = 40_000

# the raw Produce row: records per request, seconds per repetition, Produce version
RAW_BATCH_RECORDS = 100
RAW_SECONDS = 3.0
RAW_PRODUCE_VERSION = 9

TARGETS = ("kafka", "kafka-fsync", "txlog")
KAFKA_FSYNC_PROPS = {"log.flush.interval.messages": "1"}


class BenchError(RuntimeError):
    """A measurement could not complete against a target: the message says what the client saw."""


@dataclass
class Result:
    """One target's numbers; a metric missing from `values` failed with `errors[metric]`."""

    target: str
    values: dict[str, float] = field(default_factory=dict)
    spread: dict[str, tuple[float, float]] = field(default_factory=dict)  # min, max of the repetitions kept
    server_cpu: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


# --- the targets ------------------------------------------------------------------------------


class Target:
    """A server process to measure: `start()` returns its bootstrap, `cpu_s()` its CPU so far."""

    name: str

    def start(self) -> str:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def pid(self) -> int | None:
        raise NotImplementedError

    def cpu_s(self) -> float:
        pid = self.pid()
        return process_cpu_s(pid) if pid else 0.0


class KafkaTarget(Target):
    def __init__(self, name: str, work_dir: str, props: dict[str, str]):
        self.name = name
        self.broker = KafkaBroker(os.path.join(work_dir, name), props)

    def start(self) -> str:
        return self.broker.start().bootstrap

    def stop(self) -> None:
        self.broker.stop()

    def pid(self) -> int | None:
        return self.broker.process.pid if self.broker.process else None


class TxlogTarget(Target):
    name = "txlog"

    def __init__(self, work_dir: str):
        os.makedirs(os.path.join(work_dir, "txlog"), exist_ok=True)
        self.server = ServeProcess(os.path.join(work_dir, "txlog", "store"))

    def start(self) -> str:
        return self.server.start().bootstrap

    def stop(self) -> None:
        if self.server.proc is not None and self.server.proc.poll() is None:
            self.server.stop()

    def pid(self) -> int | None:
        return self.server.proc.pid if self.server.proc else None

    def log_tail(self, lines: int = 15) -> str:
        """The server's stderr but for its connection lines (one per client connection: noise here)."""
        kept = [line for line in self.server.log().splitlines() if not line.startswith("connection from ")]
        return "\n".join(kept[-lines:]) or "(nothing but connection lines)"


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (its threads included), from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime (fields 14 and 15 of stat)


# --- the clients --------------------------------------------------------------------------------


class ClientErrors:
    """librdkafka's error callback: the errors a client reported, the fatal ones raising at once."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, err: KafkaError) -> None:
        self.seen.append(f"{err.name()}: {err.str()}")

    def check(self, what: str) -> None:
        fatal = [e for e in self.seen if "FATAL" in e or "_FATAL" in e]
        if fatal:
            raise BenchError(f"{what}: {fatal[0]}")

    def summary(self) -> str:
        return f" (client errors: {'; '.join(dict.fromkeys(self.seen[-5:]))})" if self.seen else ""


def producer_config(bootstrap: str, errors: ClientErrors, **extra: object) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "message.timeout.ms": CLIENT_TIMEOUT_MS,
        "error_cb": errors,
        **extra,
    }


def create_topic(bootstrap: str, name: str) -> None:
    """One partition, replication factor 1, through CreateTopics (what any admin client sends)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)], request_timeout=30)
    try:
        futures[name].result(timeout=STALL_S)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError._UNSUPPORTED_FEATURE:
            return  # a server without CreateTopics: the producer's Metadata request creates it (auto-create)
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise BenchError(f"CreateTopics {name}: {exc.args[0].str()}") from None
    except concurrent.futures.TimeoutError:
        raise BenchError(f"CreateTopics {name}: no answer within {STALL_S:.0f} s") from None
    except Exception as exc:  # noqa: BLE001 - any other failure of the admin call is this target's, reported
        raise BenchError(f"CreateTopics {name}: {exc!r}") from None


def produce(bootstrap: str, topic: str, records: int, producers: int = 1) -> float:
    """Seconds to produce `records` values with idempotent acks=all producers and flush them.

    With several producers (each its own connection) the records go round-robin from one
    thread, so the server sees that many connections' Produce requests to one partition at once.
    """
    errors = ClientErrors()
    failed: list[str] = []

    def delivered(err: KafkaError | None, _msg: object) -> None:
        if err is not None and len(failed) < 3:
            failed.append(f"{err.name()}: {err.str()}")

    clients = [Producer(producer_config(bootstrap, errors, on_delivery=delivered)) for _ in range(producers)]
    # connecting, Metadata and InitProducerId are not throughput: one record each sent before the clock
    for producer in clients:
        producer.produce(topic, VALUE)
        if _flush(producer, errors, "produce") or failed:
            raise BenchError(f"produce: {failed[0] if failed else 'the first record was not sent'}{errors.summary()}")
    start = time.perf_counter()
    for i in range(records):
        producer = clients[i % producers]
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:  # the client's queue is full: let it send
                producer.poll(0.05)
                errors.check("produce")
        if failed:
            break
    left = sum(_flush(producer, errors, "produce") for producer in clients)
    seconds = time.perf_counter() - start
    if failed or left:
        raise BenchError(f"produce: {failed[0] if failed else f'{left} records unsent'}{errors.summary()}")
    return seconds


def raw_produce(bootstrap: str, topic: str, connections: int, seconds: float = RAW_SECONDS) -> float:
    """Records per second that `connections` wire clients get acknowledged, each sending Produce
    requests of one prebuilt batch (RAW_BATCH_RECORDS values, no producer id, acks=-1) one after
    the other for `seconds`. The client does almost nothing (encode a request, read the answer, on
    threads that wait with the GIL released), so this is the server's cost per request: its
    Python, and fsyncs a server makes per request or shares between connections (group commit)."""
    batch = build_batch([(None, VALUE, None, None)] * RAW_BATCH_RECORDS)
    _await_leader(bootstrap, topic, batch)
    deadline = time.monotonic() + seconds
    failed: list[str] = []

    def connection() -> int:
        acknowledged = 0
        with RawClient(bootstrap) as client:
            partition = client.nested(0, RAW_PRODUCE_VERSION, "PartitionProduceData", index=0, records=batch)
            data = client.nested(0, RAW_PRODUCE_VERSION, "TopicProduceData", name=topic, partition_data=(partition,))
            while time.monotonic() < deadline and not failed:
                response = client.send(
                    0, RAW_PRODUCE_VERSION, transactional_id=None, acks=-1, timeout=30_000, topic_data=(data,)
                )
                code = response.responses[0].partition_responses[0].error_code
                if code != 0:
                    failed.append(f"raw produce: error code {code}")
                acknowledged += RAW_BATCH_RECORDS
        return acknowledged

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(connections) as pool:
        total = sum(pool.map(lambda _: connection(), range(connections)))
    elapsed = time.perf_counter() - start
    if failed:
        raise BenchError(failed[0])
    return total / elapsed


def _await_leader(bootstrap: str, topic: str, batch: bytes) -> None:
    """Produce one batch until it is accepted: a Kafka broker answers a topic it has just created
    with UNKNOWN_TOPIC_OR_PARTITION or NOT_LEADER_OR_FOLLOWER until its leader is in place."""
    retriable = {3, 6}
    give_up = time.monotonic() + STALL_S
    with RawClient(bootstrap) as client:
        partition = client.nested(0, RAW_PRODUCE_VERSION, "PartitionProduceData", index=0, records=batch)
        data = client.nested(0, RAW_PRODUCE_VERSION, "TopicProduceData", name=topic, partition_data=(partition,))
        while True:
            response = client.send(
                0, RAW_PRODUCE_VERSION, transactional_id=None, acks=-1, timeout=30_000, topic_data=(data,)
            )
            code = response.responses[0].partition_responses[0].error_code
            if code == 0:
                return
            if code not in retriable or time.monotonic() > give_up:
                raise BenchError(f"raw produce: error code {code}")
            time.sleep(0.1)


def _flush(producer: Producer, errors: ClientErrors, what: str) -> int:
    """flush() until nothing is in flight, giving up after STALL_S without progress."""
    left, last, stalled_since = len(producer), -1, time.monotonic()
    while left:
        left = producer.flush(1.0)
        errors.check(what)
        if left != last:
            last, stalled_since = left, time.monotonic()
        elif time.monotonic() - stalled_since > STALL_S:
            break
    return left


def consume(bootstrap: str, topic: str, records: int) -> float:
    """Messages per second a read_committed consumer (assigned, from the beginning) receives, from
    its first message to its `records`th (connecting and the first fetch are not throughput)."""
    errors = ClientErrors()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "error_cb": errors,
        }
    )
    total = records + 1  # produce()'s warm-up record too
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got, first, start, progress = 0, 0, 0.0, time.monotonic()
        while got < total:
            # never ask for more than is left: consume() waits its whole timeout for a full batch
            batch = consumer.consume(min(10_000, total - got), timeout=1.0)
            for message in batch:
                if message.error() is not None:
                    raise BenchError(f"consume: {message.error().str()}")
            if batch and not got:
                first, start = len(batch), time.perf_counter()
            got += len(batch)
            errors.check("consume")
            if batch:
                progress = time.monotonic()
            elif time.monotonic() - progress > STALL_S:
                raise BenchError(f"consume: {got} of {total} records after {STALL_S:.0f} s{errors.summary()}")
        seconds = time.perf_counter() - start
        return (got - first) / seconds if seconds > 0 else float("inf")
    finally:
        consumer.close()


def commit_latencies(bootstrap: str, topic: str, size: int, count: int) -> list[float]:
    """Seconds of each commit_transaction() of `count` transactions of `size` records (flushed first)."""
    errors = ClientErrors()
    producer = Producer(producer_config(bootstrap, errors, **{"transactional.id": f"bench-{uuid.uuid4().hex[:8]}"}))
    _txn_call(lambda: producer.init_transactions(STALL_S), "init_transactions", errors)
    latencies = []
    for _ in range(count):
        producer.begin_transaction()
        for _ in range(size):
            while True:
                try:
                    producer.produce(topic, VALUE)
                    break
                except BufferError:
                    producer.poll(0.05)
        if _flush(producer, errors, "transaction"):
            raise BenchError(f"a transaction's records were not sent within {STALL_S:.0f} s{errors.summary()}")
        start = time.perf_counter()
        _txn_call(lambda: producer.commit_transaction(STALL_S), "commit_transaction", errors)
        latencies.append(time.perf_counter() - start)
    return latencies


def _txn_call(call: Callable[[], None], what: str, errors: ClientErrors) -> None:
    try:
        call()
    except KafkaException as exc:
        raise BenchError(f"{what}: {exc.args[0].name()}: {exc.args[0].str()}{errors.summary()}") from None


# --- one target ---------------------------------------------------------------------------------


@contextmanager
def phase(result: Result, target: Target, metric: str) -> Iterator[None]:
    """Record the server's CPU over the block, and a BenchError / client exception as the metric's failure."""
    before = target.cpu_s()
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - one failed measurement must not stop the other targets'
        result.errors[metric] = describe(exc)
    result.server_cpu[metric] = target.cpu_s() - before


def describe(exc: BaseException) -> str:
    """What went wrong, in one line: the client's KafkaError where there is one (the binding raises
    a fatal error from flush() as a SystemError caused by it), else the exception and its place."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, BenchError):
            return str(cause)
        if isinstance(cause, KafkaException) and isinstance(cause.args[0], KafkaError):
            return f"{cause.args[0].name()}: {cause.args[0].str()}"
        cause = cause.__cause__
    where = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{exc!r} at {os.path.basename(where.filename)}:{where.lineno}"


def measure(target: Target, records: int, reps: int, txn_counts: dict[int, int], producers: int) -> Result:
    result = Result(target.name)
    print(f"[{target.name}] starting ...", file=sys.stderr, flush=True)
    try:
        bootstrap = target.start()
    except (RuntimeError, OSError) as exc:  # KafkaDistError, ServeProcess's "did not start"
        result.errors["start"] = f"did not start: {str(exc).splitlines()[0] if str(exc) else repr(exc)}"
        return result
    try:
        print(f"[{target.name}] at {bootstrap}: produce/consume x{reps} ...", file=sys.stderr, flush=True)
        _throughput(result, target, bootstrap, records, reps)
        print(f"[{target.name}] {producers} producers x{reps} ...", file=sys.stderr, flush=True)
        _many_producers(result, target, bootstrap, records, reps, producers)
        for size in TXN_SIZES:
            print(f"[{target.name}] {txn_counts[size]} transactions of {size} ...", file=sys.stderr, flush=True)
            with phase(result, target, f"commit {size}"):
                topic = f"bench-txn-{size}"
                create_topic(bootstrap, topic)
                latencies = commit_latencies(bootstrap, topic, size, txn_counts[size])[1:]
                result.values[f"commit {size} p50"] = percentile(latencies, 50)
                result.values[f"commit {size} p99"] = percentile(latencies, 99)
    finally:
        target.stop()
    if isinstance(target, TxlogTarget) and result.errors:
        result.errors["server log"] = target.log_tail()
    return result


def _throughput(result: Result, target: Target, bootstrap: str, records: int, reps: int) -> None:
    """Produce then consume on a fresh topic per repetition; a failed produce skips the consume."""
    produced: list[float] = []
    consumed: list[float] = []
    for rep in range(reps):
        topic = f"bench-{rep}"
        with phase(result, target, "produce"):
            create_topic(bootstrap, topic)
            produced.append(records / produce(bootstrap, topic, records))
        if "produce" in result.errors:
            return
        with phase(result, target, "consume"):
            consumed.append(consume(bootstrap, topic, records))
        if "consume" in result.errors:
            break
    _keep(result, "produce msg/s", "produce", produced)
    _keep(result, "consume msg/s", "consume", consumed)


def _many_producers(result: Result, target: Target, bootstrap: str, records: int, reps: int, producers: int) -> None:
    """`producers` connections producing to one partition at once, a fresh topic per repetition:
    what a server that syncs each request alone (no group commit) is slowest at."""
    name = f"produce x{producers}"
    rates: list[float] = []
    for rep in range(reps):
        topic = f"bench-many-{rep}"
        with phase(result, target, name):
            create_topic(bootstrap, topic)
            rates.append(records / produce(bootstrap, topic, records, producers))
        if name in result.errors:
            return
    _keep(result, f"{name} msg/s", name, rates)
    name = f"raw produce x{producers}"
    rates = []
    for rep in range(reps):
        topic = f"bench-raw-{rep}"
        with phase(result, target, name):
            create_topic(bootstrap, topic)
            rates.append(raw_produce(bootstrap, topic, producers))
        if name in result.errors:
            return
    _keep(result, f"{name} msg/s", name, rates)


def _keep(result: Result, metric: str, phase_name: str, rates: list[float]) -> None:
    """The median of the repetitions but the first (cold), and their spread."""
    kept = after_cold(rates)
    if kept and phase_name not in result.errors:
        result.values[metric] = statistics.median(kept)
        result.spread[metric] = min(kept), max(kept)


def percentile(values: list[float], pct: float) -> float:
    """The nearest-rank percentile (with few samples p99 is the largest, as it should be)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


# --- the table ----------------------------------------------------------------------------------

ROWS = [
    ("produce msg/s", "produce", True),
    ("consume msg/s", "consume", True),
    ("produce x{producers} msg/s", "produce x{producers}", True),
    ("raw produce x{producers} msg/s", "raw produce x{producers}", True),
    *[(f"commit {size} {p}", f"commit {size}", False) for size in TXN_SIZES for p in ("p50", "p99")],
]


def render(results: list[Result], producers: int) -> str:
    """Rows are metrics, columns the targets, then txlog's speed against each Kafka target."""
    by_name = {r.target: r for r in results}
    txlog = by_name.get("txlog")
    kafkas = [r for r in results if r.target != "txlog"]
    header = ["metric", *(r.target for r in results)]
    if txlog is not None:
        header += [f"txlog vs {k.target}" for k in kafkas]
    lines = [header]
    for metric_name, phase_template, higher_is_better in ROWS:
        metric, phase_name = metric_name.format(producers=producers), phase_template.format(producers=producers)
        row = [metric if higher_is_better else f"{metric} (ms)"]
        for r in results:
            row.append(_cell(r, metric, phase_name, higher_is_better))
        if txlog is not None:
            for k in kafkas:
                mine, theirs = txlog.values.get(metric), k.values.get(metric)
                if mine and theirs:
                    row.append(f"{(mine / theirs if higher_is_better else theirs / mine):.2f}x")
                else:
                    row.append("-")
        lines.append(row)
    lines.append(["server CPU s (all phases)", *(f"{sum(r.server_cpu.values()):.1f}" for r in results)])
    widths = [max(len(row[i]) for row in lines if i < len(row)) for i in range(len(header))]
    return "\n".join("  ".join(cell.rjust(widths[i]) if i else cell.ljust(widths[i]) for i, cell in enumerate(row))
                     for row in lines)  # fmt: skip


def _cell(result: Result, metric: str, phase_name: str, higher_is_better: bool) -> str:
    if metric in result.values:
        value = result.values[metric]
        return f"{value:,.0f}" if higher_is_better else f"{value * 1000:.1f}"
    if "start" in result.errors:
        return "no start"
    return "failed" if phase_name in result.errors else "-"


def report_errors(results: list[Result]) -> str:
    out = []
    for r in results:
        for metric, error in r.errors.items():
            text = error.strip().replace("\n", "\n      ")
            out.append(f"  {r.target} {metric}: {text}")
    return "\n".join(out)


def spread_lines(results: list[Result]) -> str:
    """The min..max of the kept repetitions: how far a median can be trusted on a shared machine."""
    out = []
    for r in results:
        ranges = [f"{metric.removesuffix(' msg/s')} {lo:,.0f}..{hi:,.0f}" for metric, (lo, hi) in r.spread.items()]
        if ranges:
            out.append(f"  {r.target:12} " + ", ".join(ranges))
    return "spread of the repetitions kept (msg/s):\n" + "\n".join(out) if out else ""


def server_cpu_lines(results: list[Result], producers: int) -> str:
    many = [f"produce x{producers}", f"raw produce x{producers}"]
    phases = ["produce", "consume", *many, *(f"commit {s}" for s in TXN_SIZES)]
    out = ["server CPU s per phase (all repetitions): " + ", ".join(phases)]
    for r in results:
        out.append(f"  {r.target:12} " + "  ".join(f"{r.server_cpu.get(p, 0.0):7.2f}" for p in phases))
    return "\n".join(out)


def print_profiles(prefix: str, top: int = 25) -> None:
    """The server's own profile of each busy thread (written on its clean stop), by internal time."""
    for thread in ("loop", "store"):
        path = f"{prefix}.{thread}.prof"
        if not os.path.exists(path):
            print(f"no profile of the {thread} thread ({path})")
            continue
        print(f"--- txlog serve, {thread} thread, top {top} by internal time ---")
        stats = pstats.Stats(path, stream=sys.stdout)
        stats.sort_stats("tottime").print_stats(top)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=("kafka", "txlog"), help="only the Kafka targets (both), or only txlog")
    ap.add_argument("--records", type=int, default=200_000, help="records per produce/consume repetition")
    ap.add_argument("--reps", type=int, default=3, help="produce/consume repetitions (the first dropped)")
    ap.add_argument("--producers", type=int, default=8, help="connections of the many-producers row")
    ap.add_argument("--big", action="store_true", help="more transactions per size, for a steadier p99")
    ap.add_argument("--dir", help="scratch parent (default <repo>/.bench-tmp)")
    ap.add_argument("--profile", action="store_true", help="cProfile txlog's loop and store threads; print the top")
    args = ap.parse_args()
    txn_counts = TXN_COUNTS_BIG if args.big else TXN_COUNTS
    names = [t for t in TARGETS if args.only is None or t.startswith(args.only)]
    print(
        f"librdkafka {sys.modules['confluent_kafka'].libversion()[0]}; {args.records:,} records of "
        f"{len(VALUE)} B x {args.reps} (first dropped); transactions per size "
        + ", ".join(f"{n}: {c - 1}" for n, c in txn_counts.items())
        + f"; Kafka {KAFKA_VERSION}; kafka-fsync = log.flush.interval.messages=1"
    )
    results = []
    with scratch_dir(args.dir, "bench-serve-") as workdir:
        for name in names:
            if name == "txlog":
                target: Target = TxlogTarget(workdir)
                if args.profile:
                    os.environ[PROFILE_ENV] = os.path.join(workdir, "txlog", "serve")
            else:
                target = KafkaTarget(name, workdir, KAFKA_FSYNC_PROPS if name == "kafka-fsync" else {})
            results.append(measure(target, args.records, args.reps, txn_counts, args.producers))
        if args.profile and "txlog" in names:
            print_profiles(os.path.join(workdir, "txlog", "serve"))
    print(render(results, args.producers))
    for lines in (spread_lines(results), server_cpu_lines(results, args.producers)):
        if lines:
            print(lines)
    errors = report_errors(results)
    if errors:
        print("failures:\n" + errors)
    return 1 if any(r.errors for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
