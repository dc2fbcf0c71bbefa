"""What both directions of `txlog mirror` share: client settings, names, topic configs, the summary.

Partition mapping needs no partitioner: a record keeps its partition *number* (source
partition p is target partition p), so keys stay where they were without hashing them again,
and the target topic is created with the source's partition count (`check_partition_counts`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from txlog.errors import ClusterError, IllegalArgumentError

#: The pyproject extra that installs the Kafka client the mirror talks to clusters with.
EXTRA = "txlog[mirror]"

#: The group and transactional id a mirror uses unless told otherwise: `<prefix>-<direction>`.
DEFAULT_NAME = "txlog-mirror"

#: Store topic configs that mean the same on a Kafka broker and are copied to a topic the mirror
#: creates there. The others are left to the broker: `index.interval.bytes` is file layout,
#: `producer.id.expiration.ms` is a broker setting in Kafka and `max.producer.ids` is txlog's own.
COPIED_TOPIC_CONFIGS = ("retention.ms", "retention.bytes", "max.message.bytes", "segment.ms", "segment.bytes")

#: Kafka 4 refuses segment.bytes below 1 MiB (LogConfig's minimum); a smaller store value is not copied.
KAFKA_MIN_SEGMENT_BYTES = 1024 * 1024

#: Client settings the mirror sets itself: overriding them with -X would break exactly-once.
RESERVED_SETTINGS = frozenset(
    {"transactional.id", "enable.idempotence", "isolation.level", "enable.auto.commit", "group.id"}
)


@dataclass
class MirrorSummary:
    """What one run of a mirror did, for the one-line summary at its end."""

    direction: str  # "to" or "from"
    bootstrap: str
    records: int = 0
    transactions: int = 0
    #: (topic, partition) -> (first source offset this run, source offset the run ended at)
    spans: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    topics_created: list[str] = field(default_factory=list)
    stopped: bool = False  # ended by a stop request (Ctrl-C), not by having caught up

    def advance(self, topic: str, partition: int, start: int, end: int) -> None:
        """Note that `topic`-`partition` was mirrored from `start` (kept from the first call) to `end`."""
        first = self.spans.get((topic, partition), (start, start))[0]
        self.spans[(topic, partition)] = (first, end)

    def line(self) -> str:
        """One line: the records and transactions, the cluster, and each topic's offsets reached."""
        arrow = "to" if self.direction == "to" else "from"
        text = (
            f"Mirrored {_count(self.records, 'record')} in {_count(self.transactions, 'transaction')} "
            f"{arrow} {self.bootstrap}"
        )
        topics = sorted({topic for topic, _ in self.spans})
        if topics:
            parts = []
            for topic in topics:
                spans = sorted((p, span) for (t, p), span in self.spans.items() if t == topic)
                parts.append(
                    f"{topic} [{', '.join(f'{p}: {a}..{b}' if b > a else f'{p}: {b}' for p, (a, b) in spans)}]"
                )
            text += ": " + "; ".join(parts)
        if self.topics_created:
            text += f" (created {', '.join(self.topics_created)})"
        if self.stopped:
            text += " (stopped)"
        return text


@dataclass(frozen=True)
class Progress:
    """What a mirror tells its `progress` callback after each transaction it commits."""

    records: int
    transactions: int
    lag: int  # source records (offsets) not yet mirrored, as of the last look at the source


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def require_client() -> None:
    """Check that confluent-kafka (the `mirror` extra) is importable, else an ImportError naming the extra."""
    try:
        import confluent_kafka  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"txlog mirror needs confluent-kafka, which is not installed: pip install '{EXTRA}'") from exc


def parse_client_settings(pairs: Iterable[str]) -> dict[str, str]:
    """`-X key=value` pairs (kcat's convention) as a librdkafka config dict; later pairs win.

    Raises IllegalArgumentError for a pair without `=` or an empty key, and for a setting the
    mirror owns (`RESERVED_SETTINGS`): a mirror with auto-commit or without idempotence would
    not be exactly once, so it is refused rather than silently overridden.
    """
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise IllegalArgumentError(f"-X takes key=value (a librdkafka setting), not {pair!r}")
        if key in RESERVED_SETTINGS:
            raise IllegalArgumentError(f"-X {key} is set by the mirror itself (use --name to name its group)")
        out[key] = value
    return out


def mirror_name(name: str | None, direction: str) -> str:
    """The id a mirror's group and transactional id share: `name` as given, else `txlog-mirror-<direction>`.

    One name per mirror: a restarted mirror must find the same group (its positions) and the same
    transactional id (so its init fences the killed instance and ends its open transaction).
    """
    if name is None:
        return f"{DEFAULT_NAME}-{direction}"
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", name):
        raise IllegalArgumentError(f"a mirror name is 1-200 of A-Z a-z 0-9 . _ - , not {name!r}")
    return name


def target_topic_configs(overrides: Mapping[str, Any]) -> dict[str, str]:
    """The store topic's config overrides to set on the topic the mirror creates (`COPIED_TOPIC_CONFIGS`)."""
    out = {}
    for key in COPIED_TOPIC_CONFIGS:
        if key not in overrides:
            continue
        if key == "segment.bytes" and int(overrides[key]) < KAFKA_MIN_SEGMENT_BYTES:
            continue
        out[key] = str(overrides[key])
    return out


def store_topic_configs(cluster_configs: Mapping[str, str]) -> dict[str, str]:
    """The cluster topic's own config overrides to set on the store topic `mirror --from` creates.

    The same `COPIED_TOPIC_CONFIGS` as the other way: they mean the same in a store (storage/config.py).
    The store has no setting for the rest (cleanup.policy, compression.type,
    message.timestamp.type, ...), so they are not copied; records keep the timestamps the cluster
    gave them either way.
    """
    return {key: str(cluster_configs[key]) for key in COPIED_TOPIC_CONFIGS if key in cluster_configs}


def check_partition_counts(topic: str, source: int, target: int) -> None:
    """A topic that exists on both sides must have as many partitions: record p goes to partition p."""
    if source != target:
        raise ClusterError(
            f"topic '{topic}' has {source} partitions in the source and {target} in the target; "
            "the mirror keeps each record's partition number, so the counts must match"
        )


def cluster_error(exc: BaseException, doing: str) -> ClusterError:
    """A confluent-kafka exception as one ClusterError naming the broker's error and what was being done."""
    err = exc.args[0] if getattr(exc, "args", None) else None
    if err is not None and hasattr(err, "name") and hasattr(err, "str"):
        if err.name() == "_INVALID_ARG":  # librdkafka refused a setting before talking to any broker
            return ClusterError(f"the Kafka client settings (-X): {err.str()}")
        return ClusterError(f"{doing}: {err.name()}: {err.str()}")
    return ClusterError(f"{doing}: {exc}")
