"""Kafka's console-consumer text formatter in native code: a poll's records to one bytes.

`ConsoleFormatter(flags=..., key_separator=..., ...)` holds `txlog consume`'s text options
(the six `print.*` flags in the order timestamp, partition, offset, headers, key, value; the
separators and null literal as bytes; `value_format` 'utf8', 'base64' or 'hex'; the Kafka
names of the timestamp types, indexed by a record's timestamp_type). Its `format(records)`
takes a list of txlog.consumer_record.ConsumerRecord and returns every record's line, each
followed by the line separator (storage/native/src/format.rs).

This module is the formatter's public door: only storage imports the private
`storage._native`, so cli/consume.py comes through here. cli/consume.py's `_KafkaFormatter`
keeps the Python writer of the same bytes as the reference (and for ISO timestamps).
"""

from __future__ import annotations

from storage._native import ConsoleFormatter

__all__ = ["ConsoleFormatter"]
