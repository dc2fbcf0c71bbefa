"""The APIs the server answers, at which versions, and the handler of each: the broker's request table.

A handler module registers its APIs with `@api(key, min_version, max_version)`; `HANDLER_MODULES`
lists the modules, imported once when a server starts. ApiVersions answers from this table,
so an API is advertised exactly when a handler serves it.

A handler is called as `handler(ctx, request)` with the decoded body and returns the response
body (or None for a request that gets no answer: Produce with acks=0). A plain function runs
on the server's store thread, where every store access happens, one request at a time; an
`async def` handler runs on the event loop and reaches the store through `await ctx.run(fn, ...)`
(Fetch uses that to long-poll without holding the store thread).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

HANDLER_MODULES = (
    "txlog.server.handlers.cluster",
    "txlog.server.handlers.produce",
    "txlog.server.handlers.fetch",
    "txlog.server.handlers.transactions",
    "txlog.server.handlers.groups",
    "txlog.server.handlers.topics",
    "txlog.server.handlers.replicas",
    "txlog.server.handlers.sasl",
    "txlog.server.handlers.consumer_groups",
    "txlog.server.handlers.offsets",
)


@dataclass(frozen=True, slots=True)
class Api:
    key: int
    min_version: int
    max_version: int
    handler: Callable[..., Any]
    # Allowed before a SASL listener's client has authenticated (ApiVersions, SaslHandshake, SaslAuthenticate).
    before_auth: bool = False


APIS: dict[int, Api] = {}


def api(key: int, min_version: int, max_version: int, *, before_auth: bool = False) -> Callable:
    """Register the decorated function as the handler of API `key` at versions min..max."""

    def register(handler: Callable[..., Any]) -> Callable[..., Any]:
        if key in APIS:
            raise RuntimeError(f"API key {key} has two handlers: {APIS[key].handler} and {handler}")
        APIS[key] = Api(key, min_version, max_version, handler, before_auth)
        return handler

    return register


def load_handlers() -> dict[int, Api]:
    """Import every handler module (each registers itself) and return the table."""
    for module in HANDLER_MODULES:
        importlib.import_module(module)
    return APIS
