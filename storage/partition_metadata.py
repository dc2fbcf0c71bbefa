"""Kafka's `partition.metadata` file: the topic id a broker wrote into every partition directory.

Kafka (2.8+) writes two lines, `version: 0` and `topic_id: <id>`, where the id is a UUID
in Kafka's text form: the 16 bytes in URL-safe base64 without padding (22 characters).
txlog never writes the file (its topics have no ids); it only reads real Kafka log
directories, so anything malformed is reported with the file's name, never half believed.
"""

from __future__ import annotations

import base64
import binascii
import os

from storage.errors import KafkaStorageError
from storage.safe_open import read_no_follow

PARTITION_METADATA_FILE = "partition.metadata"
VERSION = 0
_UUID_TEXT_LENGTH = 22  # 16 bytes in base64 without its "==" padding


def read_topic_id(partition_dir: str) -> str | None:
    """The topic id recorded in the directory, as Kafka prints it; None when there is no file."""
    path = os.path.join(partition_dir, PARTITION_METADATA_FILE)
    try:
        raw = read_no_follow(path, 4096)  # the file is ~45 bytes; a huge one is not a metadata file
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise KafkaStorageError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        return parse_partition_metadata(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise KafkaStorageError(f"malformed {path}: {exc}") from None


def parse_partition_metadata(text: str) -> str:
    """The topic id of the file's text (PartitionMetadataFile's reader: version line, then topic_id line)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != 2:
        raise ValueError(f"expected 2 lines (version, topic_id), found {len(lines)}")
    version = _field(lines[0], "version")
    if version != str(VERSION):
        raise ValueError(f"unsupported version {version!r}")
    topic_id = _field(lines[1], "topic_id")
    _check_uuid(topic_id)
    return topic_id


def _field(line: str, name: str) -> str:
    prefix = f"{name}: "
    if not line.startswith(prefix):
        raise ValueError(f"line {line[:40]!r} does not start with {prefix!r}")
    return line[len(prefix) :].strip()


def _check_uuid(text: str) -> None:
    """Kafka's Uuid.fromString: exactly 16 bytes of URL-safe base64."""
    if len(text) != _UUID_TEXT_LENGTH:
        raise ValueError(f"topic id {text[:40]!r} is not a 22-character base64 UUID")
    try:
        decoded = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError):
        raise ValueError(f"topic id {text!r} is not URL-safe base64") from None
    if len(decoded) != 16 or base64.urlsafe_b64encode(decoded).decode().rstrip("=") != text:
        raise ValueError(f"topic id {text!r} does not encode 16 bytes")
