"""What every request handler shares: the store, its transport, the broker's identity and configs.

One `Broker` per `txlog serve`. It owns the writable `Store` and the `Transport` that serves
requests against it in this process, the same seam the embedded clients use, so a request
over the wire and a call from `txlog.Producer` go through the same coordinators and the same
file locks. Every store access happens on the store thread (`txlog.server.socket_server`);
the handlers never touch the store from the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from storage.store import Store
from txlog.transport import Transport

# The only node's id (`node.id`): leader of every partition and coordinator of every group and
# transactional id. Kafka has no default (a KRaft node must be given one); 1 is what the rig's broker runs.
NODE_ID = 1

MAX_NODE_ID = 2**31 - 1  # an int32 on the wire
DEFAULT_QUEUED_REQUEST_BYTES = 256 * 1024 * 1024
REPLICATION_FACTOR_CAP = "txlog.replication.factor.cap.enable"

# Broker configs the handlers read, at Kafka's defaults (`txlog serve --config KEY=VALUE` overrides).
DEFAULT_CONFIGS: dict[str, str] = {
    "node.id": str(NODE_ID),
    "auto.create.topics.enable": "true",
    "num.partitions": "1",
    "transaction.max.timeout.ms": "900000",
    # KIP-939: InitProducerId v6 `enable2Pc` is served only when this is true (Kafka's default is false)
    "transaction.two.phase.commit.enable": "false",
    "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000",
    "group.initial.rebalance.delay.ms": "3000",
    "group.consumer.heartbeat.interval.ms": "5000",
    "group.consumer.session.timeout.ms": "45000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "10000",
    "socket.request.max.bytes": "104857600",
    "connections.max.idle.ms": "600000",
    "max.request.partition.size.limit": "2000",
    # Kafka's default is -1 (unbounded); a server on a developer's machine bounds it (docs/serve.md §9).
    "queued.max.request.bytes": str(DEFAULT_QUEUED_REQUEST_BYTES),
    # Kafka's broker-wide default for topics without their own; the store has no such topic config.
    # Above 1 it cannot be met by the one replica: acks=all produces get NOT_ENOUGH_REPLICAS.
    "min.insync.replicas": "1",
    # txlog's own, off as a one-broker Kafka: when true, CreateTopics takes a replication factor
    # above 1 and makes the topic with the one replica there is, for tests written against a
    # cluster of several brokers (docs/serve.md §7). Every answer afterwards says 1 replica.
    REPLICATION_FACTOR_CAP: "false",
}


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where one listener accepts connections (the address Metadata advertises to its clients)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass
class Broker:
    store: Store
    configs: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_CONFIGS))
    transport: Transport = field(init=False)
    cluster_id: str = field(init=False)
    data_arrived: DataArrival = field(init=False)
    # The listeners as Kafka's `listeners` config writes them (PROTOCOL://HOST:PORT), once bound.
    listeners: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.transport = Transport(self.store)
        self.cluster_id = cluster_id_of(self.store.root)
        self.data_arrived = DataArrival()

    @property
    def node_id(self) -> int:
        return self.config_int("node.id")

    def config(self, name: str) -> str:
        return self.configs[name]

    def config_int(self, name: str) -> int:
        return int(self.configs[name])

    def config_bool(self, name: str) -> bool:
        return self.configs[name].strip().lower() == "true"

    def override(self, overrides: Mapping[str, Any]) -> None:
        for key, value in overrides.items():
            check_config(key, str(value))
        self.configs.update({k: str(v) for k, v in overrides.items()})


def check_config(key: str, value: str) -> None:
    """Refuse a broker config value the server cannot run with (ValueError, its message for the user)."""
    if key == "node.id" and not (value.isdigit() and int(value) <= MAX_NODE_ID):
        raise ValueError(f"node.id must be an integer from 0 to {MAX_NODE_ID}, not {value!r}")


def cluster_id_of(root: str) -> str:
    """A cluster id that stays the same for one store across restarts: the store's path, hashed into
    Kafka's 22-character UUID text (clients compare it to notice they reached another cluster)."""
    raw = uuid.uuid5(uuid.NAMESPACE_URL, "txlog:" + os.path.realpath(root)).bytes
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


class DataArrival:
    """Wakes long-polling fetches when this process appends, so they answer without polling the disk.

    Appends by other processes on the same store are not signalled: a waiting fetch also looks
    again every `RECHECK_S` (docs/DESIGN.md §11).
    """

    RECHECK_S = 0.1

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._event = asyncio.Event()

    def notify(self) -> None:
        """Called from any thread after an append (or anything that moves an end offset)."""
        if self._loop is not None and self._event is not None:
            self._loop.call_soon_threadsafe(self._event.set)

    async def wait(self, timeout_s: float) -> None:
        """Return after the next append, or after `timeout_s` (at most RECHECK_S), whichever comes first."""
        assert self._event is not None, "bind() first"
        event = self._event
        if event.is_set():
            self._event = asyncio.Event()  # the next waiter waits for the next append
            event = self._event
        try:
            await asyncio.wait_for(event.wait(), max(0.0, min(timeout_s, self.RECHECK_S)))
        except TimeoutError:
            pass
