"""The pure-Python record codec: the readable reference and test oracle of storage._native.

At runtime every batch is parsed and built by the Rust codec (storage/native, through
storage/records.py); this module is the same format written out in Python, kept for two
reasons: it is the readable statement of the rules (docs/kafka-formats.md §1, §2), and
tests/native/test_native_codec.py decodes tens of thousands of random and mutated batches with
both and demands the same records or the same typed error (and re-encodes them as the log
cleaner does with `retain_records`, against storage._native's). Nothing in txlog imports it.

It was txlog's codec before the native one (column-wise encoding with C-level
map/zip/join over varint tables, a flat decode loop with table lookups), so it is also
the "before" of tests/benchmarks/bench_codec.py.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from itertools import chain, repeat
from operator import itemgetter, sub

from crc32c import crc32c

from storage.compression_reference import compress, decompress
from storage.errors import CorruptRecordError, InvalidRecordError
from storage.records import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    MAGIC,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
)
from storage.sequence import INT32_MAX
from storage.varint import (
    NULL_LENGTH,
    ONE_BYTE_ZIGZAG,
    SINGLE_BYTE_ZIGZAG,
    SMALL_LIMIT,
    TWO_BYTE_ZIGZAG,
    VARINT_TABLE,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
)

__all__ = ["build_batch_from_columns", "decode_batch", "retain_records", "walk_records"]

_MIN_RECORD_BODY = 6
_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_COVERED_HEADER = struct.Struct(">hiqqqhii")
_FRAME = struct.Struct(">qiib")
_U32 = struct.Struct(">I")


# --- the oracle's entry points -------------------------------------------------------


def decode_batch(buf: bytes, verify_crc: bool = True) -> list[tuple]:
    """The records of the one batch in `buf`, as 6-tuples in storage.records.Record's order.

    Raises CorruptRecordError / InvalidRecordError / UnsupportedCompressionTypeError for
    bytes the native reader must refuse too (the differential test compares types only).
    """
    if len(buf) < HEADER_SIZE:
        raise CorruptRecordError(f"need {HEADER_SIZE} bytes for a batch header")
    (
        base_offset,
        batch_length,
        _epoch,
        magic,
        crc,
        attributes,
        _last_delta,
        base_timestamp,
        max_timestamp,
        _pid,
        _pepoch,
        base_sequence,
        count,
    ) = _HEADER.unpack_from(buf)
    if magic != MAGIC or batch_length < MIN_BATCH_LENGTH or batch_length + 12 > len(buf):
        raise CorruptRecordError("bad batch frame")
    size = batch_length + 12
    if verify_crc and crc32c(buf[21:size]) != crc:
        raise CorruptRecordError("CRC mismatch")
    if count < 0:
        raise InvalidRecordError(f"negative record count {count}")
    data = buf[HEADER_SIZE:size]
    if count == 0 and not data:
        return []
    codec = attributes & COMPRESSION_MASK
    if codec:
        data = decompress(codec, data)  # UnsupportedCompressionTypeError for 5-7
    log_append = attributes & TIMESTAMP_TYPE_MASK
    try:
        return _decode_records(
            data, count, base_offset, max_timestamp if log_append else base_timestamp, not log_append, base_sequence
        )
    except IndexError:
        raise CorruptRecordError("records region ends inside a record") from None


def walk_records(region: bytes) -> tuple[int, int]:
    """(records, largest timestamp delta) of an uncompressed records region; CorruptRecordError if
    the record lengths do not tile it."""

    def corrupt(detail: str) -> CorruptRecordError:
        return CorruptRecordError(detail)

    return _walk_records(region, corrupt)


def build_batch_from_columns(
    keys: Sequence,
    values: Sequence,
    headers: Sequence,
    timestamps: Sequence[int],
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> bytes:
    """The batch storage._native.encode_batch builds from the same arguments, byte for byte
    when uncompressed (compressed streams may differ in their compressed bytes only)."""
    payload = _encode_records(keys, values, headers, timestamps, base_timestamp)
    codec = attributes & COMPRESSION_MASK
    if codec:
        payload = compress(codec, payload)
    return _assemble(
        payload,
        len(keys),
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


def retain_records(buf: bytes, keep: bytes, delete_horizon: int | None = None) -> bytes:
    """The batch storage._native.retain_records (RecordBatch.retained) builds: the one batch in
    `buf` with only the records whose `keep` byte is non-zero, as Kafka's cleaner rebuilds it
    (MemoryRecords.buildRetainedRecordsInto, docs/kafka-formats.md §11). Byte for byte when
    uncompressed (compressed streams may differ in their compressed bytes only).

    Base offset, lastOffsetDelta, leader epoch and producer fields stay; each kept record keeps
    its offset delta and timestamp, its timestamp delta counted from the new base timestamp
    (the delete horizon, which sets attribute bit 6, else the first kept record's). maxTimestamp
    is the largest kept timestamp (LOG_APPEND_TIME: the original's). Nothing kept: Kafka's
    writeEmptyHeader, the records not even decoded.
    """
    header = _HEADER.unpack_from(buf)
    (
        base_offset,
        _length,
        epoch,
        _magic,
        _crc,
        attributes,
        last_delta,
        _base_ts,
        max_ts,
        pid,
        pepoch,
        base_seq,
        count,
    ) = header
    if len(keep) != max(count, 0):
        raise ValueError(f"a keep mask of {len(keep)} entries for a batch of {count} records")
    fields = dict(base_offset=base_offset, partition_leader_epoch=epoch, producer_id=pid, producer_epoch=pepoch)
    if not any(keep):
        return _assemble(
            b"",
            0,
            attributes=attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK),
            base_timestamp=max_ts,
            max_timestamp=max_ts,
            base_sequence=base_seq,
            last_offset_delta=last_delta,
            **fields,
        )
    kept = [row for row, k in zip(decode_batch(buf, verify_crc=False), keep, strict=True) if k]
    base_ts = kept[0][1] if delete_horizon is None else delete_horizon
    region = b"".join(
        _encode_record(offset - base_offset, timestamp - base_ts, key, value, headers)
        for offset, timestamp, key, value, headers, _sequence in kept
    )
    if attributes & COMPRESSION_MASK:
        region = compress(attributes & COMPRESSION_MASK, region)
    attributes &= ~DELETE_HORIZON_MASK
    return _assemble(
        region,
        len(kept),
        attributes=attributes if delete_horizon is None else attributes | DELETE_HORIZON_MASK,
        base_timestamp=base_ts,
        max_timestamp=max_ts if attributes & TIMESTAMP_TYPE_MASK else max(row[1] for row in kept),
        base_sequence=base_seq,
        last_offset_delta=last_delta,
        **fields,
    )


def _encode_record(offset_delta: int, timestamp_delta: int, key, value, headers) -> bytes:
    """One record, length-prefixed, with the deltas given (the plain form of _encode_records' row)."""
    body = b"".join(
        (
            _ZERO,
            encode_varlong(timestamp_delta),
            encode_varint(offset_delta),
            NULL_LENGTH if key is None else encode_varint(len(key)) + key,
            NULL_LENGTH if value is None else encode_varint(len(value)) + value,
            _encode_headers(headers),
        )
    )
    return encode_varint(len(body)) + body


# --- the framing walk of the append path ------------------------------------------------


def _walk_records(region: bytes, corrupt) -> tuple[int, int]:
    """Count the records tiling `region` exactly and find the largest timestamp delta.

    Raises `corrupt(detail)` when the lengths do not tile the region. A record is
    `length varint | attributes | timestampDelta varlong | ...`; within a run of
    records whose length prefix bytes are identical, record i starts at pos + i*stride.
    """
    end = len(region)
    pos = seen = 0
    max_delta: int | None = None
    one = SINGLE_BYTE_ZIGZAG  # indexed only by bytes below 0x80
    while pos < end:
        b = region[pos]
        if b < 0x80:
            length, h = one[b], 1
        else:
            try:
                length, after = decode_varint(region, pos)
            except CorruptRecordError as exc:
                raise corrupt(f"length of record {seen}: {exc}") from None
            h = after - pos
        if length < _MIN_RECORD_BODY:
            raise corrupt(f"record {seen} has length {length}, below the minimum {_MIN_RECORD_BODY}")
        stride = h + length
        fit = (end - pos) // stride
        if fit == 0:
            raise corrupt(f"record lengths overrun the batch by {pos + stride - end} bytes")
        run = 1
        if fit > 1 and h <= 2:
            stop = pos + fit * stride
            firsts = region[pos:stop:stride]
            run = fit - len(firsts.lstrip(firsts[:1]))
            if h == 2:
                seconds = region[pos + 1 : stop : stride]
                run = min(run, fit - len(seconds.lstrip(seconds[:1])))
        deltas = region[pos + h + 1 : pos + run * stride : stride]
        if deltas.isascii():
            top = max(one[x] for x in set(deltas))
        else:
            top = max(_timestamp_delta(region, pos + i * stride + h + 1, corrupt) for i in range(run))
        if max_delta is None or top > max_delta:
            max_delta = top
        pos += run * stride
        seen += run
    return seen, (0 if max_delta is None else max_delta)


def _timestamp_delta(region: bytes, pos: int, corrupt) -> int:
    try:
        return decode_varlong(region, pos)[0]
    except CorruptRecordError as exc:
        raise corrupt(f"timestamp delta: {exc}") from None


# --- record decoding (the hot loop) ---------------------------------------------------


def _decode_records(
    data: bytes, count: int, base_offset: int, base_timestamp: int, use_deltas: bool, base_sequence: int
) -> list[tuple]:
    """Decode `count` records that must fill `data` exactly, as tuples in Record's field order.

    Structural errors raise CorruptRecordError (position relative to `data`);
    reading past the end raises IndexError, which the caller reports as
    truncation - a zero-cost `try` beats a bounds check per field.
    The fields are decoded inline (table lookups for 1- and 2-byte varints)
    because a function call per field would double the cost of this loop.
    """
    rows: list[tuple] = []
    append = rows.append
    single = SINGLE_BYTE_ZIGZAG  # for a byte already known to be below 0x80
    one = ONE_BYTE_ZIGZAG
    two = TWO_BYTE_ZIGZAG
    varint = decode_varint
    varlong = decode_varlong
    no_sequence = base_sequence < 0
    wrap_at = INT32_MAX - base_sequence  # offset delta at which the sequence wraps to 0
    pos = 0
    length: int | None
    ts_delta: int | None
    offset_delta: int | None
    size: int | None
    headers: list[tuple[str, bytes | None]]
    for _ in range(count):
        # length (usually 2 bytes: records of 64..8191 bytes)
        b = data[pos]
        if b < 0x80:
            pos += 1
            record_end = pos + single[b]
        else:
            length = two[b][data[pos + 1]]
            if length is None:
                length, pos = varint(data, pos)
            else:
                pos += 2
            record_end = pos + length
        # attributes (unused, skipped), then timestampDelta (usually 1 byte)
        ts_delta = one[data[pos + 1]]
        if ts_delta is None:
            ts_delta, pos = varlong(data, pos + 1)
        else:
            pos += 2
        # offsetDelta
        b = data[pos]
        if b < 0x80:
            offset_delta = single[b]
            pos += 1
        else:
            offset_delta = two[b][data[pos + 1]]
            if offset_delta is None:
                offset_delta, pos = varint(data, pos)
            else:
                pos += 2
        # key
        b = data[pos]
        if b < 0x80:
            size = single[b]
            pos += 1
        else:
            size = two[b][data[pos + 1]]
            if size is None:
                size, pos = varint(data, pos)
            else:
                pos += 2
        if size >= 0:
            key = data[pos : (pos := pos + size)]
        elif size == -1:
            key = None
        else:
            raise CorruptRecordError(f"negative key length {size}", position=pos)
        # value
        b = data[pos]
        if b < 0x80:
            size = single[b]
            pos += 1
        else:
            size = two[b][data[pos + 1]]
            if size is None:
                size, pos = varint(data, pos)
            else:
                pos += 2
        if size >= 0:
            value = data[pos : (pos := pos + size)]
        elif size == -1:
            value = None
        else:
            raise CorruptRecordError(f"negative value length {size}", position=pos)
        # headers: the common "none, and the record ends here" case costs one byte read
        if pos + 1 == record_end and not data[pos]:
            headers = []
            pos = record_end
        else:
            headers, pos = _decode_headers(data, pos, record_end)
            if pos != record_end:
                raise CorruptRecordError(
                    f"record size mismatch: length says it ends at byte {record_end}, fields end at {pos}", position=pos
                )
        append(
            (
                base_offset + offset_delta,
                base_timestamp + ts_delta if use_deltas else base_timestamp,
                key,
                value,
                headers,
                -1
                if no_sequence
                else (base_sequence + offset_delta if offset_delta <= wrap_at else offset_delta - wrap_at - 1),
            )
        )
    if pos != len(data):
        raise CorruptRecordError(f"{len(data) - pos} bytes remain after the last of {count} records", position=pos)
    return rows


def _decode_headers(data: bytes, pos: int, record_end: int) -> tuple[list[tuple[str, bytes | None]], int]:
    """Headers of one record; rare enough that plain varint calls are fine.

    Header keys are decoded like Java's `new String(bytes, UTF_8)`: invalid
    UTF-8 becomes U+FFFD instead of failing, because Kafka accepts such keys.
    """
    count, pos = decode_varint(data, pos)
    if count < 0:
        raise CorruptRecordError(f"negative header count {count}", position=pos)
    if count and count > record_end - pos:
        raise CorruptRecordError(
            f"header count {count} exceeds the {max(record_end - pos, 0)} bytes left", position=pos
        )
    headers = []
    for _ in range(count):
        size, pos = decode_varint(data, pos)
        if size < 0:
            raise CorruptRecordError(f"negative header key length {size}", position=pos)
        name = data[pos : (pos := pos + size)].decode("utf-8", "replace")
        size, pos = decode_varint(data, pos)
        if size >= 0:
            value = data[pos : (pos := pos + size)]
        elif size == -1:
            value = None
        else:
            raise CorruptRecordError(f"negative header value length {size}", position=pos)
        headers.append((name, value))
    return headers, pos


# --- record encoding ------------------------------------------------------------------------

_ZERO = b"\x00"
#: attributes byte (always 0) + timestampDelta, for deltas 0 <= d < SMALL_LIMIT
_ATTRIBUTES_AND_DELTA = tuple(_ZERO + encoded for encoded in VARINT_TABLE)


def _encode_headers(headers) -> bytes:
    """Header block of one record: count, then (key, value) pairs; rare enough for plain calls."""
    parts = [encode_varint(len(headers))]
    for name, value in headers:
        raw = name.encode("utf-8") if isinstance(name, str) else bytes(name)
        parts.append(encode_varint(len(raw)))
        parts.append(raw)
        if value is None:
            parts.append(NULL_LENGTH)
        else:
            parts.append(encode_varint(len(value)))
            parts.append(value)
    return b"".join(parts)


def _lookup(table, indexes: Sequence) -> Sequence:
    """[table[i] for i in indexes] in one C call: itemgetter with many indexes beats map or a loop."""
    if len(indexes) == 1:
        return (table[indexes[0]],)  # itemgetter of one index returns a bare item
    return itemgetter(*indexes)(table)


def _length_prefixed(items: Sequence) -> tuple[Sequence, Sequence]:
    """(length varints, payloads) for a column of keys or values; None gets length -1.

    The fast path is C-level; a None (TypeError from len) or a length beyond
    the table (IndexError) sends the column to the general path.
    """
    try:
        return _lookup(VARINT_TABLE, list(map(len, items))), items
    except (TypeError, IndexError):
        prefixes = [NULL_LENGTH if item is None else encode_varint(len(item)) for item in items]
        return prefixes, [b"" if item is None else item for item in items]


def _timestamp_prefixes(timestamps: Sequence[int], base_timestamp: int) -> Sequence[bytes]:
    """attributes byte (always 0) + timestampDelta per record.

    Producers stamp a batch within a few milliseconds, so there are few
    distinct timestamps: encoding each once and looking them up beats
    subtracting and range-checking per record.
    """
    distinct = set(timestamps)
    if len(distinct) <= 64 or len(distinct) * 4 <= len(timestamps):
        table = {ts: _ZERO + encode_varlong(ts - base_timestamp) for ts in distinct}
        return _lookup(table, timestamps)
    deltas = list(map(sub, timestamps, repeat(base_timestamp)))
    if min(deltas) >= 0 and max(deltas) < SMALL_LIMIT:
        return _lookup(_ATTRIBUTES_AND_DELTA, deltas)
    return [_ZERO + encode_varlong(delta) for delta in deltas]


def _encode_records(
    keys: Sequence, values: Sequence, headers: Sequence, timestamps: Sequence[int], base_timestamp: int
) -> bytes:
    """The uncompressed records region, built column by column with C-level calls.

    offsetDelta is the record's index, timestampDelta is against `base_timestamp`.
    """
    n = len(keys)
    prefixes = _timestamp_prefixes(timestamps, base_timestamp)
    offset_deltas: Iterable[bytes]
    if n <= SMALL_LIMIT:
        offset_deltas = VARINT_TABLE[:n]
    else:
        offset_deltas = chain(VARINT_TABLE, map(encode_varint, range(SMALL_LIMIT, n)))
    key_lengths, keys = _length_prefixed(keys)
    value_lengths, values = _length_prefixed(values)
    header_blocks: Iterable[bytes]
    if any(headers):
        header_blocks = [_encode_headers(h) if h else _ZERO for h in headers]
    else:
        header_blocks = repeat(_ZERO, n)
    bodies = list(
        map(
            b"".join, zip(prefixes, offset_deltas, key_lengths, keys, value_lengths, values, header_blocks, strict=True)
        )
    )
    sizes, _ = _length_prefixed(bodies)
    parts = bodies * 2  # then interleave [size, body, size, body, ...] by slice assignment
    parts[::2] = sizes
    parts[1::2] = bodies
    return b"".join(parts)


def _assemble(
    payload: bytes,
    count: int,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    last_offset_delta: int | None = None,
) -> bytes:
    """Header + records; the CRC covers attributes through the last record byte. lastOffsetDelta
    is count - 1 unless given (a cleaned batch keeps the original's)."""
    last_delta = count - 1 if last_offset_delta is None else last_offset_delta
    try:
        covered = _CRC_COVERED_HEADER.pack(
            attributes, last_delta, base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count
        )
        frame = _FRAME.pack(base_offset, MIN_BATCH_LENGTH + len(payload), partition_leader_epoch, MAGIC)
    except struct.error as exc:
        raise ValueError(f"batch header field out of range: {exc}") from None
    crc = crc32c(payload, crc32c(covered))
    return b"".join((frame, _U32.pack(crc), covered, payload))
