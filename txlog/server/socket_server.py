"""The network side of `txlog serve`: listeners, connections, frames in and out, orderly shutdown.

Kafka's SocketServer reads one request per connection at a time and answers in order; so
does this. Each connection is a coroutine on one asyncio loop: it reads a size-prefixed frame
(refusing sizes past socket.request.max.bytes before reading them), finds the handler of its
API and version, runs it, writes the answer and only then reads the next frame. Handlers that
touch the store run on one store thread, one request at a time, which keeps the coordinators
and the store single-threaded as they are in every embedded process; a Fetch that waits for
data waits on the loop, not on that thread.

What Kafka does with bad input, this does too: a frame that is not a request of the version it
names, an API key nobody serves or a version outside the served range closes the connection
(ApiVersions excepted: an unsupported ApiVersions version is answered with UNSUPPORTED_VERSION
and the served table in v0 format, so the client can pick a version). A handler that fails
unexpectedly is logged with its traceback on stderr and the connection is closed; the server
keeps serving everyone else. Idle and stalled connections close after connections.max.idle.ms,
and queued.max.request.bytes bounds the memory of the requests read at once (docs/serve.md §9).
A request a `--fault` takes is answered with its error without reaching its handler (§10).
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import functools
import inspect
import os
import ssl
import sys
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from storage.errors import KafkaError
from txlog.server import faults, wire
from txlog.server.apis import load_handlers
from txlog.server.broker import Broker, Endpoint
from txlog.server.credentials import SaslConfig
from txlog.server.request_context import Connection, RequestContext

SHUTDOWN_GRACE_S = 5.0  # how long in-flight requests may take once a stop is asked
UNSUPPORTED_VERSION = 35
PRODUCE_KEY = 0
# A decoded request takes more memory than its frame: a Metadata request of 1M two-byte topic
# names decodes into ~30 bytes of Python objects per frame byte (measured with kio 0.6.5). Produce
# is the exception (its records stay one bytes object). queued.max.request.bytes counts this.
DECODED_WEIGHT = 32
# Kafka's sasl.server.max.receive.size default: what a client may send before it has authenticated.
SASL_MAX_RECEIVE_BYTES = 524_288
# Decoding costs Python time per item (a 2 MB Metadata request of 1M topics: seconds): frames past
# this size are decoded on a thread of their own, one at a time, while the loop serves the rest.
DECODE_ON_LOOP_BYTES = 64 * 1024
# Set to a path prefix, the server profiles its two busy threads (cProfile sees only the thread that
# enables it) and writes PREFIX.loop.prof and PREFIX.store.prof on a clean stop: where a benchmark's
# server time goes (tests/benchmarks/bench_serve.py --profile). Unset, nothing is profiled.
PROFILE_ENV = "TXLOG_SERVE_PROFILE"


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """A listener to open: host, port (0 takes a free one), and how its clients must connect."""

    host: str
    port: int
    security_protocol: str = "PLAINTEXT"  # PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslConfig | None = None  # SASL_PLAINTEXT and SASL_SSL: who may log in, with which mechanisms


class SocketServer:
    def __init__(
        self,
        broker: Broker,
        listeners: list[ListenerSpec],
        *,
        log: Callable[[str], None] | None = None,
        injected: faults.Faults | None = None,
    ):
        self.broker = broker
        self.faults = injected if injected is not None else faults.Faults()
        self.limits = RequestLimits.of(broker)
        self.listener_specs = listeners
        self.log = log if log is not None else stderr_line
        self.apis = load_handlers()
        self._profile_prefix = os.environ.get(PROFILE_ENV) or None
        self._profiles: dict[str, cProfile.Profile] = {}
        self.store_thread = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="txlog-store",
            initializer=functools.partial(self._start_profile, "store") if self._profile_prefix else None,
        )
        self.decode_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="txlog-decode")
        self.endpoints: list[Endpoint] = []
        self._servers: list[asyncio.base_events.Server] = []
        self._connections: dict[asyncio.Task, bool] = {}  # each connection's task: is it serving a request?
        self._stopping: asyncio.Event | None = None
        self._closing = False
        self._sweeper: asyncio.Task | None = None

    # ---- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> list[Endpoint]:
        """Open every listener; returns the endpoints actually bound (a port 0 resolved)."""
        self._stopping = asyncio.Event()
        if self._profile_prefix:
            self._start_profile("loop")
        self.broker.data_arrived.bind(asyncio.get_running_loop())
        for index, spec in enumerate(self.listener_specs):
            server = await asyncio.start_server(
                functools.partial(self._accept, listener=index), spec.host, spec.port, ssl=spec.ssl_context
            )
            self._servers.append(server)
            port = server.sockets[0].getsockname()[1]
            self.endpoints.append(Endpoint(spec.host, port))
            self.broker.listeners.append(f"{spec.security_protocol}://{Endpoint(spec.host, port)}")
        self._sweeper = asyncio.create_task(self._sweep_transactions())
        return self.endpoints

    def stop(self) -> None:
        """Ask the server to stop (from a signal handler on the loop)."""
        if self._stopping is not None:
            self._stopping.set()

    async def serve_until_stopped(self) -> None:
        assert self._stopping is not None, "start() first"
        await self._stopping.wait()
        await self.shutdown()

    async def shutdown(self) -> None:
        """Stop accepting, let in-flight requests finish (SHUTDOWN_GRACE_S), close connections, close the store."""
        for server in self._servers:
            server.close()
        for server in self._servers:
            await server.wait_closed()
        self._closing = True
        if self._sweeper is not None:
            self._sweeper.cancel()  # a sweep already on the store thread finishes before the store closes
        for task, busy in list(self._connections.items()):
            if not busy:
                task.cancel()  # waiting for a request: stop at once; one serving a request finishes it first
        pending = list(self._connections)
        if pending:
            _, late = await asyncio.wait(pending, timeout=SHUTDOWN_GRACE_S)
            for task in late:
                task.cancel()  # refused: the client sees the connection close and retries elsewhere or later
            if late:
                await asyncio.wait(late, timeout=SHUTDOWN_GRACE_S)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.store_thread, self.broker.store.close)
        if self._profile_prefix:
            await loop.run_in_executor(self.store_thread, self._stop_profile, "store")
            self._stop_profile("loop")
        self.store_thread.shutdown(wait=True)
        self.decode_thread.shutdown(wait=False, cancel_futures=True)

    async def _sweep_transactions(self) -> None:
        """Abort timed-out transactions in the background, as a broker does every
        `transaction.abort.timed.out.transaction.cleanup.interval.ms`; the sweep runs on the store
        thread between requests. A failed sweep (a disk refusing writes) is logged and retried."""
        interval_s = self.broker.config_int("transaction.abort.timed.out.transaction.cleanup.interval.ms") / 1000
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval_s)
            try:
                await loop.run_in_executor(self.store_thread, self.broker.transport.abort_expired_transactions)
            except KafkaError as exc:
                self.log(f"transaction timeout sweep failed: {exc}")
                continue
            self.broker.data_arrived.notify()  # an aborted transaction moves its partitions' last stable offsets

    def _start_profile(self, name: str) -> None:
        """Profile the calling thread (PROFILE_ENV)."""
        profile = self._profiles[name] = cProfile.Profile()
        profile.enable()

    def _stop_profile(self, name: str) -> None:
        """Stop the calling thread's profile and write it to PREFIX.NAME.prof."""
        profile = self._profiles.pop(name, None)
        if profile is not None:
            profile.disable()
            profile.dump_stats(f"{self._profile_prefix}.{name}.prof")

    # ---- connections --------------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, listener: int) -> None:
        """Serve one connection until the client leaves, sends what Kafka closes a connection for, or we stop."""
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = False
        spec, endpoint = self.listener_specs[listener], self.endpoints[listener]
        connection = Connection(
            peer=_peer(writer),
            listener=endpoint,
            security_protocol=spec.security_protocol,
            authenticated=not spec.security_protocol.startswith("SASL"),
            sasl=spec.sasl,
        )
        self.log(f"connection from {connection.peer} on {endpoint} ({spec.security_protocol})")
        reason = "closed"
        try:
            while not self._closing:
                frame, charge = await self._read_request(reader, authenticated=connection.authenticated)
                try:
                    self._connections[task] = True  # busy: shutdown lets this request finish
                    answer = await self._handle(connection, frame)
                    if answer is not None:
                        writer.write(answer)
                        await writer.drain()
                    if connection.close_after_response is not None:
                        raise _Closed(connection.close_after_response)
                    self._connections[task] = False
                finally:
                    await self.limits.memory.release(charge)
        except _Closed as exc:
            reason = str(exc)
        except (ConnectionError, asyncio.CancelledError):
            reason = "connection lost" if not self._closing else "server stopping"
        finally:
            self._connections.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self.log(f"connection from {connection.peer} ended: {reason}")

    async def _handle(self, connection: Connection, frame: bytes) -> bytes | None:
        """The encoded answer to one frame, None for a request without one; raises _Closed to close."""
        try:
            api_key, version, correlation_id = wire.peek_header(frame)
        except wire.MalformedRequestError as exc:
            raise _Closed(str(exc)) from None
        api = self.apis.get(api_key)
        message = wire.message_types(api_key, version)
        if api is None or message is None or not api.min_version <= version <= api.max_version:
            if api_key == wire.API_VERSIONS_KEY:
                return self._unsupported_api_versions(correlation_id)
            raise _Closed(f"{wire.api_name(api_key)} v{version} is not served")
        try:
            header, body = await self._decode(frame, message)
        except wire.MalformedRequestError as exc:
            raise _Closed(str(exc)) from None
        connection.client_id = header.client_id
        if not connection.authenticated and not api.before_auth:
            raise _Closed(
                f"{wire.api_name(api_key)} before authentication on a {connection.security_protocol} listener"
            )
        ctx = RequestContext(self.broker, connection, header, message, self.store_thread, self.log)
        try:
            error = self.faults.take(api_key)
            if error is not None:
                return self._injected(ctx, body, error)
            if inspect.iscoroutinefunction(api.handler):
                response = await api.handler(ctx, body)
            else:
                loop = asyncio.get_running_loop()
                response = await loop.run_in_executor(self.store_thread, api.handler, ctx, body)
            if response is None:
                return None
            return wire.encode_response(message, correlation_id, response)
        except _Closed:
            raise
        except Exception:  # noqa: BLE001 - a handler's bug closes one connection, never the server
            self.log(f"error serving {wire.api_name(api_key)} v{version} from {connection.peer}:")
            self.log(traceback.format_exc().rstrip())
            raise _Closed(f"internal error serving {wire.api_name(api_key)}") from None

    async def _decode(self, frame: bytes, message: wire.MessageTypes) -> tuple[wire.RequestHeader, object]:
        """Decode on the loop, or on the decode thread for a large frame, so the loop keeps serving others."""
        if len(frame) <= DECODE_ON_LOOP_BYTES:
            return wire.decode_request(frame, message)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.decode_thread, wire.decode_request, frame, message)

    def _injected(self, ctx: RequestContext, body: object, error: ErrorCode) -> bytes | None:
        """The answer to a request a `--fault` takes: the error for every item, the store untouched."""
        name = wire.api_name(ctx.message.api_key)
        self.log(
            f"fault injected: {name} v{ctx.version} from {ctx.connection.peer} answered with "
            f"{error.name.upper()} (error code {error.value})"
        )
        if ctx.message.api_key == PRODUCE_KEY and getattr(body, "acks", None) == 0:
            return None  # acks=0: Kafka never answers, not even with an error
        response = faults.error_response(ctx.message, body, error)
        return wire.encode_response(ctx.message, ctx.header.correlation_id, response)

    # ---- reading requests: sizes, memory, idle connections ----------------------------------------

    async def _read_request(self, reader: asyncio.StreamReader, *, authenticated: bool) -> tuple[bytes, int]:
        """The next frame and the request memory it holds (release it once answered); raises _Closed.

        Waiting for a request ends after connections.max.idle.ms (Kafka closes idle connections);
        a request must then arrive whole within that time of its size, so a client that stalls or
        vanishes mid-frame without closing its socket cannot hold memory for ever. The frame's
        bytes are read only once queued.max.request.bytes has room for them: clients sending
        large frames at once wait in turn (their bytes stay in the kernel's socket buffers).
        Before a SASL client has authenticated, a frame past SASL_MAX_RECEIVE_BYTES closes the
        connection (Kafka's sasl.server.max.receive.size).
        """
        idle_s = self.limits.idle_s
        prefix = await _read_exactly(reader, 4, idle_s, "client closed the connection", "idle connection")
        try:
            size = wire.frame_size(prefix, self.limits.max_request_bytes)
        except wire.MalformedRequestError as exc:
            raise _Closed(str(exc)) from None
        if not authenticated and size > SASL_MAX_RECEIVE_BYTES:
            raise _Closed(f"a request of {size} bytes before authentication is past {SASL_MAX_RECEIVE_BYTES}")
        head = await _read_exactly(reader, min(size, 2), idle_s, _MID_REQUEST, _STALLED)
        api_key = int.from_bytes(head, "big", signed=True) if len(head) == 2 else -1
        memory = self.limits.memory
        weight = size if api_key == PRODUCE_KEY else size * DECODED_WEIGHT
        if not memory.fits(weight):
            self.log(
                f"a request of {size} bytes waits: queued.max.request.bytes ({memory.limit}) is in use ({memory.used})"
            )
        charge = await memory.acquire(weight)
        try:
            rest = await _read_exactly(reader, size - len(head), idle_s, _MID_REQUEST, _STALLED)
        except BaseException:
            await self.limits.memory.release(charge)
            raise
        return head + rest, charge

    def _unsupported_api_versions(self, correlation_id: int) -> bytes:
        """ApiVersions at a version the broker lacks: UNSUPPORTED_VERSION and the table, in v0 (Kafka's rule)."""
        message = wire.message_types(wire.API_VERSIONS_KEY, 0)
        assert message is not None
        from txlog.server.handlers.cluster import api_version_entries

        body = wire.make(
            message.response,
            error_code=UNSUPPORTED_VERSION,
            api_keys=api_version_entries(message.response_module, self.apis),
        )
        return wire.encode_response(message, correlation_id, body)


def _peer(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


class _Closed(Exception):
    """The connection must close: the client went away or sent what Kafka would close it for."""


_MID_REQUEST = "client closed the connection mid-request"
_STALLED = "client stalled mid-request past connections.max.idle.ms"


async def _read_exactly(reader: asyncio.StreamReader, n: int, timeout_s: float, closed: str, idle: str) -> bytes:
    """`n` bytes, or _Closed with `closed` if the client leaves and `idle` if nothing comes in time."""
    try:
        return await asyncio.wait_for(reader.readexactly(n), timeout_s)
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        raise _Closed(closed) from exc
    except TimeoutError:
        raise _Closed(idle) from None


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """What the server accepts from clients, from the broker's configs (Kafka's names)."""

    max_request_bytes: int  # socket.request.max.bytes: a larger frame closes the connection unread
    idle_s: float  # connections.max.idle.ms
    memory: RequestMemory  # queued.max.request.bytes

    @classmethod
    def of(cls, broker: Broker) -> RequestLimits:
        max_request = broker.config_int("socket.request.max.bytes")
        queued = broker.config_int("queued.max.request.bytes")
        return cls(
            max_request_bytes=max_request,
            idle_s=broker.config_int("connections.max.idle.ms") / 1000,
            memory=RequestMemory(queued if queued > 0 else None),
        )


class RequestMemory:
    """A bound on the memory of requests being read or served at once (Kafka's queued.max.request.bytes).

    A request takes its charge before its body is read and gives it back once answered. A
    charge larger than the whole bound is cut to the bound, so one request always fits alone.
    Kafka's default is unbounded (-1); the server's is DEFAULT_QUEUED_REQUEST_BYTES (broker.py).
    """

    def __init__(self, limit: int | None):
        self.limit = limit
        self.used = 0
        self._freed: asyncio.Condition | None = None

    def _condition(self) -> asyncio.Condition:
        if self._freed is None:
            self._freed = asyncio.Condition()  # created on the loop that uses it
        return self._freed

    def fits(self, size: int) -> bool:
        """Would a charge of `size` be taken at once?"""
        return self.limit is None or self.used + min(size, self.limit) <= self.limit

    async def acquire(self, size: int) -> int:
        """Wait until `size` (at most the limit) fits; returns the charge to release."""
        if self.limit is None:
            return 0
        charge = min(size, self.limit)
        freed = self._condition()
        async with freed:
            await freed.wait_for(lambda: self.used + charge <= self.limit)  # type: ignore[operator]
            self.used += charge
        return charge

    async def release(self, charge: int) -> None:
        if charge:
            freed = self._condition()
            async with freed:
                self.used -= charge
                freed.notify_all()


def stderr_line(message: str) -> None:
    """One operator line on stderr; a closed stderr never stops the server."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
