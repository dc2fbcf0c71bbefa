"""Kafka's topic-name rules, which also keep every name a safe single path component."""

from __future__ import annotations

import re

from storage.errors import InvalidTopicError

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
INTERNAL_PREFIX = "__"
# The internal topics (Kafka's common.internals.Topic): txlog/coordinator/internal_topics.py creates them.
TRANSACTION_STATE_TOPIC = "__transaction_state"
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
INTERNAL_TOPICS = (TRANSACTION_STATE_TOPIC, CONSUMER_OFFSETS_TOPIC)


def validate_topic_name(name: str, *, allow_internal: bool = False) -> str:
    """Return `name` if it is a legal topic name, else raise InvalidTopicError.

    Kafka's rules (ASCII letters, digits, '.', '_', '-'; at most 249 characters;
    not '.' or '..') already exclude '/', NUL and path traversal. txlog also refuses
    a leading '-', which command lines would read as an option, and names with the
    internal prefix '__' unless the caller is the exactly-once layer creating its
    own topics.
    """
    if not isinstance(name, str) or not name:
        raise InvalidTopicError("topic name is empty")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is longer than {MAX_NAME_LENGTH} characters")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be '{name}'")
    if not _LEGAL.fullmatch(name):
        raise InvalidTopicError(
            f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_' and '-'"
        )
    if name.startswith("-"):
        raise InvalidTopicError(f"topic name {name!r} cannot start with '-'")
    if name.startswith(INTERNAL_PREFIX) and not allow_internal:
        raise InvalidTopicError(f"topic name {name!r} uses the internal prefix '__'")
    return name


def parse_partition_dir(dirname: str) -> tuple[str, int] | None:
    """Split '<topic>-<partition>' as Kafka names partition directories; None if it is not one.

    Directories Kafka marks as being deleted, moved or stray ('-delete', '-future',
    '-stray' suffixes after a '.') are not partitions.
    """
    topic, sep, part = dirname.rpartition("-")
    if not sep or not topic or not part.isdigit() or (len(part) > 1 and part[0] == "0"):
        return None
    if not _LEGAL.fullmatch(topic) or topic in (".", ".."):
        return None
    return topic, int(part)
