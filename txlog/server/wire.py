"""Kafka's wire format for the server: size-prefixed frames, request and response headers, message bodies.

The bodies are encoded and decoded by kio (Aiven's `kio`, generated from the JSON message
specs in Kafka's `clients/src/main/resources/common/message/`, with a native decoder): one
dataclass per API version, so no message of the thirty-odd APIs is written by hand here.
This module only adds what the specs leave to the broker: the 4-byte size prefix, which
header version goes with which body (flexible versions use request header v2 and response
header v1; ApiVersions always answers with response header v0 so that a client that sent
a version the broker lacks can still read the answer), and the limits a broker applies
before it trusts a byte (`socket.request.max.bytes`).
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import types
import typing
from functools import cache
from typing import Any

from kio.index import KioIndexError, load_entity_module
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.static.constants import EntityType
from kio.static.primitive import i32

# Kafka's socket.request.max.bytes default: a frame announcing more is refused before it is read.
MAX_REQUEST_BYTES = 104_857_600
API_VERSIONS_KEY = 18
_FRAME_SIZE = struct.Struct(">i")
_HEADER_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id: the same in every header version


class MalformedRequestError(Exception):
    """A frame that is not a request of the version it names: Kafka closes such a connection."""


@dataclasses.dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class MessageTypes:
    """The request and response classes of one API version, and the modules their nested types live in."""

    api_key: int
    version: int
    request: type
    response: type
    request_module: types.ModuleType
    response_module: types.ModuleType
    flexible: bool


def api_name(api_key: int) -> str:
    """Kafka's name of an API key in CamelCase (`EndTxn`), or `ApiKey(N)` for one kio does not know."""
    name = api_key_map.get(api_key)
    if name is None:
        return f"ApiKey({api_key})"
    return "".join(part.capitalize() for part in name.split("_"))


@cache
def message_types(api_key: int, version: int) -> MessageTypes | None:
    """The generated classes of `api_key` at `version`, or None if the specs have no such version."""
    name = api_key_map.get(api_key)
    if name is None:
        return None
    try:
        request_module = load_entity_module(name, version, EntityType.request)
        response_module = load_entity_module(name, version, EntityType.response)
    except KioIndexError:  # a version the specs do not have
        return None
    request = _entity_class(request_module, EntityType.request)
    response = _entity_class(response_module, EntityType.response)
    flexible = bool(getattr(request, "__flexible__"))  # noqa: B009 - a class attribute kio generates
    return MessageTypes(api_key, version, request, response, request_module, response_module, flexible)


def _entity_class(module: types.ModuleType, kind: EntityType) -> type:
    for value in vars(module).values():
        if isinstance(value, type) and getattr(value, "__type__", None) == kind and value.__module__ == module.__name__:
            return value
    raise LookupError(f"{module.__name__} defines no {kind.name}")


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api key, api version, correlation id) of a frame, read before the version is known to be served."""
    if len(frame) < _HEADER_PREFIX.size:
        raise MalformedRequestError(f"a request of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _HEADER_PREFIX.unpack_from(frame, 0)
    return api_key, api_version, correlation_id


def decode_request(frame: bytes | memoryview, message: MessageTypes) -> tuple[RequestHeader, Any]:
    """The header and body of a frame whose API and version `message` describes.

    Bytes after the body are ignored, as Kafka's RequestContext.parseRequest ignores them
    (librdkafka 2.16's Metadata v13 ends with three bytes no version of the spec has).
    """
    header_class = RequestHeaderV2 if message.flexible else RequestHeaderV1
    try:
        header: Any
        body: Any
        if message.flexible:
            frame = _without_header_tags(frame)
        header, used = entity_reader(header_class)(frame, 0)
        frame = checked_body(message.request, frame, used)
        body, _ = entity_reader(message.request)(frame, used)
    # KeyError: kio's word for a tag it does not know inside a known tagged field (the rest are dropped)
    except (SerialError, ValueError, TypeError, UnicodeDecodeError, OverflowError, KeyError) as exc:
        raise MalformedRequestError(f"cannot parse {api_name(message.api_key)} v{message.version}: {exc}") from None
    return RequestHeader(
        header.request_api_key, header.request_api_version, header.correlation_id, header.client_id
    ), body


# ---- claimed sizes, checked before kio trusts them -------------------------------------------------------

# kio's native reader reserves room for an array's claimed element count before reading any
# element: a compact array claiming 2^32 elements makes it ask for 32 GiB and the process abort
# ("memory allocation failed", found by tests/server/test_bad_input.py). So before decoding, a
# walk over the generated class checks every claimed count and length against the bytes left:
# an element takes at least one byte, so a claim past the end of the frame is a lie.

_FIXED_WIDTH = {
    "int8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "float64": 8,
    "uuid": 16,
}
_INT16 = struct.Struct(">h")
NULL_STRUCT = 0xFF  # the int8 -1 before a nullable struct that is null
_INT32 = struct.Struct(">i")


def checked_body(cls: type, frame: bytes | memoryview, position: int) -> bytes | memoryview:
    """The frame with its body (an instance of generated class `cls` at `position`) checked for kio.

    Refuses a count or length past the frame's end (MalformedRequestError), and drops the tagged
    fields the class does not know: Kafka ignores a tag it does not know (a newer client may send
    one), where kio refuses the whole message. Values are not built: only sizes are read.
    """
    drops: list[_Drop] = []
    _walk(_plan(cls), memoryview(frame), position, drops)
    return _dropped(frame, drops)


def _without_header_tags(frame: bytes | memoryview) -> bytes | memoryview:
    """A flexible request header with its tagged fields dropped (RequestHeader v2 defines none)."""
    view = memoryview(frame)
    position = _within(view, 0, _HEADER_PREFIX.size)
    _within(view, position, 2)
    (client_id_length,) = _INT16.unpack_from(view, position)  # a legacy string even in flexible headers
    position = _within(view, position + 2, max(client_id_length, 0))
    drops: list[_Drop] = []
    _walk_tagged_fields(_NO_TAGS, view, position, drops)
    return _dropped(frame, drops)


@dataclasses.dataclass(frozen=True, slots=True)
class _Drop:
    """A tagged-field section to replace by the known fields it holds."""

    start: int
    end: int
    replacement: bytes


def _dropped(frame: bytes | memoryview, drops: list[_Drop]) -> bytes | memoryview:
    if not drops:
        return frame
    out, at = bytearray(), 0
    for drop in drops:  # in frame order, never overlapping: sections are walked in order
        out += frame[at : drop.start]
        out += drop.replacement
        at = drop.end
    out += frame[at:]
    return bytes(out)


@dataclasses.dataclass(frozen=True, slots=True)
class _Step:
    """How to step over one field: `width` bytes, a length-prefixed run, or a nested struct's plan."""

    name: str
    array: bool
    width: int = 0  # a fixed-width value
    prefixed: bool = False  # a string, bytes or records: a length, then that many bytes
    wide: bool = False  # a legacy length of 4 bytes rather than 2 (bytes, records, arrays)
    nested: _Plan | None = None
    nullable: bool = False  # a nullable struct: an int8 first, -1 for null (Kafka's generated encoders)
    null_ok: bool = False  # a null count or length is allowed (the spec's nullableVersions, as kio types it)


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    flexible: bool
    steps: tuple[_Step, ...]
    tagged: dict[int, _Step]


_NO_TAGS = _Plan(True, (), {})


@cache
def _plan(cls: type) -> _Plan:
    flexible = bool(getattr(cls, "__flexible__"))  # noqa: B009 - a class attribute kio generates
    steps, tagged = [], {}
    for field in dataclasses.fields(cls):
        step = _step(field)
        if "tag" in field.metadata:
            tagged[int(field.metadata["tag"])] = step
        else:
            steps.append(step)
    return _Plan(flexible, tuple(steps), tagged)


def _step(field: dataclasses.Field) -> _Step:
    element = _array_element(field.type)
    kind = field.type if element is None else element
    entity = _entity_of(kind)
    array = element is not None
    optional = _unoptional(field.type) is not field.type
    if entity is not None:
        return _Step(field.name, array, nested=_plan(entity), nullable=optional and not array, null_ok=optional)
    kafka_type = field.metadata.get("kafka_type")
    if kafka_type in _FIXED_WIDTH:
        return _Step(field.name, array, width=_FIXED_WIDTH[kafka_type], null_ok=optional)
    if kafka_type in ("string", "bytes", "records"):
        return _Step(field.name, array, prefixed=True, wide=kafka_type != "string", null_ok=optional)
    raise LookupError(f"no size rule for field {field.name} ({kafka_type})")


def _walk(plan: _Plan, frame: memoryview, position: int, drops: list[_Drop] | None) -> int:
    """Step over one struct; unknown tags are dropped into `drops` (None: inside a tagged value, kept)."""
    flexible = plan.flexible
    for step in plan.steps:
        position = _walk_field(step, flexible, frame, position, drops)
    if flexible:
        position = _walk_tagged_fields(plan, frame, position, drops)
    return position


def _walk_field(step: _Step, flexible: bool, frame: memoryview, position: int, drops: list[_Drop] | None) -> int:
    if not step.array:
        return _walk_value(step, flexible, frame, position, drops)
    count, position = _read_count(frame, position, flexible, wide=True)
    count = _non_null(step, count)
    if step.width:
        return _within(frame, position, count * step.width)
    for _ in range(count):
        position = _walk_value(step, flexible, frame, position, drops)
    return position


def _walk_value(step: _Step, flexible: bool, frame: memoryview, position: int, drops: list[_Drop] | None) -> int:
    if step.nested is not None:
        if step.nullable:
            _within(frame, position, 1)
            position += 1
            if frame[position - 1] == NULL_STRUCT:
                return position
        return _walk(step.nested, frame, position, drops)
    if step.width:
        return _within(frame, position, step.width)
    length, position = _read_count(frame, position, flexible, wide=step.wide)
    return _within(frame, position, _non_null(step, length))


def _non_null(step: _Step, count: int) -> int:
    """A claimed count, where a negative one (null) is refused unless the field is nullable.

    Kafka's generated readers refuse it ("non-nullable field ... was serialized as null"); kio
    would hand the handlers a None where the spec promises a value.
    """
    if count >= 0:
        return count
    if not step.null_ok:
        raise MalformedRequestError(f"non-nullable field {step.name} was serialized as null")
    return 0


def _walk_tagged_fields(plan: _Plan, frame: memoryview, position: int, drops: list[_Drop] | None) -> int:
    """The tagged-field section of a flexible struct: each known tag is checked within its own size."""
    start = position
    count, position = _read_uvarint(frame, position)
    kept: list[memoryview] = []
    for _ in range(count):
        entry = position
        tag, position = _read_uvarint(frame, position)
        size, position = _read_uvarint(frame, position)
        end = _within(frame, position, size)
        step = plan.tagged.get(tag)
        if step is not None:
            _walk_field(step, True, frame[:end], position, None)
            kept.append(frame[entry:end])
        position = end
    if drops is not None and len(kept) < count:
        drops.append(_Drop(start, position, _uvarint(len(kept)) + b"".join(kept)))
    return position


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_count(frame: memoryview, position: int, flexible: bool, *, wide: bool) -> tuple[int, int]:
    """A claimed count or length (negative: null), checked to fit in what is left of the frame."""
    if flexible:
        raw, position = _read_uvarint(frame, position)
        count = raw - 1
    elif wide:
        _within(frame, position, 4)
        (count,) = _INT32.unpack_from(frame, position)
        position += 4
    else:
        _within(frame, position, 2)
        (count,) = _INT16.unpack_from(frame, position)
        position += 2
    if count > len(frame) - position:
        raise MalformedRequestError(f"a count of {count} with {len(frame) - position} bytes left")
    return count, position


def _read_uvarint(frame: memoryview, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        _within(frame, position, 1)
        byte = frame[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
        if shift > 28:
            raise MalformedRequestError("a varint longer than 5 bytes")


def _within(frame: memoryview, position: int, size: int) -> int:
    if size > len(frame) - position:
        raise MalformedRequestError(f"{size} bytes claimed with {len(frame) - position} left")
    return position + size


def _array_element(kind: Any) -> Any:
    """The element type of an array field's type (`tuple[X, ...]` or its optional), None if not an array."""
    kind = _unoptional(kind)
    return typing.get_args(kind)[0] if typing.get_origin(kind) is tuple else None


def _entity_of(kind: Any) -> type | None:
    kind = _unoptional(kind)
    return kind if isinstance(kind, type) and dataclasses.is_dataclass(kind) else None


def _unoptional(kind: Any) -> Any:
    if typing.get_origin(kind) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        return args[0] if len(args) == 1 else kind
    return kind


def encode_response(message: MessageTypes, correlation_id: int, response: Any) -> bytes:
    """The size-prefixed frame of a response: its header version follows the body's (ApiVersions: always v0)."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    if message.flexible and message.api_key != API_VERSIONS_KEY:
        entity_writer(ResponseHeaderV1)(out, ResponseHeaderV1(correlation_id=i32(correlation_id)))
    else:
        entity_writer(ResponseHeaderV0)(out, ResponseHeaderV0(correlation_id=i32(correlation_id)))
    entity_writer(message.response)(out, response)
    frame = out.getbuffer()
    _FRAME_SIZE.pack_into(frame, 0, len(frame) - 4)
    return bytes(frame)


def frame_size(prefix: bytes, max_bytes: int = MAX_REQUEST_BYTES) -> int:
    """The size a 4-byte prefix announces, refused when negative or past socket.request.max.bytes."""
    (size,) = _FRAME_SIZE.unpack(prefix)
    if size < 0:
        raise MalformedRequestError(f"a request announcing {size} bytes")
    if size > max_bytes:
        raise MalformedRequestError(f"a request of {size} bytes is past socket.request.max.bytes ({max_bytes})")
    return size


def make(cls: type, /, **values: Any) -> Any:
    """An instance of a generated message class from the fields it has at its version.

    Handlers build one answer for every version they serve; a field the version lacks is
    dropped here, a missing one with a default takes it, error codes may be given as ints
    and durations as milliseconds.
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for name, value in values.items():
        field = fields.get(name)
        if field is None:
            continue
        kwargs[name] = _coerce(field, value)
    return cls(**kwargs)


def _coerce(field: dataclasses.Field, value: Any) -> Any:
    kafka_type = field.metadata.get("kafka_type")
    if kafka_type == "error_code" and not isinstance(value, ErrorCode):
        return ErrorCode(value)
    if kafka_type in ("timedelta_i32", "timedelta_i64") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    return value
