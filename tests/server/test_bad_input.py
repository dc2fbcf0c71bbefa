"""Bad input and limits: what a client can send never crashes, hangs or swells `txlog serve`.

Every malformed frame gets a closed connection (or Kafka's error, for ApiVersions), and the
server keeps serving everyone else; idle and stalled connections are closed after
connections.max.idle.ms; frames wait for room under queued.max.request.bytes before they are
read. The fuzz tests send generated frames (random bytes, and mutations of valid frames from
real clients and of every served request) to a running server, and decode them in-process.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing

import pytest
from confluent_kafka.admin import AdminClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import KafkaAdminClient
from kio.serial.errors import OutOfBoundValue
from kio.static.primitive import i32

from tests.server.kafka_wire import (
    RawConnection,
    answers_api_versions,
    decode_response,
    encode_request,
    null_request,
    sample_request,
    served_api_keys,
    served_versions,
)
from tests.server.serve_process import ServeProcess
from txlog.server import wire
from txlog.server.socket_server import DECODE_ON_LOOP_BYTES, RequestMemory

METADATA, PRODUCE, DESCRIBE_TOPIC_PARTITIONS = 3, 0, 75
UNKNOWN_TOPIC_ID = 100
LOG_WAIT_S = 60.0
#: Frames sent per run of the server fuzz test; raise it for a longer hunt (6,000 found nothing more).
FUZZ_EXAMPLES = int(os.environ.get("TXLOG_FUZZ_EXAMPLES", "150"))


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[ServeProcess]:
    """One server for the whole module: bad input must not hurt it, so every test may share it."""
    started = ServeProcess(str(tmp_path_factory.mktemp("bad-input") / "store")).start()
    yield started
    log = started.log()
    started.kill()
    assert "Traceback" not in log, log  # every refusal was a decision, never a handler's crash


def _header(api_key: int, version: int, *, flexible: bool, client_id: bytes = b"test") -> bytes:
    header = struct.pack(">hhih", api_key, version, 9, len(client_id)) + client_id
    return header + (b"\x00" if flexible else b"")  # flexible headers end with their tagged fields


def _framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _metadata_v12() -> bytes:
    message = wire.message_types(METADATA, 12)
    assert message is not None
    return encode_request(METADATA, 12, sample_request(message.request))


BAD_FRAMES = {
    "random bytes": b"\x13\x37\xde\xad\xbe\xef" * 20,
    "an empty frame": _framed(b""),
    "a frame shorter than a header": _framed(b"\x00\x03\x00"),
    "a negative size": struct.pack(">i", -1) + b"\x00" * 16,
    "a size past socket.request.max.bytes": struct.pack(">i", 2**31 - 1),
    "a served API with a garbage body": _framed(_header(METADATA, 12, flexible=True) + b"\xff" * 40),
    "a truncated body": _metadata_v12()[:-7],
    "a frame longer than what follows": struct.pack(">i", 5000) + _metadata_v12()[4:],
    "an array claiming 2^31-1 elements": _framed(_header(METADATA, 1, flexible=False) + struct.pack(">i", 2**31 - 1)),
    "a compact array claiming 2^32 elements": _framed(_header(METADATA, 12, flexible=True) + b"\xff\xff\xff\xff\x0f"),
    "a string claiming 32767 bytes": _framed(
        _header(METADATA, 1, flexible=False) + struct.pack(">ih", 1, 32767) + b"abc"
    ),
    "header tagged fields claiming 2^32 entries": _framed(
        struct.pack(">hhih", METADATA, 12, 9, 1) + b"t" + b"\xff\xff\xff\xff\x0f"
    ),
    "a tagged field claiming 2^32 bytes": _framed(
        _header(METADATA, 12, flexible=True) + b"\x01\x01\x00" + b"\x01\x00\xff\xff\xff\xff\x0f"
    ),
    "a client id claiming 32767 bytes": _framed(struct.pack(">hhih", METADATA, 1, 9, 32767) + b"abc"),
    "a null array where the spec allows none": _framed(
        _header(PRODUCE, 9, flexible=True) + b"\x00" + struct.pack(">hi", 1, 1000) + b"\x00" + b"\x00"
    ),
    "a legacy null array where the spec allows none": _framed(
        _header(PRODUCE, 3, flexible=False) + struct.pack(">hhii", -1, 1, 1000, -1)
    ),
    "a null string where the spec allows none": _framed(
        _header(METADATA, 1, flexible=False) + struct.pack(">ih", 1, -1)
    ),
    "an unknown API key": _framed(_header(9999, 0, flexible=False)),
    "an unknown version of a served API": _framed(_header(METADATA, 99, flexible=False)),
    "a negative API key": _framed(_header(-2, 0, flexible=False)),
}


@pytest.mark.parametrize("frame", list(BAD_FRAMES.values()), ids=list(BAD_FRAMES))
def test_a_malformed_frame_closes_its_connection_and_the_server_keeps_serving(server, frame):
    with RawConnection(server.bootstrap) as conn:
        conn.send(frame)
        conn.sock.shutdown(socket.SHUT_WR)  # all there is: a frame announcing more is cut short
        assert conn.closed_by_server()
    assert answers_api_versions(server.bootstrap)
    _assert_no_traceback(server)


def _assert_no_traceback(server: ServeProcess) -> None:
    """Checked after each input, not only at the end, so hypothesis shrinks to the one that crashed a handler."""
    log = server.log()
    assert "Traceback" not in log, log[log.index("Traceback") - 2000 :]


@pytest.mark.parametrize("build", [sample_request, null_request], ids=["every field set", "nulls and empty arrays"])
def test_every_version_of_every_served_api_is_answered_without_a_handler_crashing(server, build):
    """A well-formed request at each served version gets an answer that decodes at that version.

    Fields come and go between versions (ElectLeaders v0 has no election type); a handler that
    reads one its version lacks, or trips on a null the spec allows, crashes here.
    """
    unanswered = []
    for api_key, version in served_versions(server.bootstrap):
        message = wire.message_types(api_key, version)
        assert message is not None
        with RawConnection(server.bootstrap) as conn:
            conn.send(encode_request(api_key, version, build(message.request)))
            frame = conn.receive()
        if frame is None:
            unanswered.append(f"{wire.api_name(api_key)} v{version}")
        else:
            _decodes(api_key, version, frame)
        _assert_no_traceback(server)
    assert unanswered == []


def _decodes(api_key: int, version: int, frame: bytes) -> None:
    try:
        decode_response(api_key, version, frame)
    except OutOfBoundValue as exc:
        # Kafka answers -1 for a time that is not set (DescribeTransactions' start time of an
        # Empty transaction); kio's reader refuses any negative datetime.
        assert "negative timestamp" in str(exc), exc


def test_tagged_fields_the_server_does_not_know_are_ignored_as_kafka_ignores_them(server):
    """A newer client may send tags this version's spec lacks: in the header and in the body."""
    unknown = b"\x02" + b"\x63\x02hi" + b"\x64\x00"  # two tagged fields: tag 99 ("hi"), tag 100 (empty)
    header = struct.pack(">hhih", METADATA, 12, 5, 4) + b"test" + unknown
    body = b"\x02" + b"\x00" * 16 + b"\x06known" + unknown + b"\x01\x00" + unknown  # one topic, flags, tags
    with RawConnection(server.bootstrap) as conn:
        conn.send(_framed(header + body))
        answer = conn.receive()
    assert answer is not None
    correlation_id, response = decode_response(METADATA, 12, answer)
    assert correlation_id == 5
    assert [(t.name, int(t.error_code)) for t in response.topics] == [("known", 0)]


def test_a_metadata_v11_lookup_by_topic_id_alone_is_answered(server):
    """v10 and v11 requests may leave a topic's name null (found by the fuzz test: the answer failed to encode)."""
    message = wire.message_types(METADATA, 11)
    assert message is not None
    topic = wire.make(message.request_module.MetadataRequestTopic, name=None, topic_id=uuid.UUID(int=7))
    with RawConnection(server.bootstrap) as conn:
        answer = conn.request(
            METADATA, 11, topics=(topic,), allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
    assert [(t.name, int(t.error_code)) for t in answer.topics] == [("", UNKNOWN_TOPIC_ID)]


def test_a_large_request_is_decoded_off_the_loop_and_answered(server):
    """A frame past DECODE_ON_LOOP_BYTES goes through the decode thread; its answer is the same."""
    message = wire.message_types(METADATA, 12)
    assert message is not None
    names = [f"no-such-topic-{i:06d}" for i in range(5000)]
    topics = tuple(
        wire.make(message.request_module.MetadataRequestTopic, name=name, topic_id=uuid.UUID(int=0)) for name in names
    )
    body = wire.make(
        message.request, topics=topics, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    frame = encode_request(METADATA, 12, body)
    assert len(frame) > DECODE_ON_LOOP_BYTES
    with RawConnection(server.bootstrap) as conn:
        conn.send(frame)
        answer = conn.receive()
    assert answer is not None
    _, response = decode_response(METADATA, 12, answer)
    assert [(t.name, int(t.error_code)) for t in response.topics] == [(name, 3) for name in names]  # unknown topic


def test_a_client_vanishing_mid_frame_is_logged_and_forgotten(server):
    with RawConnection(server.bootstrap) as conn:
        conn.send(_metadata_v12()[:10])
    _wait_for_log(server, "client closed the connection mid-request")
    assert answers_api_versions(server.bootstrap)


@pytest.mark.parametrize(
    ("version", "claim"),
    [(1, struct.pack(">i", 2**31 - 1)), (12, b"\xff\xff\xff\xff\x0f")],
    ids=["legacy array of 2^31-1", "compact array of 2^32-2"],
)
def test_a_claimed_count_past_the_frame_is_refused_before_kio_reserves_room_for_it(version, claim):
    """kio reserves an array's claimed count up front: 2^32 elements asked 32 GiB and aborted the process."""
    message = wire.message_types(METADATA, version)
    assert message is not None
    frame = _header(METADATA, version, flexible=message.flexible) + claim + b"\x00\x01t" * 3
    with pytest.raises(wire.MalformedRequestError, match="a count of .* with 9 bytes left"):
        wire.decode_request(frame, message)


@pytest.mark.parametrize("cursor", [None, ("t", 2)], ids=["null", "present"])
def test_a_nullable_struct_is_read_after_its_null_marker(cursor):
    """A nullable struct (DescribeTopicPartitions' cursor) starts with an int8, -1 for null: the
    size check reads it before the struct, as kio's decoder does, so the request decodes."""
    import kio.schema.describe_topic_partitions.v0.request as dtp

    message = wire.message_types(DESCRIBE_TOPIC_PARTITIONS, 0)
    assert message is not None
    body = dtp.DescribeTopicPartitionsRequest(
        topics=(dtp.TopicRequest(name="t"),),
        response_partition_limit=i32(1),
        cursor=None if cursor is None else dtp.Cursor(topic_name=cursor[0], partition_index=i32(cursor[1])),
    )
    frame = encode_request(DESCRIBE_TOPIC_PARTITIONS, 0, body)[4:]
    _, decoded = wire.decode_request(frame, message)
    assert decoded == body


# ---- idle connections ----------------------------------------------------------------------------------


@pytest.fixture
def impatient_server(tmp_path) -> Iterator[ServeProcess]:
    started = ServeProcess(str(tmp_path / "store"), args=["--config", "connections.max.idle.ms=2000"]).start()
    yield started
    started.kill()


def test_an_idle_connection_is_closed_after_connections_max_idle_ms(impatient_server):
    with RawConnection(impatient_server.bootstrap) as conn:
        assert conn.closed_by_server()
    _wait_for_log(impatient_server, "ended: idle connection")


def test_a_client_stalling_mid_frame_without_closing_is_closed(impatient_server):
    with RawConnection(impatient_server.bootstrap) as conn:
        conn.send(_metadata_v12()[:10])
        assert conn.closed_by_server()
    _wait_for_log(impatient_server, "stalled mid-request")


def test_a_busy_connection_is_not_idle(impatient_server):
    with RawConnection(impatient_server.bootstrap) as conn:
        for correlation_id in range(6):
            answer = conn.request(18, 3, correlation_id, client_software_name="t", client_software_version="1")
            assert int(answer.error_code) == 0
            time.sleep(0.5)  # each gap is well within the idle limit; together they are past it


# ---- queued.max.request.bytes --------------------------------------------------------------------------


def test_a_frame_waits_while_queued_max_request_bytes_is_in_use(tmp_path):
    limits = ["--config", "socket.request.max.bytes=1048576", "--config", "queued.max.request.bytes=1048576"]
    server = ServeProcess(str(tmp_path / "store"), args=limits).start()
    try:
        with RawConnection(server.bootstrap) as holder, RawConnection(server.bootstrap) as waiter:
            holder.send(struct.pack(">i", 1048576) + struct.pack(">h", PRODUCE) + b"\x00" * 100)  # takes it all
            waiter.send(encode_request(18, 0, sample_request(wire.message_types(18, 0).request)))  # type: ignore[union-attr]
            _wait_for_log(server, "waits: queued.max.request.bytes (1048576) is in use (1048576)")
            holder.close()  # the held frame is abandoned: its memory is returned
            answer = waiter.receive()
            assert answer is not None and struct.unpack_from(">ih", answer) == (1, 0)
    finally:
        server.kill()


def test_request_memory_lets_one_oversized_request_through_alone():
    async def scenario() -> list[str]:
        memory = RequestMemory(100)
        events: list[str] = []
        first = await memory.acquire(60)
        assert not memory.fits(60)

        async def second() -> None:
            charge = await memory.acquire(60)
            events.append("second")
            await memory.release(charge)

        async def oversized() -> None:
            charge = await memory.acquire(10_000)  # larger than the bound: waits until it is alone
            events.append(f"oversized charged {charge}")
            await memory.release(charge)

        waiting = [asyncio.create_task(second()), asyncio.create_task(oversized())]
        for _ in range(10):
            await asyncio.sleep(0)
        events.append("first released")
        await memory.release(first)
        await asyncio.gather(*waiting)
        assert memory.used == 0
        return events

    events = asyncio.run(scenario())
    assert events[0] == "first released"
    assert sorted(events[1:]) == ["oversized charged 100", "second"]


# ---- fuzzing -------------------------------------------------------------------------------------------


def _valid_frames_of(keys: Callable[[], set[int]]) -> list[bytes]:
    """A well-formed request of every version of every API in `keys()`, from kio's classes."""
    frames = []
    for key in sorted(keys()):
        for version in range(0, 20):
            message = wire.message_types(key, version)
            if message is not None:
                frames.append(encode_request(key, version, sample_request(message.request)))
    return frames


@pytest.fixture(scope="module")
def client_frames(server) -> list[bytes]:
    """Frames real clients sent the server (librdkafka and kafka-python's bootstrap), captured by a proxy."""
    with _CapturingProxy(server.bootstrap) as proxy:
        AdminClient({"bootstrap.servers": proxy.address}).list_topics(timeout=60)
        with closing(KafkaAdminClient(bootstrap_servers=proxy.address)) as admin:
            admin.list_topics()
    frames = proxy.frames()
    assert len(frames) >= 2
    return frames


@pytest.fixture(scope="module")
def served_frames(server, client_frames) -> list[bytes]:
    return client_frames + _valid_frames_of(lambda: served_api_keys(server.bootstrap))


def _mutated(frames: list[bytes]) -> st.SearchStrategy[bytes]:
    """A valid frame with bytes flipped, cut, inserted, or an int32 set to an extreme count."""

    @st.composite
    def mutate(draw: st.DrawFn) -> bytes:
        frame = bytearray(draw(st.sampled_from(frames)))
        for _ in range(draw(st.integers(1, 4))):
            kind = draw(st.sampled_from(["flip", "cut", "insert", "count", "resize"]))
            at = draw(st.integers(0, max(0, len(frame) - 1)))
            if kind == "flip" and frame:
                frame[at] ^= draw(st.integers(1, 255))
            elif kind == "cut":
                del frame[at:]
            elif kind == "insert":
                frame[at:at] = draw(st.binary(min_size=1, max_size=8))
            elif kind == "count" and len(frame) >= at + 4:
                frame[at : at + 4] = struct.pack(">i", draw(st.sampled_from([2**31 - 1, -1, -(2**31), 2**24])))
            elif kind == "resize" and len(frame) >= 4:
                frame[0:4] = struct.pack(">i", len(frame) - 4 + draw(st.integers(-8, 8)))
        return bytes(frame)

    return mutate()


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_frames_never_take_the_server_down(server, served_frames, data):
    frame = data.draw(st.one_of(st.binary(max_size=200), _mutated(served_frames)))
    with RawConnection(server.bootstrap) as conn:
        conn.send(frame)
        conn.sock.shutdown(socket.SHUT_WR)
        while conn.receive() is not None:  # answers, if any, until the server closes (a hang times out)
            pass
    assert server.proc is not None and server.proc.poll() is None
    assert answers_api_versions(server.bootstrap)
    _assert_no_traceback(server)


_EVERY_KNOWN_FRAME = _valid_frames_of(lambda: set(range(0, 100)))


@settings(max_examples=3000, deadline=None)
@given(data=st.data())
def test_fuzzed_frames_decode_or_are_refused_as_malformed(data):
    frame = data.draw(st.one_of(st.binary(max_size=300).map(_framed), _mutated(_EVERY_KNOWN_FRAME)))[4:]
    try:
        api_key, version, _ = wire.peek_header(frame)
    except wire.MalformedRequestError:
        return
    message = wire.message_types(api_key, version)
    if message is None:
        return
    try:
        wire.decode_request(frame, message)
    except wire.MalformedRequestError:
        pass


# ---- helpers -------------------------------------------------------------------------------------------


def _wait_for_log(server: ServeProcess, text: str) -> None:
    deadline = time.monotonic() + LOG_WAIT_S
    while text not in server.log():
        assert time.monotonic() < deadline, f"no {text!r} in the server's log:\n{server.log()}"
        time.sleep(0.05)


class _CapturingProxy:
    """A TCP proxy in front of the server that records the frames clients send through it."""

    def __init__(self, upstream: str):
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.sent: list[bytes] = []
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> _CapturingProxy:
        self._accepting.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            record = bytearray()
            self.sent.append(record)  # type: ignore[arg-type]
            for src, dst, rec in ((client, server, record), (server, client, None)):
                t = threading.Thread(target=_pump, args=(src, dst, rec), daemon=True)
                t.start()
                self._threads.append(t)

    def frames(self) -> list[bytes]:
        out = []
        for stream in self.sent:
            data = bytes(stream)
            while len(data) >= 4:
                (size,) = struct.unpack_from(">i", data)
                if len(data) < 4 + size:
                    break
                out.append(data[: 4 + size])
                data = data[4 + size :]
        return out


def _pump(src: socket.socket, dst: socket.socket, record: bytearray | None) -> None:
    try:
        while chunk := src.recv(65536):
            if record is not None:
                record += chunk
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
