"""Record text forms shared by `produce` and `consume`: value formats, properties, partitions.

`--value-format utf8|base64|hex` says how keys and values are written as text: `produce`
decodes each input key and value from it, `consume` encodes each key and value to it
(utf8 keeps the bytes as they are). Header values are always UTF-8 text. Kafka's console
tools take `--property NAME=VALUE`; separators may be written with backslash escapes
(`key.separator=\\t`).
"""

from __future__ import annotations

import base64
import binascii
from enum import Enum

import typer

from cli.context import USAGE, CommandError


class ValueFormat(str, Enum):
    """`--value-format`: how keys and values are written as text."""

    utf8 = "utf8"
    base64 = "base64"
    hex = "hex"


VALUE_FORMAT_HELP = "How keys and values are written as text: utf8 (as is), base64 or hex (binary data)."


def decode_value(text: bytes, fmt: ValueFormat, what: str) -> bytes:
    """Input text (one line's key or value) to the record's bytes; bad text is a ValueError."""
    if fmt is ValueFormat.utf8:
        return text
    try:
        if fmt is ValueFormat.base64:
            return base64.b64decode(text, validate=True)
        return bytes.fromhex(text.decode("ascii"))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise ValueError(f"{what} is not valid {fmt.value}") from None


def encode_value(data: bytes, fmt: ValueFormat) -> bytes:
    """A record's key or value as output bytes (utf8: unchanged)."""
    if fmt is ValueFormat.base64:
        return base64.b64encode(data)
    if fmt is ValueFormat.hex:
        return data.hex().encode("ascii")
    return data


def value_text(data: bytes | None, fmt: ValueFormat) -> tuple[str | None, bool]:
    """A key or value as a str for structured output; the flag says bytes were not UTF-8 (replaced)."""
    if data is None:
        return None, False
    if fmt is not ValueFormat.utf8:
        return encode_value(data, fmt).decode("ascii"), False
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace"), True


def header_text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


def unescape(text: str) -> str:
    r"""`\t`, `\n`, `\r`, `\\` and `\xHH` in a separator given on the command line."""
    if "\\" not in text:
        return text
    try:
        return text.encode("latin-1", errors="backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError as exc:
        raise CommandError(f"bad escape in {text!r}: {exc.reason}", exit_code=USAGE) from None


def parse_properties(values: list[str] | None, known: dict[str, str], option: str = "--property") -> dict[str, str]:
    """NAME=VALUE pairs over the defaults in `known`; an unknown name or a missing '=' is a usage error."""
    out = dict(known)
    for item in values or []:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise typer.BadParameter(f"'{item}' is not NAME=VALUE", param_hint=f"'{option}'")
        if name not in known:
            raise typer.BadParameter(
                f"unknown property '{name}' (known: {', '.join(sorted(known))})", param_hint=f"'{option}'"
            )
        out[name] = value
    return out


def parse_bool(value: str, name: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise CommandError(f"property {name} must be true or false, not {value!r}", exit_code=USAGE)


def check_partition(partition: int | None) -> None:
    """A negative --partition is never valid (kcat's -p -1 random partitioner is not offered)."""
    if partition is not None and partition < 0:
        raise CommandError(f"--partition must be 0 or more, not {partition}", exit_code=USAGE)


# Where the records of an internal topic can be read, decoded, instead of as raw bytes.
INTERNAL_TOPIC_READERS = {
    "__transaction_state": "txlog transactions list|describe, or txlog inspect --transaction-log-decoder DIR",
    "__consumer_offsets": "txlog groups describe, or txlog inspect --offsets-decoder DIR",
}


def check_topic(store, topic: str, partition: int | None, *, reading: bool = False) -> int:
    """The topic's partition count, after checking the topic and --partition exist (nothing written).

    Internal topics are refused: written only by the coordinators, and their records are
    schema-encoded bytes. A reader is told which verb shows them decoded.
    """
    from storage.errors import UnknownTopicOrPartitionError

    if topic.startswith("__"):
        hint = INTERNAL_TOPIC_READERS.get(topic) if reading else None
        raise CommandError(f"topic '{topic}' is internal" + (f": read it with {hint}" if hint else ""), exit_code=1)
    if not store.has_topic(topic):
        raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist")
    count = store.partition_count(topic)
    if partition is not None and partition >= count:
        raise UnknownTopicOrPartitionError(
            f"topic '{topic}' has no partition {partition} (it has {count}: 0..{count - 1})"
        )
    if partition is not None and partition not in store.partitions(topic):
        store.partition(topic, partition)  # raises, saying which partitions this log directory holds
    return count
