"""The native codec's errors as storage's typed errors: the one place `storage._native.CodecError` is mapped.

The extension reports damage as `CodecError(kind, message, position)` (storage/native/src/
bindings/errors.rs): kind 'corrupt', 'truncated', 'decompress' or 'too_large', and the byte of
the parsed region where a rule broke. Only the caller knows which file, which batch and which
byte of the file that was, so every caller that can meet a CodecError (storage.records for
headers, records regions and stamps; storage.compression for streams) catches it and raises what
`corrupt_record_error` makes of it: a CorruptRecordError, as callers outside storage expect.
A reader meets 'too_large' as damage like any other (a batch on disk that inflates past what it
may hold, docs/kafka-formats.md §1.4); only the append path (RecordBatch.validate_framing)
answers it otherwise, with RecordTooLargeError.
"""

from __future__ import annotations

from storage._native import CodecError
from storage.errors import CorruptRecordError

__all__ = ["CodecError", "corrupt_record_error"]


def corrupt_record_error(
    exc: CodecError,
    *,
    context: str | None = None,
    records_count: int | None = None,
    path: str | None = None,
    position: int | None = None,
) -> CorruptRecordError:
    """The CorruptRecordError for `exc`, located at `path` / `position` (in the file).

    `records_count` is given for an error inside a batch's records region (the decoders, the
    framing walk): a truncation then says how many records the header promised, and the byte the
    codec names is a byte of the region. Header and stream errors say it all in their message.
    `context` prefixes the message (which batch, or what was being done).
    """
    kind, message, region_position = exc.args
    if records_count is not None:
        if kind == "truncated":
            message = f"records region ends inside a record (expected {records_count} records)"
        elif region_position is not None:
            message = f"{message} at byte {region_position} of the records region"
    if context is not None:
        message = f"{context}: {message}"
    return CorruptRecordError(message, path=path, position=position)
