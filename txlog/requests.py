"""The requests and responses that travel between clients and coordinators, and their constants.

Kafka's clients and brokers share these as `org.apache.kafka.common.requests` and the message
schemas; here they are the vocabulary of `txlog.transport.Transport`. Clients (`txlog.clients`)
and coordinators (`txlog.coordinator`) both import this module and never each other (Admin
excepted, docs/DESIGN.md §10), so a request can be served in this process today and over the
Kafka wire protocol by a server wing later, with the same types.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.errors import KafkaError
from txlog.errors import IllegalArgumentError
from txlog.topic_partition import TopicPartition

# ---- ids carried as request strings -----------------------------------------------------------------

# A non-flexible request or record-schema STRING has an i16 length: Kafka cannot carry a longer id.
MAX_STRING_BYTES = (1 << 15) - 1


def check_id(value: object, what: str, error: type[KafkaError]) -> str:
    """`value` if it can be a Kafka id (a transactional id, a group id), else `error` naming `what`.

    Kafka carries ids as schema STRINGs: non-empty (its coordinators refuse "" with
    INVALID_REQUEST / INVALID_GROUP_ID), UTF-8, at most 32767 bytes. Checking here, before any
    record is encoded, gives every client and coordinator the same clear error instead of an
    encoder's ValueError or a UnicodeEncodeError from deep inside.
    """
    if not isinstance(value, str) or not value:
        raise error(f"{what} must be a non-empty string, not {value!r}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise error(f"{what} is not valid Unicode (it holds a lone surrogate)") from None
    if size > MAX_STRING_BYTES:
        raise error(f"{what} is {size} UTF-8 bytes, longer than Kafka's limit of {MAX_STRING_BYTES}")
    return value


# ---- ListOffsets ------------------------------------------------------------------------------------

# Kafka's ListOffsets special timestamps (ListOffsetsRequest.EARLIEST_TIMESTAMP / LATEST_TIMESTAMP).
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
# ...and the later ones: the record with the largest timestamp (v7+, KIP-734), and two about tiered
# storage (v8+ earliest local offset, v9+ latest tiered offset, KIP-1005), which txlog does not have.
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

# ---- InitProducerId / EndTxn ------------------------------------------------------------------------

DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000  # Kafka's transaction.timeout.ms default
# The transaction protocol of the client that ends a transaction (Kafka's TransactionVersion):
# 2 bumps the epoch at every end (EndTxn v5+, txlog's producer), 0 keeps it (EndTxn v0-v4).
CLIENT_TRANSACTION_VERSION_0 = 0
CLIENT_TRANSACTION_VERSION_2 = 2


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    """What InitProducerId and EndTxn (transaction protocol v2) answer: the ids to stamp batches with."""

    producer_id: int
    epoch: int


NO_PRODUCER_ID_AND_EPOCH = ProducerIdAndEpoch(-1, -1)


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    """InitProducerId v6's answer (KIP-939): the ids to stamp batches with, and with
    `keep_prepared_txn` the ids of the transaction left open (OngoingTxnProducerId/Epoch),
    (-1, -1) when there is none."""

    ids: ProducerIdAndEpoch
    ongoing: ProducerIdAndEpoch = NO_PRODUCER_ID_AND_EPOCH


# ---- ConsumerGroupHeartbeat (KIP-848) ---------------------------------------------------------------

JOIN_EPOCH = 0  # a heartbeat with member epoch 0 joins (KIP-848)
LEAVE_EPOCH = -1  # a dynamic member leaves
STATIC_LEAVE_EPOCH = -2  # a static member leaves but keeps its assignment until its session expires

DEFAULT_SESSION_TIMEOUT_MS = 45_000
DEFAULT_MAX_POLL_INTERVAL_MS = 300_000
DEFAULT_HEARTBEAT_INTERVAL_MS = 3_000

Partitions = frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """KIP-848's ConsumerGroupHeartbeat, as a member sends it."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    topics: tuple[str, ...] | None = None  # None: unchanged since the last heartbeat
    owned: Partitions | None = None  # what the member holds; None: unchanged
    assignor: str | None = None
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    rebalance_timeout_ms: int = DEFAULT_MAX_POLL_INTERVAL_MS
    client_id: str = "txlog"
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    member_id: str
    member_epoch: int
    assignment: Partitions  # what the member may hold now; it revokes whatever else it holds
    pending: bool  # the target is not reached yet (partitions to revoke or not yet released): beat again soon


@dataclass(frozen=True, slots=True)
class MemberRef:
    """Who a commit comes from: the consumer's group metadata (KIP-447)."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None


def check_session_settings(session_timeout_ms: int, max_poll_interval_ms: int, heartbeat_interval_ms: int) -> None:
    """The member's timeouts as Kafka's consumer checks them before it joins."""
    for name, value in (
        ("session_timeout_ms", session_timeout_ms),
        ("max_poll_interval_ms", max_poll_interval_ms),
        ("heartbeat_interval_ms", heartbeat_interval_ms),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise IllegalArgumentError(f"{name} must be a positive integer, not {value!r}")
    if heartbeat_interval_ms >= session_timeout_ms:
        raise IllegalArgumentError("heartbeat_interval_ms must be lower than session_timeout_ms")
