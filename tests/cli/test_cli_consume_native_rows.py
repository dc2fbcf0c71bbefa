"""`txlog consume --output jsonl|json|csv|table` rows and kcat's -J lines made natively, against their Python
reference, byte for byte.

The native rows (storage.console_format.row_formatter, storage/native/src/format.rs `RowFormat`)
are what cli/consume.py's `_Rows` prints through cli/output.py's RowWriter from ConsumerRecords:
the same JSON, csv and table text (a table laid out natively where every cell is printable
ASCII, by tabulate otherwise: cli/output.py `RenderedTable`), the same ISO timestamps, the same
U+FFFD for bytes that are not UTF-8, and the same note on stderr when a key or value was
replaced. The checks: the log of tests/cli/test_cli_consume_native_format.py (aborted and
committed transactions, every codec, null keys and values, headers with null values, bytes that
are not UTF-8, LogAppendTime) and two more (`simple_store`: printable ASCII only, over a poll's
5,000 records, its widest cells last, timestamps ISO text cannot show; `odd_store`: cells only
tabulate can lay out) read through the CLI with every output, value format and isolation level,
ISO timestamps and cut fetches; random batches (hypothesis) straight through both writers; and
random tables straight through RenderedTable and tabulate.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli import consume as consume_cli
from cli import output as output_cli
from cli.console_lines import Line
from cli.output import OutputFormat, RenderedTable, render_table
from cli.record_format import ValueFormat
from storage.console_format import batch_lines, row_formatter
from storage.records import Compression, RecordBatch, TimestampType, build_batch
from tests.cli.cli_helpers import txlog
from tests.cli.test_cli_consume_native_format import TOPIC, _no_lines
from tests.cli.test_cli_consume_native_format import store_dir as _text_tests_store
from txlog.consumer_record import ConsumerRecord

store_dir = _text_tests_store  # the log the text lines are compared over (a module fixture), read here as rows

ROW_OUTPUTS = (OutputFormat.jsonl, OutputFormat.csv, OutputFormat.json, OutputFormat.table)
# kcat -f formats: every field between literal text, escapes and %%; one with no line separator at all.
KCAT_FORMATS = ("%t|%p|%o|%T|%k|%K|%s|%S|%R|%h|%%\\t\\x41\\n", "%s", "Key %k\\r\\n%h:%S\\n\\\\")
NOTE = b"not UTF-8 and were shown with U+FFFD"
ISO = ["--timestamp-format", "iso"]
# Timestamps at the edges of what ISO text shows: none (-1), the epoch, the last millisecond of
# year 9999 (a float division shows it as .998) and the first past it, and the largest there is.
EDGE_TIMESTAMPS = (-1, 0, 999, 1_700_000_000_123, 253_402_300_799_999, 253_402_300_800_000, 2**63 - 1)
TABLE_HEADERS = ["Topic", "Partition", "Offset", "Timestamp", "Key", "Value", "Headers"]


@pytest.fixture(scope="module")
def simple_store(tmp_path_factory) -> str:
    """Cells a table lays out natively (printable ASCII: spaces at the ends, True/False, empty
    and null keys), a committed and an aborted transaction, the edge timestamps, more records
    than a poll takes, and the widest key, value and headers in the last record."""
    import txlog as client
    from storage import Store

    path = str(tmp_path_factory.mktemp("native-rows") / "store")
    with Store.open(path) as store:
        store.create_topic(TOPIC, 2, {"retention.ms": -1})  # records of 1970 stay
        log = store.partition(TOPIC, 1)
        for ts in EDGE_TIMESTAMPS:
            batch = [(b" k ", b"True", [("a", b" x")], ts), (None, b"", [], ts)]
            log.append(build_batch(batch, base_offset=log.log_end_offset))
        producer = client.Producer(store, batch_size=4096)
        for i in range(6000):
            key = None if i % 7 == 0 else f"  key {i}".encode()
            producer.send(TOPIC, key=key, value=b"False" if i % 5 == 0 else f"v{i} ".encode(), partition=0)
        producer.flush()
        txn = client.Producer(store, transactional_id="rows")
        txn.init_transactions()
        for outcome in ("committed", "aborted"):
            txn.begin_transaction()
            txn.send(TOPIC, key=b"k", value=f"in {outcome} transaction".encode(), partition=0)
            txn.flush()
            txn.commit_transaction() if outcome == "committed" else txn.abort_transaction()
        txn.close()
        producer.send(TOPIC, key=b"K" * 70, value=b"V" * 90, headers=[("widest", b"H" * 50), ("n", None)], partition=0)
        producer.close()
    return path


@pytest.fixture(scope="module")
def odd_store(tmp_path_factory) -> str:
    """Cells only tabulate lays out: wide and combining characters, a non-breaking space at an
    end, colour codes, a tab, a row-separator mark, a carriage return, U+FFFD for bad bytes."""
    from storage import Store

    path = str(tmp_path_factory.mktemp("native-rows-odd") / "store")
    cells = ["\u6f22\u5b57", "e\u0301", "\u00a0nbsp\u00a0", "\x1b[31mred\x1b[0m", "a\tb", "\x01", "cr\rx", "\x1c"]
    with Store.open(path) as store:
        store.create_topic(TOPIC, 1, {"retention.ms": -1})
        log = store.partition(TOPIC, 0)
        for i, cell in enumerate(cells):
            text = cell.encode()
            timestamps = (1_700_000_000_000 + i, EDGE_TIMESTAMPS[i % 7])
            batch = [(text, b"plain", [], timestamps[0]), (b"k", text + b"\xff", [(cell, text)], timestamps[1])]
            log.append(build_batch(batch, base_offset=log.log_end_offset))
    return path


def _consume(path: str, args: list[str], native: bool, monkeypatch: pytest.MonkeyPatch):
    """consume's run with the native rows (`native`) or with the Python rows over ConsumerRecords."""
    used = []
    with monkeypatch.context() as patch:
        for writer in (consume_cli._Rows, consume_cli._KcatJson, consume_cli._KcatFormatter):
            if native:
                patch.setattr(writer, "line_transport", _noted(writer.line_transport, used))
            else:
                patch.setattr(writer, "line_transport", _no_lines)
        proc = txlog("consume", "-t", TOPIC, *args, data_dir=path, text=False)
    assert b"Traceback" not in proc.stderr, proc.stderr
    if native:
        assert used and used[0] is not None, "the rows were not made in the fetch"
    return proc


def _noted(line_transport, used: list):
    """`line_transport`, noting each Transport it makes in `used`."""
    return lambda self, store, topic, stop_at=None: used.append(line_transport(self, store, topic, stop_at)) or used[-1]


def _cases() -> list[list[str]]:
    cases = [
        ["--output", output.value, "--value-format", value_format.value, "--isolation-level", isolation, *iso]
        for output, value_format, isolation, iso in itertools.product(
            ROW_OUTPUTS, ValueFormat, ("read_committed", "read_uncommitted"), ([], ISO)
        )
    ]
    cases += [  # kcat's -J lines
        ["-J", "--value-format", value_format.value, "--isolation-level", isolation, *iso]
        for value_format, isolation, iso in itertools.product(
            ValueFormat, ("read_committed", "read_uncommitted"), ([], ISO)
        )
    ]
    cases += [  # kcat's -f text
        ["-f", fmt, "--value-format", value_format.value, "--isolation-level", isolation]
        for fmt, value_format, isolation in itertools.product(
            KCAT_FORMATS, ValueFormat, ("read_committed", "read_uncommitted")
        )
    ]
    # Fetches cut inside a batch (-c), starting inside one (-o N), one partition, the tail (-o -N).
    for output in [*(["--output", output.value] for output in ROW_OUTPUTS), ["-J"], ["-f", KCAT_FORMATS[0]]]:
        cases += [
            [*output, *cut] for cut in (["-c", "5"], ["-o", "3", "-c", "9"], ["-p", "1"], ["-o", "-4"], ["-o", "end"])
        ]
    return cases


def _same_bytes(path: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> bytes:
    reference = _consume(path, args, False, monkeypatch)
    native = _consume(path, args, True, monkeypatch)
    assert reference.returncode == 0, reference.stderr
    assert (native.returncode, native.stdout, native.stderr) == (0, reference.stdout, reference.stderr)
    return native.stdout


@pytest.mark.parametrize("args", _cases(), ids=" ".join)
def test_native_rows_are_the_python_rows_bytes(store_dir, args, monkeypatch):
    _same_bytes(store_dir, args, monkeypatch)


def _edge_cases() -> list[list[str]]:
    cases = [
        ["--output", output.value, "--isolation-level", isolation, *iso]
        for output, isolation, iso in itertools.product(ROW_OUTPUTS, ("read_committed", "read_uncommitted"), ([], ISO))
    ]
    cases += [["--output", output.value, "-c", "5001", *ISO] for output in ROW_OUTPUTS]  # -c stops mid-batch
    cases += [
        ["-J", "--isolation-level", isolation, *iso]
        for isolation in ("read_committed", "read_uncommitted")
        for iso in ([], ISO)
    ]
    return cases + [["--output", "table", "-p", "0", "-c", "6000"], ["--output", "table", "--value-format", "hex"]]


@pytest.mark.parametrize("args", _edge_cases(), ids=" ".join)
def test_native_rows_of_simple_cells_are_the_python_rows_bytes(simple_store, args, monkeypatch):
    _same_bytes(simple_store, args, monkeypatch)


@pytest.mark.parametrize("args", _edge_cases()[:8], ids=" ".join)
def test_native_rows_of_odd_cells_are_the_python_rows_bytes(odd_store, args, monkeypatch):
    _same_bytes(odd_store, args, monkeypatch)


def test_a_simple_table_is_laid_out_natively(simple_store, monkeypatch):
    """No tabulate for printable ASCII, spilled to a file or not, with the widest cells last and
    the stripped spaces, True/False and ISO text the comparisons above hold."""
    stdout = _same_bytes(simple_store, ["--output", "table", *ISO], monkeypatch)
    monkeypatch.setattr(output_cli, "render_table", _no_tabulate)
    assert _consume(simple_store, ["--output", "table", *ISO], True, monkeypatch).stdout == stdout
    monkeypatch.setattr(RenderedTable, "HELD", 1000)  # held on a file past 1,000 bytes, read back 777 at a time
    monkeypatch.setattr(RenderedTable, "READ", 777)
    assert _consume(simple_store, ["--output", "table", *ISO], True, monkeypatch).stdout == stdout
    dashes = stdout.split(b"\n")[1]
    assert dashes.endswith(b"-" * 70 + b"  " + b"-" * 90 + b"  " + b"-" * 64)  # the widths are the last row's
    assert b"\nt        1            0         -1                        k    " in stdout
    assert b"  k  " in stdout and b"  True  " in stdout and b"  False\n" in stdout
    assert b"  9999-12-31T23:59:59.999Z  " in stdout
    assert b"aborted" not in stdout and b"in committed transaction" in stdout


def _no_tabulate(*args, **kwargs):
    raise AssertionError("a table of printable ASCII went through tabulate")


def test_iso_timestamps_show_every_millisecond_and_keep_what_iso_cannot_show(simple_store, monkeypatch):
    """ISO text is exact to the millisecond up to year 9999's last one; past it, and with no
    timestamp, the epoch ms stays (as it does for -1): no traceback (the Python rows used to
    raise "year 10000 is out of range", and print .998 for 23:59:59.999)."""
    stdout = _same_bytes(simple_store, ["--output", "jsonl", "-p", "1", *ISO], monkeypatch)
    shown = [json.loads(line)["timestamp"] for line in stdout.splitlines()[::2]]
    assert shown == [
        -1,
        "1970-01-01T00:00:00.000Z",
        "1970-01-01T00:00:00.999Z",
        "2023-11-14T22:13:20.123Z",
        "9999-12-31T23:59:59.999Z",
        253_402_300_800_000,
        2**63 - 1,
    ]


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


def test_the_kcat_lines_hold_what_the_comparison_is_about(store_dir, monkeypatch):
    """-J's lines show both timestamp types, replaced bytes (and the note), nulls and flat headers."""
    kcat = _consume(store_dir, ["-J"], True, monkeypatch)
    assert NOTE in kcat.stderr
    docs = [json.loads(line) for line in kcat.stdout.splitlines()]
    assert {doc["tstype"] for doc in docs} == {"create", "logappend"}
    assert any(doc["key"] is None for doc in docs) and any(doc["payload"] is None for doc in docs)
    assert ["h", None, "\u00fc"] in [doc["headers"][:3] for doc in docs]
    assert all(list(doc)[:3] == ["topic", "partition", "offset"] and doc["broker"] == 1 for doc in docs)


def test_the_kcat_text_holds_what_the_comparison_is_about(store_dir, monkeypatch):
    """-f's text shows null keys and lengths, raw header values and bytes that are not UTF-8 as they are."""
    kcat = _consume(store_dir, ["-f", KCAT_FORMATS[0]], True, monkeypatch)
    assert NOTE not in kcat.stderr  # -f prints bytes as they are: nothing replaced
    records = len(_consume(store_dir, ["-J"], True, monkeypatch).stdout.splitlines())
    assert kcat.stdout.endswith(b"|%\tA\n") and kcat.stdout.count(b"|%\tA\n") == records > 10
    assert b"||-1|" in kcat.stdout  # %k and %K of a null key
    assert b"|h=NULL," in kcat.stdout and b"\xff" in kcat.stdout


def test_an_empty_topic_prints_what_each_output_prints_for_no_rows(tmp_path, monkeypatch):
    path = str(tmp_path / "store")
    from storage import Store

    with Store.open(path) as store:
        store.create_topic(TOPIC, 1)
    printed = {output: _same_bytes(path, ["--output", output.value], monkeypatch) for output in ROW_OUTPUTS}
    assert printed[OutputFormat.csv] == b"topic,partition,offset,timestamp,key,value,headers\n"
    assert printed[OutputFormat.json] == b"[]\n" and printed[OutputFormat.jsonl] == b""
    assert printed[OutputFormat.table].startswith(b"Topic    Partition")


# ---- random batches, straight through both writers ---------------------------------------------------

_text_bytes = st.text(max_size=8).map(lambda t: t.encode("utf-8", "surrogatepass"))
_data = st.none() | st.binary(max_size=24) | _text_bytes | st.sampled_from([b'",\n\r\\\x00\x7f', b"\xed\xa0\x80"])
_name = st.text(max_size=5) | st.binary(max_size=5)  # header names that are not UTF-8 too


@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(st.tuples(_data, _data, st.lists(st.tuples(_name, _data), max_size=3)), min_size=1, max_size=6),
    codec=st.sampled_from(list(Compression)),
    log_append_time=st.booleans(),
    output=st.sampled_from([*ROW_OUTPUTS, "-J", *KCAT_FORMATS]),
    value_format=st.sampled_from(list(ValueFormat)),
    partition=st.integers(0, 2**31 - 1),
    base_offset=st.integers(0, 2**40),
    timestamp=st.sampled_from(EDGE_TIMESTAMPS) | st.integers(-(2**40), 2**62),
    iso=st.booleans(),
    stop=st.none() | st.integers(-8, 8),
)
def test_random_batches_make_the_same_rows(
    records, codec, log_append_time, output, value_format, partition, base_offset, timestamp, iso, stop
):
    """And with a stop timestamp (e@MS, `stop` ms from the batch's first timestamp; the records' go
    down, or are all the same under LogAppendTime) the lines end where cli/consume.py `_before` would
    end the reference's records, and say at which record."""
    batch = RecordBatch.parse(
        build_batch(
            [(k, v, h, timestamp - 7 * i) for i, (k, v, h) in enumerate(records)],  # down: no 64-bit overflow
            base_offset=base_offset,
            compression=codec,
            timestamp_type=TimestampType.LOG_APPEND_TIME if log_append_time else TimestampType.CREATE_TIME,
            log_append_time=timestamp if log_append_time else None,
        )
    )
    end = base_offset + len(records)
    reference, native = (_row_writer(output, value_format, iso) for _ in range(2))
    shown = batch.consumer_records(ConsumerRecord, TOPIC, partition, base_offset, end)
    stop_at = None if stop is None else min(timestamp + stop, 2**63 - 1)  # e@ past 2**63 - 1: cli/console_lines.py
    reached = next((r for r in shown if stop_at is not None and r.timestamp >= stop_at), None)
    if reached is not None:
        shown = shown[: reached.offset - base_offset]
    ref_out = _written(reference, shown)
    if isinstance(native, consume_cli._KcatFormatter):
        native.native = row_formatter("kcat", TOPIC, value_format.value, kcat_parts=native.parts)
    elif isinstance(native, consume_cli._KcatJson):
        native.native = row_formatter("kcat_json", TOPIC, value_format.value, iso_timestamps=iso, broker=native.broker)
    else:
        native.native = row_formatter(output.value, TOPIC, value_format.value, iso_timestamps=iso)
    native.lines = True
    lines, more, stopped = batch_lines(native.native, batch, Line, partition, base_offset, end, len(records), stop_at)
    assert (more, stopped) == (reached is not None, None if reached is None else reached.offset)
    assert len(lines) == len(shown)
    assert _written(native, lines) == ref_out
    assert native.replaced == reference.replaced


Writer = consume_cli._Rows | consume_cli._KcatJson | consume_cli._KcatFormatter


def _row_writer(output, value_format: ValueFormat, iso: bool) -> Writer:
    """The writer of `--output output`, of kcat's -J or of a kcat -f format, with its Python rows."""
    if output == "-J":
        return consume_cli._KcatJson(value_format, iso_timestamps=iso)
    if isinstance(output, str):
        return consume_cli._KcatFormatter(value_format, output)
    return consume_cli._Rows(value_format, output, iso_timestamps=iso)


def _written(writer: Writer, records: list) -> bytes:
    """What the writer prints for one poll's records, then its close."""
    out = io.BytesIO()
    with contextlib.redirect_stdout(io.TextIOWrapper(out, encoding="utf-8")) as stdout:
        writer.out = stdout.buffer
        writer.write(records)
        writer.close()
        stdout.flush()
        return out.getvalue()


# ---- random tables, straight through RenderedTable and tabulate ---------------------------------------

_char = st.sampled_from(' ab~!=,"True') | st.characters(max_codepoint=0x3100, blacklist_categories=("Cs",))
_cell = st.text(_char, max_size=12)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.lists(_cell, min_size=7, max_size=7), max_size=8), ascii_only=st.booleans())
def test_random_tables_lay_out_as_tabulate(rows, ascii_only):
    if ascii_only:  # the cells laid out natively (printable ASCII), most of the time
        rows = [[cell.encode("ascii", "ignore").decode().replace("\x7f", "") for cell in row] for row in rows]
        rows = [["".join(ch for ch in cell if ch >= " ") for cell in row] for row in rows]
    table = RenderedTable(TABLE_HEADERS)
    table.add(b"".join(_cell_bytes(cell) for row in rows for cell in row))
    assert b"".join(table.render()) == (render_table(rows, TABLE_HEADERS) + "\n").encode()


def _cell_bytes(cell: str) -> bytes:
    data = cell.encode()
    return len(data).to_bytes(4, "little") + data


def test_a_kcat_format_with_an_unknown_field_is_refused():
    """The CLI refuses it first (`Unsupported formatter`); the native formatter does not trust that."""
    with pytest.raises(ValueError, match="unknown kcat field"):
        row_formatter("kcat", TOPIC, "utf8", kcat_parts=[b"text", "x"])
    proc = txlog("consume", "-t", TOPIC, "-f", "%x", data_dir="/nonexistent-store", text=True)
    assert proc.returncode != 0 and proc.stderr.startswith("Error: Unsupported formatter: %x")
