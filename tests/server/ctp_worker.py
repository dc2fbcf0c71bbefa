"""A consume-transform-produce application with librdkafka (confluent-kafka), as Kafka's
exactly-once pattern prescribes: a read_committed consumer in a group, a transactional producer,
the group's offsets committed inside each transaction (send_offsets_to_transaction, KIP-447).

The end-to-end tests run it in-process and as a child process that they kill -9 and start again
(tests/server/test_client_faults.py). It stops when the group's committed offsets reach the end
of every input partition (the input is written before it starts). It prints one line per
committed transaction, `COMMITTED <n> <t>` (t: time.monotonic() when it began, the system's
CLOCK_MONOTONIC, which a parent process can compare with its own), and `HOLDING` when `hold_open_after` transactions are
committed and it has written the next one's records and waits, the transaction left open, to be
killed.

    python3 -m tests.server.ctp_worker BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID [options]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from tests.server.client_checks import transform

# bounds on a call that never answers: a hung server fails the run instead of hanging it
CALL_TIMEOUT_S = 120.0
RUN_DEADLINE_S = 600.0
# the exit code of a worker that must be started again: a librdkafka call never returned (see
# _watchdog), or a fatal error made its producer unusable
STUCK_EXIT = 75


@dataclass
class Job:
    bootstrap: str
    input: str
    output: str
    group: str
    transactional_id: str
    partitions: int = 3
    group_protocol: str = "classic"
    batch: int = 20
    abort_every: int = 0  # abort every Nth transaction on purpose and copy its batch again
    hold_open_after: int | None = None
    # short, so the server aborts a killed worker's open transaction soon; it also bounds how long
    # librdkafka waits for an absent coordinator (the server-restart test lengthens it)
    transaction_timeout_ms: int = 10_000
    exit_if_stuck_s: float | None = None  # see _watchdog
    rebootstrap: bool = True  # librdkafka's default; see _client_config
    pause_ms: int = 0  # after each commit: a slow application, so a test can act mid-stream


def run(job: Job, say: Callable[[str], None] = print) -> int:
    """Copy the input to the output exactly once; returns how many transactions were committed."""
    consumer = Consumer(_consumer_config(job))
    producer = Producer(
        {
            **_client_config(job),
            "transactional.id": job.transactional_id,
            "transaction.timeout.ms": job.transaction_timeout_ms,
        }
    )
    producer.init_transactions(CALL_TIMEOUT_S)
    consumer.subscribe([job.input])
    ends = _end_offsets(consumer, job)
    commits = attempts = 0
    deadline = time.monotonic() + RUN_DEADLINE_S
    try:
        while time.monotonic() < deadline:
            batch = _consume(consumer, job.batch)
            if not batch:
                if _group_done(consumer, job, ends):
                    return commits
                continue
            attempts += 1
            if job.hold_open_after is not None and commits >= job.hold_open_after:
                _hold_open(producer, job, batch, say)
            abort = job.abort_every > 0 and attempts % job.abort_every == 0
            began = time.monotonic()
            if _transaction(producer, consumer, job, batch, abort):
                commits += 1
                say(f"COMMITTED {commits} {began:.6f}")
                time.sleep(job.pause_ms / 1000)
            else:
                _rewind(consumer, batch)
        raise TimeoutError(f"not done after {RUN_DEADLINE_S:.0f} s ({commits} transactions committed)")
    finally:
        consumer.close()


def _client_config(job: Job) -> dict:
    """What the producer and the consumer share.

    With one broker, its restart takes every connection down at once, which makes librdkafka
    (2.10+, KIP-899) re-bootstrap at once: it decommissions the broker handle, and its cache of
    group coordinators keeps pointing at the dead handle, so the TxnOffsetCommit of the next
    send_offsets_to_transaction waits for it forever (seen with librdkafka 2.16 against both
    servers). `metadata.recovery.strategy=none` keeps the handle, which reconnects.
    """
    config: dict = {"bootstrap.servers": job.bootstrap}
    if not job.rebootstrap:
        config["metadata.recovery.strategy"] = "none"
    return config


def _consumer_config(job: Job) -> dict:
    config = {
        **_client_config(job),
        "group.id": job.group,
        "group.protocol": job.group_protocol,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if job.group_protocol == "classic":
        # the broker's minimum session: a killed member's partitions move on within seconds
        config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
    return config


def _end_offsets(consumer: Consumer, job: Job) -> dict[int, int]:
    return {
        p: consumer.get_watermark_offsets(TopicPartition(job.input, p), CALL_TIMEOUT_S)[1]
        for p in range(job.partitions)
    }


def _consume(consumer: Consumer, batch: int) -> list[Message]:
    messages = consumer.consume(batch, 1.0)
    for msg in messages:
        # librdkafka reports a lost connection as an event and recovers by itself; only a fatal
        # error ends the application
        if msg.error() and msg.error().fatal():
            raise KafkaException(msg.error())
    return [msg for msg in messages if not msg.error()]


def _transaction(producer: Producer, consumer: Consumer, job: Job, batch: list[Message], abort: bool) -> bool:
    """One transaction: the batch transformed, and its offsets for the group. True if committed;
    False if aborted (on purpose, or because the broker made it abortable, e.g. a rebalance)."""
    try:
        producer.begin_transaction()
        for msg in batch:
            producer.produce(job.output, value=transform(msg.value().decode()).encode(), partition=msg.partition())
        if abort:
            producer.flush(CALL_TIMEOUT_S)  # in the log first: abort_transaction drops what is unsent
            _retrying(lambda: producer.abort_transaction(CALL_TIMEOUT_S))
            return False
        offsets, group = _next_offsets(batch), consumer.consumer_group_metadata()
        with _watchdog(job.exit_if_stuck_s):
            producer.send_offsets_to_transaction(offsets, group, CALL_TIMEOUT_S)
        _retrying(lambda: producer.commit_transaction(CALL_TIMEOUT_S))
        return True
    except KafkaException as exc:
        # a retriable error outside commit (e.g. the coordinator away while the server restarts):
        # this batch is given up like an abortable one, and copied again after the abort
        error = exc.args[0]
        if not (error.txn_requires_abort() or error.retriable()):
            raise
        _retrying(lambda: producer.abort_transaction(CALL_TIMEOUT_S))
        return False


@contextmanager
def _watchdog(seconds: float | None) -> Iterator[None]:
    """Exit the process with STUCK_EXIT if the block has not returned within `seconds`.

    librdkafka's send_offsets_to_transaction can wait forever, past its timeout, when the
    coordinator went away during the call (confluentinc/librdkafka#5456 and #5511, open in
    2.16; after a single broker's restart this was its re-bootstrap, see _client_config): the
    process is then stuck for good, and what an operator does, restart it with the same
    transactional.id, is what a test does on this exit code.
    """
    if seconds is None:
        yield
        return
    timer = threading.Timer(seconds, _exit_stuck)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _exit_stuck() -> None:
    print("STUCK", flush=True)
    os._exit(STUCK_EXIT)


def _retrying(call: Callable[[], None]) -> None:
    """librdkafka's rule for commit and abort: a retriable error (e.g. a timeout while the
    coordinator is away) means call it again. (send_offsets_to_transaction called again after a
    timeout can wait forever in librdkafka 2.16: that batch is aborted instead.)"""
    deadline = time.monotonic() + RUN_DEADLINE_S
    while True:
        try:
            call()
            return
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _next_offsets(batch: list[Message]) -> list[TopicPartition]:
    nxt: dict[tuple[str, int], int] = {}
    for msg in batch:
        key = (msg.topic(), msg.partition())
        nxt[key] = max(nxt.get(key, 0), msg.offset() + 1)
    return [TopicPartition(topic, p, offset) for (topic, p), offset in nxt.items()]


def _rewind(consumer: Consumer, batch: list[Message]) -> None:
    """Back to the batch's first record per partition, so an aborted batch is copied again;
    a partition a rebalance took away is the new owner's to copy."""
    first: dict[tuple[str, int], int] = {}
    for msg in batch:
        key = (msg.topic(), msg.partition())
        first[key] = min(first.get(key, msg.offset()), msg.offset())
    owned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
    for (topic, p), offset in first.items():
        if (topic, p) in owned:
            try:
                consumer.seek(TopicPartition(topic, p, offset))
            except KafkaException:
                pass  # revoked between assignment() and seek(): not ours to copy


def _group_done(consumer: Consumer, job: Job, ends: dict[int, int]) -> bool:
    try:
        partitions = [TopicPartition(job.input, p) for p in range(job.partitions)]
        with _watchdog(job.exit_if_stuck_s):
            committed = consumer.committed(partitions, CALL_TIMEOUT_S)
    except KafkaException as exc:
        # e.g. NOT_COORDINATOR or a timeout while the server restarts: ask again later
        if not (exc.args[0].retriable() or exc.args[0].code() == KafkaError._TIMED_OUT):
            raise
        return False
    return all(tp.offset >= ends[tp.partition] for tp in committed)


def _hold_open(producer: Producer, job: Job, batch: list[Message], say: Callable[[str], None]) -> None:
    producer.begin_transaction()
    for msg in batch:
        producer.produce(job.output, value=transform(msg.value().decode()).encode(), partition=msg.partition())
    producer.flush(CALL_TIMEOUT_S)
    say("HOLDING")
    time.sleep(RUN_DEADLINE_S)
    raise TimeoutError("held a transaction open and was not killed")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ctp_worker")
    for name in ("bootstrap", "input", "output", "group", "transactional_id"):
        parser.add_argument(name)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--group-protocol", default="classic")
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--abort-every", type=int, default=0)
    parser.add_argument("--hold-open-after", type=int)
    parser.add_argument("--pause-ms", type=int, default=0)
    parser.add_argument("--exit-if-stuck-s", type=float)
    parser.add_argument("--transaction-timeout-ms", type=int, default=10_000)
    parser.add_argument("--no-rebootstrap", dest="rebootstrap", action="store_false")
    job = Job(**vars(parser.parse_args(argv)))
    try:
        commits = run(job, say=lambda line: print(line, flush=True))
    except KafkaException as exc:
        if not exc.args[0].fatal():
            raise
        # librdkafka's rule: after a fatal error the producer is unusable; the application
        # starts again with a new one (same transactional.id), which the caller does on this code
        print(f"FATAL {exc.args[0]}", flush=True)
        return STUCK_EXIT
    print(f"DONE {commits}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
