"""Delivery semantics made observable: the same faults, three producer settings, counted outcomes.

Each mode sends the same numbered records, one request per record, through a transport
that meets the same seeded fault plan. Afterwards the topic is read back
(read_uncommitted: everything that reached the log) and every sent record is classified:

* at-most-once (no retries): a lost request or lost acknowledgement is never retried, so
  records are lost and never duplicated;
* at-least-once (retries, no idempotence): a retry after a lost acknowledgement or a late
  duplicate writes the record twice, so records are duplicated and never lost;
* exactly-once (idempotence, and the transactional variant): the log recognises a retry by
  producer id and sequence, so nothing is lost or duplicated.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from dataclasses import dataclass
from enum import Enum
from typing import TypedDict

from storage.partition_log import PartitionLog
from storage.store import Store
from txlog.clients.producer import Producer
from txlog.errors import KafkaError
from txlog.fetch import IsolationLevel, fetch
from txlog.tools.fault_injection import Fault, FaultInjectingTransport, FaultPlan
from txlog.transport import Transport

DEFAULT_RECORDS = 200
DEFAULT_FAULT_RATE = 0.2


class DeliveryMode(str, Enum):
    AT_MOST_ONCE = "at-most-once"
    AT_LEAST_ONCE = "at-least-once"
    EXACTLY_ONCE = "exactly-once"
    EXACTLY_ONCE_TRANSACTIONAL = "exactly-once (transactions)"


class _ProducerSettings(TypedDict, total=False):
    """The Producer keywords a mode sets (the rest keep their defaults)."""

    enable_idempotence: bool
    retries: int
    linger_ms: int
    transport: Transport
    transactional_id: str


_SETTINGS: dict[DeliveryMode, _ProducerSettings] = {
    DeliveryMode.AT_MOST_ONCE: _ProducerSettings(enable_idempotence=False, retries=0),
    DeliveryMode.AT_LEAST_ONCE: _ProducerSettings(enable_idempotence=False, retries=10),
    DeliveryMode.EXACTLY_ONCE: _ProducerSettings(enable_idempotence=True, retries=10),
    DeliveryMode.EXACTLY_ONCE_TRANSACTIONAL: _ProducerSettings(retries=10),
}


@dataclass(frozen=True, slots=True)
class DeliveryReport:
    """What one mode did under the injected faults. `written` counts distinct records in the log."""

    mode: DeliveryMode
    sent: int
    acknowledged: int
    written: int
    duplicated: int
    lost: int
    faults: dict[str, int]


def run_mode(store: Store, topic: str, mode: DeliveryMode, records: int, faults: FaultPlan) -> DeliveryReport:
    """Send `records` numbered values in `mode` through `faults`; count what the log holds."""
    run = uuid.uuid4().hex[:8]
    log = store.partition(topic, 0)
    start = log.log_end_offset
    settings: _ProducerSettings = {
        **_SETTINGS[mode],
        "linger_ms": 0,
        "transport": FaultInjectingTransport(Transport(store), faults),
    }
    if mode is DeliveryMode.EXACTLY_ONCE_TRANSACTIONAL:
        settings["transactional_id"] = f"delivery-{run}"
    acknowledged = 0
    with Producer(store, **settings) as producer:
        if mode is DeliveryMode.EXACTLY_ONCE_TRANSACTIONAL:
            producer.init_transactions()
            producer.begin_transaction()
        for i in range(records):
            future = producer.send(topic, value=f"{run}:{i}".encode(), partition=0)
            producer.flush()
            acknowledged += future.exception() is None
        if mode is DeliveryMode.EXACTLY_ONCE_TRANSACTIONAL:
            producer.commit_transaction()
    ours = f"{run}:".encode()  # the topic may hold other runs' records, null values included
    copies = Counter(v for v in _values_since(log, start) if v is not None and v.startswith(ours))
    written = len(copies)
    return DeliveryReport(
        mode,
        records,
        acknowledged,
        written,
        sum(copies.values()) - written,
        records - written,
        {f.value: n for f, n in faults.injected.items() if f is not Fault.NONE},
    )


def _values_since(log: PartitionLog, start: int) -> list[bytes | None]:
    values: list[bytes | None] = []
    position = start
    while True:
        result = fetch(log, position, IsolationLevel.READ_UNCOMMITTED, max_records=10_000)
        values.extend(r.value for r in result.records)
        if result.next_offset >= result.high_watermark or result.next_offset == position:
            return values
        position = result.next_offset


def compare_delivery_semantics(
    store: str | os.PathLike | Store,
    *,
    records: int = DEFAULT_RECORDS,
    fault_rate: float = DEFAULT_FAULT_RATE,
    seed: int = 7,
    topic: str = "delivery-semantics",
    modes: tuple[DeliveryMode, ...] = tuple(DeliveryMode),
) -> list[DeliveryReport]:
    """Run every mode over the same seeded faults into `topic` (created if missing); one report each."""
    own = not isinstance(store, Store)
    s = store if isinstance(store, Store) else Store.open(store)
    try:
        if not s.has_topic(topic):
            try:
                s.create_topic(topic, 1)
            except KafkaError:
                if not s.has_topic(topic):
                    raise
        return [run_mode(s, topic, mode, records, FaultPlan(rate=fault_rate, seed=seed)) for mode in modes]
    finally:
        if own:
            s.close()
