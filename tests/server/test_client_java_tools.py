"""Kafka 4.4's own Java tools and clients end to end (tests/kafka_rig/kafka_dist.run_tool):
kafka-console-producer and kafka-console-consumer with `--isolation-level read_committed`,
kafka-transactions (list, describe, find-hanging), kafka-consumer-groups (--list, --describe),
and a KafkaProducer/KafkaConsumer exactly-once program (compat/java_eos, called as it is)."""

from __future__ import annotations

from compat.harness import PASSED
from compat.java_eos import run as run_java_eos
from tests.server import ctp_worker
from tests.server.client_checks import (
    assert_exactly_once,
    input_values,
    produce_inputs,
    read_values,
    record_count,
    transform,
    write_aborted,
)
from tests.server.endpoints import topic_name

CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


def test_console_producer_then_console_consumer_read_committed(endpoint, request, big):
    n = record_count(200, big)
    topic = topic_name(request.node.nodeid, "t")
    endpoint.create_topic(topic, 3)
    # aborted records first: were they visible, they would be among the first n read
    write_aborted(endpoint.bootstrap, topic, ["aborted"] * 6)
    lines = input_values(n)
    endpoint.tool(CONSOLE_PRODUCER, "--topic", topic, input="\n".join(lines) + "\n")

    out = endpoint.tool(
        CONSOLE_CONSUMER, "--topic", topic, "--from-beginning", "--isolation-level", "read_committed",
        "--max-messages", str(n), "--timeout-ms", "120000",
    )  # fmt: skip
    assert_exactly_once(lines, out.stdout.splitlines())
    uncommitted = read_values(endpoint.bootstrap, topic, 3, n, isolation="read_uncommitted")
    assert uncommitted.count("aborted") == 6  # they are in the log


def test_kafka_transactions_and_consumer_groups_describe_a_finished_copy(endpoint, request):
    n = 60
    source, sink = (topic_name(request.node.nodeid, role) for role in ("in", "out"))
    group, txn_id = f"{sink}-group", f"{sink}-txn"
    endpoint.create_topic(source, 3)
    endpoint.create_topic(sink, 3)
    inputs = produce_inputs(endpoint.bootstrap, source, n)
    ctp_worker.run(ctp_worker.Job(endpoint.bootstrap, source, sink, group, txn_id), say=lambda line: None)
    assert_exactly_once(map(transform, inputs), read_values(endpoint.bootstrap, sink, 3, n))

    assert endpoint.transaction_states()[txn_id] == "CompleteCommit"
    described = endpoint.tool(TRANSACTIONS, "describe", "--transactional-id", txn_id).stdout
    assert txn_id in described and "CompleteCommit" in described
    assert endpoint.hanging_transactions() == []

    assert group in endpoint.tool(CONSUMER_GROUPS, "--list").stdout.split()
    rows = endpoint.tool(CONSUMER_GROUPS, "--describe", "--group", group).stdout
    lag = {}
    for line in rows.splitlines():
        cells = line.split()
        if len(cells) > 5 and cells[0] == group and cells[1] == source:
            lag[int(cells[2])] = (int(cells[3]), int(cells[4]), int(cells[5]))
    # per partition: committed offset = log end offset, lag 0
    assert lag == {p: (len(range(p, n, 3)), len(range(p, n, 3)), 0) for p in range(3)}


def test_find_hanging_reports_nothing_after_an_aborted_transaction(endpoint, request):
    topic = topic_name(request.node.nodeid, "t")
    endpoint.create_topic(topic, 3)
    write_aborted(endpoint.bootstrap, topic, ["aborted"] * 3)
    assert endpoint.hanging_transactions() == []
    assert set(endpoint.transaction_states().values()) <= {"CompleteAbort", "CompleteCommit", "Empty"}


def test_java_kafka_producer_and_consumer_exactly_once_program(endpoint, tmp_path):
    result = run_java_eos(endpoint.bootstrap, str(tmp_path))
    failed = [(o.test, o.detail) for o in result.outcomes if o.status != PASSED]
    assert result.outcomes and not failed, f"{failed}; see {result.log_path}"
