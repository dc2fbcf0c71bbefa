"""`txlog consume`'s text formatter in native code against its Python reference, byte for byte.

The native formatter (storage.console_format, storage/native/src/format.rs) writes what
cli/consume.py's `_KafkaFormatter.write_reference` writes: Kafka's console-consumer lines under
every print.* combination, separator, null literal and --value-format. Two checks: every option
combination over a log that holds what a reader meets (aborted and committed transactions, their
control batches, every codec, null keys and values, headers with null values, bytes that are not
UTF-8, LogAppendTime batches), run through the CLI under both isolation levels; and random records
and options (hypothesis) straight through both writers.
"""

from __future__ import annotations

import io
import itertools
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import txlog as client
from cli import consume as consume_cli
from cli import dump_log
from cli.record_format import ValueFormat
from storage import Store
from storage.records import Compression, RecordBatch, TimestampType, build_batch, crc32c
from tests.cli.cli_helpers import txlog
from txlog.consumer_record import ConsumerRecord

TOPIC = "t"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
FLAGS = ("print.timestamp", "print.partition", "print.offset", "print.headers", "print.key", "print.value")
ODD = b"\xff\xfe\x00tab\there\nnewline\\"  # not UTF-8, with the default separators inside


UTF8_ONLY = [
    (None, "\u00fc\u20ac value".encode(), [("h", None)]),
    (b"k", None, []),
    ("\u043a\u043b\u044e\u0447".encode(), b"v", [("a", b"1"), ("\u00e9", b"\xff")]),
    (b"", b"", []),
]


def _records(tag: str) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    """Keys, values and headers of one producer's records: every shape a line can take."""
    return [
        (f"k-{tag}".encode(), f"v-{tag}".encode(), []),
        (None, f"no key {tag}".encode(), [("h", b"1")]),
        (f"null value {tag}".encode(), None, [("h", None), ("\u00fc", ODD)]),
        (None, None, []),
        (ODD, ODD + tag.encode(), [("a", b""), ("b", b"x")]),
        (b"", b"", []),
    ]


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("native-format") / "store")
    with Store.open(path) as store:
        store.create_topic(TOPIC, 2)
        for codec in CODECS:
            producer = client.Producer(store, compression_type=codec, enable_idempotence=True)
            for partition in (0, 1):
                for key, value, headers in _records(codec):
                    producer.send(TOPIC, key=key, value=value, headers=headers, partition=partition)
            producer.close()
        for codec in ("none", "zstd"):  # batches of UTF-8 only: what inspect formats natively
            producer = client.Producer(store, compression_type=codec)
            for key, value, headers in UTF8_ONLY:
                producer.send(TOPIC, key=key, value=value, headers=headers, partition=0)
            producer.close()
        txn = client.Producer(store, transactional_id="fmt", compression_type="lz4")
        txn.init_transactions()
        for outcome in ("commit", "abort", "commit", "abort"):
            txn.begin_transaction()
            for key, value, headers in _records(outcome):
                txn.send(TOPIC, key=key, value=value, headers=headers, partition=0)
            txn.flush()  # in the log before the abort, so read_uncommitted shows them
            txn.commit_transaction() if outcome == "commit" else txn.abort_transaction()
        txn.close()
        log = store.partition(TOPIC, 1)  # a LogAppendTime batch: every record shows the batch's time
        log.append(
            build_batch(
                [(b"la", b"append time", [], 1_700_000_000_000), (None, ODD, [("z", None)], 1_700_000_000_001)],
                base_offset=log.log_end_offset,
                timestamp_type=TimestampType.LOG_APPEND_TIME,
                compression=Compression.GZIP,
                log_append_time=1_700_000_000_123,
            )
        )
    return path


def _consume(store_dir: str, args: list[str], mode: str, monkeypatch: pytest.MonkeyPatch) -> bytes:
    """consume's stdout written by one of the three writers of its text lines (`mode`):

    * "lines": the default, lines made in the fetch straight from the batches' bytes;
    * "records": the native formatter over ConsumerRecords (a writer whose `line_transport` makes
      none: cli/consume.py's fallback);
    * "reference": the Python writer over ConsumerRecords.
    """
    used = []
    with monkeypatch.context() as patch:
        if mode == "reference":
            patch.setattr(consume_cli._KafkaFormatter, "write", consume_cli._KafkaFormatter.write_reference)
        else:  # the run under test must not fall back to the reference
            patch.setattr(consume_cli._KafkaFormatter, "write_reference", _refuse)
        if mode == "lines":
            line_transport = consume_cli._KafkaFormatter.line_transport
            patch.setattr(
                consume_cli._KafkaFormatter,
                "line_transport",
                lambda self, store, topic, stop_at=None: (
                    used.append(line_transport(self, store, topic, stop_at)) or used[-1]
                ),
            )
        else:
            patch.setattr(consume_cli._KafkaFormatter, "line_transport", _no_lines)
        proc = txlog("consume", "-t", TOPIC, *args, data_dir=store_dir, text=False)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, (proc.returncode, proc.stderr)
    if mode == "lines":
        assert used and used[0] is not None, "the lines were not made in the fetch"
    return proc.stdout


def _no_lines(self, store, topic, stop_at=None) -> None:
    """A writer's `line_transport` that makes no lines: the poll returns ConsumerRecords."""
    return None


def _refuse(self, records) -> None:
    raise AssertionError("the native formatter fell back to the Python one")


def _cases() -> list[list[str]]:
    """Every print.* combination (value format and isolation level rotating through them), then
    every value format and isolation level with every field shown and unusual separators."""
    cases = []
    formats, isolations = [f.value for f in ValueFormat], ("read_committed", "read_uncommitted")
    for i, shown in enumerate(itertools.product(("true", "false"), repeat=len(FLAGS))):
        props = [f"{name}={on}" for name, on in zip(FLAGS, shown, strict=True)]
        cases.append(
            [
                *(a for p in props for a in ("--property", p)),
                "--value-format",
                formats[i % 3],
                "--isolation-level",
                isolations[i // 3 % 2],
            ]  # fmt: skip
        )
    separators = [
        "key.separator=\\x00|",
        "line.separator=\\r\\n",
        "headers.separator=;;",
        "null.literal=<NULL>",
    ]
    for value_format, isolation, null in itertools.product(formats, isolations, ("<NULL>", "")):
        props = [f"{name}=true" for name in FLAGS] + separators[:3] + [f"null.literal={null}"]
        cases.append(
            [
                *(a for p in props for a in ("--property", p)),
                "--value-format",
                value_format,
                "--isolation-level",
                isolation,
            ]  # fmt: skip
        )
    cases.append(["--property", "line.separator=", "--property", "print.key=true"])  # no separator at all
    for isolation in isolations:  # ISO timestamps (cli/consume.py `iso_timestamp`), of both timestamp types
        iso = ["--property", "print.timestamp=true", "--timestamp-format", "iso"]
        cases.append([*iso, "--isolation-level", isolation])
    # Fetches cut inside a batch (-c), starting inside one (-o N), one partition, the tail (-o -N).
    offsets = ["--property", "print.offset=true", "--property", "print.partition=true"]
    cases += [[*offsets, "-c", "5"], [*offsets, "-o", "3", "-c", "9"], [*offsets, "-p", "1"], [*offsets, "-o", "-4"]]
    return cases


@pytest.mark.parametrize("args", _cases(), ids=lambda args: " ".join(args).replace("--property ", ""))
def test_native_lines_are_the_python_formatters_bytes(store_dir, args, monkeypatch):
    reference = _consume(store_dir, args, "reference", monkeypatch)
    assert reference  # the log has records under both isolation levels: the comparison saw them
    assert _consume(store_dir, args, "lines", monkeypatch) == reference
    assert _consume(store_dir, args, "records", monkeypatch) == reference


def test_the_log_holds_what_the_comparison_is_about(store_dir, monkeypatch):
    """The fixture really has aborted data, nulls, headers and both timestamp types."""
    every = ["--property", "print.headers=true", "--property", "print.key=true", "--property", "print.timestamp=true"]
    committed = _consume(store_dir, every, "lines", monkeypatch)
    uncommitted = _consume(store_dir, [*every, "--isolation-level", "read_uncommitted"], "lines", monkeypatch)
    assert b"v-abort" in uncommitted and b"v-abort" not in committed and b"v-commit" in committed
    assert b"LogAppendTime:1700000000123\tNO_HEADERS\tla\tappend time\n" in committed
    assert b"CreateTime:" in committed and b"h:null,\xc3\xbc:\xff\xfe" in committed and b"\tnull\tnull\n" in committed
    assert ODD in committed


def test_iso_timestamps_are_made_natively(store_dir, monkeypatch):
    iso = ["--property", "print.timestamp=true", "--timestamp-format", "iso"]
    out = _consume(store_dir, iso, "lines", monkeypatch)
    assert b"LogAppendTime:2023-11-14T22:13:20.123Z\t" in out and b"CreateTime:20" in out


# ---- random records and options, straight through both writers ---------------------------------------

_data = st.none() | st.binary(max_size=40)
_header = st.tuples(st.text(max_size=6), _data)
_record = st.builds(
    lambda partition, offset, timestamp, kind, key, value, headers: ConsumerRecord(
        TOPIC, partition, offset, timestamp, TimestampType(kind), key, value, headers
    ),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1) | st.integers(-2, 253_402_300_800_001),  # the second: ISO text's range
    st.sampled_from([0, 1]),
    _data,
    _data,
    st.lists(_header, max_size=3),
)
_separator = st.text(alphabet=st.characters(blacklist_characters="\\", blacklist_categories=("Cs",)), max_size=3)


@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(_record, max_size=8),
    flags=st.tuples(*[st.booleans()] * len(FLAGS)),
    separators=st.tuples(_separator, _separator, _separator, _separator),
    value_format=st.sampled_from(list(ValueFormat)),
    iso=st.booleans(),
)
def test_random_records_format_alike(records, flags, separators, value_format, iso):
    props = dict(consume_cli.FORMATTER_PROPERTIES)
    props.update({name: str(on).lower() for name, on in zip(FLAGS, flags, strict=True)})
    texts = ("key.separator", "line.separator", "headers.separator", "null.literal")
    props.update(zip(texts, separators, strict=True))
    outputs = []
    for write in (consume_cli._KafkaFormatter.write, consume_cli._KafkaFormatter.write_reference):
        writer = consume_cli._KafkaFormatter(value_format, props, iso_timestamps=iso)
        writer.out = io.BytesIO()
        write(writer, records)
        outputs.append(writer.out.getvalue())
    assert outputs[0] == outputs[1]


def test_a_batch_that_cannot_be_decoded_fails_alike(tmp_path, monkeypatch):
    """Damage a batch's records under a valid CRC: every writer prints the records before it,
    then the same one-line error, with the same exit code (the Consumer's rule for a batch its
    decoder refuses, which the lines decoder must keep)."""
    path = str(tmp_path / "store")
    with Store.open(path) as store:
        store.create_topic(TOPIC, 1)
        log = store.partition(TOPIC, 0)
        for i in range(3):
            log.append(build_batch([(b"k", f"v{i}a".encode(), [], 1), (b"k", f"v{i}b".encode(), [], 1)]))
    segment = tmp_path / "store" / f"{TOPIC}-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    second = 12 + struct.unpack_from(">i", data, 8)[0]
    # The first record's key length (after its length, attributes, timestamp and offset deltas): 63 bytes.
    data[second + 61 + 4] = 0x7E
    struct.pack_into(
        ">I",
        data,
        second + 17,
        crc32c(bytes(data[second + 21 : second + 12 + struct.unpack_from(">i", data, second + 8)[0]])),
    )
    segment.write_bytes(bytes(data))
    runs = {}
    for mode in ("reference", "lines", "records"):
        with monkeypatch.context() as patch:
            if mode == "reference":
                patch.setattr(consume_cli._KafkaFormatter, "write", consume_cli._KafkaFormatter.write_reference)
            if mode != "lines":
                patch.setattr(consume_cli._KafkaFormatter, "line_transport", _no_lines)
            runs[mode] = txlog("consume", "-t", TOPIC, "--property", "print.offset=true", data_dir=path)
    reference = runs["reference"]
    assert reference.returncode != 0 and reference.stdout == "Offset:0\tv0a\nOffset:1\tv0b\n"
    assert reference.stderr.startswith("Error: ") and "Traceback" not in reference.stderr
    for mode in ("lines", "records"):
        assert (runs[mode].returncode, runs[mode].stdout, runs[mode].stderr) == (
            reference.returncode,
            reference.stdout,
            reference.stderr,
        ), mode


def test_the_records_taken_from_a_batch_are_one_line_listed_once_per_record(tmp_path):
    """consume's fetch makes one object for the records it takes from a batch (their lines in one
    bytes), whole or cut by the fetch's offsets or record limit, listed once per record so that the
    Consumer's and the CLI's counts stay counts of records. Two batches of the same bytes, one after
    the other, both print."""
    from cli.console_lines import chunks, joined
    from txlog.topic_partition import TopicPartition

    path = str(tmp_path / "store")
    with Store.open(path) as store:
        store.create_topic(TOPIC, 1)
        log = store.partition(TOPIC, 0)
        for batch in ([b"same"] * 3, [b"same"] * 3, [b"x", b"y"]):
            log.append(build_batch([(None, value, [], 1) for value in batch]))
        writer = consume_cli._KafkaFormatter(ValueFormat.utf8, dict(consume_cli.FORMATTER_PROPERTIES))
        transport = writer.line_transport(store, TOPIC)
        assert transport is not None
        tp, rc = TopicPartition(TOPIC, 0), client.IsolationLevel.READ_COMMITTED
        whole = transport.fetch(tp, 0, rc, max_records=500, max_bytes=1 << 20)
        assert len(whole.records) == 8 and whole.next_offset == 8
        assert len({id(line) for line in whole.records}) == 3  # one per batch
        assert [line.offset for line in whole.records] == [2, 2, 2, 5, 5, 5, 7, 7]  # each batch's last
        assert joined(whole.records) == b"same\n" * 6 + b"x\ny\n"
        inside = transport.fetch(tp, 1, rc, max_records=5, max_bytes=1 << 20)  # starts inside the first batch
        assert [line.offset for line in inside.records] == [2, 2, 5, 5, 5] and inside.next_offset == 6
        assert len({id(line) for line in inside.records}) == 2
        full = transport.fetch(tp, 0, rc, max_records=4, max_bytes=1 << 20)  # the record limit cuts the second
        assert [line.offset for line in full.records] == [2, 2, 2, 3] and full.next_offset == 4
        assert len({id(line) for line in full.records}) == 2
        assert joined(inside.records) == joined(full.records) + b"same\n" == b"same\n" * 5
        one = full.records[0]
        assert joined([one, one, whole.records[0], one]) == b"same\n" * 9  # only a repeat back to back is one
        # What the text writers write one after the other instead of joining them: the same pieces.
        assert chunks(whole.records) == [b"same\n" * 3, b"same\n" * 3, b"x\ny\n"]
        assert chunks([one, one, whole.records[0], one]) == [b"same\n" * 3, b"same\n" * 3, b"same\n" * 3]
        assert b"".join(chunks(inside.records)) == joined(inside.records) and chunks([]) == []
    for args, printed in (([], 8), (["-c", "4"], 4), (["-o", "4", "-c", "3"], 3)):
        proc = txlog("consume", "-t", TOPIC, *args, data_dir=path)
        lines = (["same"] * 6 + ["x", "y"])[int(args[1]) if args[:1] == ["-o"] else 0 :][:printed]
        assert (proc.returncode, proc.stdout.splitlines()) == (0, lines), args
        assert f"Processed a total of {printed} messages" in proc.stderr


def test_consume_reads_every_batch_of_the_log_once(tmp_path, monkeypatch):
    """A poll ends at its bytes (cli/consume.py POLL_BYTES), not at a record count that
    stopped it inside a read: every batch the log holds is read once, none read and dropped to be read
    again by the next poll; the output is every record's line, and -c still stops at its count."""
    from storage.partition_log import PartitionLog

    path = str(tmp_path / "store")
    values = [f"{i:06d}".encode() * 16 for i in range(12_000)]  # 96-byte values: ~1.4 MB of batches
    with Store.open(path) as store:
        store.create_topic(TOPIC, 1)
        log = store.partition(TOPIC, 0)
        for at in range(0, len(values), 400):
            log.append(build_batch([(None, value, [], 1) for value in values[at : at + 400]]))
    read_bytes: list[int] = []
    real = PartitionLog.read

    def counted(self, *args, **kwargs):
        batches = real(self, *args, **kwargs)
        read_bytes.append(sum(batch.size for batch in batches))
        return batches

    monkeypatch.setattr(PartitionLog, "read", counted)
    proc = txlog("consume", "-t", TOPIC, data_dir=path)
    assert proc.returncode == 0 and proc.stdout.encode() == b"".join(value + b"\n" for value in values)
    segment = sum(f.stat().st_size for f in (tmp_path / "store" / f"{TOPIC}-0").glob("*.log"))
    assert sum(read_bytes) == segment and len(read_bytes) > 1, (sum(read_bytes), segment, len(read_bytes))
    proc = txlog("consume", "-t", TOPIC, "-c", "7000", data_dir=path)
    assert proc.returncode == 0 and proc.stdout.splitlines() == [value.decode() for value in values[:7000]]


# ---- inspect --print-data-log: kafka-dump-log's record lines ----------------------------------------

INSPECT_CASES = [
    ["--print-data-log"],
    ["--print-data-log", "--skip-record-metadata"],
    ["--deep-iteration"],
    ["--deep-iteration", "--skip-record-metadata"],
]


@pytest.mark.parametrize("args", INSPECT_CASES, ids=" ".join)
def test_inspect_native_lines_are_the_python_lines(store_dir, args, monkeypatch):
    """Each segment of the log (every codec, control batches, nulls, headers, UTF-8 and not,
    LogAppendTime) printed with the native record lines and with the Python ones."""
    segments = sorted(str(p) for p in Path(store_dir).glob(f"{TOPIC}-*/*.log"))
    assert len(segments) == 2
    made = []
    native = dump_log.dump_record_lines

    def counted(batch, **kwargs):
        lines = native(batch, **kwargs)
        made.append(lines is not None)
        return lines

    with monkeypatch.context() as patch:
        patch.setattr(dump_log, "dump_record_lines", counted)
        ours = txlog("inspect", *args, *segments, text=False)
    with monkeypatch.context() as patch:
        patch.setattr(dump_log, "_native_record_lines", lambda batch, opts: None)
        reference = txlog("inspect", *args, *segments, text=False)
    assert (ours.returncode, ours.stdout, ours.stderr) == (reference.returncode, reference.stdout, reference.stderr)
    assert any(made)
    if "--print-data-log" in args:  # batches with data that is not UTF-8 are the Python lines'
        assert not all(made)


_utf8_or_bytes = (
    st.none() | st.binary(max_size=30) | st.text(max_size=10).map(lambda t: t.encode("utf-8", "surrogatepass"))
)


@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(
        st.tuples(_utf8_or_bytes, _utf8_or_bytes, st.lists(st.tuples(st.text(max_size=5), _data), max_size=2)),
        min_size=1,
        max_size=6,
    ),
    codec=st.sampled_from(list(Compression)),
    log_append_time=st.booleans(),
    print_data=st.booleans(),
    skip_metadata=st.booleans(),
)
def test_random_batches_dump_alike(records, codec, log_append_time, print_data, skip_metadata):
    """A batch of random keys, values and headers: the native kafka-dump-log lines (where it makes
    them) are the Python lines' bytes, as inspect writes them (str lines as UTF-8)."""
    batch = RecordBatch.parse(
        build_batch(
            [(k, v, h, 1_700_000_000_000 + i) for i, (k, v, h) in enumerate(records)],
            compression=codec,
            timestamp_type=TimestampType.LOG_APPEND_TIME if log_append_time else TimestampType.CREATE_TIME,
        )
    )
    opts = dump_log.Options(print_data=print_data, deep=True, skip_metadata=skip_metadata)
    native = dump_log.text_of({"type": "records", "batch": batch, "records": None}, opts)
    reference = dump_log.text_of({"type": "records", "batch": batch, "records": batch.record_tuples()}, opts)
    as_bytes = [
        text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text for text in (native, reference)
    ]
    assert as_bytes[0] == as_bytes[1]


@pytest.mark.parametrize("cut", [1, 30, 70])
def test_a_torn_tail_reads_alike(tmp_path, monkeypatch, cut):
    """The last batch cut short, as a power loss leaves it: every writer prints the same records
    (the complete batches before it) with the same exit code and stderr."""
    path = str(tmp_path / "store")
    with Store.open(path) as store:
        store.create_topic(TOPIC, 1)
        log = store.partition(TOPIC, 0)
        for i in range(3):
            log.append(build_batch([(None, f"v{i}a".encode(), [], 1), (b"k", f"v{i}b".encode(), [("h", None)], 2)]))
    segment = tmp_path / "store" / f"{TOPIC}-0" / "00000000000000000000.log"
    data = segment.read_bytes()
    segment.write_bytes(data[: len(data) - cut])
    runs = {}
    for mode in ("reference", "lines", "records"):
        with monkeypatch.context() as patch:
            if mode == "reference":
                patch.setattr(consume_cli._KafkaFormatter, "write", consume_cli._KafkaFormatter.write_reference)
            if mode != "lines":
                patch.setattr(consume_cli._KafkaFormatter, "line_transport", _no_lines)
            props = ["--property", "print.offset=true", "--property", "print.headers=true"]
            proc = txlog("consume", "-t", TOPIC, *props, data_dir=path)
            runs[mode] = (proc.returncode, proc.stdout, proc.stderr)
    assert "v1b" in runs["reference"][1] and "v2a" not in runs["reference"][1]
    assert runs["lines"] == runs["reference"] == runs["records"]
