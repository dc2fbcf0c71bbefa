"""`txlog serve` as a process: it listens, clients discover it, and it stops cleanly."""

from __future__ import annotations

import socket
import struct
from contextlib import closing

from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient

from tests.server.serve_process import ServeProcess


def _frame(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"test"
    return struct.pack(">i", len(header) + len(body)) + header + body


def _exchange(bootstrap: str, frame: bytes) -> bytes:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(frame)
        size = s.recv(4)
        if not size:
            return b""
        (n,) = struct.unpack(">i", size)
        data = b""
        while len(data) < n:
            chunk = s.recv(n - len(data))
            if not chunk:
                break
            data += chunk
        return data


def test_librdkafka_and_kafka_python_discover_the_server(txlog_server):
    metadata = AdminClient({"bootstrap.servers": txlog_server.bootstrap}).list_topics(timeout=30)
    assert [b.port for b in metadata.brokers.values()] == [txlog_server.port]
    with closing(KafkaAdminClient(bootstrap_servers=txlog_server.bootstrap)) as admin:
        assert admin.list_topics() == []


def test_an_unsupported_api_versions_version_is_answered_in_v0_with_the_table(txlog_server):
    answer = _exchange(txlog_server.bootstrap, _frame(18, 99, 7))
    correlation_id, error_code, count = struct.unpack_from(">ihi", answer)
    assert (correlation_id, error_code) == (7, 35)  # UNSUPPORTED_VERSION
    keys = {struct.unpack_from(">hhh", answer, 10 + 6 * i)[0] for i in range(count)}
    assert {3, 18} <= keys  # Metadata, ApiVersions


def test_an_unknown_api_key_or_an_oversized_frame_closes_only_that_connection(txlog_server):
    assert _exchange(txlog_server.bootstrap, _frame(9999, 0, 1)) == b""
    assert _exchange(txlog_server.bootstrap, struct.pack(">i", 200 * 1024 * 1024)) == b""
    assert _exchange(txlog_server.bootstrap, struct.pack(">i", -5)) == b""
    answer = _exchange(txlog_server.bootstrap, _frame(18, 0, 3))
    assert struct.unpack_from(">ih", answer) == (3, 0)  # still serving


def test_sigterm_stops_the_server_cleanly_and_a_restart_keeps_the_store(tmp_path):
    server = ServeProcess(str(tmp_path / "store")).start()
    AdminClient({"bootstrap.servers": server.bootstrap}).list_topics("auto-made", timeout=30)
    assert server.stop() == 0
    server.start()
    try:
        with closing(KafkaAdminClient(bootstrap_servers=server.bootstrap)) as admin:
            assert "auto-made" in admin.list_topics()
    finally:
        server.kill()
