"""The boundary between a producer and the log: where "the network" can fail (DESIGN.md §4).

With no broker, a produce request is a function call. Delivery semantics are about what
happens when that call's request or answer goes missing, so the call goes through this
boundary, where a fault plan can inject Kafka's three classic failures:

* LOSE_REQUEST — the request never reaches the log; the client times out.
* LOSE_ACK — the log appends, the acknowledgement is lost; the client times out.
* DUPLICATE — the request is delayed past the client's timeout and still arrives later,
  after the client's retry (if it retries) — the shape that makes retries duplicate.

Either way the client only sees RequestTimedOutError and cannot tell which it was.
"""

from __future__ import annotations

import random
from collections import deque
from enum import Enum
from typing import Iterable

from storage.errors import KafkaError
from storage.partition_log import AppendResult
from storage.producer_state import TxnVerifier
from storage.store import Store
from txlog.errors import RequestTimedOutError


class Fault(str, Enum):
    NONE = "none"
    LOSE_REQUEST = "lose-request"
    LOSE_ACK = "lose-ack"
    DUPLICATE = "duplicate"


class FaultPlan:
    """Which fault meets each request, reproducible so that several runs face the same faults.

    Either an explicit script (one Fault per request, then NONE) or a seeded random draw
    at `rate` among `kinds`.
    """

    def __init__(self, script: Iterable[Fault] | None = None, *, rate: float = 0.0,
                 kinds: Iterable[Fault] = (Fault.LOSE_REQUEST, Fault.LOSE_ACK, Fault.DUPLICATE),
                 seed: int | None = None):
        self._script = deque(script or ())
        self._rate = rate
        self._kinds = tuple(kinds)
        self._random = random.Random(seed)
        self.injected: dict[Fault, int] = {f: 0 for f in Fault}

    def next(self) -> Fault:
        if self._script:
            fault = self._script.popleft()
        elif self._rate and self._random.random() < self._rate:
            fault = self._random.choice(self._kinds)
        else:
            fault = Fault.NONE
        self.injected[fault] += 1
        return fault


class Transport:
    """Delivers produce requests to partition logs, applying a fault plan if one is given."""

    def __init__(self, store: Store, faults: FaultPlan | None = None):
        self.store = store
        self.faults = faults
        self._delayed: list[tuple[str, int, bytes, TxnVerifier | None]] = []

    def produce(self, topic: str, partition: int, data: bytes, verify_txn: TxnVerifier | None = None) -> AppendResult:
        fault = self.faults.next() if self.faults is not None else Fault.NONE
        if fault is Fault.LOSE_REQUEST:
            raise RequestTimedOutError(f"request to {topic}-{partition} timed out")
        if fault is Fault.DUPLICATE:
            self._delayed.append((topic, partition, data, verify_txn))
            raise RequestTimedOutError(f"request to {topic}-{partition} timed out")
        try:
            result = self.store.partition(topic, partition).append(data, verify_txn=verify_txn)
        finally:
            self.deliver_delayed()
        if fault is Fault.LOSE_ACK:
            raise RequestTimedOutError(f"request to {topic}-{partition} timed out")
        return result

    def deliver_delayed(self) -> None:
        """Late requests finally arrive; whatever the log answers is lost with the connection."""
        delayed, self._delayed = self._delayed, []
        for topic, partition, data, verify in delayed:
            try:
                self.store.partition(topic, partition).append(data, verify_txn=verify)
            except KafkaError:
                pass  # e.g. refused by epoch after the transaction ended: nobody is listening
