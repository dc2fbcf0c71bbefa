"""The transaction APIs: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, and the
admin views DescribeProducers, ListTransactions, DescribeTransactions.

Every request goes to the transaction coordinator through the broker's transport, the same
calls txlog's own producer and Admin make. Both transaction protocols are served, each with
Kafka's epoch rules: an EndTxn below v5 is transaction protocol v1 (librdkafka, kafka-python,
aiokafka: the epoch stays across transactions), v5 is protocol v2 (Java 4.x, franz-go: the
epoch is bumped at every end and the answer carries the new one). See docs/serve.md §5.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable
from typing import Any

from storage.errors import KafkaError, UnknownTopicOrPartitionError
from txlog.coordinator.transaction_coordinator import TransactionCoordinator, TransactionDescription
from txlog.errors import InvalidRequestError, InvalidTxnStateError
from txlog.requests import (
    CLIENT_TRANSACTION_VERSION_0,
    CLIENT_TRANSACTION_VERSION_2,
    NO_PRODUCER_ID_AND_EPOCH,
    InitProducerIdResult,
    ProducerIdAndEpoch,
)
from txlog.schemas.transaction_log import TxnState
from txlog.server.apis import api
from txlog.server.errors import NONE, error_code
from txlog.server.request_context import RequestContext

TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
OPERATION_NOT_ATTEMPTED = 55
TRANSACTIONAL_ID_NOT_FOUND = 105
INVALID_REGULAR_EXPRESSION = 128
END_TXN_BUMPS_FROM_VERSION = 5  # EndTxn v5 is transaction protocol v2 (KIP-890): the answer carries the new epoch
BATCHED_ADD_PARTITIONS_FROM_VERSION = 4  # AddPartitionsToTxn v4+: several transactions, verify_only (KIP-890)


def _coordinator(ctx: RequestContext) -> TransactionCoordinator:
    """The transport's coordinator, held to the broker's `transaction.max.timeout.ms` (a `--config`)."""
    coordinator = ctx.broker.transport.transaction_coordinator
    coordinator.max_timeout_ms = ctx.broker.config_int("transaction.max.timeout.ms")
    return coordinator


def _ms(value: Any) -> int:
    """A kio duration (timedelta) or a plain int as milliseconds."""
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


# ---- InitProducerId -----------------------------------------------------------------------------------


@api(22, 0, 6)
def init_producer_id(ctx: RequestContext, request: Any) -> Any:
    """A producer id and epoch: fresh for an idempotent producer, the next instance of a transactional id.

    v6's two-phase commit (KIP-939: `enable2_pc`, `keep_prepared_txn`) is served as the embedded
    coordinator serves it (TransactionCoordinator.init_producer_id_2pc; the answer's
    OngoingTxnProducerId/Epoch name a kept transaction) when the broker config
    `transaction.two.phase.commit.enable` is true; while it is false, Kafka's default, it is
    refused as Kafka's broker refuses it: TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
    """
    two_pc = bool(getattr(request, "enable2_pc", False))
    keep = bool(getattr(request, "keep_prepared_txn", False))
    if (two_pc or keep) and not ctx.broker.config_bool("transaction.two.phase.commit.enable"):
        return _init_answer(ctx, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    expected = None
    if getattr(request, "producer_id", -1) >= 0 and getattr(request, "producer_epoch", -1) >= 0:
        expected = ProducerIdAndEpoch(request.producer_id, request.producer_epoch)  # KIP-360 (v3+)
    try:
        if request.transactional_id is None:
            if two_pc or keep:
                raise InvalidRequestError("two-phase commit needs a transactional id")
            result = InitProducerIdResult(ctx.broker.transport.init_producer_id(None))
        elif two_pc or keep:
            _coordinator(ctx)
            result = ctx.broker.transport.init_producer_id_2pc(
                request.transactional_id,
                _ms(request.transaction_timeout),
                enable_2pc=two_pc,
                keep_prepared_txn=keep,
                expected=expected,
            )
        else:
            _coordinator(ctx)
            result = InitProducerIdResult(
                ctx.broker.transport.init_producer_id(
                    request.transactional_id, _ms(request.transaction_timeout), expected
                )
            )
    except KafkaError as exc:
        return _init_answer(ctx, error_code(exc))
    ctx.broker.data_arrived.notify()  # an open transaction it aborted moved the last stable offsets
    return _init_answer(ctx, NONE, result)


def _init_answer(ctx: RequestContext, code: int, result: InitProducerIdResult | None = None) -> Any:
    ids = None if result is None else result.ids
    ongoing = NO_PRODUCER_ID_AND_EPOCH if result is None else result.ongoing
    return ctx.respond(
        throttle_time=0,
        error_code=code,
        producer_id=ids.producer_id if ids else -1,
        producer_epoch=ids.epoch if ids else -1,
        ongoing_txn_producer_id=ongoing.producer_id,
        ongoing_txn_producer_epoch=ongoing.epoch,
    )


# ---- AddPartitionsToTxn, AddOffsetsToTxn -----------------------------------------------------------------


@api(24, 0, 5)
def add_partitions_to_txn(ctx: RequestContext, request: Any) -> Any:
    """v0-v3: one client's transaction. v4+: a batch of transactions, each optionally `verify_only`
    (what a partition leader sends its coordinator under KIP-890; a client may send it too)."""
    if ctx.version < BATCHED_ADD_PARTITIONS_FROM_VERSION:
        results = _add_partitions(
            ctx,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            request.v3_and_below_topics,
            verify_only=False,
        )
        return ctx.respond(throttle_time=0, results_by_topic_v3_and_below=results)
    answers = tuple(
        ctx.make(
            "AddPartitionsToTxnResult",
            transactional_id=txn.transactional_id,
            topic_results=_add_partitions(
                ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics, verify_only=txn.verify_only
            ),
        )
        for txn in request.transactions
    )
    return ctx.respond(throttle_time=0, error_code=NONE, results_by_transaction=answers)


def _add_partitions(
    ctx: RequestContext, txn_id: str, producer_id: int, epoch: int, topics: Iterable[Any], *, verify_only: bool
) -> tuple[Any, ...]:
    """Per-partition answers: a partition that cannot be added fails alone and the others are not
    attempted (OPERATION_NOT_ATTEMPTED); a coordinator refusal is every partition's answer."""
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    codes = dict.fromkeys(wanted, NONE)
    store = ctx.broker.store
    for topic, partition in wanted:
        if not store.has_topic(topic) or not 0 <= partition < store.partition_count(topic):
            codes[(topic, partition)] = UnknownTopicOrPartitionError.code
    if any(codes.values()):
        codes = {tp: code or OPERATION_NOT_ATTEMPTED for tp, code in codes.items()}
    else:
        try:
            if verify_only:
                _verify(ctx, txn_id, producer_id, epoch, wanted)
            else:
                ctx.broker.transport.add_partitions_to_txn(txn_id, producer_id, epoch, wanted)
        except KafkaError as exc:
            codes = dict.fromkeys(wanted, error_code(exc))
    return _topic_results(ctx, codes)


def _verify(ctx: RequestContext, txn_id: str, producer_id: int, epoch: int, wanted: list[tuple[str, int]]) -> None:
    coordinator = ctx.broker.transport.transaction_coordinator
    for topic, partition in wanted:
        if not coordinator.verify(txn_id, producer_id, epoch, topic, partition):
            raise InvalidTxnStateError(f"{topic}-{partition} is not in the transaction of '{txn_id}'")


def _topic_results(ctx: RequestContext, codes: dict[tuple[str, int], int]) -> tuple[Any, ...]:
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), code in codes.items():
        by_topic.setdefault(topic, []).append(
            ctx.make("AddPartitionsToTxnPartitionResult", partition_index=partition, partition_error_code=code)
        )
    return tuple(
        ctx.make("AddPartitionsToTxnTopicResult", name=topic, results_by_partition=tuple(results))
        for topic, results in by_topic.items()
    )


@api(25, 0, 4)
def add_offsets_to_txn(ctx: RequestContext, request: Any) -> Any:
    """Registers the group's `__consumer_offsets` partition in the transaction (TxnOffsetCommit follows)."""
    try:
        ctx.broker.transport.add_offsets_to_txn(
            request.transactional_id, request.producer_id, request.producer_epoch, request.group_id
        )
    except KafkaError as exc:
        return ctx.respond(throttle_time=0, error_code=error_code(exc))
    return ctx.respond(throttle_time=0, error_code=NONE)


# ---- EndTxn ----------------------------------------------------------------------------------------------


@api(26, 0, 5)
def end_txn(ctx: RequestContext, request: Any) -> Any:
    """Commit or abort: decided, marked and completed before the answer (Kafka answers after the
    decision and writes the markers after; here a read_committed reader sees the outcome at once)."""
    bumps = ctx.version >= END_TXN_BUMPS_FROM_VERSION
    client_version = CLIENT_TRANSACTION_VERSION_2 if bumps else CLIENT_TRANSACTION_VERSION_0
    try:
        ids = ctx.broker.transport.end_txn(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            request.committed,
            client_version=client_version,
        )
    except KafkaError as exc:
        return ctx.respond(throttle_time=0, error_code=error_code(exc), producer_id=-1, producer_epoch=-1)
    ctx.broker.data_arrived.notify()  # the markers moved the last stable offsets
    return ctx.respond(throttle_time=0, error_code=NONE, producer_id=ids.producer_id, producer_epoch=ids.epoch)


# ---- DescribeProducers -----------------------------------------------------------------------------------


@api(61, 0, 0)
def describe_producers(ctx: RequestContext, request: Any) -> Any:
    """What each partition remembers per producer (kafka-transactions describe-producers)."""
    topics = tuple(
        ctx.make(
            "TopicResponse",
            name=topic.name,
            partitions=tuple(_producers_of(ctx, topic.name, p) for p in topic.partition_indexes),
        )
        for topic in request.topics
    )
    return ctx.respond(throttle_time=0, topics=topics)


def _producers_of(ctx: RequestContext, topic: str, partition: int) -> Any:
    try:
        states = ctx.broker.store.partition(topic, partition).producer_states()
    except KafkaError as exc:
        return ctx.make(
            "PartitionResponse",
            partition_index=partition,
            error_code=error_code(exc),
            error_message=str(exc),
            active_producers=(),
        )
    producers = tuple(
        ctx.make(
            "ProducerState",
            producer_id=pid,
            producer_epoch=s["producer_epoch"],
            last_sequence=s["last_sequence"],
            last_timestamp=s["last_timestamp"],
            coordinator_epoch=s["coordinator_epoch"],
            current_txn_start_offset=s["current_txn_start_offset"],
        )
        for pid, s in sorted(states.items())
    )
    return ctx.make(
        "PartitionResponse", partition_index=partition, error_code=NONE, error_message=None, active_producers=producers
    )


# ---- ListTransactions, DescribeTransactions --------------------------------------------------------------


def _swept_coordinator(ctx: RequestContext) -> TransactionCoordinator:
    """The coordinator after its sweep, so a listing shows what a broker's background threads would
    have done by now (as `Admin.list_transactions` does)."""
    ctx.broker.transport.abort_expired_transactions()
    ctx.broker.data_arrived.notify()
    return _coordinator(ctx)


@api(66, 0, 2)
def list_transactions(ctx: RequestContext, request: Any) -> Any:
    """Every transactional id, filtered by state names, producer ids, (v1) how long the transaction
    has been open and (v2) a regular expression the whole id must match."""
    known = {state.admin_name: state for state in TxnState}
    states = {known[name] for name in request.state_filters if name in known}
    unknown = tuple(name for name in request.state_filters if name not in known)
    pids = set(request.producer_id_filters)
    duration = getattr(request, "duration_filter", -1)
    pattern = getattr(request, "transactional_id_pattern", None)
    try:
        regex = re.compile(pattern) if pattern else None
    except re.error as exc:
        return ctx.respond(
            throttle_time=0, error_code=INVALID_REGULAR_EXPRESSION, error_message=str(exc), transaction_states=()
        )
    now = _now_ms()
    listed = tuple(
        ctx.make(
            "TransactionState",
            transactional_id=d.transactional_id,
            producer_id=d.state.producer_id,
            transaction_state=d.state.state.admin_name,
        )
        for d in _swept_coordinator(ctx).list_transactions()
        if (not request.state_filters or d.state.state in states)
        and (not pids or d.state.producer_id in pids)
        and (duration < 0 or now - d.state.start_ms > duration)  # Kafka's rule, which lists an idle id too
        and (regex is None or regex.fullmatch(d.transactional_id) is not None)
    )
    return ctx.respond(throttle_time=0, error_code=NONE, unknown_state_filters=unknown, transaction_states=listed)


@api(65, 0, 0)
def describe_transactions(ctx: RequestContext, request: Any) -> Any:
    coordinator = _swept_coordinator(ctx)
    return ctx.respond(
        throttle_time=0, transaction_states=tuple(_describe(ctx, coordinator, t) for t in request.transactional_ids)
    )


def _describe(ctx: RequestContext, coordinator: TransactionCoordinator, txn_id: str) -> Any:
    try:
        found: TransactionDescription | None = coordinator.describe(txn_id)
    except KafkaError as exc:
        return _described(ctx, txn_id, error_code(exc))
    if found is None:
        return _described(ctx, txn_id, TRANSACTIONAL_ID_NOT_FOUND)
    value = found.state
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(value.partitions):
        by_topic.setdefault(topic, []).append(partition)
    return ctx.make(
        "TransactionState",
        error_code=NONE,
        transactional_id=txn_id,
        transaction_state=value.state.admin_name,
        transaction_timeout=value.timeout_ms,
        transaction_start_time=_datetime(value.start_ms),
        producer_id=value.producer_id,
        producer_epoch=value.producer_epoch,
        topics=tuple(ctx.make("TopicData", topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
    )


def _described(ctx: RequestContext, txn_id: str, code: int) -> Any:
    """An id that cannot be described: the error and the spec's zero defaults, as Kafka answers."""
    return ctx.make(
        "TransactionState",
        error_code=code,
        transactional_id=txn_id,
        transaction_state="",
        transaction_timeout=0,
        transaction_start_time=_datetime(0),
        producer_id=0,
        producer_epoch=0,
        topics=(),
    )


def _datetime(ms: int) -> datetime.datetime:
    """A wire timestamp (ms) as the aware datetime kio writes back to the same number (-1: none)."""
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def _now_ms() -> int:
    return int(datetime.datetime.now(tz=datetime.UTC).timestamp() * 1000)
