"""Per-topic configuration with Kafka's names, defaults and validation.

Topic configs are stored as Kafka writes them on the command line (`segment.bytes=1048576`),
so `txlog topics create --config k=v` and Kafka users speak the same language. Two keys are
txlog's own, taken from broker settings Kafka applies per partition anyway:
`producer.id.expiration.ms` and `max.producer.ids` (a cap on producer states per partition,
0 = unlimited; redpanda has the same knob, and docs/reliability-scenarios.md scenario 9 needs it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from storage.errors import InvalidConfigurationError

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# name -> (default, minimum, maximum); every config is an integer.
_SPEC: dict[str, tuple[int, int, int]] = {
    "segment.bytes": (1073741824, 14, INT32_MAX),
    "segment.ms": (604800000, 1, INT64_MAX),
    "retention.ms": (604800000, -1, INT64_MAX),
    "retention.bytes": (-1, -1, INT64_MAX),
    "max.message.bytes": (1048588, 0, INT32_MAX),
    "index.interval.bytes": (4096, 0, INT32_MAX),
    "producer.id.expiration.ms": (86400000, 1, INT64_MAX),
    "max.producer.ids": (0, 0, INT32_MAX),
}

CONFIG_NAMES: tuple[str, ...] = tuple(_SPEC)


def is_long_config(name: str) -> bool:
    """Is the config a 64-bit one (Kafka's LONG type) rather than an INT? Its range says so."""
    return _SPEC[name][2] > INT32_MAX


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """Effective configuration of one topic (defaults filled in)."""

    segment_bytes: int = _SPEC["segment.bytes"][0]
    segment_ms: int = _SPEC["segment.ms"][0]
    retention_ms: int = _SPEC["retention.ms"][0]
    retention_bytes: int = _SPEC["retention.bytes"][0]
    max_message_bytes: int = _SPEC["max.message.bytes"][0]
    index_interval_bytes: int = _SPEC["index.interval.bytes"][0]
    producer_id_expiration_ms: int = _SPEC["producer.id.expiration.ms"][0]
    max_producer_ids: int = _SPEC["max.producer.ids"][0]

    @classmethod
    def from_overrides(cls, overrides: Mapping[str, Any] | None) -> TopicConfig:
        """Build from Kafka-named overrides, rejecting unknown names and bad values."""
        values = validate_overrides(overrides or {})
        return cls(**{name.replace(".", "_"): v for name, v in values.items()})

    def to_dict(self) -> dict[str, int]:
        """Kafka-named view of every setting, as `topics describe` shows it."""
        return {f.name.replace("_", "."): getattr(self, f.name) for f in fields(self)}


def validate_overrides(overrides: Mapping[str, Any]) -> dict[str, int]:
    """Check names and ranges; values may be ints or decimal strings (from a CLI)."""
    out: dict[str, int] = {}
    for name, raw in overrides.items():
        if name not in _SPEC:
            known = ", ".join(CONFIG_NAMES)
            raise InvalidConfigurationError(f"unknown topic config '{name}' (known: {known})")
        _, low, high = _SPEC[name]
        try:
            value = int(raw)
        except (TypeError, ValueError):
            raise InvalidConfigurationError(f"config {name}: '{raw}' is not an integer") from None
        if isinstance(raw, bool) or not low <= value <= high:
            raise InvalidConfigurationError(f"config {name}={raw} is outside [{low}, {high}]")
        out[name] = value
    return out
