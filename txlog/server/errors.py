"""Kafka error codes for what the store and the coordinators raise, in one place for every handler."""

from __future__ import annotations

from storage.errors import KafkaError

NONE = 0
UNKNOWN_SERVER_ERROR = -1


def error_code(exc: BaseException) -> int:
    """The Kafka error code of a txlog error (each carries Kafka's own), UNKNOWN_SERVER_ERROR otherwise."""
    if isinstance(exc, KafkaError) and isinstance(exc.code, int) and exc.code != -1:
        return exc.code
    return UNKNOWN_SERVER_ERROR


def error_message(exc: BaseException) -> str:
    """What a response's error_message field carries: the error's own words."""
    return str(exc) or type(exc).__name__
