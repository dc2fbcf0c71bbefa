"""Producer sequence arithmetic (docs/kafka-formats.md §1.1).

Sequences are int32 that wrap from INT32_MAX straight to 0 (never to a
negative number), so a producer may run forever on one id/epoch. Every place
that compares or advances sequences must go through these two functions;
plain `+`/`-` is wrong exactly at the wrap, which is where bugs hide.
"""

from __future__ import annotations

from storage.varint import INT32_MAX

__all__ = ["INT32_MAX", "dec_seq", "inc_seq"]


def inc_seq(sequence: int, delta: int) -> int:
    """Advance `sequence` by `delta`, wrapping past INT32_MAX to 0 as Kafka does."""
    if sequence > INT32_MAX - delta:
        return delta - (INT32_MAX - sequence) - 1
    return sequence + delta


def dec_seq(sequence: int, delta: int) -> int:
    """Step `sequence` back by `delta`, wrapping below 0 to INT32_MAX as Kafka does."""
    if sequence < delta:
        return INT32_MAX - (delta - sequence) + 1
    return sequence - delta
