"""`txlog consume --output jsonl|csv` rows made natively against their Python reference, byte for byte.

The native rows (storage.console_format.row_formatter, storage/native/src/format.rs `RowFormat`)
are what cli/consume.py's `_Rows` prints through cli/output.py's RowWriter from ConsumerRecords:
the same JSON and csv text, the same U+FFFD for bytes that are not UTF-8, and the same note on
stderr when a key or value was replaced. Two checks: the log of tests/cli/test_cli_consume_native_format.py
(aborted and committed transactions, every codec, null keys and values, headers with null values,
bytes that are not UTF-8, LogAppendTime) read through the CLI with every value format, both
isolation levels and cut fetches; and random batches (hypothesis) straight through both writers.
"""

from __future__ import annotations

import contextlib
import io
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli import consume as consume_cli
from cli.console_lines import Line
from cli.output import OutputFormat
from cli.record_format import ValueFormat
from storage.console_format import batch_lines, row_formatter
from storage.records import Compression, RecordBatch, TimestampType, build_batch
from tests.cli.cli_helpers import txlog
from tests.cli.test_cli_consume_native_format import TOPIC
from tests.cli.test_cli_consume_native_format import store_dir as _text_tests_store
from txlog.consumer_record import ConsumerRecord

store_dir = _text_tests_store  # the log the text lines are compared over (a module fixture), read here as rows

ROW_OUTPUTS = (OutputFormat.jsonl, OutputFormat.csv)
NOTE = b"not UTF-8 and were shown with U+FFFD"


def _consume(path: str, args: list[str], native: bool, monkeypatch: pytest.MonkeyPatch):
    """consume's run with the native rows (`native`) or with the Python rows over ConsumerRecords."""
    used = []
    with monkeypatch.context() as patch:
        if native:
            line_transport = consume_cli._Rows.line_transport
            patch.setattr(
                consume_cli._Rows,
                "line_transport",
                lambda self, store, topic: used.append(line_transport(self, store, topic)) or used[-1],
            )
        else:
            patch.setattr(consume_cli._Rows, "line_transport", lambda self, store, topic: None)
        proc = txlog("consume", "-t", TOPIC, *args, data_dir=path, text=False)
    assert b"Traceback" not in proc.stderr, proc.stderr
    if native:
        assert used and used[0] is not None, "the rows were not made in the fetch"
    return proc


def _cases() -> list[list[str]]:
    cases = [
        ["--output", output.value, "--value-format", value_format.value, "--isolation-level", isolation]
        for output, value_format, isolation in itertools.product(
            ROW_OUTPUTS, ValueFormat, ("read_committed", "read_uncommitted")
        )
    ]
    # Fetches cut inside a batch (-c), starting inside one (-o N), one partition, the tail (-o -N).
    for output in ROW_OUTPUTS:
        cases += [
            ["--output", output.value, *cut]
            for cut in (["-c", "5"], ["-o", "3", "-c", "9"], ["-p", "1"], ["-o", "-4"], ["-o", "end"])
        ]
    return cases


@pytest.mark.parametrize("args", _cases(), ids=" ".join)
def test_native_rows_are_the_python_rows_bytes(store_dir, args, monkeypatch):
    reference = _consume(store_dir, args, False, monkeypatch)
    native = _consume(store_dir, args, True, monkeypatch)
    assert reference.returncode == 0, reference.stderr
    assert (native.returncode, native.stdout, native.stderr) == (0, reference.stdout, reference.stderr)


def test_the_rows_hold_what_the_comparison_is_about(store_dir, monkeypatch):
    """The log's rows show replaced bytes (and the note), nulls, escapes, headers and quoted csv fields."""
    jsonl = _consume(store_dir, ["--output", "jsonl"], True, monkeypatch)
    assert NOTE in jsonl.stderr
    assert b'"key": null' in jsonl.stdout and b'"value": null' in jsonl.stdout
    assert '"\ufffd\ufffd\\u0000tab\\there\\nnewline\\\\'.encode() in jsonl.stdout  # ODD, escaped
    assert '"headers": [["h", null], ["\u00fc", "\ufffd\ufffd\\u0000tab'.encode() in jsonl.stdout
    assert b'"timestamp": 1700000000123' in jsonl.stdout
    csv = _consume(store_dir, ["--output", "csv"], True, monkeypatch)
    assert csv.stdout.startswith(b"topic,partition,offset,timestamp,key,value,headers\n")
    assert b'"[[""h"", null]' in csv.stdout
    hexed = _consume(store_dir, ["--output", "jsonl", "--value-format", "hex"], True, monkeypatch)
    assert NOTE not in hexed.stderr  # hex shows every byte: nothing replaced


@pytest.mark.parametrize(
    "args",
    [["--output", "jsonl", "--timestamp-format", "iso"], ["--output", "json"], ["--output", "table"]],
    ids=" ".join,
)
def test_iso_timestamps_json_and_table_keep_the_python_rows(store_dir, args, monkeypatch):
    """Where the native rows do not apply, no line transport is made (and the Python rows print)."""
    made = []
    line_transport = consume_cli._Rows.line_transport
    with monkeypatch.context() as patch:
        patch.setattr(
            consume_cli._Rows,
            "line_transport",
            lambda self, store, topic: made.append(line_transport(self, store, topic)) or made[-1],
        )
        proc = txlog("consume", "-t", TOPIC, "-c", "2", *args, data_dir=store_dir, text=False)
    assert proc.returncode == 0, proc.stderr
    assert made == [None]


def test_empty_csv_prints_its_header_row_once(tmp_path):
    path = str(tmp_path / "store")
    from storage import Store

    with Store.open(path) as store:
        store.create_topic(TOPIC, 1)
    proc = txlog("consume", "-t", TOPIC, "--output", "csv", data_dir=path, text=False)
    assert (proc.returncode, proc.stdout) == (0, b"topic,partition,offset,timestamp,key,value,headers\n")


# ---- random batches, straight through both writers ---------------------------------------------------

_text_bytes = st.text(max_size=8).map(lambda t: t.encode("utf-8", "surrogatepass"))
_data = st.none() | st.binary(max_size=24) | _text_bytes | st.sampled_from([b'",\n\r\\\x00\x7f', b"\xed\xa0\x80"])
_name = st.text(max_size=5) | st.binary(max_size=5)  # header names that are not UTF-8 too


@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(st.tuples(_data, _data, st.lists(st.tuples(_name, _data), max_size=3)), min_size=1, max_size=6),
    codec=st.sampled_from(list(Compression)),
    log_append_time=st.booleans(),
    output=st.sampled_from(ROW_OUTPUTS),
    value_format=st.sampled_from(list(ValueFormat)),
    partition=st.integers(0, 2**31 - 1),
    base_offset=st.integers(0, 2**40),
)
def test_random_batches_make_the_same_rows(
    records, codec, log_append_time, output, value_format, partition, base_offset
):
    batch = RecordBatch.parse(
        build_batch(
            [(k, v, h, 1_700_000_000_000 + 7 * i) for i, (k, v, h) in enumerate(records)],
            base_offset=base_offset,
            compression=codec,
            timestamp_type=TimestampType.LOG_APPEND_TIME if log_append_time else TimestampType.CREATE_TIME,
            log_append_time=1_700_000_000_500 if log_append_time else None,
        )
    )
    end = base_offset + len(records)
    reference = consume_cli._Rows(value_format, output)
    ref_out = _written(reference, batch.consumer_records(ConsumerRecord, TOPIC, partition, base_offset, end))
    native = consume_cli._Rows(value_format, output)
    native.native = row_formatter(output.value, TOPIC, value_format.value)
    native.lines = True
    lines, more = batch_lines(native.native, batch, Line, partition, base_offset, end, len(records))
    assert not more and len(lines) == len(records)
    assert _written(native, lines) == ref_out
    assert native.replaced == reference.replaced


def _written(writer: consume_cli._Rows, records: list) -> bytes:
    """What the writer prints for one poll's records, then its close."""
    out = io.BytesIO()
    with contextlib.redirect_stdout(io.TextIOWrapper(out, encoding="utf-8")) as stdout:
        writer.out = stdout.buffer
        writer.write(records)
        writer.close()
        stdout.flush()
        return out.getvalue()
