"""The public Consumer, in Kafka's client vocabulary (kafka-python users should feel at home).

A consumer either `assign`s partitions itself (no group membership: the group id is
only where positions are committed to and resumed from) or `subscribe`s to topics as a
member of its group (`txlog.coordinator.group_coordinator`, KIP-848's model): the group splits the
subscribed partitions between its members, moves them when members come and go, and
fences commits from members it has expired. A subscribed consumer heartbeats from a
background thread and reconciles its assignment inside `poll`, where the rebalance
listener's callbacks run (revoked before assigned; lost when the member was fenced).
Without a group id, or on a read-only store, `subscribe` reads every partition of the
topics with no membership, as kafka-python does without a group.

Where a partition starts, when nothing was `seek`ed: the group's committed offset,
else `auto_offset_reset`. Under read_committed the committed offset is asked for with
require-stable, so a transaction still holding a pending offset commit for the
partition makes the consumer wait instead of resuming from an offset that is about
to change (KIP-447). Positions only move forward on their own; only `seek*` and an
out-of-range position (retention, a log cut back) move them elsewhere.

Every request goes through a `txlog.transport.Transport` (Fetch, ListOffsets, OffsetFetch,
OffsetCommit, ConsumerGroupHeartbeat), one made on the consumer's store unless `transport=`
is given (e.g. a `txlog.tools.fault_injection.FaultInjectingTransport`).

When `poll` writes: there is no broker daemon to abort a transaction whose producer died, so
on a writable store a poll that is blocked by an open transaction (its partition is at the
LSO with data beyond it, or its committed offset is pending) runs the transaction
coordinator's sweep, `Transport.abort_expired_transactions`: it writes ABORT markers for
transactions past their timeout and completes decided ones. It runs at most every
EXPIRED_SWEEP_INTERVAL_MS (UNSTABLE_SWEEP_INTERVAL_MS while a committed offset is pending).
A consumer on a read-only store never writes.

Reading never needs a write (docs/reliability-scenarios.md scenario 70): a store directory this
process may not write opens read-only (`Store.open_for_reading`), a partition whose recovery the
disk refuses (full) is read as a read-only view, auto-commits the disk refuses are logged, and
`close()` logs instead of raising; only an explicit `commit()` raises the disk's refusal.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, cast, overload

from storage.errors import KafkaStorageError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from storage.store import Store
from txlog.consumer_record import ConsumerRecord
from txlog.errors import (
    FencedMemberEpochError,
    IllegalArgumentError,
    IllegalStateError,
    InvalidGroupIdError,
    KafkaError,
    NoOffsetForPartitionError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
)
from txlog.fetch import IsolationLevel
from txlog.requests import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_MAX_POLL_INTERVAL_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    check_session_settings,
)
from txlog.topic_partition import OffsetAndMetadata, TopicPartition
from txlog.transport import Transport

if TYPE_CHECKING:  # a group member's, imported when one subscribes: a plain reader never loads them (~3 ms)
    from txlog.clients.membership import ConsumerGroupMetadata, Membership

_log = logging.getLogger(__name__)

OFFSET_RESET_POLICIES = ("earliest", "latest", "none")
_EARLIEST, _LATEST = "earliest", "latest"
POLL_BACKOFF_S = 0.01  # sleep between empty fetch rounds while poll waits for data
EXPIRED_SWEEP_INTERVAL_MS = 10_000  # how often a blocked poll may run the coordinator's sweep (a write)
# A partition whose committed offset is pending is not read at all until its transaction ends (a
# new owner after a rebalance waits there), so that wait sweeps more often than a pinned LSO does.
UNSTABLE_SWEEP_INTERVAL_MS = 1_000


@dataclass
class _PartitionState:
    """What the consumer tracks per assigned partition."""

    position: int | None = None  # None: not known yet, resolved on first use
    reset: str | None = None  # a pending seek_to_beginning/seek_to_end, resolved on first use
    paused: bool = False


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _MemberSettings(TypedDict):
    """The consumer's settings a group membership starts with (Membership's keyword arguments)."""

    instance_id: str | None
    session_timeout_ms: int
    max_poll_interval_ms: int
    heartbeat_interval_ms: int
    assignor: str | None
    client_id: str


class Consumer:
    """Reads assigned partitions in order under an isolation level, committing positions to a group."""

    def __init__(
        self,
        path_or_store: str | os.PathLike | Store,
        *,
        group_id: str | None = None,
        isolation_level: str | IsolationLevel = "read_committed",
        auto_offset_reset: str = "earliest",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        max_poll_records: int = 500,
        fetch_max_bytes: int = 52428800,
        max_partition_fetch_bytes: int = 1048576,
        group_instance_id: str | None = None,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        max_poll_interval_ms: int = DEFAULT_MAX_POLL_INTERVAL_MS,
        heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
        group_remote_assignor: str | None = None,
        client_id: str = "txlog",
        clock: Callable[[], int] | None = None,
        transport: Transport | None = None,
    ):
        self._isolation = IsolationLevel.parse(isolation_level)
        _check_config(
            group_id,
            auto_offset_reset,
            auto_commit_interval_ms,
            max_poll_records,
            fetch_max_bytes,
            max_partition_fetch_bytes,
        )
        check_session_settings(session_timeout_ms, max_poll_interval_ms, heartbeat_interval_ms)
        if group_instance_id is not None and (not isinstance(group_instance_id, str) or not group_instance_id):
            raise IllegalArgumentError(
                f"group_instance_id must be a non-empty string or None, not {group_instance_id!r}"
            )
        self._member_settings = _MemberSettings(
            instance_id=group_instance_id,
            session_timeout_ms=session_timeout_ms,
            max_poll_interval_ms=max_poll_interval_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            assignor=group_remote_assignor,
            client_id=client_id,
        )
        self._group_id = group_id
        self._reset_policy = auto_offset_reset
        self._auto_commit_interval_ms = auto_commit_interval_ms
        self._max_poll_records = max_poll_records
        self._fetch_max_bytes = fetch_max_bytes
        self._partition_fetch_bytes = max_partition_fetch_bytes
        self._clock = clock or _now_ms
        if isinstance(path_or_store, Store):
            self._store, self._owns_store = path_or_store, False
        else:
            # Writable where this process may write, else read-only like `txlog consume`: reading
            # never needs a write (docs/reliability-scenarios.md scenario 70).
            self._store, self._owns_store = Store.open_for_reading(path_or_store), True
        self._transport = transport if transport is not None else Transport(self._store, clock=self._clock)
        self._membership: Membership | None = None  # set while subscribed as a group member
        self._listener: Any = None
        # Without a group (as in kafka-python) or on a read-only store (a Kafka data directory)
        # there is nowhere to commit to, so auto-commit is simply off; explicit commits still raise.
        self._auto_commit = bool(enable_auto_commit) and group_id is not None and not self._store.read_only
        self._assigned: dict[TopicPartition, _PartitionState] = {}
        self._subscription: set[str] | None = None
        self._pattern: re.Pattern[str] | None = None
        self._next_partition = 0  # round-robin start of the next poll
        self._last_auto_commit = self._clock()
        self._auto_committed: dict[TopicPartition, int] = {}
        self._deferred_error: KafkaError | None = None  # raised by the next poll (see _fetch_round)
        self._last_sweep_ms = -EXPIRED_SWEEP_INTERVAL_MS
        self._closed = False

    # ---- assignment ---------------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (replacing any earlier assignment); `[]` unassigns.

        No group membership: nothing else stops another consumer reading the same
        partitions, and commits are only accepted while the group has no members.
        """
        self._check_open()
        wanted = [_as_tp(tp) for tp in partitions]
        if wanted and self._subscribed():
            raise IllegalStateError("subscription to topics, partitions and pattern are mutually exclusive")
        self._subscription, self._pattern = None, None
        self._set_assignment(wanted)

    def subscribe(self, topics: Iterable[str] = (), pattern: str | None = None, listener: Any = None) -> None:
        """Join the group for these topics (or every topic matching `pattern`), now and later.

        The group decides which of their partitions this member reads; `listener`
        (an object with any of on_partitions_revoked / on_partitions_assigned /
        on_partitions_lost, as Kafka's ConsumerRebalanceListener) is called from
        `poll` when that changes. The member joins on the first `poll`.
        """
        self._check_open()
        names = [topics] if isinstance(topics, str) else list(topics)
        if bool(names) == (pattern is not None):
            raise IllegalStateError("subscribe to a list of topics or a pattern, exactly one of them")
        if self._assigned and not self._subscribed():
            raise IllegalStateError("subscription to topics, partitions and pattern are mutually exclusive")
        if any(not isinstance(n, str) or not n for n in names):
            raise IllegalArgumentError(f"topic names must be non-empty strings, not {names!r}")
        self._subscription = set(names) if pattern is None else None
        self._pattern = re.compile(pattern) if pattern is not None else None
        self._listener = listener
        if self._group_id is not None and not self._store.read_only and self._membership is None:
            from txlog.clients.membership import Membership

            self._membership = Membership(
                self._store, self._transport, self._group_id, clock=self._clock, **self._member_settings
            )
        self._refresh_subscription()

    def unsubscribe(self) -> None:
        """Drop the subscription or assignment; a group member revokes its partitions and leaves."""
        self._check_open()
        self._leave_group()
        self._subscription, self._pattern = None, None
        self._set_assignment([])

    def subscription(self) -> set[str]:
        """The subscribed topic names (for a pattern: those matching now)."""
        self._check_open()
        if self._pattern is not None:
            return set(self._matching_topics())
        return set(self._subscription or ())

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer reads now (for a group member: what the group gave it)."""
        self._check_open()
        if self._subscribed() and self._membership is None:
            self._refresh_subscription()
        return set(self._assigned)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """Group id, member id, member epoch (as generation_id) and instance id, for
        `Producer.send_offsets_to_transaction` (KIP-447); generation -1 outside group management."""
        self._check_open()
        if self._group_id is None:
            raise InvalidGroupIdError("group_metadata() needs a consumer with a group_id")
        if self._membership is None:
            from txlog.clients.membership import ConsumerGroupMetadata

            return ConsumerGroupMetadata(self._group_id, group_instance_id=self._member_settings["instance_id"])
        return self._membership.metadata()

    def enforce_rebalance(self) -> None:
        """Heartbeat on the next poll instead of at the next interval (Kafka's enforceRebalance)."""
        self._check_open()
        if self._membership is not None:
            self._membership.beat_soon()

    def assignment_settled(self) -> bool:
        """Whether this consumer holds what its group means it to (txlog's addition, for readers that
        stop at the end: an empty poll means "nothing more" only once the member has joined and no
        partition is still on its way to it). Always True outside group management."""
        self._check_open()
        membership = self._membership
        return membership is None or (membership.joined and not membership.pending)

    def _subscribed(self) -> bool:
        return self._subscription is not None or self._pattern is not None

    def _set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        """Keep the state of partitions that stay assigned; new ones start unpositioned."""
        self._assigned = {tp: self._assigned.get(tp) or _PartitionState() for tp in sorted(set(partitions))}

    def _matching_topics(self) -> list[str]:
        if self._pattern is not None:
            return [t for t in self._store.list_topics(include_internal=False) if self._pattern.fullmatch(t)]
        return [t for t in sorted(self._subscription or ()) if self._store.has_topic(t)]

    def _refresh_subscription(self) -> None:
        """Follow topics and partitions created (or deleted) since the last look.

        A group member tells the group its topics (the group assigns); without a group
        the consumer simply takes every partition of them.
        """
        if not self._subscribed():
            return
        if self._membership is not None:
            wanted = sorted(self._subscription or ()) if self._pattern is None else self._matching_topics()
            self._membership.set_topics(tuple(wanted))
            return
        partitions = [TopicPartition(t, p) for t in self._matching_topics() for p in self._store.partitions(t)]
        if set(partitions) != set(self._assigned):
            self._set_assignment(partitions)

    # ---- group membership ---------------------------------------------------------------------

    def _maintain_membership(self) -> None:
        """Heartbeat when due and apply what the group says, running the listener (Kafka's order).

        Partitions taken away are revoked first (positions auto-committed, then
        on_partitions_revoked), and the revocation is acknowledged at once so the
        group can hand them on; then new partitions are added and
        on_partitions_assigned runs. A member the group fenced or expired gets
        on_partitions_lost instead and rejoins.
        """
        membership = self._membership
        if membership is None:
            return
        membership.polled()
        if not membership.due():
            return
        epoch_before = membership.epoch if membership.joined else None
        try:
            response = membership.heartbeat(frozenset(self._assigned))
            while set(self._assigned) - response.assignment:
                self._revoke(set(self._assigned) - response.assignment)
                response = membership.heartbeat(frozenset(self._assigned))
        except (UnknownMemberIdError, FencedMemberEpochError, StaleMemberEpochError):
            self._lose_partitions()
            membership.fenced()
            return
        except OSError as exc:
            # Membership is a write (the member's session file, the group's records): a group member
            # on a disk that refuses it cannot take part, and says so in the typed error.
            raise KafkaStorageError(f"group '{self._group_id}': cannot record this member: {exc.strerror}") from exc
        added = response.assignment - set(self._assigned)
        if added or response.member_epoch != epoch_before:
            self._set_assignment(set(self._assigned) | added)
            self._call_listener("on_partitions_assigned", added)

    def _revoke(self, partitions: set[TopicPartition], *, commit: bool = True) -> None:
        """Give partitions back: commit their positions (auto-commit), tell the listener, drop them."""
        if self._auto_commit and commit:
            positions = {
                tp: OffsetAndMetadata(position)
                for tp in sorted(partitions)
                if (position := self._assigned[tp].position) is not None and self._auto_committed.get(tp) != position
            }
            if positions:
                self._commit_to_group(positions)
        self._call_listener("on_partitions_revoked", partitions)
        self._set_assignment(set(self._assigned) - partitions)

    def _lose_partitions(self) -> None:
        """The group moved on without us: the partitions may already be someone else's, commit nothing."""
        lost = set(self._assigned)
        self._set_assignment([])
        if lost:
            self._call_listener("on_partitions_lost", lost)

    def _call_listener(self, name: str, partitions: AbstractSet[TopicPartition]) -> None:
        callback = getattr(self._listener, name, None)
        if callback is None and name == "on_partitions_lost":
            callback = getattr(self._listener, "on_partitions_revoked", None)  # Kafka's default for lost
        if callback is not None:
            callback(set(partitions))

    def _leave_group(self, *, commit: bool = True) -> None:
        """Revoke everything and leave (a static member keeps its place until its session expires)."""
        membership = self._membership
        if membership is None:
            return
        try:
            if membership.joined and self._assigned:
                self._revoke(set(self._assigned), commit=commit)
        finally:
            self._membership = None
            membership.leave()

    # ---- positions ----------------------------------------------------------------------------

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Fetch from `offset` on the next poll (out of range is handled by auto_offset_reset then)."""
        state = self._state_of(partition)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise IllegalArgumentError(f"seek offset must be a non-negative integer, not {offset!r}")
        state.position, state.reset = offset, None

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Start from the log start (of all assigned partitions when none are named)."""
        self._seek_lazily(partitions, _EARLIEST)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Start from the end offset under this isolation (LSO for read_committed) when next used."""
        self._seek_lazily(partitions, _LATEST)

    def seek_clamped(self, partition: TopicPartition, offset: int) -> int:
        """Seek to `offset`, or for a negative one that many offsets before the end offset under this
        isolation (kcat's `-o -N`), clamped into [log start, log end] instead of being left to
        auto_offset_reset; returns the offset chosen."""
        tp = _as_tp(partition)
        start = self._boundary_offset(tp, EARLIEST_TIMESTAMP, self._isolation)
        log_end = self._boundary_offset(tp, LATEST_TIMESTAMP, IsolationLevel.READ_UNCOMMITTED)
        target = min(max(self._end_offset(tp) + offset if offset < 0 else offset, start), log_end)
        self.seek(tp, target)
        return target

    def _seek_lazily(self, partitions: tuple[TopicPartition, ...], where: str) -> None:
        """Like Kafka, resolve the offset when it is next needed, so 'end' means the end then."""
        self._check_open()
        states = [self._state_of(tp) for tp in partitions] if partitions else list(self._assigned.values())
        for state in states:
            state.position, state.reset = None, where

    def position(self, partition: TopicPartition, *, timeout_ms: int = 0) -> int:
        """Offset of the next record poll would return for the partition, resolving it if needed.

        Under read_committed, a pending transactional offset commit for the partition
        keeps it unresolved; this waits up to `timeout_ms` for it and then raises
        UnstableOffsetCommitError (retriable).
        """
        tp = _as_tp(partition)
        state = self._state_of(tp)
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            try:
                return self._resolve(tp, state)
            except UnstableOffsetCommitError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(POLL_BACKOFF_S)

    def _state_of(self, partition: TopicPartition) -> _PartitionState:
        self._check_open()
        tp = _as_tp(partition)
        state = self._assigned.get(tp)
        if state is None:
            raise IllegalStateError(f"no current assignment for partition {tp.topic}-{tp.partition}")
        return state

    def _resolve(self, tp: TopicPartition, state: _PartitionState) -> int:
        """The partition's position, from a pending seek, the group's committed offset or the reset policy."""
        if state.position is None:
            if state.reset is not None:
                state.position = self._reset_offset(tp, state.reset)
            else:
                committed = self._committed_start(tp)
                state.position = committed if committed is not None else self._reset_offset(tp, self._reset_policy)
            state.reset = None
        return state.position

    def _committed_start(self, tp: TopicPartition) -> int | None:
        """The group's committed offset for the partition, if any; unstable ones raise (read_committed)."""
        if self._group_id is None:
            return None
        stable = self._isolation is IsolationLevel.READ_COMMITTED
        found = self._transport.offset_fetch(self._group_id, [tp], require_stable=stable).get(tp)
        return None if found is None else found.offset

    def _reset_offset(self, tp: TopicPartition, policy: str) -> int:
        if policy == _EARLIEST:
            return self._boundary_offset(tp, EARLIEST_TIMESTAMP, self._isolation)
        if policy == _LATEST:
            return self._end_offset(tp)
        raise NoOffsetForPartitionError(
            f"no committed offset for {tp.topic}-{tp.partition} and auto_offset_reset is 'none'"
        )

    def _boundary_offset(self, tp: TopicPartition, timestamp: int, isolation: IsolationLevel) -> int:
        """ListOffsets for EARLIEST_TIMESTAMP or LATEST_TIMESTAMP, which always answer: the offset."""
        found = self._transport.list_offsets(tp, timestamp, isolation)
        assert found is not None, "only a real timestamp can find no offset"
        return found[0]

    def _end_offset(self, tp: TopicPartition) -> int:
        """Kafka's ListOffsets(LATEST) with isolation: the LSO for read_committed, else the log end."""
        return self._boundary_offset(tp, LATEST_TIMESTAMP, self._isolation)

    # ---- polling ------------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Up to `max_records` records across the assigned partitions, round-robin.

        Waits up to `timeout_ms` for data (short sleeps), and returns [] when there is
        none: every partition is at the end of what the isolation level lets it see,
        paused, or waiting for a pending offset commit to be decided. Blocked by an open
        transaction on a writable store, it may run the coordinator's sweep, which writes
        (see the module docstring: `_maybe_abort_expired_transactions`).
        """
        self._check_open()
        limit = self._max_poll_records if max_records is None else max_records
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise IllegalArgumentError(f"max_records must be a positive integer, not {limit!r}")
        if not self._assigned and not self._subscribed():
            raise IllegalStateError("consumer is not subscribed to any topics or assigned any partitions")
        if self._deferred_error is not None:
            error, self._deferred_error = self._deferred_error, None
            raise error
        self._maybe_auto_commit()
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        while True:
            self._refresh_subscription()
            self._maintain_membership()
            records, progressed = self._fetch_round(limit)
            if records:
                return records
            if progressed:
                continue  # skipped aborted data or markers: more may follow at once
            if time.monotonic() >= deadline:
                return []
            time.sleep(min(POLL_BACKOFF_S, max(deadline - time.monotonic(), 0)))

    def _fetch_round(self, limit: int) -> tuple[list[ConsumerRecord], bool]:
        """One pass over the fetchable partitions, starting after the last one served.

        Returns the records and whether any position moved (even without records).
        """
        partitions = [tp for tp, st in self._assigned.items() if not st.paused]
        if not partitions:
            return [], False
        for tp in partitions:  # NoOffsetForPartitionError surfaces before any position moves
            self._try_resolve(tp)
        start = self._next_partition % len(partitions)
        out: list[ConsumerRecord] = []
        progressed = False
        budget = self._fetch_max_bytes
        for i in range(len(partitions)):
            if len(out) >= limit or budget <= 0:
                break
            tp = partitions[(start + i) % len(partitions)]
            try:
                got, moved, used = self._fetch_partition(tp, limit - len(out), budget)
            except OffsetOutOfRangeError as exc:
                if not out:
                    raise
                self._deferred_error = exc  # records already taken must reach the caller first
                break
            out.extend(got)
            budget -= used
            progressed = progressed or moved
            if got:
                self._next_partition = start + i + 1
        return out, progressed

    def _try_resolve(self, tp: TopicPartition) -> int | None:
        """The partition's position, or None while it cannot be known yet.

        An unstable committed offset (a transaction still holds a pending commit for it)
        and a partition assigned before its topic exists are waited out, not errors.
        """
        try:
            return self._resolve(tp, self._assigned[tp])
        except UnstableOffsetCommitError:
            # The pending commit's transaction may belong to a producer that died: only
            # its timeout ends it, and with no daemon somebody must run that sweep.
            self._maybe_abort_expired_transactions(UNSTABLE_SWEEP_INTERVAL_MS)
            return None
        except UnknownTopicOrPartitionError:
            return None

    def _fetch_partition(self, tp: TopicPartition, room: int, budget: int) -> tuple[list[ConsumerRecord], bool, int]:
        """Fetch one partition from its position; (records, position moved, bytes budget used)."""
        state = self._assigned[tp]
        start = self._try_resolve(tp)
        if start is None:
            return [], False, 0
        max_bytes = max(1, min(self._partition_fetch_bytes, budget))
        try:
            result = self._transport.fetch(tp, start, self._isolation, max_records=room, max_bytes=max_bytes)
        except UnknownTopicOrPartitionError:
            return [], False, 0  # the topic was deleted under us
        except OffsetOutOfRangeError:
            return [], self._reset_out_of_range(tp, state, start), 0
        moved = result.next_offset > start
        if not result.records and result.next_offset >= result.last_stable_offset < result.high_watermark:
            self._maybe_abort_expired_transactions()
        state.position = max(start, result.next_offset)
        return result.records, moved, result.fetched_bytes

    def _maybe_abort_expired_transactions(self, interval_ms: int = EXPIRED_SWEEP_INTERVAL_MS) -> None:
        """Blocked at an open transaction's LSO: run the coordinator's sweep, a write.

        There is no daemon to abort a transaction whose producer died (docs/DESIGN.md §5); a
        reader with write access does the coordinator's sweep, at most every
        EXPIRED_SWEEP_INTERVAL_MS (Kafka's abort.timed.out.transaction.cleanup.interval.ms), or
        `interval_ms` where the wait blocks a whole partition (an unstable committed offset).
        A read-only reader only ever reports the LSO pinned. A coordinator that cannot run
        (e.g. a damaged `__transaction_state`) must not stop reads, so its errors are dropped.
        """
        now = self._clock()
        if self._store.read_only or now - self._last_sweep_ms < interval_ms:
            return
        self._last_sweep_ms = now
        try:
            self._transport.abort_expired_transactions()
        except KafkaError:
            pass

    def _reset_out_of_range(self, tp: TopicPartition, state: _PartitionState, position: int) -> bool:
        """Kafka's OffsetOutOfRange handling: reset per policy, or raise when the policy is 'none'."""
        if self._reset_policy == "none":
            raise OffsetOutOfRangeError(
                f"position {position} of {tp.topic}-{tp.partition} is out of range and auto_offset_reset is 'none'"
            )
        state.position = self._reset_offset(tp, self._reset_policy)
        return state.position != position

    # ---- pausing ------------------------------------------------------------------------------

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching these partitions until resumed; positions are kept."""
        for tp in partitions:
            self._state_of(tp).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state_of(tp).paused = False

    def paused(self) -> set[TopicPartition]:
        self._check_open()
        return {tp for tp, st in self._assigned.items() if st.paused}

    # ---- offsets of the log -------------------------------------------------------------------

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        self._check_open()
        return {tp: self._boundary_offset(tp, EARLIEST_TIMESTAMP, self._isolation) for tp in map(_as_tp, partitions)}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The LSO under read_committed, the log end under read_uncommitted."""
        self._check_open()
        return {tp: self._end_offset(tp) for tp in map(_as_tp, partitions)}

    def offsets_for_times(
        self,
        timestamps: Mapping[TopicPartition, int],
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        """Per partition, (offset, timestamp) of the first record with timestamp ≥ the one given, or None.

        As Kafka's ListOffsets, read_committed only answers with offsets below the LSO.
        """
        self._check_open()
        out: dict[TopicPartition, tuple[int, int] | None] = {}
        for tp, ts in timestamps.items():
            tp = _as_tp(tp)
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                raise IllegalArgumentError(f"target timestamp for {tp.topic}-{tp.partition} must be ≥ 0, not {ts!r}")
            out[tp] = self._transport.list_offsets(tp, ts, self._isolation)
        return out

    def topics(self) -> set[str]:
        """Names of the store's non-internal topics."""
        self._check_open()
        return set(self._store.list_topics(include_internal=False))

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """Partition ids of a topic, or None if it does not exist (as kafka-python)."""
        self._check_open()
        if not self._store.has_topic(topic):
            return None
        return set(range(self._store.partition_count(topic)))

    # ---- committing ---------------------------------------------------------------------------

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None) -> None:
        """Commit offsets to the group (default: the positions of all assigned partitions)."""
        self._check_open()
        self._require_group()
        if offsets is None:
            offsets = self._consumed()
        if offsets:
            self._commit_to_group(offsets)

    def _commit_to_group(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int]) -> None:
        """A plain commit, as this consumer's member of the group when it is one (fenced if it is not)."""
        member = self._membership.ref() if self._membership is not None else None
        self._transport.offset_commit(self._require_group(), offsets, member)
        self._auto_committed.update({tp: _offset_of(om) for tp, om in offsets.items()})

    @overload
    def committed(self, partition: TopicPartition, *, timeout_ms: int = 0) -> OffsetAndMetadata | None: ...

    @overload
    def committed(
        self, partition: Iterable[TopicPartition], *, timeout_ms: int = 0
    ) -> dict[TopicPartition, OffsetAndMetadata | None]: ...

    def committed(
        self, partition: TopicPartition | Iterable[TopicPartition], *, timeout_ms: int = 0
    ) -> OffsetAndMetadata | None | dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offset of one partition (None if none), or a dict for several.

        Under read_committed the offset must be stable: while a transaction holds a
        pending commit for it, this retries up to `timeout_ms`, then raises
        UnstableOffsetCommitError (retriable).
        """
        self._check_open()
        group = self._require_group()
        single = _is_single_partition(partition)
        if single:
            wanted = [_as_tp(partition)]
        else:  # not a (topic, partition) pair, so a collection of them
            wanted = [_as_tp(tp) for tp in cast("Iterable[TopicPartition]", partition)]
        stable = self._isolation is IsolationLevel.READ_COMMITTED
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            try:
                found = self._transport.offset_fetch(group, wanted, require_stable=stable)
                break
            except UnstableOffsetCommitError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(POLL_BACKOFF_S)
        return found.get(wanted[0]) if single else {tp: found.get(tp) for tp in wanted}

    def _require_group(self) -> str:
        if self._group_id is None:
            raise InvalidGroupIdError("committing or reading committed offsets needs a group_id")
        return self._group_id

    def _consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """Positions of assigned partitions that have one (Kafka's allConsumed)."""
        return {tp: OffsetAndMetadata(st.position) for tp, st in self._assigned.items() if st.position is not None}

    def _maybe_auto_commit(self, *, force: bool = False) -> None:
        """Commit consumed positions when the interval passed; skip when nothing moved."""
        if not self._auto_commit:
            return
        now = self._clock()
        if not force and now - self._last_auto_commit < self._auto_commit_interval_ms:
            return
        self._last_auto_commit = now
        positions = {tp: om.offset for tp, om in self._consumed().items()}
        changed = {tp: OffsetAndMetadata(off) for tp, off in positions.items() if self._auto_committed.get(tp) != off}
        if not changed:
            return
        try:
            self._commit_to_group(changed)
        except (UnknownMemberIdError, StaleMemberEpochError):
            # The group moved on while we were away: these positions may be someone else's to
            # commit now. As Kafka's auto-commit, drop them; the next heartbeat says what we lost.
            if self._membership is not None:
                self._membership.beat_soon()
        except KafkaStorageError as exc:
            # The disk refused the commit (full, read-only). As Kafka's auto-commit failures, it is
            # logged and reading goes on; the next interval tries again (an explicit commit raises).
            _log.warning("auto-commit of group '%s' failed: %s", self._group_id, exc)

    # ---- life cycle ---------------------------------------------------------------------------

    def close(self, autocommit: bool = True) -> None:
        """Commit positions (when auto-commit is on), leave the group, release the store if this consumer opened it.

        Never raises for the disk (docs/reliability-scenarios.md scenario 70): as Kafka's consumer
        logs a failed auto-commit on close and goes on, a commit, a leave or a store close that
        the disk refuses is logged as a warning. A consumer writes nothing but its group's
        records, each durable when its call returned, so nothing acknowledged is at stake here.
        """
        if self._closed:
            return
        try:
            if autocommit:
                self._quietly("commit its positions", lambda: self._maybe_auto_commit(force=True))
            self._quietly("leave its group", lambda: self._leave_group(commit=autocommit))
        finally:
            self._closed = True
            if self._membership is not None:
                self._membership.abandon()
            if self._owns_store:
                self._quietly("close its store", self._store.close)

    def _quietly(self, what: str, step: Callable[[], None]) -> None:
        """Run one step of `close`; a storage error (or any error the log raises) is logged, not raised."""
        try:
            step()
        except (KafkaError, OSError) as exc:
            _log.warning("consumer of group %r could not %s on close: %s", self._group_id, what, exc)

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("this consumer has already been closed")

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Iterate records as kafka-python does, ending when a poll finds nothing new."""
        while True:
            records = self.poll()
            if not records:
                return
            yield from records


def _offset_of(om: OffsetAndMetadata | int) -> int:
    return om if isinstance(om, int) else om[0]


def _is_single_partition(value: object) -> bool:
    """A TopicPartition or a plain (topic, partition) pair, as opposed to a collection of them."""
    return isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str)


def _as_tp(tp: Iterable[object]) -> TopicPartition:
    try:
        topic, partition = tp
    except (TypeError, ValueError):
        raise IllegalArgumentError(f"expected a TopicPartition, not {tp!r}") from None
    if not isinstance(topic, str) or isinstance(partition, bool) or not isinstance(partition, int):
        raise IllegalArgumentError(f"expected a TopicPartition, not {tp!r}")
    return TopicPartition(topic, partition)


def _check_config(
    group_id: str | None,
    auto_offset_reset: str,
    auto_commit_interval_ms: int,
    max_poll_records: int,
    fetch_max_bytes: int,
    max_partition_fetch_bytes: int,
) -> None:
    """Reject bad settings at construction, where the mistake is, not at the first poll."""
    if group_id is not None and (not isinstance(group_id, str) or not group_id):
        raise InvalidGroupIdError(f"group_id must be a non-empty string or None, not {group_id!r}")
    if auto_offset_reset not in OFFSET_RESET_POLICIES:
        raise IllegalArgumentError(
            f"auto_offset_reset must be one of {', '.join(OFFSET_RESET_POLICIES)}, not {auto_offset_reset!r}"
        )
    for name, value in (
        ("auto_commit_interval_ms", auto_commit_interval_ms),
        ("max_poll_records", max_poll_records),
        ("fetch_max_bytes", fetch_max_bytes),
        ("max_partition_fetch_bytes", max_partition_fetch_bytes),
    ):
        minimum = 0 if name == "auto_commit_interval_ms" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise IllegalArgumentError(f"{name} must be an integer ≥ {minimum}, not {value!r}")
