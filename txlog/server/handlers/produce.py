"""Produce: batches validated (CRC, sequence, epoch) and appended as received.

Each partition's record set goes to the store as the client sent it (one or more RecordBatch
v2): the partition validates it and assigns offsets (`Transport.produce`); a retry of one of
a producer's last five batches is answered with its original offsets. Every partition of a
request is written without fdatasync and then synced once before the answer (all the written
partitions in one sync round: one syncfs where allowed), whatever `acks` says: the store's
high watermark only covers synced data, so an acknowledged batch is both visible to readers and
durable (docs/serve.md §3).

Group commit: the appends and the sync are two turns on the store thread, with the loop in
between, so the Produce requests of other connections that arrived meanwhile are appended
before this request's sync runs, and that one fdatasync makes them all durable; their own
syncs then find the partition already synced and cost nothing (`PartitionLog.sync`).

A transactional produce is verified against its transaction by the partition (KIP-890 part
1). From Produce v12 (transaction protocol v2, KIP-890 part 2) the client no longer sends
AddPartitionsToTxn: the partitions of the request are added to the open transaction here,
before any byte is appended, as Kafka's partition leader asks its coordinator to.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from storage.errors import CorruptRecordError, KafkaError, UnknownTopicOrPartitionError
from storage.records import TRANSACTIONAL_MASK, BatchHeader
from storage.topic_name import INTERNAL_TOPICS
from txlog.server.apis import api
from txlog.server.errors import NONE, error_code, error_message
from txlog.server.request_context import RequestContext

INVALID_TOPIC_EXCEPTION = 17
NOT_ENOUGH_REPLICAS = 19
INVALID_REQUIRED_ACKS = 21
CONCURRENT_TRANSACTIONS = 51
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 14, 15, 16
UNKNOWN_TOPIC_OR_PARTITION = 3
ADD_PARTITIONS_FROM_VERSION = 12  # KIP-890 part 2: Produce v12 adds its partitions to the transaction
# Kafka turns these coordinator answers to a produce's transaction check into NOT_ENOUGH_REPLICAS,
# an error every client version retries without refreshing metadata (ReplicaManager, KIP-890).
_RETRIABLE_AS_NOT_ENOUGH_REPLICAS = frozenset(
    {CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}
)


@dataclass
class _Outcome:
    """One partition's answer, filled as the request goes through its steps."""

    error: int = NONE
    message: str | None = None
    base_offset: int = -1
    log_start_offset: int = -1
    written: bool = False


@dataclass
class _Request:
    """The partitions of one Produce request in their order, and what each came to."""

    topics: list[tuple[str, list[tuple[int, Any]]]] = field(default_factory=list)
    outcomes: dict[tuple[str, int], _Outcome] = field(default_factory=dict)

    def partitions(self) -> Iterator[tuple[str, int, Any]]:
        for topic, parts in self.topics:
            for index, records in parts:
                yield topic, index, records

    def fail(self, topic: str, partition: int, code: int, message: str | None = None) -> None:
        outcome = self.outcomes[(topic, partition)]
        outcome.error, outcome.message = code, message

    def pending(self) -> Iterator[tuple[str, int, Any]]:
        """The partitions that have no error yet."""
        for topic, index, records in self.partitions():
            if self.outcomes[(topic, index)].error == NONE:
                yield topic, index, records


@api(0, 3, 12)
async def produce(ctx: RequestContext, request: Any) -> Any:
    work = _Request()
    for topic in request.topic_data:
        work.topics.append((topic.name, [(p.index, p.records) for p in topic.partition_data]))
        for p in topic.partition_data:
            work.outcomes[(topic.name, p.index)] = _Outcome()
    if request.acks not in (-1, 0, 1):
        for topic, index, _ in work.partitions():
            work.fail(topic, index, INVALID_REQUIRED_ACKS, f"acks={request.acks} is not -1, 0 or 1")
    elif await ctx.run(_write, ctx, work, request.transactional_id, request.acks):
        # a turn of its own: other connections' appends queued meanwhile share this fdatasync
        await ctx.run(_sync, ctx, work)
    if request.acks == 0:
        return None  # acks=0: the client reads no answer (errors are only in the broker's view)
    return _response(ctx, work)


def _write(ctx: RequestContext, work: _Request, transactional_id: str | None, acks: int) -> bool:
    """The request's checks and appends, without fdatasync (store thread); did anything get written?"""
    _check_topics(ctx, work)
    if acks == -1:
        _check_min_insync_replicas(ctx, work)
    if transactional_id is not None and ctx.version >= ADD_PARTITIONS_FROM_VERSION:
        _add_to_transaction(ctx, work, transactional_id)
    _append(ctx, work, transactional_id)
    return any(o.written for o in work.outcomes.values())


def _check_topics(ctx: RequestContext, work: _Request) -> None:
    """Refuse what Kafka refuses before any write: unknown partitions (Produce never creates a
    topic; Metadata does) and internal topics, which only the coordinators write."""
    store = ctx.broker.store
    counts: dict[str, int] = {}  # each topic's partition count, read once a request (a read of the store's metadata)
    for topic, index, _ in work.partitions():
        if topic in INTERNAL_TOPICS:
            work.fail(topic, index, INVALID_TOPIC_EXCEPTION, f"cannot append to internal topic {topic}")
            continue
        if topic not in counts:
            try:
                counts[topic] = store.partition_count(topic)
            except UnknownTopicOrPartitionError:
                counts[topic] = 0
        if not 0 <= index < counts[topic]:
            work.fail(topic, index, UNKNOWN_TOPIC_OR_PARTITION, f"this server does not host {topic}-{index}")


def _check_min_insync_replicas(ctx: RequestContext, work: _Request) -> None:
    """acks=all asks for `min.insync.replicas` copies; the one replica here meets at most 1, and
    Kafka refuses such a write before appending rather than acknowledging fewer copies."""
    wanted = ctx.broker.config_int("min.insync.replicas")
    if wanted <= 1:
        return
    for topic, index, _ in list(work.pending()):
        work.fail(
            topic,
            index,
            NOT_ENOUGH_REPLICAS,
            f"The size of the current ISR (1) is insufficient to satisfy the min.isr requirement of {wanted} "
            f"for partition {topic}-{index}",
        )


def _add_to_transaction(ctx: RequestContext, work: _Request, transactional_id: str) -> None:
    """KIP-890 part 2: add the request's transactional partitions to the producer's open
    transaction, in one coordinator write; a refusal fails those partitions, nothing is appended."""
    wanted: list[tuple[str, int]] = []
    ids: tuple[int, int] | None = None
    for topic, index, records in work.pending():
        try:
            header = BatchHeader.parse(records or b"")
        except CorruptRecordError:
            continue  # the append refuses it with the store's own words
        if header.attributes & TRANSACTIONAL_MASK and header.producer_id >= 0:
            ids = ids or (header.producer_id, header.producer_epoch)
            wanted.append((topic, index))
    if ids is None:
        return
    try:
        ctx.broker.transport.add_partitions_on_produce(transactional_id, ids[0], ids[1], wanted)
    except KafkaError as exc:
        code = error_code(exc)
        if code in _RETRIABLE_AS_NOT_ENOUGH_REPLICAS:
            code = NOT_ENOUGH_REPLICAS
        for topic, index in wanted:
            work.fail(topic, index, code, error_message(exc))


def _append(ctx: RequestContext, work: _Request, transactional_id: str | None) -> None:
    """Append every partition without fdatasync (`_sync` makes them durable)."""
    transport = ctx.broker.transport
    for topic, index, records in work.pending():
        outcome = work.outcomes[(topic, index)]
        try:
            result = transport.produce(topic, index, records or b"", transactional_id, sync=False)
        except KafkaError as exc:
            code = error_code(exc)
            outcome.error = NOT_ENOUGH_REPLICAS if code in _RETRIABLE_AS_NOT_ENOUGH_REPLICAS else code
            outcome.message = error_message(exc)
            continue
        outcome.base_offset, outcome.written = result.base_offset, True


def _sync(ctx: RequestContext, work: _Request) -> None:
    """Sync every written partition once (store thread), all in one sync round
    (`Transport.sync_each_partition`: one syncfs where allowed, docs/DESIGN.md §3): nothing to do
    for a partition another request's sync since the append covered. A failure fails its own
    partition alone. Readers and the answer wait for this."""
    transport = ctx.broker.transport
    written = [(t, p) for (t, p), o in work.outcomes.items() if o.written]
    for (topic, index), failure in zip(written, transport.sync_each_partition(written), strict=True):
        outcome = work.outcomes[(topic, index)]
        if failure is not None:  # the fsync failed: the write's durability is unknown
            outcome.error, outcome.message, outcome.base_offset = error_code(failure), error_message(failure), -1
            continue
        try:
            outcome.log_start_offset = ctx.broker.store.partition(topic, index).log_start_offset
        except KafkaError as exc:  # deleted since its sync
            outcome.error, outcome.message, outcome.base_offset = error_code(exc), error_message(exc), -1
    if written:
        ctx.broker.data_arrived.notify()


def _response(ctx: RequestContext, work: _Request) -> Any:
    topics = []
    for topic, parts in work.topics:
        answers = []
        for index, _ in parts:
            o = work.outcomes[(topic, index)]
            answers.append(
                ctx.make(
                    "PartitionProduceResponse",
                    index=index,
                    error_code=o.error,
                    base_offset=o.base_offset,
                    log_append_time=None,  # -1: the topics use CreateTime
                    log_start_offset=o.log_start_offset,
                    record_errors=(),
                    error_message=o.message if o.error != NONE else None,
                )
            )
        topics.append(ctx.make("TopicProduceResponse", name=topic, partition_responses=tuple(answers)))
    return ctx.respond(responses=tuple(topics), throttle_time=0, node_endpoints=())
