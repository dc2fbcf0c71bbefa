"""`txlog serve`: answer Kafka's wire protocol on a store, so Kafka clients and tools run against it.

    txlog --data-dir DIR serve [--listen [PROTOCOL://]HOST:PORT ...] [--config KEY=VALUE ...]

Examples:

    txlog serve                                   # 127.0.0.1:9092, store ./txlog-data
    txlog serve --listen 127.0.0.1:0              # a free port, printed on stdout
    kcat -b 127.0.0.1:9092 -L                     # what kcat sees
    txlog serve --fault EndTxn:COORDINATOR_NOT_AVAILABLE:2   # rehearse a commit's retries
    kafka-console-consumer.sh --bootstrap-server 127.0.0.1:9092 --topic t \\
        --isolation-level read_committed --from-beginning
    txlog serve --sasl-credentials users.txt --add-scram-user alice   # password on stdin
    txlog serve --listen SASL_SSL://0.0.0.0:9093 --ssl-certfile server.pem \\
        --ssl-keyfile server-key.pem --sasl-credentials users.txt     # docs/serve.md §8

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
import dataclasses
import getpass
import ipaddress
import re
import signal
import socket
import ssl
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from cli.context import USAGE, CommandError, open_store, settings

if TYPE_CHECKING:
    from txlog.server.credentials import SaslConfig
    from txlog.server.faults import Faults
    from txlog.server.socket_server import ListenerSpec, SocketServer

DEFAULT_LISTENER = "127.0.0.1:9092"
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = (
    "PLAIN",
    "SCRAM-SHA-256",
    "SCRAM-SHA-512",
)  # txlog.server.credentials.MECHANISMS, without importing it for --help
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
    ssl_certfile: Annotated[
        str | None,
        typer.Option(
            "--ssl-certfile",
            metavar="PEM",
            help="The server's certificate (chain), for SSL:// and SASL_SSL:// listeners.",
        ),
    ] = None,
    ssl_keyfile: Annotated[
        str | None,
        typer.Option("--ssl-keyfile", metavar="PEM", help="The certificate's private key (unencrypted PEM)."),
    ] = None,
    ssl_cafile: Annotated[
        str | None,
        typer.Option(
            "--ssl-cafile",
            metavar="PEM",
            help="CAs of the client certificates: TLS clients must present one (Kafka's ssl.client.auth=required).",
        ),
    ] = None,
    sasl_credentials: Annotated[
        str | None,
        typer.Option(
            "--sasl-credentials",
            metavar="FILE",
            help="The users of SASL_PLAINTEXT:// and SASL_SSL:// listeners (docs/serve.md §8 for the format).",
        ),
    ] = None,
    sasl_mechanisms: Annotated[
        str,
        typer.Option(
            "--sasl-enabled-mechanisms", metavar="LIST", help="Comma-separated SASL mechanisms the listeners accept."
        ),
    ] = ",".join(SASL_MECHANISMS),
    allow_anonymous_remote: Annotated[
        bool,
        typer.Option(
            "--allow-anonymous-remote",
            help="Let clients that do not authenticate (PLAINTEXT; SSL without --ssl-cafile) connect off loopback.",
        ),
    ] = False,
    add_scram_user: Annotated[
        str | None,
        typer.Option(
            "--add-scram-user",
            metavar="USER",
            help="Write USER's SCRAM-SHA-256/512 credentials (password from stdin) into --sasl-credentials; exit.",
        ),
    ] = None,
    scram_iterations: Annotated[
        int,
        typer.Option("--scram-iterations", metavar="N", help="PBKDF2 iterations of --add-scram-user (4096..16384)."),
    ] = 4096,
    fault: Annotated[
        list[str] | None,
        typer.Option(
            "--fault",
            metavar="API:ERROR[:COUNT]",
            help="Answer the next COUNT (default 1) requests of API with Kafka's ERROR instead of serving them "
            "(repeatable), e.g. EndTxn:COORDINATOR_NOT_AVAILABLE:2.",
        ),
    ] = None,
    fault_file: Annotated[
        str | None,
        typer.Option(
            "--fault-file",
            metavar="PATH",
            help="More faults, one API:ERROR[:COUNT] a line; on SIGHUP the server re-reads it and the "
            "faults it lists replace those pending.",
        ),
    ] = None,
) -> None:
    """Serve the Kafka protocol on the store (kcat, confluent-kafka, Java clients, kafka-python)."""
    from txlog.server.broker import DEFAULT_CONFIGS, Broker
    from txlog.server.socket_server import SocketServer

    if add_scram_user is not None:
        _add_scram_user(sasl_credentials, add_scram_user, scram_iterations)
        return
    security = Security(
        ssl_certfile, ssl_keyfile, ssl_cafile, sasl_credentials, sasl_mechanisms, allow_anonymous_remote
    )
    listeners = secure_listeners([parse_listener(text) for text in (listen or [DEFAULT_LISTENER])], security)
    overrides = dict(parse_config(text, DEFAULT_CONFIGS) for text in (config or []))
    injected = parse_faults(fault or [], fault_file)
    store = open_store(ctx, create=True)
    broker = Broker(store)
    broker.override(overrides)
    server = SocketServer(broker, listeners, log=_log_line(quiet=settings(ctx).quiet), injected=injected)
    asyncio.run(_run(server, fault_file))


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


# ---- security: which listeners may open, TLS, SASL (docs/serve.md §8) --------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Security:
    """The security options of one `txlog serve`, as given on the command line."""

    ssl_certfile: str | None
    ssl_keyfile: str | None
    ssl_cafile: str | None
    sasl_credentials: str | None
    sasl_mechanisms: str
    allow_anonymous_remote: bool


def secure_listeners(listeners: list[ListenerSpec], security: Security) -> list[ListenerSpec]:
    """The listeners with their TLS context and SASL users; refuses an anonymous one off loopback unless allowed.

    A client of a PLAINTEXT listener, or of an SSL one that asks no client certificate, is
    anonymous (Kafka's User:ANONYMOUS) and may read and write every topic: only loopback
    serves them unless --allow-anonymous-remote says so.
    """
    protocols = {spec.security_protocol for spec in listeners}
    uses_ssl = bool(protocols & {"SSL", "SASL_SSL"})
    uses_sasl = bool(protocols & {"SASL_PLAINTEXT", "SASL_SSL"})
    _refuse_unused(security, uses_ssl=uses_ssl, uses_sasl=uses_sasl)
    for spec in listeners:
        anonymous = spec.security_protocol == "PLAINTEXT" or (
            spec.security_protocol == "SSL" and not security.ssl_cafile
        )
        if anonymous and not security.allow_anonymous_remote and not is_loopback(spec.host):
            raise CommandError(
                f"--listen {spec.security_protocol}://{spec.host}:{spec.port}: clients of this listener do not "
                "authenticate and could read and write every topic from the network; use SASL_SSL:// "
                "(or SSL:// with --ssl-cafile), or a loopback address, or say --allow-anonymous-remote",
                exit_code=USAGE,
            )
    context = server_ssl_context(security) if uses_ssl else None
    sasl = sasl_config(security) if uses_sasl else None
    return [
        dataclasses.replace(
            spec,
            ssl_context=context if spec.security_protocol in ("SSL", "SASL_SSL") else None,
            sasl=sasl if spec.security_protocol.startswith("SASL") else None,
        )
        for spec in listeners
    ]


def _refuse_unused(security: Security, *, uses_ssl: bool, uses_sasl: bool) -> None:
    """Options for a listener that is not there are a mistake (a forgotten SASL_SSL:// prefix): say so."""
    if not uses_ssl:
        given = [
            name
            for name, value in (
                ("--ssl-certfile", security.ssl_certfile),
                ("--ssl-keyfile", security.ssl_keyfile),
                ("--ssl-cafile", security.ssl_cafile),
            )
            if value
        ]
        if given:
            raise CommandError(f"{given[0]} is given but no --listen is SSL:// or SASL_SSL://", exit_code=USAGE)
    if not uses_sasl and security.sasl_credentials:
        raise CommandError(
            "--sasl-credentials is given but no --listen is SASL_PLAINTEXT:// or SASL_SSL://", exit_code=USAGE
        )


def is_loopback(host: str) -> bool:
    """Does `host` (an address or a name) reach this machine only? A name counts when every address it has does."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return False  # it does not resolve: binding to it fails anyway, with the resolver's words
    return bool(addresses) and all(ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addresses)


def server_ssl_context(security: Security) -> ssl.SSLContext:
    """TLS for SSL:// and SASL_SSL://: TLS 1.2 and 1.3 (ssl.enabled.protocols), client certificates if --ssl-cafile."""
    if not security.ssl_certfile or not security.ssl_keyfile:
        raise CommandError("an SSL:// or SASL_SSL:// listener needs --ssl-certfile and --ssl-keyfile", exit_code=USAGE)
    # Not create_default_context: that would also trust the system's CAs to vouch for clients.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(security.ssl_certfile, security.ssl_keyfile, password=_no_key_password)
    except (OSError, ssl.SSLError) as exc:
        raise CommandError(
            f"cannot load --ssl-certfile {security.ssl_certfile} with --ssl-keyfile {security.ssl_keyfile}: "
            f"{_ssl_reason(exc)} (both must be PEM, the key unencrypted and matching the certificate)"
        ) from None
    if security.ssl_cafile:
        try:
            context.load_verify_locations(cafile=security.ssl_cafile)
        except (OSError, ssl.SSLError) as exc:
            raise CommandError(f"cannot load --ssl-cafile {security.ssl_cafile}: {_ssl_reason(exc)}") from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _no_key_password() -> str:
    raise CommandError("--ssl-keyfile is encrypted; txlog serve reads unencrypted PEM keys only")


def _ssl_reason(exc: OSError | ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    return f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc)


def sasl_config(security: Security) -> SaslConfig:
    """The users and mechanisms of the SASL listeners."""
    from txlog.errors import InvalidConfigurationError
    from txlog.server.credentials import MECHANISMS, SaslConfig, load_credentials

    if not security.sasl_credentials:
        raise CommandError("a SASL_PLAINTEXT:// or SASL_SSL:// listener needs --sasl-credentials FILE", exit_code=USAGE)
    mechanisms = tuple(m.strip().upper() for m in security.sasl_mechanisms.split(",") if m.strip())
    unknown = [m for m in mechanisms if m not in MECHANISMS]
    if unknown or not mechanisms:
        raise CommandError(
            f"--sasl-enabled-mechanisms: {', '.join(unknown) or 'none given'} (known: {', '.join(MECHANISMS)})",
            exit_code=USAGE,
        )
    try:
        credentials = load_credentials(security.sasl_credentials)
    except InvalidConfigurationError as exc:
        raise CommandError(str(exc)) from None
    return SaslConfig(credentials, mechanisms)


def _add_scram_user(path: str | None, user: str, iterations: int) -> None:
    """`--add-scram-user USER`: the password from stdin (prompted twice on a terminal), never echoed or stored."""
    from txlog.errors import InvalidConfigurationError
    from txlog.server.credentials import add_scram_user

    if not path:
        raise CommandError("--add-scram-user needs --sasl-credentials FILE (the file to write)", exit_code=USAGE)
    if sys.stdin.isatty():
        password = getpass.getpass(f"Password of {user}: ")
        if getpass.getpass("Again: ") != password:
            raise CommandError("the two passwords differ")
    else:
        password = sys.stdin.readline().removesuffix("\n").removesuffix("\r")
    if not password:
        raise CommandError("the password is empty")
    try:
        add_scram_user(path, user, password, iterations=iterations)
    except InvalidConfigurationError as exc:
        raise CommandError(str(exc), exit_code=USAGE) from None
    print(f"wrote SCRAM-SHA-256 and SCRAM-SHA-512 credentials of {user} to {path}", file=sys.stderr)


def parse_config(text: str, known: dict[str, str]) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise CommandError(f"--config '{text}' is not KEY=VALUE", exit_code=USAGE)
    if key not in known:
        raise CommandError(
            f"--config: unknown broker config '{key}' (known: {', '.join(sorted(known))})", exit_code=USAGE
        )
    from txlog.server.broker import check_config

    try:
        check_config(key, value)
    except ValueError as exc:
        raise CommandError(f"--config: {exc}", exit_code=USAGE) from None
    return key, value


def parse_faults(texts: list[str], fault_file: str | None) -> Faults:
    """`--fault API:ERROR[:COUNT]` options, in order, then the `--fault-file`'s (txlog/server/faults.py)."""
    from txlog.server.faults import Faults, parse_fault, read_fault_file

    parsed = []
    for text in texts:
        try:
            parsed.append(parse_fault(text))
        except ValueError as exc:
            raise CommandError(f"--fault {exc}", exit_code=USAGE) from None
    if fault_file is not None:
        try:
            parsed += read_fault_file(fault_file)
        except ValueError as exc:
            raise CommandError(f"--fault-file {exc}", exit_code=USAGE) from None
    return Faults(parsed)


def _reload_faults_on_sighup(server: SocketServer, fault_file: str) -> None:
    """SIGHUP: the faults the file lists now replace the pending ones (a bad file changes nothing)."""
    from txlog.server.faults import read_fault_file

    def reload() -> None:
        try:
            faults = read_fault_file(fault_file)
        except ValueError as exc:
            server.log(f"error: --fault-file {exc}; faults unchanged")
            return
        server.faults.replace(faults)
        server.log(f"faults reloaded from {fault_file}: {', '.join(map(str, faults)) or 'none'}")

    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload)


async def _run(server: SocketServer, fault_file: str | None = None) -> None:
    try:
        endpoints = await server.start()
    except OSError as exc:
        await server.shutdown()
        raise CommandError(f"cannot listen: {exc.strerror or exc}") from None
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, server.stop)
    if fault_file is not None:
        _reload_faults_on_sighup(server, fault_file)
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
