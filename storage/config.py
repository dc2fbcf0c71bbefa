"""Per-topic configuration with Kafka's names, types, defaults and validation.

Topic configs are stored as Kafka writes them on the command line (`segment.bytes=1048576`),
so `txlog topics create --config k=v` and Kafka users speak the same language. Each config
has Kafka's ConfigDef type (LONG, INT, DOUBLE, LIST): the type says how a value is parsed,
how it is shown, and what DescribeConfigs reports. Two keys are txlog's own, taken from
broker settings Kafka applies per partition anyway: `producer.id.expiration.ms` and
`max.producer.ids` (a cap on producer states per partition, 0 = unlimited; redpanda has the
same knob, and docs/reliability-scenarios.md scenario 9 needs it).

`cleanup.policy` is a LIST of `delete` and `compact` (Kafka's LogConfig): retention deletes
whole segments only when `delete` is in it, the cleaner (storage/log_cleaner.py) compacts only
when `compact` is; an empty list keeps everything (Kafka 4.x). It is stored normalised (sorted,
no repeats), so "delete,compact" and "compact,delete" are the same setting.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from storage.errors import InvalidConfigurationError
from storage.varint import INT32_MAX, INT64_MAX

CLEANUP_POLICY_DELETE = "delete"
CLEANUP_POLICY_COMPACT = "compact"
CLEANUP_POLICIES = (CLEANUP_POLICY_COMPACT, CLEANUP_POLICY_DELETE)

ConfigValue = int | float | str


class ConfigType(Enum):
    """Kafka's ConfigDef.Type of a topic config (the names DescribeConfigs reports)."""

    INT = "INT"
    LONG = "LONG"
    DOUBLE = "DOUBLE"
    LIST = "LIST"


@dataclass(frozen=True, slots=True)
class _Spec:
    type: ConfigType
    default: ConfigValue
    low: float = 0
    high: float = INT64_MAX


_SPEC: dict[str, _Spec] = {
    "segment.bytes": _Spec(ConfigType.INT, 1073741824, 14, INT32_MAX),
    "segment.ms": _Spec(ConfigType.LONG, 604800000, 1),
    "retention.ms": _Spec(ConfigType.LONG, 604800000, -1),
    "retention.bytes": _Spec(ConfigType.LONG, -1, -1),
    "max.message.bytes": _Spec(ConfigType.INT, 1048588, 0, INT32_MAX),
    "index.interval.bytes": _Spec(ConfigType.INT, 4096, 0, INT32_MAX),
    "producer.id.expiration.ms": _Spec(ConfigType.LONG, 86400000, 1),
    "max.producer.ids": _Spec(ConfigType.INT, 0, 0, INT32_MAX),
    "cleanup.policy": _Spec(ConfigType.LIST, CLEANUP_POLICY_DELETE),
    "min.cleanable.dirty.ratio": _Spec(ConfigType.DOUBLE, 0.5, 0, 1),
    "min.compaction.lag.ms": _Spec(ConfigType.LONG, 0, 0),
    "max.compaction.lag.ms": _Spec(ConfigType.LONG, INT64_MAX, 1),
    "delete.retention.ms": _Spec(ConfigType.LONG, 86400000, 0),
}

CONFIG_NAMES: tuple[str, ...] = tuple(_SPEC)


def config_type(name: str) -> ConfigType:
    """Kafka's type of the config `name` (KeyError for a name the store does not know)."""
    return _SPEC[name].type


def is_long_config(name: str) -> bool:
    """Is the config a 64-bit one (Kafka's LONG type)?"""
    return _SPEC[name].type is ConfigType.LONG


def format_config_value(value: ConfigValue) -> str:
    """A value as Kafka shows it: integers and lists as written, a DOUBLE as Java prints it (0.5, 1.0)."""
    if isinstance(value, float):
        return repr(value)
    return str(value)


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """Effective configuration of one topic (defaults filled in)."""

    segment_bytes: int = int(_SPEC["segment.bytes"].default)
    segment_ms: int = int(_SPEC["segment.ms"].default)
    retention_ms: int = int(_SPEC["retention.ms"].default)
    retention_bytes: int = int(_SPEC["retention.bytes"].default)
    max_message_bytes: int = int(_SPEC["max.message.bytes"].default)
    index_interval_bytes: int = int(_SPEC["index.interval.bytes"].default)
    producer_id_expiration_ms: int = int(_SPEC["producer.id.expiration.ms"].default)
    max_producer_ids: int = int(_SPEC["max.producer.ids"].default)
    cleanup_policy: str = str(_SPEC["cleanup.policy"].default)
    min_cleanable_dirty_ratio: float = float(_SPEC["min.cleanable.dirty.ratio"].default)
    min_compaction_lag_ms: int = int(_SPEC["min.compaction.lag.ms"].default)
    max_compaction_lag_ms: int = int(_SPEC["max.compaction.lag.ms"].default)
    delete_retention_ms: int = int(_SPEC["delete.retention.ms"].default)
    # cleanup.policy split once: every append asks `compact` (its key check) and the roll check
    # asks it again (max_segment_ms). Not fields of the setting: neither compared, hashed, shown
    # nor in to_dict; __post_init__ derives them from cleanup_policy whenever one is built.
    _compact: bool = field(init=False, repr=False, compare=False)
    _delete: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        policies = self.cleanup_policy.split(",")
        object.__setattr__(self, "_compact", CLEANUP_POLICY_COMPACT in policies)
        object.__setattr__(self, "_delete", CLEANUP_POLICY_DELETE in policies)

    @classmethod
    def from_overrides(cls, overrides: Mapping[str, Any] | None) -> TopicConfig:
        """Build from Kafka-named overrides, rejecting unknown names and bad values."""
        values = validate_overrides(overrides or {})
        config = cls(**{name.replace(".", "_"): v for name, v in values.items()})  # type: ignore[arg-type]
        config.check_consistent()
        return config

    def check_consistent(self) -> None:
        """The rules between configs (Kafka's LogConfig.validate): the compaction lags must be in order."""
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfigurationError(
                f"conflict topic config setting min.compaction.lag.ms ({self.min_compaction_lag_ms}) > "
                f"max.compaction.lag.ms ({self.max_compaction_lag_ms})"
            )

    @property
    def compact(self) -> bool:
        """Whether the cleaner compacts this topic (`compact` in cleanup.policy)."""
        return self._compact

    @property
    def delete(self) -> bool:
        """Whether retention deletes this topic's old segments (`delete` in cleanup.policy)."""
        return self._delete

    @property
    def max_segment_ms(self) -> int:
        """When the active segment rolls by age (Kafka's LogConfig.maxSegmentMs): a compact topic's
        segment also rolls at max.compaction.lag.ms, since only sealed segments can be cleaned."""
        if self.compact:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    def to_dict(self) -> dict[str, ConfigValue]:
        """Kafka-named view of every setting, as `topics describe` shows it."""
        return {f.name.replace("_", "."): getattr(self, f.name) for f in fields(self) if f.init}


def validate_overrides(overrides: Mapping[str, Any]) -> dict[str, ConfigValue]:
    """Check names, types and ranges; values may be typed or strings (from a CLI). Returns them parsed."""
    out: dict[str, ConfigValue] = {}
    for name, raw in overrides.items():
        if name not in _SPEC:
            known = ", ".join(CONFIG_NAMES)
            raise InvalidConfigurationError(f"unknown topic config '{name}' (known: {known})")
        out[name] = _parse(name, _SPEC[name], raw)
    return out


def _parse(name: str, spec: _Spec, raw: Any) -> ConfigValue:
    if isinstance(raw, bool):
        raise InvalidConfigurationError(f"config {name}: '{raw}' is not a valid {spec.type.value.lower()}")
    if spec.type is ConfigType.LIST:
        return _parse_policy(name, raw)
    value: int | float
    if spec.type is ConfigType.DOUBLE:
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise InvalidConfigurationError(f"config {name}: '{raw}' is not a number") from None
        if not math.isfinite(value):
            raise InvalidConfigurationError(f"config {name}: '{raw}' is not a number")
    else:
        try:
            value = int(raw)
        except (TypeError, ValueError):
            raise InvalidConfigurationError(f"config {name}: '{raw}' is not an integer") from None
    if not spec.low <= value <= spec.high:
        low, high = (int(spec.low), int(spec.high)) if spec.type is not ConfigType.DOUBLE else (spec.low, spec.high)
        raise InvalidConfigurationError(f"config {name}={raw} is outside [{low}, {high}]")
    return value


def _parse_policy(name: str, raw: Any) -> str:
    """cleanup.policy: a comma-separated list of `compact` and `delete`, in any order; stored sorted.

    The empty list is Kafka 4.x's infinite retention (TopicConfig's cleanup.policy doc): neither
    deletion by time or size nor compaction, e.g. after an IncrementalAlterConfigs SUBTRACT of both."""
    if not isinstance(raw, str):
        raise InvalidConfigurationError(f"config {name}: '{raw}' is not a list of {' and '.join(CLEANUP_POLICIES)}")
    if not raw.strip():
        return ""
    items = [item.strip() for item in raw.split(",")]
    bad = [item for item in items if item not in CLEANUP_POLICIES]
    if bad or not items:
        raise InvalidConfigurationError(
            f"Invalid value {raw} for configuration {name}: String must be one of: {', '.join(CLEANUP_POLICIES)}"
        )
    return ",".join(sorted(set(items)))
