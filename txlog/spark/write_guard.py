"""The Spark sink's commit protocol on the store: transactional ids, the driver's decision, the replay guard.

Every task of a write (query `q`, batch `b`, Spark task partition `p`) writes its rows in one
KIP-939 two-phase-commit transaction of transactional id `txlog-spark-{q}-{b}-{p}` (shared by
every attempt of the task, so a later attempt fences an earlier one) and prepares it. The
driver then decides, and the decision is one plain offset commit of the consumer group
`txlog-spark-{q}` (one durable batch in `__consumer_offsets`, so all of it or none of it):

* `txlog-spark-batch`-0: offset `b`, metadata the number of tasks `n` (the latest decided batch);
* `txlog-spark-prepared`-`p` for every task: offset `b`, metadata the task's prepared state
  ("producerId:epoch", KIP-939's PreparedTxnState text).

Each task's own transaction also commits `txlog-spark-written`-`p` at offset `b` to the same
group (`send_offsets_to_transaction`), so the mark that task `p` of batch `b` is in the log
becomes visible in the same transaction as its rows. A decided batch whose marks do not all
say `b` was cut short by a driver that died while completing it; `settle` finishes it.

Why a group's offsets rather than a topic of records: the decision must be read before every
batch, and a group's committed offsets are kept by its coordinator per (topic, partition),
so reading the latest decision is one lookup, not a scan of every decision ever written; an
offset commit of many entries is one batch, atomic; and Kafka's tools show it as it is
(`kafka-consumer-groups --describe`: the batch id is the offset). The entries' topics are
names in the group only; no such topics are created.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from storage.store import Store
from txlog.clients.admin import Admin
from txlog.clients.consumer import Consumer
from txlog.clients.prepared_txn_state import PreparedTxnState
from txlog.clients.producer import Producer
from txlog.errors import IllegalArgumentError, InvalidTxnStateError
from txlog.schemas.transaction_log import TxnState
from txlog.topic_partition import OffsetAndMetadata, TopicPartition

_log = logging.getLogger(__name__)

PREFIX = "txlog-spark-"
#: The group's entry naming the latest decided batch (offset) and its task count (metadata).
BATCH_ENTRY = TopicPartition("txlog-spark-batch", 0)
#: The group's entries holding each task's prepared state, by Spark task partition.
PREPARED_TOPIC = "txlog-spark-prepared"
#: Written by each task inside its own transaction: visible exactly when the task's rows are.
WRITTEN_TOPIC = "txlog-spark-written"
#: A query id becomes part of transactional ids and a group id: Kafka's topic-name characters
#: minus '.', so the id reads back unambiguously.
_QUERY_ID = re.compile(r"[A-Za-z0-9_-]{1,200}")


def check_query_id(query_id: str) -> str:
    if not isinstance(query_id, str) or not _QUERY_ID.fullmatch(query_id):
        raise IllegalArgumentError(
            f"option 'queryId' must be 1-200 ASCII letters, digits, '_' or '-', not {query_id!r}"
        )
    return query_id


def transactional_id(query_id: str, batch_id: int, partition_id: int) -> str:
    """The transactional id of task `partition_id` of batch `batch_id` (every attempt shares it)."""
    return f"{PREFIX}{query_id}-{batch_id}-{partition_id}"


def group_id(query_id: str) -> str:
    """The consumer group holding the query's decisions."""
    return f"{PREFIX}{query_id}"


@dataclass(frozen=True)
class Decision:
    """The driver's decision for one batch: commit these prepared states, task by task."""

    query_id: str
    batch_id: int
    states: tuple[str, ...]  # per Spark task partition, PreparedTxnState text

    def transactions(self) -> list[tuple[str, PreparedTxnState]]:
        return [
            (transactional_id(self.query_id, self.batch_id, p), PreparedTxnState.parse(s))
            for p, s in enumerate(self.states)
        ]


def latest_decision(store: Store, query_id: str) -> tuple[Decision | None, dict[int, int]]:
    """The query's latest decided batch (None if none), and the `written` marks per task partition."""
    with Admin(store) as admin:
        offsets = admin.list_consumer_group_offsets(group_id(query_id))
    batch = offsets.get(BATCH_ENTRY)
    if batch is None:
        return None, {}
    count = int(batch.metadata)
    states = []
    for p in range(count):
        entry = offsets.get(TopicPartition(PREPARED_TOPIC, p))
        if entry is None or entry.offset != batch.offset:
            raise InvalidTxnStateError(
                f"group '{group_id(query_id)}' holds an incomplete decision for batch {batch.offset}"
            )
        states.append(entry.metadata)
    written = {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == WRITTEN_TOPIC}
    return Decision(query_id, batch.offset, tuple(states)), written


def record_decision(store: Store, decision: Decision) -> None:
    """The commit point: one atomic, durable offset commit naming every task's prepared state."""
    offsets = {BATCH_ENTRY: OffsetAndMetadata(decision.batch_id, str(len(decision.states)))}
    for p, state in enumerate(decision.states):
        offsets[TopicPartition(PREPARED_TOPIC, p)] = OffsetAndMetadata(decision.batch_id, state)
    with Consumer(store, group_id=group_id(decision.query_id), enable_auto_commit=False) as consumer:
        consumer.commit(offsets)


def written_mark(
    query_id: str, batch_id: int, partition_id: int
) -> tuple[dict[TopicPartition, OffsetAndMetadata], str]:
    """What a task commits inside its transaction: (offsets, group) for send_offsets_to_transaction."""
    return {TopicPartition(WRITTEN_TOPIC, partition_id): OffsetAndMetadata(batch_id)}, group_id(query_id)


def settle(store: Store, query_id: str) -> int:
    """Finish the query's latest decision (a driver may have died while completing it); returns
    its batch id, or -1 when the query has decided nothing yet.

    Runs on the driver before a batch's tasks start, so no task of that batch can fence a
    decided transaction first (a task's init_transactions() aborts what its id left open).
    """
    decision, written = latest_decision(store, query_id)
    if decision is None:
        return -1
    complete(store, decision, written)
    return decision.batch_id


def complete(store: Store, decision: Decision, written: dict[int, int] | None = None) -> None:
    """Commit every transaction the decision names, skipping the tasks whose mark shows them committed."""
    for p, (tid, state) in enumerate(decision.transactions()):
        if written is not None and written.get(p) == decision.batch_id:
            continue
        complete_one(store, tid, state)


def complete_one(store: Store, tid: str, state: PreparedTxnState) -> None:
    """KIP-939's recovery: a new instance keeps the prepared transaction and completes it with the
    state the decision holds (a transaction that is not the one named is aborted, never committed)."""
    with Producer(store, transactional_id=tid, transaction_two_phase_commit_enable=True) as producer:
        producer.init_transactions(keep_prepared_txn=True)
        try:
            producer.complete_transaction(state)
        except InvalidTxnStateError:
            # nothing open: completed already (a second driver's roll-forward, or a task's mark not yet
            # read). A transaction aborted by someone else would also end here; `txlog verify` and the
            # read-back show that, the decision cannot bring its records back.
            _log.info("transaction %s of a decided batch was already complete", tid)


def abort(store: Store, tid: str) -> None:
    """End whatever transaction `tid` left open, without keeping it (KIP-939: that aborts a prepared one)."""
    with Producer(store, transactional_id=tid, transaction_two_phase_commit_enable=True) as producer:
        producer.init_transactions()


def check_prepared(store: Store, prepared: list[tuple[str, PreparedTxnState]]) -> None:
    """Before deciding: the coordinator still holds each transaction open with the producer id and
    epoch its task reported. A later attempt of the task (a speculative copy, a retry that started
    after this attempt prepared) fenced it otherwise, and committing the batch would lose its rows."""
    with Admin(store) as admin:
        states = {d.transactional_id: d.state for d in admin.list_transactions([TxnState.ONGOING])}
    for tid, state in prepared:
        value = states.get(tid)
        if value is None or (value.producer_id, value.producer_epoch) != (state.producer_id, state.epoch):
            raise InvalidTxnStateError(
                f"transaction {tid} is no longer the one its task prepared ({state}): another attempt of the "
                "task fenced it; the batch is aborted and must run again"
            )
