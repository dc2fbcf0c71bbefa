"""Faults at the client-to-log seam: a transport that wraps the real one and fails on a plan.

Delivery semantics and crash recovery are about what happens when a request or its answer
goes missing, or the process dies between two requests. `FaultInjectingTransport` delegates
every request to the transport it wraps (`txlog.transport.Transport`) and, where its
`FaultPlan` says so, injects one of these instead — nothing in the log is patched:

Network faults, drawn per Produce (and TxnOffsetCommit, which produces the offsets' batch)
from a script or a seeded random rate, Kafka's three classic failures:

* LOSE_REQUEST — the request never reaches the log; the client times out.
* LOSE_ACK — the log appends, the acknowledgement is lost; the client times out.
* DUPLICATE — the request is delayed past the client's timeout and still arrives later,
  after the client's retry (if it retries) — the shape that makes retries duplicate.

Either way the client only sees RequestTimedOutError and cannot tell which it was.

Step faults, a declarative list of `StepFault(step, action, occurrence)`: at the n-th call
of a named request (`Step`, Kafka's request names), lose it, lose its answer, or crash the
process just before or just after it took effect. Documented outcomes of the crashes that
matter (reliability scenarios; tests/tools/test_fault_injection.py proves each):

* before the first WRITE_TXN_MARKERS of a commit (= right after PREPARE_COMMIT is durable):
  the decision stands; the next coordinator call or sweep rolls the commit forward;
* after the first WRITE_TXN_MARKERS: one partition is marked, the next call marks the rest;
* before END_TXN: the transaction stays Ongoing until its timeout (or a new instance) aborts it;
* after END_TXN with LOSE_ACK: the retried EndTxn is recognised (KIP-890) and answers the ids.

A crash raises `Crashed` (a BaseException: no client handler swallows it) and leaves the
wrapper dead: every later request raises it too, as nothing a dead process sends arrives.
`KILL_*` sends SIGKILL to the process instead (or calls the wrapper's `kill`), for child
processes (the demo, the crash-matrix worker).
"""

from __future__ import annotations

import os
import random
import signal
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from storage.errors import KafkaError
from storage.partition_log import AppendResult
from storage.records import ControlType
from txlog.errors import RequestTimedOutError
from txlog.fetch import FetchResult, IsolationLevel
from txlog.requests import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    HeartbeatRequest,
    HeartbeatResponse,
    InitProducerIdResult,
    MemberRef,
    ProducerIdAndEpoch,
)
from txlog.schemas.transaction_log import TxnLogValue
from txlog.topic_partition import OffsetAndMetadata, TopicPartition
from txlog.transport import Transport

T = TypeVar("T")


class Fault(str, Enum):
    """What the network does to one Produce request."""

    NONE = "none"
    LOSE_REQUEST = "lose-request"
    LOSE_ACK = "lose-ack"
    DUPLICATE = "duplicate"


class Step(str, Enum):
    """The requests of the seam a step fault can name (Kafka's request names)."""

    PRODUCE = "Produce"
    FETCH = "Fetch"
    LIST_OFFSETS = "ListOffsets"
    INIT_PRODUCER_ID = "InitProducerId"
    ADD_PARTITIONS_TO_TXN = "AddPartitionsToTxn"
    ADD_OFFSETS_TO_TXN = "AddOffsetsToTxn"
    TXN_OFFSET_COMMIT = "TxnOffsetCommit"
    END_TXN = "EndTxn"
    WRITE_TXN_MARKERS = "WriteTxnMarkers"  # the coordinator's, one call per partition marked
    CHECK_TRANSACTION_ALIVE = "CheckTransactionAlive"
    ABORT_EXPIRED_TRANSACTIONS = "AbortExpiredTransactions"  # the coordinator's sweep
    OFFSET_COMMIT = "OffsetCommit"
    OFFSET_FETCH = "OffsetFetch"
    CONSUMER_GROUP_HEARTBEAT = "ConsumerGroupHeartbeat"


class Action(str, Enum):
    """What a step fault does at its call."""

    LOSE_REQUEST = "lose-request"  # not served; the caller gets RequestTimedOutError
    LOSE_ACK = "lose-ack"  # served, the answer is lost; the caller gets RequestTimedOutError
    CRASH_BEFORE = "crash-before"  # the process dies just before the call: Crashed
    CRASH_AFTER = "crash-after"  # the process dies once the call took effect: Crashed
    KILL_BEFORE = "kill-before"  # SIGKILL just before the call (a child process)
    KILL_AFTER = "kill-after"  # SIGKILL once the call took effect


@dataclass(frozen=True, slots=True)
class StepFault:
    """At the `occurrence`-th call (1-based) of `step` through the wrapper, do `action`."""

    step: Step
    action: Action
    occurrence: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "step", Step(self.step))
        object.__setattr__(self, "action", Action(self.action))
        if isinstance(self.occurrence, bool) or not isinstance(self.occurrence, int) or self.occurrence < 1:
            raise ValueError(f"occurrence must be a positive integer, not {self.occurrence!r}")


class Crashed(BaseException):
    """The process 'died' at a planned step. A BaseException, so no client error handler runs on it."""


class FaultPlan:
    """Which fault meets each request, reproducible so that several runs face the same faults.

    Network faults on Produce: either an explicit script (one Fault per request, then NONE)
    or a seeded random draw at `rate` among `kinds`. Step faults: `steps`, each naming a
    request, the call of it, and what happens.
    """

    def __init__(
        self,
        script: Iterable[Fault] | None = None,
        *,
        rate: float = 0.0,
        kinds: Iterable[Fault] = (Fault.LOSE_REQUEST, Fault.LOSE_ACK, Fault.DUPLICATE),
        seed: int | None = None,
        steps: Iterable[StepFault] = (),
    ):
        self._script = deque(script or ())
        self._rate = rate
        self._kinds = tuple(kinds)
        self._random = random.Random(seed)
        self.injected: dict[Fault, int] = {f: 0 for f in Fault}
        self._steps: dict[tuple[Step, int], Action] = {(f.step, f.occurrence): f.action for f in steps}
        self.calls: dict[Step, int] = {}  # requests seen per step, faulted or not
        self.fired: list[StepFault] = []  # the step faults that happened, in order

    def arm(self, *faults: StepFault) -> None:
        """Add step faults counted from now: occurrence n is the n-th call of its step after this.

        For a fault meant for one operation after setup work (warm-up transactions) whose
        number of calls is not worth predicting.
        """
        for f in faults:
            self._steps[(f.step, self.calls.get(f.step, 0) + f.occurrence)] = f.action

    def next(self) -> Fault:
        """The network fault for the next Produce request."""
        if self._script:
            fault = self._script.popleft()
        elif self._rate and self._random.random() < self._rate:
            fault = self._random.choice(self._kinds)
        else:
            fault = Fault.NONE
        self.injected[fault] += 1
        return fault

    def action_for(self, step: Step) -> Action | None:
        """Count one call of `step`; the action planned for this call, if any."""
        n = self.calls.get(step, 0) + 1
        self.calls[step] = n
        action = self._steps.get((step, n)) if self._steps else None
        if action is not None:
            self.fired.append(StepFault(step, action, n))
        return action


def _sigkill(fault: StepFault) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _timed_out(step: Step) -> RequestTimedOutError:
    return RequestTimedOutError(f"{step.value} request timed out")


class FaultInjectingTransport(Transport):
    """A transport that delegates every request to `inner` and fails where `plan` says.

    It is a Transport (clients take it wherever they take one) but serves nothing itself:
    each request goes to `inner`, wrapped in the plan's step fault for that call. The
    coordinator behind `inner` sends its WriteTxnMarkers back through this wrapper.
    """

    serves_concurrently = False  # the plan counts requests in the order they come: one at a time

    def __init__(self, inner: Transport, plan: FaultPlan, *, kill: Callable[[StepFault], None] | None = None):
        super().__init__(inner.store)
        self.inner = inner
        self.plan = plan
        self._kill = kill or _sigkill  # how KILL_* ends the process (a worker may announce it first)
        self.crashed = False
        self._delayed: list[tuple[str, int, bytes, str | None, bool, bool]] = []
        inner.send_markers_through(self)

    # the coordinators are the inner transport's: there is one broker side, however many wrappers
    @property
    def transaction_coordinator(self):
        return self.inner.transaction_coordinator

    @property
    def group_coordinator(self):
        return self.inner.group_coordinator

    def send_markers_through(self, outer: Transport) -> None:
        self.inner.send_markers_through(outer)

    # ---- the plan at one call ---------------------------------------------------------------------------

    def _call(self, step: Step, serve: Callable[[], T]) -> T:
        """Serve one request through the plan's step fault for this call (if any)."""
        if self.crashed:
            raise Crashed(f"{step.value} after the process crashed")
        action = self.plan.action_for(step)
        if action is None:
            return serve()
        if action is Action.LOSE_REQUEST:
            raise _timed_out(step)
        if action in (Action.CRASH_BEFORE, Action.KILL_BEFORE):
            self._die(self.plan.fired[-1])
        result = serve()
        if action is Action.LOSE_ACK:
            raise _timed_out(step)
        self._die(self.plan.fired[-1])
        return result

    def _die(self, fault: StepFault) -> None:
        if fault.action in (Action.KILL_BEFORE, Action.KILL_AFTER):
            self._kill(fault)
        self.crashed = True
        raise Crashed(f"planned crash ({fault.action.value} {fault.step.value} #{fault.occurrence})")

    # ---- Produce: network faults, then step faults ------------------------------------------------------

    def produce(
        self,
        topic: str,
        partition: int,
        data: bytes | bytearray,
        transactional_id: str | None = None,
        *,
        sync: bool = True,
        trusted: bool = False,
    ) -> AppendResult:
        return self._through_network(
            topic,
            partition,
            data,
            transactional_id,
            lambda: self._call(
                Step.PRODUCE,
                lambda: self.inner.produce(topic, partition, data, transactional_id, sync=sync, trusted=trusted),
            ),
            sync=sync,
            trusted=trusted,
        )

    def sync_partitions(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Passed through: a sync is no request of its own (it is the durability of produces already made)."""
        if self.crashed:
            raise Crashed("sync after the process crashed")
        self.inner.sync_partitions(partitions)

    def sync_each_partition(self, partitions: Sequence[tuple[str, int]]) -> list[KafkaError | None]:
        """Passed through, as `sync_partitions`."""
        if self.crashed:
            raise Crashed("sync after the process crashed")
        return self.inner.sync_each_partition(partitions)

    def produce_durably(
        self, requests: Sequence[tuple[str, int, bytes | bytearray]], *, trusted: bool = False
    ) -> list[AppendResult | KafkaError]:
        """One durable `produce` per partition, each a request of the plan's, in order (the sender gives
        such a round to this wrapper one `produce` at a time anyway: `serves_concurrently`)."""
        outcomes: list[AppendResult | KafkaError] = []
        for topic, partition, data in requests:
            try:
                outcomes.append(self.produce(topic, partition, data, trusted=trusted))
            except KafkaError as exc:
                outcomes.append(exc)
        return outcomes

    def produce_requests(
        self, topic: str, partition: int, requests: Sequence[bytes | bytearray], *, trusted: bool = False
    ) -> tuple[list[AppendResult], KafkaError | None]:
        """One durable `produce` per request, each a request of the plan's, in order, up to the first
        refused (the sender never gives this wrapper such a round: `serves_concurrently`)."""
        results: list[AppendResult] = []
        for data in requests:
            try:
                results.append(self.produce(topic, partition, data, trusted=trusted))
            except KafkaError as exc:
                return results, exc
        return results, None

    def txn_offset_commit(
        self, group: str, member: MemberRef | None, topic: str, partition: int, data: bytes, transactional_id: str
    ) -> AppendResult:
        return self._through_network(
            topic,
            partition,
            data,
            transactional_id,
            lambda: self._call(
                Step.TXN_OFFSET_COMMIT,
                lambda: self.inner.txn_offset_commit(group, member, topic, partition, data, transactional_id),
            ),
            sync=False,
        )  # a late duplicate is written as the original was

    def _through_network(
        self,
        topic: str,
        partition: int,
        data: bytes | bytearray,
        transactional_id: str | None,
        send: Callable[[], AppendResult],
        *,
        sync: bool = True,
        trusted: bool = False,
    ) -> AppendResult:
        if self.crashed:
            raise Crashed("produce after the process crashed")
        fault = self.plan.next()
        if fault is Fault.LOSE_REQUEST:
            raise RequestTimedOutError(f"request to {topic}-{partition} timed out")
        if fault is Fault.DUPLICATE:
            # the late copy is the bytes as sent: a producer's bytearray batch is re-stamped if built again
            self._delayed.append((topic, partition, bytes(data), transactional_id, sync, trusted))
            raise RequestTimedOutError(f"request to {topic}-{partition} timed out")
        try:
            result = send()
        finally:
            if not self.crashed:
                self.deliver_delayed()
        if fault is Fault.LOSE_ACK:
            raise RequestTimedOutError(f"request to {topic}-{partition} timed out")
        return result

    def deliver_delayed(self) -> None:
        """Late requests finally arrive; whatever the log answers is lost with the connection."""
        delayed, self._delayed = self._delayed, []
        for topic, partition, data, transactional_id, sync, trusted in delayed:
            try:
                self.inner.produce(topic, partition, data, transactional_id, sync=sync, trusted=trusted)
            except KafkaError:
                pass  # e.g. refused by epoch after the transaction ended: nobody is listening

    # ---- every other request: step faults only ---------------------------------------------------------------

    def fetch(
        self, tp: TopicPartition, offset: int, isolation: IsolationLevel, *, max_records: int, max_bytes: int
    ) -> FetchResult:
        return self._call(
            Step.FETCH, lambda: self.inner.fetch(tp, offset, isolation, max_records=max_records, max_bytes=max_bytes)
        )

    def list_offsets(self, tp: TopicPartition, timestamp: int, isolation: IsolationLevel) -> tuple[int, int] | None:
        return self._call(Step.LIST_OFFSETS, lambda: self.inner.list_offsets(tp, timestamp, isolation))

    def init_producer_id(
        self,
        transactional_id: str | None,
        timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
        expected: ProducerIdAndEpoch | None = None,
    ) -> ProducerIdAndEpoch:
        return self._call(
            Step.INIT_PRODUCER_ID, lambda: self.inner.init_producer_id(transactional_id, timeout_ms, expected)
        )

    def init_producer_id_2pc(
        self,
        transactional_id: str,
        timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
        *,
        enable_2pc: bool,
        keep_prepared_txn: bool,
        expected: ProducerIdAndEpoch | None = None,
    ) -> InitProducerIdResult:
        return self._call(
            Step.INIT_PRODUCER_ID,
            lambda: self.inner.init_producer_id_2pc(
                transactional_id,
                timeout_ms,
                enable_2pc=enable_2pc,
                keep_prepared_txn=keep_prepared_txn,
                expected=expected,
            ),
        )

    def add_partitions_to_txn(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> TxnLogValue:
        return self._call(
            Step.ADD_PARTITIONS_TO_TXN,
            lambda: self.inner.add_partitions_to_txn(transactional_id, producer_id, epoch, partitions),
        )

    def add_offsets_to_txn(self, transactional_id: str, producer_id: int, epoch: int, group: str) -> TxnLogValue:
        return self._call(
            Step.ADD_OFFSETS_TO_TXN, lambda: self.inner.add_offsets_to_txn(transactional_id, producer_id, epoch, group)
        )

    def add_partitions_on_produce(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> None:
        return self._call(
            Step.ADD_PARTITIONS_TO_TXN,
            lambda: self.inner.add_partitions_on_produce(transactional_id, producer_id, epoch, partitions),
        )

    def end_txn(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool, *, client_version: int = 2
    ) -> ProducerIdAndEpoch:
        return self._call(
            Step.END_TXN,
            lambda: self.inner.end_txn(transactional_id, producer_id, epoch, commit, client_version=client_version),
        )

    def check_transaction_alive(self, transactional_id: str, producer_id: int, epoch: int) -> TxnLogValue:
        return self._call(
            Step.CHECK_TRANSACTION_ALIVE,
            lambda: self.inner.check_transaction_alive(transactional_id, producer_id, epoch),
        )

    def abort_expired_transactions(self) -> None:
        self._call(Step.ABORT_EXPIRED_TRANSACTIONS, self.inner.abort_expired_transactions)

    def write_txn_markers(
        self,
        topic: str,
        partition: int,
        control: ControlType,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        timestamp: int,
        *,
        sync: bool = True,
    ) -> AppendResult:
        return self._call(
            Step.WRITE_TXN_MARKERS,
            lambda: self.inner.write_txn_markers(
                topic, partition, control, producer_id, producer_epoch, coordinator_epoch, timestamp, sync=sync
            ),
        )

    def offsets_partition(self, group: str) -> TopicPartition:
        return self.inner.offsets_partition(group)

    def encode_offset_commit(
        self, group: str, tp: TopicPartition, offset: OffsetAndMetadata, timestamp: int
    ) -> tuple[bytes, bytes]:
        return self.inner.encode_offset_commit(group, tp, offset, timestamp)

    def offset_commit(
        self, group: str, offsets: Mapping[TopicPartition, OffsetAndMetadata | int], member: MemberRef | None
    ) -> None:
        self._call(Step.OFFSET_COMMIT, lambda: self.inner.offset_commit(group, offsets, member))

    def offset_fetch(
        self, group: str, partitions: Iterable[TopicPartition] | None, *, require_stable: bool
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        return self._call(
            Step.OFFSET_FETCH, lambda: self.inner.offset_fetch(group, partitions, require_stable=require_stable)
        )

    def consumer_group_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        return self._call(Step.CONSUMER_GROUP_HEARTBEAT, lambda: self.inner.consumer_group_heartbeat(request))
