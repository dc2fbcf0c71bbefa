"""The integrity check of a whole store: every partition's files, then its transactions (`txlog verify`).

`check_store` runs storage's file check (`storage.file_check`) over every partition (every
topic, internal ones too, or one topic) and adds what only the exactly-once layer can judge:

* every open transaction of a partition belongs to an Ongoing coordinator transaction that
  lists this partition ("hanging" otherwise) and is within its timeout ("expired" otherwise);
* the coordinator itself: no transaction left in PrepareCommit/PrepareAbort (decided but not
  completed) and no Ongoing one past its timeout; a two-phase-commit (KIP-939) transaction, which
  never times out, is a warning once it has been open longer than `transaction.max.timeout.ms`.

The rules are the ones txlog runs by (`TxnLogValue.is_ongoing_in`, `is_expired`), not a
second reading of them. The store is only read: open it read-only (no locks, nothing
written, nothing repaired) and the check is safe beside running writers and on a real Kafka
log directory. The findings are typed (`Finding`: severity, location, message); how they
print is the caller's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from storage.config import TopicConfig
from storage.errors import KafkaError, UnsupportedForMessageFormatError
from storage.file_check import (
    Finding,
    Findings,
    LogDirCheckpoints,
    PartitionFileCheck,
    Severity,
    read_log_dir_checkpoints,
)
from storage.store import Store
from storage.topic_name import TRANSACTION_STATE_TOPIC
from txlog.coordinator.transaction_coordinator import (
    MAX_TRANSACTION_TIMEOUT_MS,
    TransactionCoordinator,
    TransactionDescription,
)
from txlog.schemas.transaction_log import TxnLogValue, TxnState

__all__ = ["StoreCheckReport", "check_store", "Finding", "Severity"]


@dataclass
class StoreCheckReport:
    """The findings, in the order found, and what was checked."""

    findings: Findings
    partitions: int = 0
    batches: int = 0
    absent: dict[str, list[int]] = field(default_factory=dict)  # partitions a Kafka log dir does not hold


def _now_ms() -> int:
    return int(time.time() * 1000)


def check_store(
    store: Store,
    topic: str | None = None,
    *,
    now: int | None = None,
    progress: Callable[[StoreCheckReport], None] | None = None,
) -> StoreCheckReport:
    """Every check over the store (or one topic's partitions); never writes. `progress` is called
    with the report so far after each partition (the CLI's progress line)."""
    now = _now_ms() if now is None else now
    findings = Findings()
    report = StoreCheckReport(findings)
    try:
        descriptions = TransactionCoordinator(store).list_transactions()
    except Exception as exc:  # noqa: BLE001  a damaged coordinator partition is itself a finding
        findings.add(Severity.ERROR, TRANSACTION_STATE_TOPIC, None, None, None, f"cannot replay the coordinator: {exc}")
        descriptions = []
    by_producer = {d.state.producer_id: d for d in descriptions}
    expired: set[str] = set()  # transactional ids already reported expired by a partition
    checkpoints = read_log_dir_checkpoints(store.root, store.kafka_layout, findings)
    for name in [topic] if topic is not None else store.list_topics(include_internal=True):
        for p in store.partitions(name):  # a Kafka log dir may hold only some: those are what there is to check
            _check_partition(report, store, name, p, by_producer, expired, now, checkpoints)
            if progress is not None:
                progress(report)
        if store.absent_partitions(name):
            report.absent[name] = store.absent_partitions(name)
    _check_coordinator(findings, descriptions, topic, expired, now)
    return report


def _check_partition(
    report: StoreCheckReport,
    store: Store,
    topic: str,
    p: int,
    by_producer: dict[int, TransactionDescription],
    expired: set[str],
    now: int,
    checkpoints: LogDirCheckpoints,
) -> None:
    report.partitions += 1
    try:
        config = store.topic_config(topic)
    except Exception:  # noqa: BLE001  a Kafka dir's topics have no txlog metadata: defaults
        config = TopicConfig()
    check = PartitionFileCheck(
        report.findings,
        store.partition_dir(topic, p),
        topic,
        p,
        config,
        now=now,
        gaps_allowed=store.kafka_layout,
        checkpoints=checkpoints,
    )
    try:
        log = store.partition(topic, p)
    except UnsupportedForMessageFormatError:
        log = None  # the scan below reports where the pre-0.11 messages are
    except KafkaError as exc:
        check.add(Severity.ERROR, None, None, f"the partition cannot be opened: {exc}")
        log = None
    if os.path.isdir(check.directory):
        check.run()
    report.batches += check.batches
    if log is None or check.log_damaged:
        # A damaged log's view may not state its transactions (PartitionLog.check_transactions_known):
        # the scan's replay is the word left, the damage itself the finding.
        if log is not None:
            check.against_checkpoints(log.log_end_offset)
        _open_transactions(check, check.state.open_transactions(), by_producer, expired)
        return
    try:
        check.against_the_log(log)
    except KafkaError as exc:
        check.add(Severity.ERROR, None, None, f"reading the partition failed: {exc}")
    else:
        check.against_checkpoints(log.log_end_offset)
        _open_transactions(check, log.open_transactions(), by_producer, expired)


def _open_transactions(
    check: PartitionFileCheck,
    open_txns: dict[int, int],
    by_producer: dict[int, TransactionDescription],
    expired: set[str],
) -> None:
    """Each open transaction of the partition against the coordinator transaction of its producer."""
    topic, partition, now = check.topic, check.partition, check.now
    for pid, first in sorted(open_txns.items()):
        d = by_producer.get(pid)
        v = None if d is None else d.state
        if v is not None and (topic, partition) in v.partitions and v.state.is_prepared:
            continue  # reported once, at the coordinator
        if v is None or not v.is_ongoing_in(topic, partition):
            check.add(
                Severity.ERROR,
                None,
                first,
                f"hanging: producer {pid}'s transaction open since offset {first}; no Ongoing coordinator "
                "transaction lists this partition (`txlog transactions abort --start-offset`)",
            )
        elif d is not None and v.start_ms >= 0 and v.is_expired(now):  # (v is d's state)
            expired.add(d.transactional_id)
            check.add(
                Severity.ERROR,
                None,
                first,
                f"expired: transaction '{d.transactional_id}' (producer {pid}) open since offset {first} for "
                f"{now - v.start_ms} ms, past its timeout of {v.timeout_ms} ms",
            )


def _check_coordinator(
    findings: Findings, descriptions: list[TransactionDescription], topic: str | None, expired: set[str], now: int
) -> None:
    """Decided transactions not completed, Ongoing ones past their timeout no partition reported, and
    two-phase-commit ones open for longer than any other transaction may be."""
    for d in descriptions:
        v = d.state
        if topic is not None and topic != TRANSACTION_STATE_TOPIC and all(t != topic for t, _ in v.partitions):
            continue
        where = f"transaction '{d.transactional_id}' (producer {v.producer_id})"
        if v.state.is_prepared:
            findings.add(
                Severity.ERROR,
                TRANSACTION_STATE_TOPIC,
                d.coordinator_partition,
                None,
                None,
                f"{where} is {v.state.kafka_name}: decided but not completed — any writer will roll it forward",
            )
        elif d.transactional_id not in expired and v.start_ms >= 0 and v.is_expired(now):
            findings.add(
                Severity.ERROR,
                TRANSACTION_STATE_TOPIC,
                d.coordinator_partition,
                None,
                None,
                f"expired: {where} Ongoing for {now - v.start_ms} ms, past its timeout of {v.timeout_ms} ms",
            )
        elif _stuck_two_phase_commit(v, now):
            findings.add(
                Severity.WARNING,
                TRANSACTION_STATE_TOPIC,
                d.coordinator_partition,
                None,
                None,
                f"{where} is an open two-phase-commit transaction, Ongoing for {now - v.start_ms} ms (past "
                f"transaction.max.timeout.ms={MAX_TRANSACTION_TIMEOUT_MS}): it never times out and holds back "
                f"the LSO of {len(v.partitions)} partition(s) until its transaction manager ends it "
                f"(`txlog commit|abort --transactional-id {d.transactional_id}`)",
            )


def _stuck_two_phase_commit(v: TxnLogValue, now: int) -> bool:
    """A KIP-939 transaction open longer than the longest timeout any other transaction may have.

    Kafka never times these out (their outcome belongs to an external transaction manager), so
    nothing else reports one whose manager is gone; past `transaction.max.timeout.ms` (Kafka's
    default, 15 minutes) every read_committed reader of its partitions has waited longer than for
    any ordinary transaction, which is worth a warning but is no broken rule.
    """
    return (
        v.state == TxnState.ONGOING
        and v.is_two_phase_commit
        and v.start_ms >= 0
        and now - v.start_ms > MAX_TRANSACTION_TIMEOUT_MS
    )
