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
        header, used = entity_reader(header_class)(frame, 0)
        body, _ = entity_reader(message.request)(frame, used)
    except (SerialError, ValueError, TypeError, UnicodeDecodeError, OverflowError) as exc:
        raise MalformedRequestError(f"cannot parse {api_name(message.api_key)} v{message.version}: {exc}") from None
    return RequestHeader(
        header.request_api_key, header.request_api_version, header.correlation_id, header.client_id
    ), body


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
