"""Fetch, ListOffsets, OffsetForLeaderEpoch, DeleteRecords: reading the log over the wire.

A Fetch answer is the broker's half of `txlog.fetch` (`read_batches`): whole batches as the
segment files hold them, capped at the high watermark or, under read_committed, the last
stable offset, with the aborted transactions the client needs to drop the ones it must not
show. The client runs the consumer half itself, so no record is decoded here.

Fetch sessions (KIP-227) are not kept: every fetch is answered in full with session id 0,
which is how a broker whose session cache is full answers a client asking for a new session
(Kafka's FetchManager), and what every client handles by sending full fetches from then on.
An incremental fetch (epoch > 0) names a session this server never gave out, so it gets
FETCH_SESSION_ID_NOT_FOUND, and the client starts over with a full one.

Long poll: while a fetch has fewer than `min_bytes` to return it waits, up to `max_wait_ms`,
on `Broker.data_arrived` (woken by appends in this process, rechecking for other processes'
appends), off the store thread, so other connections are served meanwhile.
"""

from __future__ import annotations

import asyncio
import datetime
from dataclasses import dataclass
from typing import Any

from storage.errors import InvalidTopicError, KafkaError
from storage.log_loader import LEADER_EPOCH
from storage.topic_name import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from txlog.fetch import BatchesRead, IsolationLevel, read_batches
from txlog.server.apis import api
from txlog.server.broker import Broker
from txlog.server.errors import error_code
from txlog.server.request_context import RequestContext
from txlog.topic_partition import TopicPartition

NONE = 0
FETCH_SESSION_ID_NOT_FOUND = 70
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
NO_SESSION = 0  # Kafka's INVALID_SESSION_ID: this answer is not part of a fetch session
FINAL_EPOCH, INITIAL_EPOCH = -1, 0  # a full fetch: sessionless (-1), or asking for a new session (0)
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
NO_LEADER_EPOCH = -1  # a request's current_leader_epoch when the client does not know it: no check
READ_COMMITTED_LEVEL = 1  # the wire's isolation_level byte for read_committed
HIGH_WATERMARK = -1  # DeleteRecords' offset meaning "up to the high watermark"
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


def _isolation(level: int) -> IsolationLevel:
    return IsolationLevel.READ_COMMITTED if level == READ_COMMITTED_LEVEL else IsolationLevel.READ_UNCOMMITTED


def _ms(value: Any) -> int:
    """A duration field in milliseconds (kio gives timedeltas)."""
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def _leader_epoch_error(current_leader_epoch: int) -> int:
    """Kafka's check of a request's current_leader_epoch against the leader's (always LEADER_EPOCH here)."""
    if current_leader_epoch in (NO_LEADER_EPOCH, LEADER_EPOCH):
        return NONE
    return FENCED_LEADER_EPOCH if current_leader_epoch < LEADER_EPOCH else UNKNOWN_LEADER_EPOCH


# ---- Fetch ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Wanted:
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int


@dataclass(frozen=True, slots=True)
class _Answer:
    """One partition's part of a fetch: what was read, or the error code."""

    wanted: _Wanted
    read: BatchesRead | None
    error: int = NONE


def _read_all(broker: Broker, wanted: list[_Wanted], isolation: IsolationLevel, max_bytes: int) -> list[_Answer]:
    """Read every partition of a fetch (store thread): each up to its own limit, all up to `max_bytes`.

    Kafka's rule (KIP-74): the first batch of the first partition with data is returned
    however large, so a consumer always progresses; after that, a batch that does not fit
    what is left of either limit waits for a later fetch.
    """
    answers: list[_Answer] = []
    remaining = max_bytes
    min_one = True
    for want in wanted:
        epoch_error = _leader_epoch_error(want.current_leader_epoch)
        if epoch_error != NONE:
            answers.append(_Answer(want, None, epoch_error))
            continue
        try:
            log = broker.store.partition(want.topic, want.partition)
            read = read_batches(log, want.fetch_offset, isolation, min(want.max_bytes, remaining), min_one=min_one)
        except KafkaError as exc:
            answers.append(_Answer(want, None, error_code(exc)))
            continue
        if read.batches:
            min_one = False
            remaining = max(0, remaining - read.size)
        answers.append(_Answer(want, read))
    return answers


def _satisfied(answers: list[_Answer], min_bytes: int) -> bool:
    """Kafka's DelayedFetch rule: answer now when enough bytes are ready, or any partition has an error."""
    if any(a.error != NONE for a in answers):
        return True
    return sum(a.read.size for a in answers if a.read is not None) >= min_bytes


@api(1, 4, 12)
async def fetch(ctx: RequestContext, request: Any) -> Any:
    session_epoch = getattr(request, "session_epoch", FINAL_EPOCH)
    if session_epoch not in (FINAL_EPOCH, INITIAL_EPOCH):
        return ctx.respond(throttle_time=0, error_code=FETCH_SESSION_ID_NOT_FOUND, session_id=NO_SESSION, responses=())
    wanted = [
        _Wanted(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes, getattr(p, "current_leader_epoch", -1))
        for t in request.topics
        for p in t.partitions
    ]
    isolation = _isolation(getattr(request, "isolation_level", 0))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0, _ms(request.max_wait)) / 1000
    while True:
        answers = await ctx.run(_read_all, ctx.broker, wanted, isolation, request.max_bytes)
        remaining = deadline - loop.time()
        if not wanted or remaining <= 0 or _satisfied(answers, request.min_bytes):
            break
        await ctx.broker.data_arrived.wait(remaining)
    return ctx.respond(
        throttle_time=0, error_code=NONE, session_id=NO_SESSION, responses=_fetch_topics(ctx, request, answers)
    )


def _fetch_topics(ctx: RequestContext, request: Any, answers: list[_Answer]) -> tuple[Any, ...]:
    """The answers grouped back into the request's topics, in its order."""
    topics = []
    it = iter(answers)
    for t in request.topics:
        partitions = tuple(_partition_data(ctx, next(it)) for _ in t.partitions)
        topics.append(ctx.make("FetchableTopicResponse", topic=t.topic, partitions=partitions))
    return tuple(topics)


def _partition_data(ctx: RequestContext, answer: _Answer) -> Any:
    read = answer.read
    if read is None:
        return ctx.make(
            "PartitionData",
            partition_index=answer.wanted.partition,
            error_code=answer.error,
            high_watermark=-1,
            last_stable_offset=-1,
            log_start_offset=-1,
            aborted_transactions=None,
            preferred_read_replica=-1,
            records=b"",
        )
    bounds = read.bounds
    aborted = None
    if read.aborted is not None:
        aborted = tuple(
            ctx.make("AbortedTransaction", producer_id=txn.producer_id, first_offset=txn.first_offset)
            for txn in read.aborted
        )
    return ctx.make(
        "PartitionData",
        partition_index=answer.wanted.partition,
        error_code=NONE,
        high_watermark=bounds.high_watermark,
        # Kafka's LSO is never past the HW: the read_committed view's end, whatever this fetch's isolation.
        last_stable_offset=min(bounds.last_stable_offset, bounds.high_watermark),
        log_start_offset=bounds.log_start_offset,
        aborted_transactions=aborted,
        preferred_read_replica=-1,
        records=read.data(),
    )


# ---- ListOffsets ------------------------------------------------------------------------------------------


@api(2, 1, 10)
def list_offsets(ctx: RequestContext, request: Any) -> Any:
    isolation = _isolation(getattr(request, "isolation_level", 0))
    topics = tuple(
        ctx.make(
            "ListOffsetsTopicResponse",
            name=t.name,
            partitions=tuple(_list_offset(ctx, t.name, p, isolation) for p in t.partitions),
        )
        for t in request.topics
    )
    return ctx.respond(throttle_time=0, topics=topics)


def _list_offset(ctx: RequestContext, topic: str, partition: Any, isolation: IsolationLevel) -> Any:
    index = partition.partition_index
    code = _leader_epoch_error(getattr(partition, "current_leader_epoch", NO_LEADER_EPOCH))
    found: tuple[int, int] | None = None
    if code == NONE:
        try:
            found = ctx.broker.transport.list_offsets(TopicPartition(topic, index), partition.timestamp, isolation)
        except KafkaError as exc:
            code = error_code(exc)
    if code != NONE:
        return ctx.make(
            "ListOffsetsPartitionResponse",
            partition_index=index,
            error_code=code,
            timestamp=-1,
            offset=-1,
            leader_epoch=-1,
        )
    if found is None:  # no record at or after the time: Kafka answers offset -1
        offset, timestamp, epoch = UNDEFINED_OFFSET, -1, UNDEFINED_EPOCH
    else:
        (offset, timestamp), epoch = found, LEADER_EPOCH
    return ctx.make(
        "ListOffsetsPartitionResponse",
        partition_index=index,
        error_code=NONE,
        timestamp=timestamp,
        offset=offset,
        leader_epoch=epoch,
    )


# ---- OffsetForLeaderEpoch --------------------------------------------------------------------------------


@api(23, 2, 4)
def offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
    topics = tuple(
        ctx.make(
            "OffsetForLeaderTopicResult",
            topic=t.topic,
            partitions=tuple(_epoch_end_offset(ctx, t.topic, p) for p in t.partitions),
        )
        for t in request.topics
    )
    return ctx.respond(throttle_time=0, topics=topics)


def _epoch_end_offset(ctx: RequestContext, topic: str, partition: Any) -> Any:
    """Kafka's LeaderEpochFileCache.endOffsetFor with txlog's one epoch, LEADER_EPOCH, starting at the log start.

    The current epoch ends at the log end; an epoch before the first ends where the first
    starts (Kafka answers it with the epoch asked for); UNDEFINED (-1) and an epoch past the
    current one are unknown: (-1, -1).
    """
    index = partition.partition
    code = _leader_epoch_error(getattr(partition, "current_leader_epoch", NO_LEADER_EPOCH))
    epoch, end = UNDEFINED_EPOCH, UNDEFINED_OFFSET
    if code == NONE:
        try:
            log = ctx.broker.store.partition(topic, index)
            wanted = partition.leader_epoch
            if wanted == LEADER_EPOCH:
                epoch, end = LEADER_EPOCH, log.log_end_offset
            elif wanted < UNDEFINED_EPOCH:  # before the first epoch: it ends where LEADER_EPOCH starts
                epoch, end = wanted, log.log_start_offset
        except KafkaError as exc:
            code = error_code(exc)
    return ctx.make("EpochEndOffset", error_code=code, partition=index, leader_epoch=epoch, end_offset=end)


# ---- DeleteRecords ----------------------------------------------------------------------------------------


@api(21, 0, 2)
def delete_records(ctx: RequestContext, request: Any) -> Any:
    topics = tuple(
        ctx.make(
            "DeleteRecordsTopicResult",
            name=t.name,
            partitions=tuple(_delete_before(ctx, t.name, p.partition_index, p.offset) for p in t.partitions),
        )
        for t in request.topics
    )
    return ctx.respond(throttle_time=0, topics=topics)


def _delete_before(ctx: RequestContext, topic: str, index: int, offset: int) -> Any:
    """One partition's log start moved to `offset` (-1: the high watermark), as `PartitionLog.delete_records` rules."""
    try:
        if topic in INTERNAL_TOPICS:  # Kafka's ReplicaManager refuses clients this
            raise InvalidTopicError(f"cannot delete records of internal topic {topic}")
        log = ctx.broker.store.partition(topic, index)
        low_watermark = log.delete_records(log.high_watermark if offset == HIGH_WATERMARK else offset)
    except KafkaError as exc:
        low_watermark, code = -1, error_code(exc)
    else:
        code = NONE
    return ctx.make("DeleteRecordsPartitionResult", partition_index=index, low_watermark=low_watermark, error_code=code)
