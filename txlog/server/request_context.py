"""What a handler knows about the request it serves: the broker, the connection, the header, the version."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from txlog.server import wire
from txlog.server.broker import Broker, Endpoint
from txlog.server.credentials import SaslConfig

T = TypeVar("T")


@dataclass
class Connection:
    """One client connection: where it came from, which listener took it, and what it has proved."""

    peer: str
    listener: Endpoint
    security_protocol: str = "PLAINTEXT"
    authenticated: bool = True  # a SASL listener sets False until SaslAuthenticate succeeds
    principal: str = "User:ANONYMOUS"
    sasl: SaslConfig | None = None  # a SASL listener's users and mechanisms
    # set by a handler whose answer must be the connection's last (a failed login): why it closes
    close_after_response: str | None = None
    client_id: str | None = None
    # per-connection state a handler keeps between requests (the SASL exchange, for one)
    state: dict[str, Any] = field(default_factory=dict)


@dataclass
class RequestContext:
    broker: Broker
    connection: Connection
    header: wire.RequestHeader
    message: wire.MessageTypes
    store_thread: Executor
    log: Callable[[str], None]  # the server's operator lines on stderr (`SocketServer.log`)

    @property
    def version(self) -> int:
        return self.message.version

    def respond(self, **values: Any) -> Any:
        """The response body of this request's version, from the fields it has (`wire.make`)."""
        return wire.make(self.message.response, **values)

    def make(self, name: str, /, **values: Any) -> Any:
        """A nested response type of this version (`Partition`, `Topic`...) by its class name."""
        return wire.make(getattr(self.message.response_module, name), **values)

    def has_field(self, name: str) -> bool:
        """Does this version's response have the field? (Handlers that build fields at some versions only.)"""
        return any(f.name == name for f in dataclasses.fields(self.message.response))

    async def run(self, fn: Callable[..., T], /, *args: Any) -> T:
        """Run `fn(*args)` on the store thread (for async handlers; sync handlers are already there)."""
        return await asyncio.get_running_loop().run_in_executor(self.store_thread, fn, *args)
