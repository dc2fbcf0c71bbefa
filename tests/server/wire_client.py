"""A minimal Kafka protocol client for tests that must send one exact request (a version, a field, an error path).

Requests are encoded and responses decoded by kio, the library the server uses, but through the
client's side of it (request header in, response header out), so a test checks the server's
answer as a client reads it. Real clients are for everything else.
"""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.index import load_entity_module
from kio.schema.index import api_key_map
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

_NAMES = {name: key for key, name in api_key_map.items()}


def _entity(module: Any, kind: EntityType) -> type:
    for value in vars(module).values():
        if isinstance(value, type) and getattr(value, "__type__", None) == kind and value.__module__ == module.__name__:
            return value
    raise LookupError(module.__name__)


def message(api: str, version: int, kind: EntityType = EntityType.request) -> Any:
    """The kio module of `api` (snake_case, e.g. "join_group") at `version`, for building nested types."""
    return load_entity_module(api, version, kind)


class WireClient:
    """One connection; `call(api, version, **fields)` sends a request and returns the decoded response."""

    def __init__(self, bootstrap: str, client_id: str = "wire-test"):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=120)
        self.client_id = client_id
        self.correlation_id = 0

    def call(self, api: str, version: int, **fields: Any) -> Any:
        request_class = _entity(message(api, version), EntityType.request)
        response_class = _entity(message(api, version, EntityType.response), EntityType.response)
        flexible = bool(request_class.__flexible__)
        self.correlation_id += 1
        header_class = RequestHeaderV2 if flexible else RequestHeaderV1
        out = io.BytesIO()
        entity_writer(header_class)(
            out,
            header_class(
                request_api_key=_NAMES[api],
                request_api_version=version,
                correlation_id=self.correlation_id,
                client_id=self.client_id,
            ),
        )
        entity_writer(request_class)(out, request_class(**fields))
        frame = out.getvalue()
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        data = self._read(struct.unpack(">i", self._read(4))[0])
        response_header = ResponseHeaderV1 if flexible and api != "api_versions" else ResponseHeaderV0
        header, used = entity_reader(response_header)(data, 0)
        assert header.correlation_id == self.correlation_id
        body, _ = entity_reader(response_class)(data, used)
        return body

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the server closed the connection")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
