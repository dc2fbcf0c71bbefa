"""`txlog serve`: answer Kafka's wire protocol on a store, so Kafka clients and tools run against it.

    txlog --data-dir DIR serve [--listen [PROTOCOL://]HOST:PORT ...] [--config KEY=VALUE ...]

Examples:

    txlog serve                                   # 127.0.0.1:9092, store ./txlog-data
    txlog serve --listen 127.0.0.1:0              # a free port, printed on stdout
    kcat -b 127.0.0.1:9092 -L                     # what kcat sees
    kafka-console-consumer.sh --bootstrap-server 127.0.0.1:9092 --topic t \\
        --isolation-level read_committed --from-beginning

In Python (confluent-kafka): Producer({"bootstrap.servers": "127.0.0.1:9092",
"transactional.id": "app-1"}) works as against a broker; so do kafka-python, aiokafka,
franz-go and the Java clients (README "Using Kafka clients").

When every listener accepts connections the server prints `listening on HOST:PORT` on stdout,
one line per listener, then runs until SIGINT or SIGTERM, answers or refuses the requests in
flight, closes the store and exits 0. Connections and errors are logged on stderr (-q keeps
only errors). The store is created when DIR does not exist. Other processes may use the
store at the same time: embedded producers, consumers, `txlog process` and the CLI see the
server's writes, and the server sees theirs, under the store's file locks.
"""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from cli.context import USAGE, CommandError, open_store, settings

if TYPE_CHECKING:
    from txlog.server.socket_server import ListenerSpec, SocketServer

DEFAULT_LISTENER = "127.0.0.1:9092"
PROTOCOLS = ("PLAINTEXT",)
_LISTENER = re.compile(r"^(?:(?P<proto>[A-Za-z_]+)://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[^:\[\]]*):(?P<port>\d{1,5})$")


def serve(
    ctx: typer.Context,
    listen: Annotated[
        list[str] | None,
        typer.Option(
            "--listen",
            metavar="[PROTOCOL://]HOST:PORT",
            help=f"Where to accept connections (repeatable; default {DEFAULT_LISTENER}; port 0 takes a free port).",
        ),
    ] = None,
    config: Annotated[
        list[str] | None,
        typer.Option(
            "--config",
            metavar="KEY=VALUE",
            help="A broker config (repeatable), e.g. auto.create.topics.enable=false, num.partitions=3.",
        ),
    ] = None,
) -> None:
    """Serve the Kafka protocol on the store (kcat, confluent-kafka, Java clients, kafka-python)."""
    from txlog.server.broker import DEFAULT_CONFIGS, Broker
    from txlog.server.socket_server import SocketServer

    listeners = [parse_listener(text) for text in (listen or [DEFAULT_LISTENER])]
    overrides = dict(parse_config(text, DEFAULT_CONFIGS) for text in (config or []))
    store = open_store(ctx, create=True)
    broker = Broker(store)
    broker.override(overrides)
    server = SocketServer(broker, listeners, log=_log_line(quiet=settings(ctx).quiet))
    asyncio.run(_run(server))


def parse_listener(text: str) -> ListenerSpec:
    """`[PROTOCOL://]HOST:PORT` (IPv6 hosts in brackets), as Kafka's `listeners` config writes them."""
    from txlog.server.socket_server import ListenerSpec

    match = _LISTENER.match(text)
    if match is None:
        raise CommandError(f"--listen '{text}' is not [PROTOCOL://]HOST:PORT", exit_code=USAGE)
    protocol = (match["proto"] or "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise CommandError(
            f"--listen '{text}': protocol {protocol} is not one of {', '.join(PROTOCOLS)}", exit_code=USAGE
        )
    port = int(match["port"])
    if port > 65535:
        raise CommandError(f"--listen '{text}': port {port} is past 65535", exit_code=USAGE)
    host = match["host"].strip("[]") or "0.0.0.0"
    return ListenerSpec(host, port, protocol)


def parse_config(text: str, known: dict[str, str]) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise CommandError(f"--config '{text}' is not KEY=VALUE", exit_code=USAGE)
    if key not in known:
        raise CommandError(
            f"--config: unknown broker config '{key}' (known: {', '.join(sorted(known))})", exit_code=USAGE
        )
    return key, value


async def _run(server: SocketServer) -> None:
    try:
        endpoints = await server.start()
    except OSError as exc:
        await server.shutdown()
        raise CommandError(f"cannot listen: {exc.strerror or exc}") from None
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, server.stop)
    for endpoint in endpoints:
        print(f"listening on {endpoint}", flush=True)
    await server.serve_until_stopped()


def _log_line(*, quiet: bool) -> Callable[[str], None]:
    """The server's stderr: connection lines unless -q; lines about errors always."""
    from txlog.server.socket_server import stderr_line

    def log(message: str) -> None:
        if not quiet or "error" in message.lower():
            stderr_line(message)

    return log
