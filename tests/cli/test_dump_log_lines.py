"""`inspect`'s batched record lines against the one-line-per-record definition (cli.dump_log).

`text_of` formats a batch's record lines in one go (`record_lines`, and the bytes shortcut
`_ascii_record_lines` for ASCII data without nulls or headers); `record_line(record_item(...))`
is the readable definition of a kafka-dump-log record line. Every option combination and
every kind of record must give the same bytes both ways.
"""

from __future__ import annotations

import itertools

import pytest

from cli import dump_log
from storage.records import Record, RecordBatch, TimestampType, build_batch

BATCHES = {
    "ascii": build_batch([(b"key-%d" % i, b"value %d" % i, None, 1000 + i) for i in range(5)]),
    "null key and value": build_batch([(None, b"v", None, 1), (b"k", None, None, 2), (None, None, None, 3)]),
    "headers": build_batch([(b"k", b"v", [("a", b"1"), ("b", None)], 1), (b"k", b"v", None, 2)]),
    "not ascii": build_batch([(b"k\xc3\xa9", "vé".encode(), None, 1), (b"\xff", b"\xfe\xff", None, 2)]),
    "log append time": build_batch(
        [(b"k", b"v", None, 1)] * 3, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=99
    ),
    "transactional": build_batch(
        [(b"k", b"v", None, 1)] * 3, producer_id=7, producer_epoch=1, base_sequence=40, is_transactional=True
    ),
}


def upper_parser(record):
    return (
        None if record.key is None else record.key.decode(errors="replace").upper(),
        None if record.value is None else f"<{len(record.value)}>",
    )


@pytest.mark.parametrize("name", BATCHES)
@pytest.mark.parametrize(
    "print_data,skip_metadata,parser",
    [
        *((p, s, None) for p, s in itertools.product((False, True), repeat=2)),
        (True, False, upper_parser),
        (True, True, upper_parser),
    ],
)
def test_batched_lines_are_the_per_record_lines(name, print_data, skip_metadata, parser):
    batch = RecordBatch.parse(BATCHES[name])
    opts = dump_log.Options(print_data=print_data, deep=True, skip_metadata=skip_metadata, parser=parser)
    records = batch.record_tuples()
    expected = "\n".join(
        dump_log.record_line(dump_log.record_item(batch, Record._make(r), opts), skip_metadata) for r in records
    )
    text = dump_log.text_of({"type": "records", "batch": batch, "records": records}, opts)
    assert (text.decode() if isinstance(text, bytes) else text) == expected


def test_the_bytes_shortcut_is_taken_for_plain_ascii_data():
    batch = RecordBatch.parse(BATCHES["ascii"])
    opts = dump_log.Options(print_data=True, deep=True)
    assert isinstance(
        dump_log.text_of({"type": "records", "batch": batch, "records": batch.record_tuples()}, opts), bytes
    )


def test_a_batch_without_records_prints_nothing():
    batch = RecordBatch.parse(BATCHES["ascii"])
    assert dump_log.text_of({"type": "records", "batch": batch, "records": []}, dump_log.Options(deep=True)) is None
