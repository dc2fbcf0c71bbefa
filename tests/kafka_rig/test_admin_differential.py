"""txlog's views of a real broker's data directory against the broker's own answers (issue 21, item 2).

One dedicated broker gets a small, complete story through librdkafka (confluent-kafka): a
committed, an aborted and a still-open transaction on a two-partition topic, and two consumer
groups that commit read_committed positions, one with the classic protocol and one with KIP-848's
(`group.protocol=consumer`). Each group then gets a live member of its protocol, still
subscribed while Kafka's own tools (kafka-transactions, kafka-consumer-groups with
`--members --verbose`, `--state --verbose`, `--list --type --state`) and read_committed /
read_uncommitted consumers record their answers, and still subscribed when the broker stops
(a controlled shutdown): the records keep the members, and txlog reads a copy of the log
directory. Where every value agrees the raw text is compared too, byte for byte but for the
allowed columns, which are masked.

Columns that cannot agree are named with their reason in ALLOWED_DIFFERENCES and documented in
docs/kafka-formats.md §9: there is no broker, so no broker id or host to print, and durations
are measured at different moments.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Consumer, Producer

from tests.cli.cli_helpers import tree, txlog
from tests.kafka_rig.broker import KafkaBroker
from tests.kafka_rig.kafka_dist import run_tool

TOPIC = "orders"
TRANSACTIONS_TOOL = "org.apache.kafka.tools.TransactionsCommand"
GROUPS_TOOL = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
GROUPS = {"g-classic": "classic", "g-consumer": "consumer"}
TRANSACTIONAL_IDS = ("tx-committed", "tx-aborted", "tx-open")

# (view, column, row or None for every row): why txlog's value cannot equal the broker's.
ALLOWED_DIFFERENCES = {
    ("transactions", "Coordinator", None): "no broker: txlog's coordinator is the __transaction_state partition",
    ("describe", "CoordinatorId", None): "no broker: txlog's coordinator is the __transaction_state partition",
    ("describe", "TransactionDurationMs", None): "now minus the start: measured at a different moment",
    ("state", "COORDINATOR (ID)", None): "no broker: txlog names the __consumer_offsets partition",
}

#: Columns txlog prints after Kafka's, which Kafka 4.4's kafka-transactions lacks: KIP-939's
#: two-phase commit, which its tool does not show (docs/cli-reference.md, docs/kafka-formats.md §9).
TXLOG_ONLY_COLUMNS = {
    "transactions": ("TwoPhaseCommit",),
    "describe": ("TwoPhaseCommit", "PreparedTxnState"),
}


@dataclass
class Recorded:
    """What the live broker answered, and the copy of its log directory taken after it stopped."""

    log_dir: str
    tools: dict[str, str] = field(default_factory=dict)
    consumed: dict[str, list[tuple[int, int, bytes | None, bytes | None]]] = field(default_factory=dict)


def _transactional(bootstrap: str, transactional_id: str) -> Producer:
    # A timeout far beyond the fixture's run: the broker must not abort tx-open before it stops.
    conf = {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5}
    producer = Producer({**conf, "transaction.timeout.ms": 600_000})
    producer.init_transactions(60)
    return producer


def _write_transactions(bootstrap: str) -> Producer:
    """Committed, aborted and open transactions; the open one's producer is returned, still open."""
    committed = _transactional(bootstrap, "tx-committed")
    committed.begin_transaction()
    for i in range(10):
        committed.produce(TOPIC, key=f"k{i}".encode(), value=f"committed-{i}".encode(), headers=[("h", b"v")])
    committed.produce(TOPIC, key=b"null-value", value=None)
    committed.commit_transaction(60)
    aborted = _transactional(bootstrap, "tx-aborted")
    aborted.begin_transaction()
    for i in range(5):
        aborted.produce(TOPIC, value=f"aborted-{i}".encode(), partition=i % 2)
    aborted.flush(60)
    aborted.abort_transaction(60)
    still_open = _transactional(bootstrap, "tx-open")
    still_open.begin_transaction()
    for i in range(3):
        still_open.produce(TOPIC, value=f"open-{i}".encode(), partition=1)
    still_open.flush(60)
    return still_open


def _consume(bootstrap: str, isolation: str, group: str | None = None, protocol: str = "classic") -> list[tuple]:
    """Every record a librdkafka consumer returns until the end of each partition."""
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group or f"reader-{isolation}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": isolation,
        "group.protocol": protocol,
    }
    consumer = Consumer(conf)
    consumer.subscribe([TOPIC])
    records: list[tuple] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 90
    while len(at_end) < 2 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error():
            if message.error().code() == -191:  # _PARTITION_EOF
                at_end.add(message.partition())
            continue
        records.append((message.partition(), message.offset(), message.key(), message.value()))
    if group is not None:
        consumer.commit(asynchronous=False)
    consumer.close()
    assert len(at_end) == 2, f"{isolation} consumer did not reach the end of both partitions"
    return sorted(records)


def _tool(*args: str) -> str:
    return run_tool(*args).stdout


def _live_member(bootstrap: str, group: str, protocol: str) -> Consumer:
    """A member of `group` that holds both partitions and stays subscribed (nothing is committed)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "group.protocol": protocol,
            "client.id": f"live-{protocol}",
        }
    )
    consumer.subscribe([TOPIC])
    deadline = time.monotonic() + 90
    while len(consumer.assignment()) < 2 and time.monotonic() < deadline:
        consumer.poll(0.5)
    assert len(consumer.assignment()) == 2, f"the live {protocol} member of {group} was not given both partitions"
    return consumer


def _stable(bootstrap: str, group: str) -> str:
    """`--describe --state --verbose` once the broker calls the group Stable (its member has reconciled):
    nothing changes in its records after that while the member only heartbeats."""
    deadline = time.monotonic() + 120
    while True:
        text = _tool(
            GROUPS_TOOL, "--bootstrap-server", bootstrap, "--describe", "--group", group, "--state", "--verbose"
        )
        if "Stable" in text or time.monotonic() > deadline:
            return text


def _close_later(consumers: list[Consumer]) -> None:
    """Close the live members off the test's path: with the broker gone their goodbye only times out."""
    import threading

    for consumer in consumers:
        threading.Thread(target=consumer.close, daemon=True).start()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    work = tmp_path_factory.mktemp("admin-differential")
    broker = KafkaBroker(str(work / "broker")).start()
    try:
        broker.create_topic(TOPIC, 2)
        bootstrap = broker.bootstrap
        still_open = _write_transactions(bootstrap)
        result = Recorded(str(work / "copy"))
        for group, protocol in GROUPS.items():
            result.consumed[group] = _consume(bootstrap, "read_committed", group, protocol)
        for isolation in ("read_committed", "read_uncommitted"):
            result.consumed[isolation] = _consume(bootstrap, isolation)
        live = [_live_member(bootstrap, group, protocol) for group, protocol in GROUPS.items()]
        for group in GROUPS:
            result.tools[f"{group} state verbose"] = _stable(bootstrap, group)
        result.tools["list_transactions"] = _tool(TRANSACTIONS_TOOL, "--bootstrap-server", bootstrap, "list")
        for tid in TRANSACTIONAL_IDS:
            describe = ("describe", "--transactional-id", tid)
            result.tools[tid] = _tool(TRANSACTIONS_TOOL, "--bootstrap-server", bootstrap, *describe)
        for group in GROUPS:
            result.tools[group] = _tool(GROUPS_TOOL, "--bootstrap-server", bootstrap, "--describe", "--group", group)
            for view in ("state", "members"):
                result.tools[f"{group} {view}"] = _tool(
                    GROUPS_TOOL, "--bootstrap-server", bootstrap, "--describe", "--group", group, f"--{view}"
                )
            result.tools[f"{group} members verbose"] = _tool(
                GROUPS_TOOL, "--bootstrap-server", bootstrap, "--describe", "--group", group, "--members", "--verbose"
            )
        result.tools["list"] = _tool(GROUPS_TOOL, "--bootstrap-server", bootstrap, "--list", "--type", "--state")
        result.tools["transactions list"] = result.tools.pop("list_transactions")
        broker.stop()
        _close_later(live)
        del still_open  # its transaction stays open in the copy: the broker stopped first
        shutil.copytree(broker.log_dir, result.log_dir)
        yield result
    finally:
        broker.stop()


def _table(text: str) -> list[dict[str, str]]:
    """Rows of a Kafka tool's table as {column: value}: kafka-transactions separates cells with tabs
    (an empty cell stays a cell), kafka-consumer-groups pads them with spaces."""
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("Consumer group")]
    if "\t" in lines[0]:
        split = [[cell.strip() for cell in line.rstrip("\t").split("\t")] for line in lines]
        return [dict(zip(split[0], cells, strict=True)) for cells in split[1:]]
    columns = lines[0].replace("COORDINATOR (ID)", "COORDINATOR\0(ID)").split()
    columns = [c.replace("\0", " ") for c in columns]
    rows = []
    for line in lines[1:]:
        cells = line.split()
        if "COORDINATOR (ID)" in columns and len(cells) == len(columns) + 1:
            # Kafka prints "host:port  (id)" in one column: glue the "(id)" back to it
            i = columns.index("COORDINATOR (ID)")
            cells[i : i + 2] = [f"{cells[i]} {cells[i + 1]}"]
        assert len(cells) == len(columns), f"cannot split {line!r} into {columns}"
        rows.append(dict(zip(columns, cells, strict=True)))
    return rows


def _same(view: str, kafka_rows: list[dict[str, str]], txlog_rows: list[dict[str, str]], key: str) -> None:
    """The two tables have the same columns and rows, outside the allowed columns."""
    assert kafka_rows and txlog_rows
    extra = TXLOG_ONLY_COLUMNS.get(view, ())
    assert list(txlog_rows[0]) == list(kafka_rows[0]) + list(extra), f"{view}: columns differ"
    txlog_rows = [{c: v for c, v in row.items() if c not in extra} for row in txlog_rows]

    def ignored(row: str, column: str) -> bool:
        return (view, column, None) in ALLOWED_DIFFERENCES or (view, column, row) in ALLOWED_DIFFERENCES

    def comparable(rows: list[dict[str, str]]) -> dict[str, dict[str, str]]:
        return {row[key]: {c: v for c, v in row.items() if not ignored(row[key], c)} for row in rows}

    assert comparable(txlog_rows) == comparable(kafka_rows), view


def _ok(*args: str, data_dir: str) -> str:
    run = txlog(*args, data_dir=data_dir)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_transactions_list_matches_kafka_transactions(recorded: Recorded) -> None:
    mine = _ok("transactions", "list", data_dir=recorded.log_dir)
    _same("transactions", _table(recorded.tools["transactions list"]), _table(mine), "TransactionalId")


@pytest.mark.parametrize("transactional_id", TRANSACTIONAL_IDS)
def test_transactions_describe_matches_kafka_transactions(recorded: Recorded, transactional_id: str) -> None:
    mine = _ok("transactions", "describe", "--transactional-id", transactional_id, data_dir=recorded.log_dir)
    _same("describe", _table(recorded.tools[transactional_id]), _table(mine), "TransactionalId")


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_groups_describe_offsets_match_kafka_consumer_groups(recorded: Recorded, group: str) -> None:
    mine = _ok("groups", "describe", "--group", group, data_dir=recorded.log_dir)
    kafka = [{**row, "key": row["PARTITION"]} for row in _table(recorded.tools[group])]
    ours = [{**row, "key": row["PARTITION"]} for row in _table(mine)]
    _same("offsets", kafka, ours, "key")


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_groups_describe_state_matches_kafka_consumer_groups(recorded: Recorded, group: str) -> None:
    mine = _ok("groups", "describe", "--group", group, "--state", data_dir=recorded.log_dir)
    _same("state", _table(recorded.tools[f"{group} state"]), _table(mine), "GROUP")


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_groups_describe_state_verbose_matches_kafka_consumer_groups(recorded: Recorded, group: str) -> None:
    mine = _ok("groups", "describe", "--group", group, "--state", "--verbose", data_dir=recorded.log_dir)
    kafka = recorded.tools[f"{group} state verbose"]
    _same("state", _table(kafka), _table(mine), "GROUP")
    assert _masked(mine, "COORDINATOR (ID)") == _masked(kafka, "COORDINATOR (ID)")


@pytest.mark.parametrize("verbose", [False, True], ids=["members", "members-verbose"])
@pytest.mark.parametrize("group", sorted(GROUPS))
def test_groups_describe_members_match_kafka_consumer_groups(recorded: Recorded, group: str, verbose: bool) -> None:
    """The live member, its epochs and assignments, and Kafka's layout to the byte."""
    args = ("--members", "--verbose") if verbose else ("--members",)
    mine = _ok("groups", "describe", "--group", group, *args, data_dir=recorded.log_dir)
    kafka = recorded.tools[f"{group} members{' verbose' if verbose else ''}"]
    _same("members", _table(kafka), _table(mine), "CONSUMER-ID")
    assert mine == kafka


def test_groups_list_type_and_state_match_kafka_consumer_groups(recorded: Recorded) -> None:
    mine = _ok("groups", "list", "--type", "--state", data_dir=recorded.log_dir)
    kafka = recorded.tools["list"]
    assert {row["GROUP"]: row for row in _table(mine)} == {row["GROUP"]: row for row in _table(kafka)}
    # the layout to the byte; the broker lists groups in its own order
    mine_lines, kafka_lines = mine.splitlines(), kafka.splitlines()
    assert mine_lines[0] == kafka_lines[0] and sorted(mine_lines[1:]) == sorted(kafka_lines[1:])


def _masked(text: str, column: str) -> str:
    """The text with `column`'s cells blanked: from where its header starts to where the next one does."""
    lines = text.splitlines()
    header = next(line for line in lines if column in line)
    start = header.index(column)
    end = header.index(" ", start + len(column)) + 1
    end += len(header[end:]) - len(header[end:].lstrip(" "))
    return "\n".join(line[:start] + " " * (end - start) + line[end:] if line.strip() else line for line in lines)


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_consume_returns_what_the_brokers_consumer_returned(recorded: Recorded, isolation: str) -> None:
    out = _ok(
        "consume",
        "-t",
        TOPIC,
        "-o",
        "beginning",
        "--isolation-level",
        isolation,
        "--output",
        "jsonl",
        "--value-format",
        "base64",
        data_dir=recorded.log_dir,
    )
    mine = sorted(_jsonl_record(line) for line in out.splitlines())
    assert mine == recorded.consumed[isolation]


def _jsonl_record(line: str) -> tuple[int, int, bytes | None, bytes | None]:
    import base64

    row = json.loads(line)

    def raw(value: str | None) -> bytes | None:
        return None if value is None else base64.b64decode(value)

    return row["partition"], row["offset"], raw(row["key"]), raw(row["value"])


def test_txlog_changes_not_one_byte_of_a_kafka_directory(recorded: Recorded) -> None:
    before = tree(recorded.log_dir)
    for args in (
        ("transactions", "list"),
        ("groups", "describe", "--all-groups"),
        ("consume", "-t", TOPIC, "-o", "beginning"),
        ("verify",),
    ):
        txlog(*args, data_dir=recorded.log_dir)
    assert tree(recorded.log_dir) == before
    assert not os.path.exists(os.path.join(recorded.log_dir, "txlog.json"))


@pytest.mark.parametrize("reader", ["jvm", "python"])
@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_spark_reads_what_the_brokers_consumer_returned(recorded: Recorded, spark, reader: str, isolation: str) -> None:
    import txlog.spark

    options = {"subscribe": TOPIC, "isolation.level": isolation}
    if reader == "jvm":
        frame = txlog.spark.read(spark, recorded.log_dir, **options)
    else:
        frame = spark.read.format(txlog.spark.FORMAT).options(**options).load(recorded.log_dir)
    rows = frame.select("partition", "offset", "key", "value").collect()
    mine = sorted((r.partition, r.offset, _bytes(r.key), _bytes(r.value)) for r in rows)
    assert mine == recorded.consumed[isolation]


def _bytes(value: bytearray | bytes | None) -> bytes | None:
    return None if value is None else bytes(value)
