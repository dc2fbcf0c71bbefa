"""Kafka's KRaft metadata records (`__cluster_metadata` and KRaft snapshots), decoded for `inspect`.

A KRaft metadata log is a log of ordinary v2 record batches whose record values are
`ApiMessageAndVersion` frames: uvarint frame version (always 1), uvarint record type (the
schema's apiKey), uvarint schema version, then the record's fields. Every metadata
schema is flexible from version 0, so strings, bytes and arrays always carry compact
(uvarint length + 1) lengths and every struct ends with a tagged-field section.

The schemas are described as data (`SCHEMAS`) and read by one interpreter, so adding a
record type is adding a table entry. What `--cluster-metadata-decoder` prints is
`metadata_record_json`: `{"type":"TOPIC_RECORD","version":0,"data":{...}}`, with `data`
laid out as Kafka's generated JSON converters lay it out (fields in schema order under
their lower-camel-case names, a field only in the versions that have it, a tagged field
only when it differs from its default). The JSON text is written here rather than by
`json.dumps` because Kafka's text differs from Python's for doubles (`1.0E7`) and for
control characters in strings (`\\u001F`), and the payload must match Kafka's byte for
byte.

Every byte is treated as hostile: any malformation raises MetadataRecordError (a
CorruptRecordError) whose message says what was wrong, never another exception.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from storage.errors import CorruptRecordError
from txlog.schemas.schema_types import SchemaReader, uuid_text

FRAME_VERSION = 1
_SHORT_MAX = 0x7FFF
_NO_VERSION = 0x7FFF  # upper bound of an open-ended "N+" version range
ZERO_UUID = uuid_text(bytes(16))
_UNSET = object()


class MetadataRecordError(CorruptRecordError):
    """A metadata record's bytes do not decode; the message is the line's explanation."""


# ---- schema description -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range, as a schema's "0+", "1-2" or "none" strings denote."""

    low: int
    high: int

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high


NONE = Versions(1, 0)  # the empty range


def versions(text: str) -> Versions:
    """Parse a schema's version string: "N+", "N-M", "N" or "none"."""
    if text == "none":
        return NONE
    if text.endswith("+"):
        return Versions(int(text[:-1]), _NO_VERSION)
    low, _, high = text.partition("-")
    return Versions(int(low), int(high or low))


_PRIMITIVE_DEFAULTS: dict[str, Any] = {
    "int8": 0,
    "int16": 0,
    "int32": 0,
    "int64": 0,
    "uint16": 0,
    "bool": False,
    "float64": 0.0,
    "string": "",
    "bytes": b"",
    "uuid": ZERO_UUID,
}
# The fewest bytes one array element can take: bounds an element count before looping on it.
_MIN_ELEMENT_SIZE = {"int32": 4, "uuid": 16, "string": 1, "struct": 1}


@dataclass(frozen=True, slots=True)
class Field:
    """One schema field. `type` is a primitive name, "[]int32"/"[]uuid"/"[]string", or "[]struct"."""

    name: str
    type: str
    versions: Versions
    nullable: Versions = NONE
    tagged: Versions = NONE
    tag: int | None = None
    default: Any = None
    fields: tuple[Field, ...] = ()  # the element's fields, for "[]struct"

    @property
    def json_name(self) -> str:
        """Kafka's JSON key: the field name with its first letter lower-cased."""
        return self.name[:1].lower() + self.name[1:]

    def is_default(self, value: Any) -> bool:
        """Whether a tagged field would be left out of Kafka's JSON (and of the wire)."""
        if self.default is None:
            return value is None
        return value is not None and value == self.default


def f(
    name: str,
    type_: str,
    vers: str = "0+",
    *,
    nullable: str = "none",
    tag: int | None = None,
    default: Any = _UNSET,
    fields: tuple[Field, ...] = (),
) -> Field:
    """A field as its schema states it; a tagged field is tagged in every version it has.

    `default` is the schema's default ("null" is None); unstated, it is the type's zero
    value, or an empty array.
    """
    if default is _UNSET:
        default = [] if type_.startswith("[]") else _PRIMITIVE_DEFAULTS[type_]
    return Field(
        name,
        type_,
        versions(vers),
        versions(nullable),
        versions(vers) if tag is not None else NONE,
        tag,
        default,
        fields,
    )


@dataclass(frozen=True, slots=True)
class Schema:
    api_key: int
    name: str
    valid: Versions
    fields: tuple[Field, ...]

    @property
    def type_name(self) -> str:
        """MetadataRecordType's constant name: TopicRecord -> TOPIC_RECORD, ZkMigration... -> ZK_MIGRATION_..."""
        out = []
        previous_upper = True
        for ch in self.name:
            if ch.isupper():
                if not previous_upper:
                    out.append("_")
                out.append(ch)
                previous_upper = True
            else:
                out.append(ch.upper())
                previous_upper = False
        return "".join(out)


def _endpoint_fields() -> tuple[Field, ...]:
    return (f("Name", "string"), f("Host", "string"), f("Port", "uint16"), f("SecurityProtocol", "int16"))


def _feature_fields() -> tuple[Field, ...]:
    return (f("Name", "string"), f("MinSupportedVersion", "int16"), f("MaxSupportedVersion", "int16"))


_SCHEMA_LIST = (
    Schema(
        0,
        "RegisterBrokerRecord",
        versions("0-4"),
        (
            f("BrokerId", "int32"),
            f("IsMigratingZkBroker", "bool", "2+", default=False),
            f("IncarnationId", "uuid"),
            f("BrokerEpoch", "int64"),
            f("EndPoints", "[]struct", fields=_endpoint_fields()),
            f("Features", "[]struct", fields=_feature_fields()),
            f("Rack", "string", nullable="0+"),
            f("Fenced", "bool", default=True),
            f("InControlledShutdown", "bool", "1+", default=False),
            f("LogDirs", "[]uuid", "3+", tag=0),
            # v4 (Kafka 4.4): the broker's cordoned log directories, null unless any were sent
            f("CordonedLogDirs", "[]uuid", "4+", nullable="4+", tag=1, default=None),
        ),
    ),
    Schema(1, "UnregisterBrokerRecord", versions("0"), (f("BrokerId", "int32"), f("BrokerEpoch", "int64"))),
    Schema(2, "TopicRecord", versions("0"), (f("Name", "string"), f("TopicId", "uuid"))),
    Schema(
        3,
        "PartitionRecord",
        versions("0-2"),
        (
            f("PartitionId", "int32", default=-1),
            f("TopicId", "uuid"),
            f("Replicas", "[]int32"),
            f("Isr", "[]int32"),
            f("RemovingReplicas", "[]int32"),
            f("AddingReplicas", "[]int32"),
            f("Leader", "int32", default=-1),
            f("LeaderRecoveryState", "int8", tag=0, default=0),
            f("LeaderEpoch", "int32", default=-1),
            f("PartitionEpoch", "int32", default=-1),
            f("Directories", "[]uuid", "1+"),
            f("EligibleLeaderReplicas", "[]int32", "2+", nullable="2+", tag=1, default=None),
            f("LastKnownElr", "[]int32", "2+", nullable="2+", tag=2, default=None),
        ),
    ),
    Schema(
        4,
        "ConfigRecord",
        versions("0"),
        (
            f("ResourceType", "int8"),
            f("ResourceName", "string"),
            f("Name", "string"),
            f("Value", "string", nullable="0+"),
        ),
    ),
    Schema(
        5,
        "PartitionChangeRecord",
        versions("0-2"),
        (
            f("PartitionId", "int32", default=-1),
            f("TopicId", "uuid"),
            f("Isr", "[]int32", nullable="0+", tag=0, default=None),
            f("Leader", "int32", tag=1, default=-2),
            f("Replicas", "[]int32", nullable="0+", tag=2, default=None),
            f("RemovingReplicas", "[]int32", nullable="0+", tag=3, default=None),
            f("AddingReplicas", "[]int32", nullable="0+", tag=4, default=None),
            f("LeaderRecoveryState", "int8", tag=5, default=-1),
            f("Directories", "[]uuid", "1+", nullable="1+", tag=8, default=None),
            f("EligibleLeaderReplicas", "[]int32", "2+", nullable="2+", tag=6, default=None),
            f("LastKnownElr", "[]int32", "2+", nullable="2+", tag=7, default=None),
        ),
    ),
    Schema(7, "FenceBrokerRecord", versions("0"), (f("Id", "int32"), f("Epoch", "int64"))),
    Schema(8, "UnfenceBrokerRecord", versions("0"), (f("Id", "int32"), f("Epoch", "int64"))),
    Schema(9, "RemoveTopicRecord", versions("0"), (f("TopicId", "uuid"),)),
    Schema(
        10,
        "DelegationTokenRecord",
        versions("0"),
        (
            f("Owner", "string"),
            f("Requester", "string"),
            f("Renewers", "[]string"),
            f("IssueTimestamp", "int64"),
            f("MaxTimestamp", "int64"),
            f("ExpirationTimestamp", "int64"),
            f("TokenId", "string"),
        ),
    ),
    Schema(
        11,
        "UserScramCredentialRecord",
        versions("0"),
        (
            f("Name", "string"),
            f("Mechanism", "int8"),
            f("Salt", "bytes"),
            f("StoredKey", "bytes"),
            f("ServerKey", "bytes"),
            f("Iterations", "int32"),
        ),
    ),
    Schema(12, "FeatureLevelRecord", versions("0"), (f("Name", "string"), f("FeatureLevel", "int16"))),
    Schema(
        14,
        "ClientQuotaRecord",
        versions("0"),
        (
            f("Entity", "[]struct", fields=(f("EntityType", "string"), f("EntityName", "string", nullable="0+"))),
            f("Key", "string"),
            f("Value", "float64"),
            f("Remove", "bool"),
        ),
    ),
    Schema(
        15,
        "ProducerIdsRecord",
        versions("0"),
        (
            f("BrokerId", "int32"),
            f("BrokerEpoch", "int64", default=-1),
            f("NextProducerId", "int64"),
        ),
    ),
    Schema(
        17,
        "BrokerRegistrationChangeRecord",
        versions("0-3"),
        (
            f("BrokerId", "int32"),
            f("BrokerEpoch", "int64"),
            f("Fenced", "int8", tag=0),
            f("InControlledShutdown", "int8", "1+", tag=1),
            f("LogDirs", "[]uuid", "2+", tag=2),
            f("CordonedLogDirs", "[]uuid", "3+", nullable="3+", tag=3, default=None),  # v3, Kafka 4.4
        ),
    ),
    Schema(
        18,
        "AccessControlEntryRecord",
        versions("0"),
        (
            f("Id", "uuid"),
            f("ResourceType", "int8"),
            f("ResourceName", "string"),
            f("PatternType", "int8"),
            f("Principal", "string"),
            f("Host", "string"),
            f("Operation", "int8"),
            f("PermissionType", "int8"),
        ),
    ),
    Schema(19, "RemoveAccessControlEntryRecord", versions("0"), (f("Id", "uuid"),)),
    Schema(20, "NoOpRecord", versions("0"), ()),
    Schema(21, "ZkMigrationStateRecord", versions("0"), (f("ZkMigrationState", "int8"),)),
    Schema(22, "RemoveUserScramCredentialRecord", versions("0"), (f("Name", "string"), f("Mechanism", "int8"))),
    Schema(23, "BeginTransactionRecord", versions("0"), (f("Name", "string", nullable="0+", tag=0, default=None),)),
    Schema(24, "EndTransactionRecord", versions("0"), ()),
    Schema(25, "AbortTransactionRecord", versions("0"), (f("Reason", "string", nullable="0+", tag=0, default=None),)),
    Schema(26, "RemoveDelegationTokenRecord", versions("0"), (f("TokenId", "string"),)),
    Schema(
        27,
        "RegisterControllerRecord",
        versions("0"),
        (
            f("ControllerId", "int32"),
            f("IncarnationId", "uuid"),
            f("ZkMigrationReady", "bool"),
            f("EndPoints", "[]struct", fields=_endpoint_fields()),
            f("Features", "[]struct", fields=_feature_fields()),
        ),
    ),
    Schema(28, "ClearElrRecord", versions("0"), (f("TopicName", "string"),)),
)
SCHEMAS: dict[int, Schema] = {s.api_key: s for s in _SCHEMA_LIST}


# ---- reading --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetadataRecord:
    """One decoded ApiMessageAndVersion: its schema, version and field values by Kafka field name."""

    schema: Schema
    version: int
    values: dict[str, Any] = field(default_factory=dict)


_READER_LABEL = "metadata record"


def _detail(exc: CorruptRecordError) -> str:
    """The reader's message without its label: the line already says which record it is."""
    return str(exc).removeprefix(f"{_READER_LABEL}: ")


def _frame_short(r: SchemaReader, entity: str) -> int:
    """One of the frame's uvarints, which Kafka narrows to a short."""
    try:
        value = r.uvarint()
    except CorruptRecordError as exc:
        raise MetadataRecordError(f"Error while reading {entity}: {_detail(exc)}") from None
    if value > _SHORT_MAX:
        raise MetadataRecordError(f"Value for {entity} was too large.")
    return value


def _null_refused(r: SchemaReader, fld: Field, start: int) -> CorruptRecordError:
    return r.corrupt(f"non-nullable field {fld.json_name} was serialized as null", start)


def _read_string(r: SchemaReader, fld: Field, version: int) -> str | None:
    start = r.position  # errors name where the field starts, not where its length ended
    length = r.uvarint() - 1
    if length < 0:
        if version not in fld.nullable:
            raise _null_refused(r, fld, start)
        return None
    if length > _SHORT_MAX:
        raise r.corrupt(f"string field {fld.json_name} had invalid length {length}", start)
    # Java decodes with replacement characters rather than failing, and so do we.
    return r.raw(length, fld.json_name).decode("utf-8", errors="replace")


def _read_bytes(r: SchemaReader, fld: Field, version: int) -> bytes | None:
    start = r.position
    value = r.compact_bytes(fld.json_name)
    if value is None and version not in fld.nullable:
        raise _null_refused(r, fld, start)
    return value


_PRIMITIVE_READERS: dict[str, Callable[[SchemaReader, str], Any]] = {
    "int8": SchemaReader.i8,
    "int16": SchemaReader.i16,
    "int32": SchemaReader.i32,
    "int64": SchemaReader.i64,
    "uint16": SchemaReader.u16,
    "bool": lambda r, what: r.i8(what) != 0,  # Kafka reads any non-zero byte as true
    "float64": SchemaReader.f64,
    "uuid": lambda r, what: uuid_text(r.uuid(what)),
}


def _read_element(r: SchemaReader, fld: Field, element: str, version: int) -> Any:
    if element == "struct":
        return _read_struct(r, fld.fields, version)
    if element == "string":
        return _read_string(r, Field(fld.name, "string", fld.versions), version)
    return _PRIMITIVE_READERS[element](r, fld.json_name)


def _read_array(r: SchemaReader, fld: Field, version: int) -> list[Any] | None:
    element = fld.type[2:]
    start = r.position
    count = r.compact_array_count(_MIN_ELEMENT_SIZE[element], fld.json_name)
    if count is None:
        if version not in fld.nullable:
            raise _null_refused(r, fld, start)
        return None
    return [_read_element(r, fld, element, version) for _ in range(count)]


def _read_value(r: SchemaReader, fld: Field, version: int) -> Any:
    if fld.type.startswith("[]"):
        return _read_array(r, fld, version)
    if fld.type == "string":
        return _read_string(r, fld, version)
    if fld.type == "bytes":
        return _read_bytes(r, fld, version)
    return _PRIMITIVE_READERS[fld.type](r, fld.json_name)


def _tag_reader(fld: Field, version: int, values: dict[str, Any]) -> Callable[[SchemaReader], None]:
    """What reading tag `fld.tag` does in `version`: set the field, or refuse a tag this version lacks."""

    def read(r: SchemaReader) -> None:
        if version not in fld.tagged or version not in fld.versions:
            raise r.corrupt(f"Tag {fld.tag} is not valid for version {version}")
        values[fld.name] = _read_value(r, fld, version)

    return read


def _read_struct(r: SchemaReader, fields: tuple[Field, ...], version: int) -> dict[str, Any]:
    """A struct's fields in order (defaults for absent and tagged ones), then its tag section."""
    values: dict[str, Any] = {}
    for fld in fields:
        if version in fld.versions and version not in fld.tagged:
            values[fld.name] = _read_value(r, fld, version)
        else:
            values[fld.name] = fld.default
    known = {fld.tag: _tag_reader(fld, version, values) for fld in fields if fld.tag is not None}
    r.tagged_fields(known)  # unknown tags are skipped, as Kafka keeps them aside unprinted
    return values


def decode_metadata_record(value: bytes | None) -> MetadataRecord:
    """Read one ApiMessageAndVersion (a metadata record's value) in Kafka's order and with its checks."""
    if value is None:
        raise MetadataRecordError("the record has no value")
    r = SchemaReader(value, _READER_LABEL)
    frame = _frame_short(r, "frame version")
    if frame == 0:
        raise MetadataRecordError(
            "Could not deserialize metadata record with frame version 0. Note that upgrades "
            "from the preview release of KRaft in 2.8 to newer versions are not supported."
        )
    if frame != FRAME_VERSION:
        raise MetadataRecordError(
            f"Could not deserialize metadata record due to unknown frame version {frame}"
            f"(only frame version {FRAME_VERSION} is supported)"
        )
    api_key = _frame_short(r, "type")
    version = _frame_short(r, "version")
    schema = SCHEMAS.get(api_key)
    if schema is None:
        raise MetadataRecordError(f"Unknown metadata id {api_key} (unknown record type {api_key})")
    if version not in schema.valid:
        raise MetadataRecordError(
            f"Failed to deserialize record with type {api_key}: Can't read version {version} of {schema.name}"
        )
    try:
        values = _read_struct(r, schema.fields, version)
    except CorruptRecordError as exc:
        raise MetadataRecordError(
            f"Failed to deserialize record with type {api_key} ({schema.name} v{version}): {_detail(exc)}"
        ) from None
    remaining = len(value) - r.position
    if remaining > 0:
        raise MetadataRecordError(f"Found {remaining} byte(s) of garbage after {api_key}")
    return MetadataRecord(schema, version, values)


# ---- Kafka's JSON text ----------------------------------------------------------------------------

_ESCAPED = re.compile(r'[\x00-\x1f"\\]')
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def json_string(text: str) -> str:
    """A JSON string as Jackson writes it: short escapes where they exist, else \\u00XX in upper case."""
    return '"' + _ESCAPED.sub(lambda m: _SHORT_ESCAPES.get(m[0]) or f"\\u{ord(m[0]):04X}", text) + '"'


def java_double(x: float) -> str:
    """Java's Double.toString (which Jackson writes): plain in [1e-3, 1e7), else `d.dddE±n`.

    NaN and the infinities are not JSON numbers; Jackson quotes them by default.
    """
    if math.isnan(x):
        return '"NaN"'
    if math.isinf(x):
        return '"Infinity"' if x > 0 else '"-Infinity"'
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    exact = Decimal(repr(abs(x))).normalize()  # the shortest digits that round-trip, trailing zeros gone
    _, digit_tuple, exponent = exact.as_tuple()
    assert isinstance(exponent, int), "NaN and the infinities were handled above"
    digits = "".join(map(str, digit_tuple))
    point = len(digits) + exponent  # where the decimal point falls within `digits`
    if 1e-3 <= abs(x) < 1e7:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        if point >= len(digits):
            return f"{sign}{digits}{'0' * (point - len(digits))}.0"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{point - 1}"


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")  # Jackson's BinaryNode: standard, padded


def _json_value(fld: Field, element: str, value: Any, version: int) -> str:
    if value is None:
        return "null"
    if element == "struct":
        return _struct_json(fld.fields, value, version)
    if element == "bool":
        return "true" if value else "false"
    if element == "float64":
        return java_double(value)
    if element in ("string", "uuid"):
        return json_string(value)
    if element == "bytes":
        return json_string(_base64(value))
    return str(value)


def _field_json(fld: Field, value: Any, version: int) -> str:
    if value is None or not fld.type.startswith("[]"):
        return _json_value(fld, fld.type, value, version)
    element = fld.type[2:]
    return "[" + ",".join(_json_value(fld, element, v, version) for v in value) + "]"


def _struct_json(fields: tuple[Field, ...], values: dict[str, Any], version: int) -> str:
    """Fields present in `version`, in schema order; a tagged field only when not its default."""
    parts = []
    for fld in fields:
        if version not in fld.versions:
            continue
        value = values[fld.name]
        if version in fld.tagged and fld.is_default(value):
            continue
        parts.append(f"{json_string(fld.json_name)}:{_field_json(fld, value, version)}")
    return "{" + ",".join(parts) + "}"


def metadata_record_json(record: MetadataRecord) -> str:
    """DumpLogSegments' payload: `{"type":"TOPIC_RECORD","version":0,"data":{...}}`."""
    data = _struct_json(record.schema.fields, record.values, record.version)
    return f'{{"type":{json_string(record.schema.type_name)},"version":{record.version},"data":{data}}}'
