"""SaslHandshake and SaslAuthenticate: PLAIN and SCRAM-SHA-256/512 on SASL_PLAINTEXT and SASL_SSL listeners.

The exchange is Kafka's (SaslServerAuthenticator): a client may send ApiVersions, then
SaslHandshake v1 naming a mechanism, then SaslAuthenticate requests carrying the mechanism's
tokens until the login completes; every other request before that closes the connection
(socket_server, through `Api.before_auth`). An unsupported mechanism is answered with
UNSUPPORTED_SASL_MECHANISM and the enabled list, and a failed login with
SASL_AUTHENTICATION_FAILED and Kafka's message, after Kafka's 100 ms delay
(connection.failed.authentication.delay.ms, which slows password guessing); both answers are
the connection's last. SaslHandshake v0, where the tokens that follow are bare frames without
a Kafka header (clients before Kafka 1.0), is not served. Sessions do not expire
(session_lifetime_ms 0: Kafka's connections.max.reauth.ms default), so clients never
re-authenticate. On an authenticated connection both APIs answer ILLEGAL_SASL_STATE, as
Kafka's KafkaApis does.
"""

from __future__ import annotations

import asyncio
from typing import Any

from txlog.errors import SaslAuthenticationFailedError
from txlog.server.apis import api
from txlog.server.request_context import RequestContext
from txlog.server.sasl_mechanisms import Mechanism, mechanism_server

NONE = 0
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
# A token past this is refused: PLAIN and SCRAM messages are a few hundred bytes, so a larger one is an attack.
MAX_TOKEN_BYTES = 4096
FAILED_AUTHENTICATION_DELAY_S = 0.1  # Kafka's connection.failed.authentication.delay.ms default
_MECHANISM = "sasl.mechanism"  # the connection state key of the login in progress


@api(17, 1, 1, before_auth=True)
async def sasl_handshake(ctx: RequestContext, request: Any) -> Any:
    connection = ctx.connection
    sasl = connection.sasl
    if sasl is None or connection.authenticated:
        return ctx.respond(error_code=ILLEGAL_SASL_STATE, mechanisms=())
    enabled = tuple(sasl.mechanisms)
    if _MECHANISM in connection.state:
        connection.close_after_response = "SaslHandshake during SASL authentication"
        return ctx.respond(error_code=ILLEGAL_SASL_STATE, mechanisms=enabled)
    if request.mechanism not in enabled:
        connection.close_after_response = f"unsupported SASL mechanism {request.mechanism!r}"
        return ctx.respond(error_code=UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled)
    connection.state[_MECHANISM] = mechanism_server(request.mechanism, sasl.credentials)
    return ctx.respond(error_code=NONE, mechanisms=enabled)


@api(36, 0, 2, before_auth=True)
async def sasl_authenticate(ctx: RequestContext, request: Any) -> Any:
    connection = ctx.connection
    if connection.authenticated:
        return _answer(ctx, ILLEGAL_SASL_STATE, "SaslAuthenticate request received after successful authentication")
    mechanism: Mechanism | None = connection.state.get(_MECHANISM)
    if mechanism is None:
        connection.close_after_response = "SaslAuthenticate before SaslHandshake"
        return _answer(ctx, ILLEGAL_SASL_STATE, "Unexpected SaslAuthenticate request during SASL handshake")
    try:
        if len(request.auth_bytes) > MAX_TOKEN_BYTES:
            raise SaslAuthenticationFailedError(f"a SASL token of more than {MAX_TOKEN_BYTES} bytes is refused")
        # Off the loop: a PLAIN login checked against a SCRAM credential runs PBKDF2.
        token = await asyncio.to_thread(mechanism.evaluate, bytes(request.auth_bytes))
    except SaslAuthenticationFailedError as exc:
        await asyncio.sleep(FAILED_AUTHENTICATION_DELAY_S)
        connection.close_after_response = f"{mechanism.name} authentication failed"
        return _answer(ctx, SASL_AUTHENTICATION_FAILED, str(exc))
    if mechanism.complete:
        connection.authenticated = True
        connection.principal = f"User:{mechanism.user}"
        del connection.state[_MECHANISM]
    return _answer(ctx, NONE, None, token)


def _answer(ctx: RequestContext, error_code: int, message: str | None, token: bytes = b"") -> Any:
    return ctx.respond(error_code=error_code, error_message=message, auth_bytes=token, session_lifetime=0)
