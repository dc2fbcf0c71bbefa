"""A raw Kafka protocol client for tests: frames encoded with kio, sent on a plain socket, answers decoded.

Real clients retry and hide what the server answered; tests of exact answers (a faulted
response, a refused frame) speak the protocol themselves through this.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import socket
import struct
import types
import typing
import uuid
from collections.abc import Iterator
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from txlog.server import wire

TIMEOUT_S = 60.0


def encode_request(api_key: int, version: int, body: Any, *, correlation_id: int = 1, client_id: str = "test") -> bytes:
    """The size-prefixed frame of a request (body: an instance of kio's request class of that version)."""
    message = wire.message_types(api_key, version)
    assert message is not None, (api_key, version)
    out = io.BytesIO()
    header_values = dict(
        request_api_key=i16(api_key),
        request_api_version=i16(version),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    if message.flexible:
        entity_writer(RequestHeaderV2)(out, RequestHeaderV2(**header_values))
    else:
        entity_writer(RequestHeaderV1)(out, RequestHeaderV1(**header_values))
    entity_writer(message.request)(out, body)
    data = out.getvalue()
    return struct.pack(">i", len(data)) + data


def request_body(api_key: int, version: int, **fields: Any) -> Any:
    message = wire.message_types(api_key, version)
    assert message is not None
    return wire.make(message.request, **fields)


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, body) of a response frame without its size prefix."""
    message = wire.message_types(api_key, version)
    assert message is not None
    header_class = ResponseHeaderV1 if message.flexible and api_key != wire.API_VERSIONS_KEY else ResponseHeaderV0
    header, used = entity_reader(header_class)(frame, 0)
    body, _ = entity_reader(message.response)(frame, used)
    return header.correlation_id, body


class RawConnection:
    """One TCP connection to the server, for exchanging raw frames."""

    def __init__(self, bootstrap: str, timeout: float = TIMEOUT_S):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def receive(self) -> bytes | None:
        """The next response frame (without its size), or None when the server closed the connection."""
        prefix = self._exactly(4)
        if prefix is None:
            return None
        (size,) = struct.unpack(">i", prefix)
        return self._exactly(size)

    def _exactly(self, n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            try:
                chunk = self.sock.recv(n - len(data))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            data += chunk
        return data

    def request(self, api_key: int, version: int, correlation_id: int = 1, **fields: Any) -> Any:
        """Send a request built from `fields` and return the decoded response body."""
        self.send(
            encode_request(api_key, version, request_body(api_key, version, **fields), correlation_id=correlation_id)
        )
        frame = self.receive()
        assert frame is not None, f"the server closed the connection instead of answering {wire.api_name(api_key)}"
        got, body = decode_response(api_key, version, frame)
        assert got == correlation_id
        return body

    def closed_by_server(self) -> bool:
        """Does the server close this connection (rather than answer anything)?"""
        return self.receive() is None


def api_versions(bootstrap: str) -> Any:
    """The server's ApiVersions v3 answer, on a fresh connection."""
    with RawConnection(bootstrap) as conn:
        return conn.request(wire.API_VERSIONS_KEY, 3, client_software_name="t", client_software_version="1")


def answers_api_versions(bootstrap: str) -> bool:
    """Does the server still serve: a fresh connection gets ApiVersions answered with no error."""
    body = api_versions(bootstrap)
    return int(body.error_code) == 0 and len(body.api_keys) > 0


def served_api_keys(bootstrap: str) -> set[int]:
    return {int(k.api_key) for k in api_versions(bootstrap).api_keys}


def served_versions(bootstrap: str) -> list[tuple[int, int]]:
    """Every (API key, version) the server's ApiVersions answer names."""
    return [
        (int(k.api_key), version)
        for k in api_versions(bootstrap).api_keys
        for version in range(int(k.min_version), int(k.max_version) + 1)
    ]


# ---- sample requests: every field filled, two items in every array ---------------------------------


def sample_request(cls: type) -> Any:
    """A request of kio class `cls` with two distinct items in every array (values from their position)."""
    return _sample_of(cls, iter(range(1, 1 << 30)))


def null_request(cls: type) -> Any:
    """A request of kio class `cls` with every nullable field null and every other array empty."""
    return _sample_of(cls, iter(range(1, 1 << 30)), nulls=True)


def _sample_of(cls: Any, counter: Iterator[int], *, nulls: bool = False) -> Any:
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        t = _unoptional(f.type)
        if nulls and t is not f.type:
            values[f.name] = None
            continue
        if nulls and typing.get_origin(t) is tuple:
            values[f.name] = ()
            continue
        if typing.get_origin(t) is tuple:
            element = typing.get_args(t)[0]
            values[f.name] = tuple(_one(f, element, counter, nulls) for _ in range(2))
        else:
            values[f.name] = _one(f, t, counter, nulls)
    return cls(**values)


def _one(f: dataclasses.Field, t: Any, counter: Iterator[int], nulls: bool = False) -> Any:
    if dataclasses.is_dataclass(t):
        return _sample_of(t, counter, nulls=nulls)
    n = next(counter)
    kind = f.metadata["kafka_type"]
    return {
        "string": f"s{n}",
        "int8": n % 100,
        "int16": n,
        "int32": n,
        "int64": n,
        "uint16": n,
        "float64": float(n),
        "bool": False,
        "bytes": b"",
        "records": b"",
        "uuid": uuid.UUID(int=n),
        "timedelta_i32": datetime.timedelta(milliseconds=n),
        "timedelta_i64": datetime.timedelta(milliseconds=n),
        "datetime_i64": datetime.datetime.fromtimestamp(n, datetime.UTC),
        "error_code": ErrorCode.none,
    }[kind]


def _unoptional(t: Any) -> Any:
    if typing.get_origin(t) in (types.UnionType, typing.Union):
        return next(a for a in typing.get_args(t) if a is not type(None))
    return t
