"""One Kafka request over a socket, encoded and decoded by kio: for answers no client library shows.

Real clients retry or hide the error codes a test wants to see (acks=2, a corrupt CRC, an
unknown topic); this sends exactly the request a test builds and returns the decoded response.
"""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from txlog.server import wire


class RawClient:
    """A connection that sends requests one at a time and reads their answers (or none, for acks=0)."""

    def __init__(self, bootstrap: str, timeout_s: float = 60.0):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, api_key: int, version: int, *, expect_answer: bool = True, **fields: Any) -> Any:
        """Send the request built from `fields` (`wire.make`); return the decoded response body."""
        message = wire.message_types(api_key, version)
        assert message is not None, f"kio has no {api_key} v{version}"
        self.correlation_id += 1
        out = io.BytesIO()
        header_cls = RequestHeaderV2 if message.flexible else RequestHeaderV1
        header = header_cls(
            request_api_key=i16(api_key),
            request_api_version=i16(version),
            correlation_id=i32(self.correlation_id),
            client_id="raw-test",
        )
        entity_writer(header_cls)(out, header)
        entity_writer(message.request)(out, wire.make(message.request, **fields))
        body = out.getvalue()
        self.sock.sendall(struct.pack(">i", len(body)) + body)
        if not expect_answer:
            return None
        (size,) = struct.unpack(">i", self._read(4))
        frame = self._read(size)
        response_header = (
            ResponseHeaderV1 if message.flexible and api_key != wire.API_VERSIONS_KEY else ResponseHeaderV0
        )
        header_in, used = entity_reader(response_header)(frame, 0)
        assert header_in.correlation_id == self.correlation_id
        response, _ = entity_reader(message.response)(frame, used)
        return response

    def nested(self, api_key: int, version: int, class_name: str, /, **fields: Any) -> Any:
        """A nested request type (`TopicProduceData`...) of this API version."""
        message = wire.message_types(api_key, version)
        assert message is not None
        return wire.make(getattr(message.request_module, class_name), **fields)

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the server closed the connection")
            data += chunk
        return data
