"""A consumer's side of group membership: join, heartbeat, leave (Kafka's ConsumerMembershipManager).

The consumer owns its partitions and runs the rebalance listener; this class owns the
member's identity (member id, epoch, static instance id), its session (the lock and
heartbeat file of `txlog.member_session`, kept fresh by a background thread, as Kafka's
heartbeat thread keeps a slow poll loop alive) and the pacing of heartbeats to the
coordinator: every `heartbeat_interval_ms`, and quickly while a reconciliation is under way.
Heartbeats (join and leave included) are ConsumerGroupHeartbeat requests through the
consumer's `txlog.transport.Transport`; the session files are local, not requests.
"""

from __future__ import annotations

import base64
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from storage.store import Store
from txlog.member_session import MemberSession
from txlog.requests import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    HeartbeatRequest,
    HeartbeatResponse,
    MemberRef,
    Partitions,
)
from txlog.transport import Transport

RECONCILE_BEAT_MS = 50  # heartbeat pace while partitions wait to be revoked or released


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """What a transactional producer needs of a consumer to commit its offsets (KIP-447).

    `generation_id` is the member epoch; -1 and an empty member id mean a consumer
    outside group management (assign()).
    """

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None

    def member(self) -> MemberRef | None:
        if not self.member_id:
            return None
        return MemberRef(self.member_id, self.generation_id, self.group_instance_id)


def new_member_id() -> str:
    """A client-generated member id in Kafka's Uuid text form (22 URL-safe base64 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


class Membership:
    """One member of one group, for one consumer."""

    def __init__(
        self,
        store: Store,
        transport: Transport,
        group_id: str,
        *,
        instance_id: str | None,
        session_timeout_ms: int,
        max_poll_interval_ms: int,
        heartbeat_interval_ms: int,
        assignor: str | None,
        client_id: str,
        clock: Callable[[], int],
    ):
        self._store, self._transport, self.group_id = store, transport, group_id
        self.instance_id = instance_id
        self.member_id = new_member_id()
        self.epoch = JOIN_EPOCH
        self.joined = False
        self.pending = True  # the group's target assignment is not reached yet (or not joined yet)
        self._session_timeout_ms = session_timeout_ms
        self._max_poll_interval_ms = max_poll_interval_ms
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self._assignor = assignor
        self._client_id = client_id
        self._clock = clock
        self._topics: tuple[str, ...] = ()
        self._topics_sent = False
        self._next_beat_ms = 0
        self._session: MemberSession | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- identity -------------------------------------------------------------------------------------

    def metadata(self) -> ConsumerGroupMetadata:
        if not self.joined:
            return ConsumerGroupMetadata(self.group_id, -1, "", self.instance_id)
        return ConsumerGroupMetadata(self.group_id, self.epoch, self.member_id, self.instance_id)

    def ref(self) -> MemberRef | None:
        return self.metadata().member()

    # ---- pacing ---------------------------------------------------------------------------------------

    def set_topics(self, topics: tuple[str, ...]) -> None:
        """The subscription to send with the next heartbeat, which is due at once if it changed."""
        topics = tuple(sorted(set(topics)))
        if topics != self._topics or not self._topics_sent:
            self._topics, self._topics_sent = topics, False
            self._next_beat_ms = 0

    def polled(self) -> None:
        """A poll happened: the max.poll.interval.ms clock restarts (no syscall until the next beat)."""
        if self._session is not None:
            self._session.poll_ms = self._clock()

    def due(self) -> bool:
        return self._clock() >= self._next_beat_ms

    def beat_soon(self) -> None:
        self._next_beat_ms = 0

    # ---- the heartbeat ---------------------------------------------------------------------------------

    def heartbeat(self, owned: Partitions | None) -> HeartbeatResponse:
        """Send one heartbeat (joining first if needed); errors leave the member to rejoin."""
        session = self._session if self._session is not None else self._start_session()
        now = self._clock()
        session.beat(now, polled=True)
        request = HeartbeatRequest(
            self.group_id,
            self.member_id,
            self.epoch,
            self.instance_id,
            None if self._topics_sent and self.joined else self._topics,
            owned if self.joined else None,
            self._assignor,
            self._session_timeout_ms,
            self._max_poll_interval_ms,
            self._client_id,
        )
        response = self._transport.consumer_group_heartbeat(request)
        self.joined, self._topics_sent = True, True
        self.epoch = response.member_epoch
        self.pending = response.pending
        pace = RECONCILE_BEAT_MS if response.pending else self._heartbeat_interval_ms
        self._next_beat_ms = self._clock() + pace
        return response

    def fenced(self) -> None:
        """The coordinator no longer knows us at our epoch: rejoin, with the same member id (KIP-848)."""
        self.epoch, self.joined, self._topics_sent = JOIN_EPOCH, False, False
        self.pending = True
        self._next_beat_ms = 0

    def leave(self) -> None:
        """Leave the group (a static member keeps its place until its session expires)."""
        try:
            if self.joined:
                epoch = STATIC_LEAVE_EPOCH if self.instance_id is not None else LEAVE_EPOCH
                self._transport.consumer_group_heartbeat(
                    HeartbeatRequest(self.group_id, self.member_id, epoch, self.instance_id)
                )
        finally:
            self.joined = False
            self._stop_session(remove=self.instance_id is None)

    def abandon(self) -> None:
        """Drop the session without telling the coordinator (the store is going away)."""
        self._stop_session(remove=False)

    # ---- the session and its heartbeat thread -----------------------------------------------------------

    def _start_session(self) -> MemberSession:
        session = self._session = MemberSession(self._store.root, self.group_id, self.member_id)
        session.beat(self._clock(), polled=True)
        self._stop.clear()
        period = max(min(self._heartbeat_interval_ms, self._session_timeout_ms // 3), 10) / 1000
        self._thread = threading.Thread(
            target=self._beat_forever, args=(session, period), daemon=True, name=f"txlog-heartbeat-{self.group_id}"
        )
        self._thread.start()
        return session

    def _beat_forever(self, session: MemberSession, period: float) -> None:
        while not self._stop.wait(period):
            try:
                session.beat(self._clock())
            except OSError:
                return  # the session was closed under us

    def _stop_session(self, *, remove: bool) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._session is not None:
            self._session.close(remove=remove)
            self._session = None
