"""Committed offsets over the wire: OffsetCommit, OffsetFetch, TxnOffsetCommit, OffsetDelete.

Every offset goes to `__consumer_offsets` through the transport, so embedded txlog tools see
what wire clients commit and the other way round. Who may commit is checked first:

* a member of a **classic group** this server runs (txlog/server/classic_group_coordinator.py)
  by its generation and member id, on the event loop, then written with no member (the
  membership record knows no classic members);
* a member of a **KIP-848 group** by its member id and epoch, under the group's lock, by
  txlog's group coordinator (`Transport.offset_commit` / `txn_offset_commit`);
* a commit with no member (an admin tool, a consumer using assign()) only while the group has
  no members, as Kafka allows it.

TxnOffsetCommit (KIP-447) is written as the transactional producer's own batch: the
server builds it from the request with the producer's id and epoch, at the next sequence of
that producer on the group's `__consumer_offsets` partition, so the transaction's markers
decide it as they decide its data. From v5 (transaction protocol v2, KIP-890 part 2) the commit
adds that partition to the transaction itself; below v5 AddOffsetsToTxn must have added it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from storage.errors import KafkaError
from storage.records import BatchBuilder
from storage.topic_name import CONSUMER_OFFSETS_TOPIC
from storage.varint import INT32_MAX
from txlog.errors import UnstableOffsetCommitError
from txlog.requests import MemberRef
from txlog.schemas.group_metadata import decode_subscription
from txlog.server.apis import api
from txlog.server.broker import Broker
from txlog.server.errors import error_code
from txlog.server.handlers.groups import classic_groups, consumer_group
from txlog.server.request_context import RequestContext
from txlog.topic_partition import OffsetAndMetadata, TopicPartition

OFFSET_COMMIT_KEY = 8
# KIP-890 part 2: from TxnOffsetCommit v5 the client sends no AddOffsetsToTxn; the commit itself adds
# the group's `__consumer_offsets` partition to the transaction (Kafka's group coordinator asks the
# transaction coordinator to, as a Produce v12's partition leader does).
TXN_OFFSET_COMMIT_ADDS_FROM_VERSION = 5

Offsets = dict[TopicPartition, OffsetAndMetadata]


def _requested_offsets(request: Any) -> Offsets:
    return {
        TopicPartition(t.name, p.partition_index): OffsetAndMetadata(
            p.committed_offset, p.committed_metadata or "", getattr(p, "committed_leader_epoch", -1)
        )
        for t in request.topics
        for p in t.partitions
    }


def _member(member_id: str, generation: int, instance_id: str | None) -> MemberRef | None:
    """The KIP-848 member a commit names (None: a commit from outside group management)."""
    return MemberRef(member_id, generation, instance_id) if member_id else None


def _unknown_partitions(broker: Broker, offsets: Iterable[TopicPartition]) -> set[TopicPartition]:
    """The partitions no topic of the store has: Kafka answers them UNKNOWN_TOPIC_OR_PARTITION."""
    store = broker.store
    return {tp for tp in offsets if not store.has_topic(tp.topic) or tp.partition >= store.partition_count(tp.topic)}


def _partition_codes(ctx: RequestContext, request: Any, codes: dict[TopicPartition, int]) -> tuple[Any, ...]:
    prefix = "OffsetCommit" if ctx.message.api_key == OFFSET_COMMIT_KEY else "TxnOffsetCommit"
    return tuple(
        ctx.make(
            f"{prefix}ResponseTopic",
            name=t.name,
            partitions=tuple(
                ctx.make(
                    f"{prefix}ResponsePartition",
                    partition_index=p.partition_index,
                    error_code=codes[TopicPartition(t.name, p.partition_index)],
                )
                for p in t.partitions
            ),
        )
        for t in request.topics
    )


# ---- OffsetCommit -------------------------------------------------------------------------------------


@api(OFFSET_COMMIT_KEY, 2, 9)
async def offset_commit(ctx: RequestContext, request: Any) -> Any:
    offsets = _requested_offsets(request)
    generation = request.generation_id_or_member_epoch
    instance_id = getattr(request, "group_instance_id", None)
    member: MemberRef | None = None
    if not request.group_id:
        code: int | None = ErrorCode.invalid_group_id
    else:
        code = classic_groups(ctx.broker).check_commit(
            request.group_id, request.member_id, instance_id, generation, transactional=False
        )
        if code is None:
            member = _member(request.member_id, generation, instance_id)
    if code is not None and code != ErrorCode.none:
        codes = dict.fromkeys(offsets, code)
    else:
        codes = await ctx.run(_commit, ctx, request.group_id, offsets, member, generation)
    return ctx.respond(throttle_time=0, topics=_partition_codes(ctx, request, codes))


def _commit(
    ctx: RequestContext, group_id: str, offsets: Offsets, member: MemberRef | None, generation: int
) -> dict[TopicPartition, int]:
    broker = ctx.broker
    if member is not None and not _has_membership_record(broker, group_id):
        # a generation or epoch for a group that does not exist (a classic member after a server
        # restart): Kafka's answer, so the member rejoins
        missing = ErrorCode.group_id_not_found if ctx.version >= 9 else ErrorCode.illegal_generation
        return dict.fromkeys(offsets, int(missing))
    unknown = _unknown_partitions(broker, offsets)
    codes = dict.fromkeys(unknown, int(ErrorCode.unknown_topic_or_partition))
    known = {tp: om for tp, om in offsets.items() if tp not in unknown}
    try:
        if known:
            broker.transport.offset_commit(group_id, known, member)
        code = int(ErrorCode.none)
    except KafkaError as exc:
        code = error_code(exc)
    codes.update(dict.fromkeys(known, code))
    return codes


def _has_membership_record(broker: Broker, group_id: str) -> bool:
    if not broker.store.has_topic(CONSUMER_OFFSETS_TOPIC):
        return False
    return broker.transport.group_offsets.group_metadata(group_id) is not None


# ---- TxnOffsetCommit ----------------------------------------------------------------------------------


@api(28, 0, 5)
async def txn_offset_commit(ctx: RequestContext, request: Any) -> Any:
    offsets = _requested_offsets(request)
    generation = getattr(request, "generation_id", -1)
    member_id = getattr(request, "member_id", "")
    instance_id = getattr(request, "group_instance_id", None)
    member: MemberRef | None = None
    if not request.group_id:
        code: int | None = ErrorCode.invalid_group_id
    else:
        code = classic_groups(ctx.broker).check_commit(
            request.group_id, member_id, instance_id, generation, transactional=True
        )
        if code is None:
            member = _member(member_id, generation, instance_id)
    if code is not None and code != ErrorCode.none:
        codes = dict.fromkeys(offsets, code)
    else:
        adds = ctx.version >= TXN_OFFSET_COMMIT_ADDS_FROM_VERSION
        codes = await ctx.run(_txn_commit, ctx.broker, request, offsets, member, adds)
    return ctx.respond(throttle_time=0, topics=_partition_codes(ctx, request, codes))


def _txn_commit(
    broker: Broker, request: Any, offsets: Offsets, member: MemberRef | None, adds: bool
) -> dict[TopicPartition, int]:
    unknown = _unknown_partitions(broker, offsets)
    codes = dict.fromkeys(unknown, int(ErrorCode.unknown_topic_or_partition))
    known = {tp: om for tp, om in offsets.items() if tp not in unknown}
    try:
        if known:
            if adds:
                target = broker.transport.offsets_partition(request.group_id)
                broker.transport.add_partitions_on_produce(
                    request.transactional_id,
                    request.producer_id,
                    request.producer_epoch,
                    [(target.topic, target.partition)],
                )
            _append_txn_offsets(broker, request, known, member)
        code = int(ErrorCode.none)
    except KafkaError as exc:
        code = error_code(exc)
    codes.update(dict.fromkeys(known, code))
    return codes


def _append_txn_offsets(broker: Broker, request: Any, offsets: Offsets, member: MemberRef | None) -> None:
    """The producer's transactional batch of offset records, as txlog's own producer builds it."""
    transport = broker.transport
    target = transport.offsets_partition(request.group_id)
    now = time.time_ns() // 1_000_000
    builder = BatchBuilder(max_bytes=1 << 30, is_transactional=True)
    for tp, om in offsets.items():
        key, value = transport.encode_offset_commit(request.group_id, tp, om, now)
        builder.append(key, value, None, now)
    sequence = _next_sequence(broker, target, request.producer_id, request.producer_epoch)
    data = builder.stamp_build(request.producer_id, request.producer_epoch, sequence)  # as the producer stamps it
    transport.txn_offset_commit(
        request.group_id, member, target.topic, target.partition, data, request.transactional_id
    )


def _next_sequence(broker: Broker, tp: TopicPartition, producer_id: int, epoch: int) -> int:
    """Where this producer's next batch on the partition must start (the client sends no sequence for
    TxnOffsetCommit: a broker's coordinator appends it unchecked, txlog's partition checks every batch)."""
    state = broker.store.partition(tp.topic, tp.partition).producer_states().get(producer_id)
    if state is None or state["producer_epoch"] != epoch:
        return 0
    last = state["last_sequence"]
    return 0 if last == INT32_MAX else last + 1


# ---- OffsetFetch --------------------------------------------------------------------------------------


@api(9, 1, 9)
async def offset_fetch(ctx: RequestContext, request: Any) -> Any:
    require_stable = getattr(request, "require_stable", False)
    if ctx.version < 8:
        wanted = _wanted(request.topics)
        code, topics = await ctx.run(_fetch_group, ctx.broker, request.group_id, wanted, require_stable)
        return ctx.respond(
            throttle_time=0, topics=_fetched_topics(ctx, topics, "OffsetFetchResponseTopic"), error_code=code
        )
    groups = []
    for group in request.groups:
        code, topics = await ctx.run(_fetch_group, ctx.broker, group.group_id, _wanted(group.topics), require_stable)
        groups.append(
            ctx.make(
                "OffsetFetchResponseGroup",
                group_id=group.group_id,
                topics=_fetched_topics(ctx, topics, "OffsetFetchResponseTopics"),
                error_code=code,
            )
        )
    return ctx.respond(throttle_time=0, groups=tuple(groups))


Fetched = dict[TopicPartition, tuple[OffsetAndMetadata | None, int]]


def _wanted(topics: Any) -> list[TopicPartition] | None:
    if topics is None:
        return None  # every committed partition of the group (v2+)
    return [TopicPartition(t.name, p) for t in topics for p in t.partition_indexes]


def _fetch_group(
    broker: Broker, group_id: str, wanted: list[TopicPartition] | None, require_stable: bool
) -> tuple[int, Fetched]:
    """(group error, per partition (committed or None, error)). A pending transactional commit makes the
    partitions it covers UNSTABLE_OFFSET_COMMIT under require_stable (KIP-447). Store thread."""
    transport = broker.transport
    if not group_id:
        return int(ErrorCode.invalid_group_id), {}
    try:
        try:
            committed = transport.offset_fetch(group_id, wanted, require_stable=require_stable)
            unstable: set[TopicPartition] = set()
        except UnstableOffsetCommitError:
            committed = transport.offset_fetch(group_id, wanted, require_stable=False)
            unstable = set(transport.group_offsets.pending(group_id))
    except KafkaError as exc:
        return error_code(exc), {}
    if wanted is None:
        found: Fetched = {tp: (om, int(ErrorCode.none)) for tp, om in committed.items()}
    else:  # in the order asked, as Kafka answers
        found = {tp: (committed.get(tp), int(ErrorCode.none)) for tp in wanted}
    for tp in unstable & set(found):
        found[tp] = (None, int(ErrorCode.unstable_offset_commit))
    return int(ErrorCode.none), found


def _fetched_topics(ctx: RequestContext, found: Fetched, topic_class: str) -> tuple[Any, ...]:
    partition_class = "OffsetFetchResponsePartition" if ctx.version < 8 else "OffsetFetchResponsePartitions"
    by_topic: dict[str, list[Any]] = {}
    for tp, (om, code) in found.items():
        by_topic.setdefault(tp.topic, []).append(
            ctx.make(
                partition_class,
                partition_index=tp.partition,
                committed_offset=om.offset if om else -1,
                committed_leader_epoch=om.leader_epoch if om else -1,
                metadata=om.metadata if om else "",
                error_code=code,
            )
        )
    return tuple(ctx.make(topic_class, name=name, partitions=tuple(parts)) for name, parts in by_topic.items())


# ---- OffsetDelete -------------------------------------------------------------------------------------


@api(47, 0, 0)
async def offset_delete(ctx: RequestContext, request: Any) -> Any:
    wanted = [TopicPartition(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    subscribed = _classic_subscriptions(ctx, request.group_id)
    code, codes = await ctx.run(_delete_offsets, ctx.broker, request.group_id, wanted, subscribed)
    topics = tuple(
        ctx.make(
            "OffsetDeleteResponseTopic",
            name=t.name,
            partitions=tuple(
                ctx.make(
                    "OffsetDeleteResponsePartition",
                    partition_index=p.partition_index,
                    error_code=codes.get(TopicPartition(t.name, p.partition_index), ErrorCode.none),
                )
                for p in t.partitions
            ),
        )
        for t in request.topics
    )
    return ctx.respond(error_code=code, throttle_time=0, topics=topics if code == ErrorCode.none else ())


def _classic_subscriptions(ctx: RequestContext, group_id: str) -> set[str]:
    """The topics the live members of a classic group subscribe to (consumer protocol metadata)."""
    group = classic_groups(ctx.broker).live(group_id)
    if group is None or group.protocol_type != "consumer":
        return set()
    topics: set[str] = set()
    for m in group.members.values():
        data = m.metadata(group.protocol_name)
        if data:
            try:
                topics.update(decode_subscription(data)[1].topics)
            except KafkaError:
                continue
    return topics


def _delete_offsets(
    broker: Broker, group_id: str, wanted: list[TopicPartition], subscribed: set[str]
) -> tuple[int, dict[TopicPartition, int]]:
    """Tombstone the offsets, except of topics a live member subscribes to (GROUP_SUBSCRIBED_TO_TOPIC)."""
    if not group_id:
        return int(ErrorCode.invalid_group_id), {}
    if not broker.store.has_topic(CONSUMER_OFFSETS_TOPIC):
        return int(ErrorCode.group_id_not_found), {}
    try:
        description = consumer_group(broker, group_id)
        if description is not None:
            subscribed = subscribed | {t for m in description.members for t in m.topics}
        codes = {tp: int(ErrorCode.group_subscribed_to_topic) for tp in wanted if tp.topic in subscribed}
        free = [tp for tp in wanted if tp not in codes]
        if free:
            broker.transport.group_offsets.delete_offsets(group_id, free)
    except KafkaError as exc:
        return error_code(exc), {}
    return int(ErrorCode.none), codes
