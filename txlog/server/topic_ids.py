"""Topic ids for the wire: the one rule that gives every topic of a store a Kafka `Uuid`.

Kafka names topics by id in KIP-848's assignments (ConsumerGroupHeartbeat carries only ids)
and in newer Metadata, Fetch and OffsetCommit versions; the Java consumer and librdkafka
resolve an assignment's ids through Metadata, so Metadata and the group APIs must answer
the same id for a topic. A Kafka-written topic keeps the id in its `partition.metadata`;
a txlog topic has none (docs/DESIGN.md §11), so it gets one derived from the store's
cluster id and the topic's name: stable across server restarts, with nothing to persist.

The price of deriving it: a topic deleted and created again under the same name keeps its
id, so a client cannot tell the two apart by id, as it could on a broker (docs/serve.md §11).
"""

from __future__ import annotations

import base64
import uuid

from storage.errors import InconsistentTopicIdError
from storage.store import Store

ZERO_UUID = uuid.UUID(int=0)
# Kafka reserves the zero id ("no id") and 1 (the KRaft metadata topic's); a derived id avoids both.
_RESERVED = frozenset({0, 1})
_NAMESPACE = uuid.UUID("6f0d9d2e-8a52-4bde-9d53-4a4f2f6b1e7c")  # txlog's namespace for derived topic ids


def topic_id(store: Store, cluster_id: str, name: str) -> uuid.UUID:
    """The id of topic `name`: its partition.metadata's when it has one, else derived from the name."""
    try:
        recorded = store.topic_id(name)
    except InconsistentTopicIdError:
        recorded = None
    if recorded is not None:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(recorded + "=="))
    derived = bytearray(uuid.uuid5(_NAMESPACE, f"{cluster_id}\0{name}").bytes)
    derived[0] &= 0x7F  # Kafka's Uuid.randomUuid never gives an id whose text starts with '-'
    value = uuid.UUID(bytes=bytes(derived))
    return value if value.int not in _RESERVED else uuid.UUID(int=2)


def topic_name(store: Store, cluster_id: str, wanted: uuid.UUID) -> str | None:
    """The topic whose id is `wanted` (None if no topic of the store has it)."""
    if wanted == ZERO_UUID:
        return None
    return next((name for name in store.list_topics() if topic_id(store, cluster_id, name) == wanted), None)


def topic_names(store: Store, cluster_id: str) -> dict[uuid.UUID, str]:
    """Every topic of the store by id (one pass, for a request naming several ids)."""
    return {topic_id(store, cluster_id, name): name for name in store.list_topics()}
