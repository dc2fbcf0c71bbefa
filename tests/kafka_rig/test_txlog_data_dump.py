"""Issue 21, item 3: Kafka's DumpLogSegments reads a txlog store and finds nothing wrong, and it
prints what `txlog inspect` prints (the same comparator and allow-list as item 2).

The store is written through txlog's producer paths: plain (acks=1) and idempotent producers,
transactions committed and aborted (ABORT markers, `.txnindex`), transactional offset commits,
every codec, headers, null keys and values, several partitions, and segment.bytes small enough
that segments roll. Keys and values include malformed UTF-8 of each kind Java's String decoder
groups differently from Python's, since Kafka prints keys and payloads through it.
"""

from __future__ import annotations

import re

import pytest

from storage import Store
from storage.compression import Compression
from tests.kafka_rig.dump_compare import ALLOWED, kafka_dump, txlog_inspect, unexplained, used_entries
from txlog.clients.producer import Producer
from txlog.topic_partition import TopicPartition

CODECS = [c.name.lower() for c in Compression]
SMALL_SEGMENTS = {"segment.bytes": 4096, "index.interval.bytes": 512}
MALFORMED_UTF8 = [
    b"\xed\xbf\x4a",  # a valid second byte, then a bad third: one U+FFFD in Java
    b"\xed\xa0\x80",  # a surrogate's well-formed bytes
    b"\xe0\x80\x80",  # overlong
    b"\xf0\x80\x80\x80",
    b"\xf4\x90\x80\x80",  # beyond U+10FFFF
    b"\xc0\xaf",
    b"abc\xe2\x82",  # truncated at the end
    b"abc\xf0\x9f\x98",
    b"\xf0\x9f\x41",
    b"\xe2\x28\xa1",
    b"\xff\xfe",
]


def _records(tag: str):
    for i in range(40):
        key = None if i % 7 == 1 else f"{tag}-k{i}".encode()
        value = None if i % 7 == 2 else b"" if i % 7 == 3 else f"{tag}-v{i}-{'z' * 3 * i}".encode()
        headers = [("h", b"hv"), ("nullvalue", None)] if i % 5 == 0 else None
        yield i % 3, key, value, headers


def write_store(root: str) -> None:
    store = Store.open(root)
    store.create_topic("plain", 3, SMALL_SEGMENTS)
    store.create_topic("txn", 2, SMALL_SEGMENTS)
    store.create_topic("input", 1)
    for codec in CODECS:
        plain = Producer(store, compression_type=codec, enable_idempotence=codec != "none", acks="all")
        for partition, key, value, headers in _records(f"plain-{codec}"):
            plain.send("plain", value=value, key=key, partition=partition, headers=headers)
        plain.close()
        txn = Producer(store, transactional_id=f"tx-{codec}", compression_type=codec)
        txn.init_transactions()
        for outcome in ("commit", "abort"):
            txn.begin_transaction()
            for partition, key, value, headers in _records(f"txn-{codec}-{outcome}"):
                txn.send("txn", value=value, key=key, partition=partition % 2, headers=headers)
            txn.send_offsets_to_transaction({TopicPartition("input", 0): 5}, "txlog-group")
            txn.commit_transaction() if outcome == "commit" else txn.abort_transaction()
        txn.close()
    odd = Producer(store, enable_idempotence=False, acks=1)
    for data in MALFORMED_UTF8:
        odd.send("plain", value=data, key=data[::-1], partition=0)
    odd.close()
    store.close()


OPTION_SETS = {
    "deep-iteration": (["--deep-iteration", "--print-data-log"], lambda f: True),
    "verify-index-only": (["--verify-index-only"], lambda f: f.endswith((".index", ".timeindex"))),
    "index-sanity-check": (["--index-sanity-check"], lambda f: f.endswith((".index", ".timeindex"))),
    "transaction-log-decoder": (
        ["--transaction-log-decoder"],
        lambda f: "/__transaction_state-" in f and f.endswith(".log"),
    ),
    "offsets-decoder": (["--offsets-decoder"], lambda f: "/__consumer_offsets-" in f and f.endswith(".log")),
}


@pytest.fixture(scope="module")
def store_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("txlog-store")
    write_store(str(root))
    suffixes = (".log", ".index", ".timeindex", ".snapshot", ".txnindex")
    return sorted(str(p) for p in root.rglob("*") if p.is_file() and p.name.endswith(suffixes))


def test_the_store_has_what_the_comparison_claims(store_files: list[str]) -> None:
    assert any(f.endswith(".txnindex") for f in store_files)
    assert sum(1 for f in store_files if "/txn-0/" in f and f.endswith(".log")) > 1, "segments should roll"


@pytest.mark.parametrize("name", list(OPTION_SETS))
def test_dump_log_segments_reads_the_txlog_store_as_inspect_does(store_files: list[str], name: str) -> None:
    options, wanted = OPTION_SETS[name]
    files = [f for f in store_files if wanted(f)]
    assert files
    kafka, txlog = kafka_dump(options, files), txlog_inspect(options, files)
    assert kafka.returncode == 0, kafka.stderr
    # Kafka finds nothing wrong: no index mismatch, no invalid bytes; the one stderr block it
    # prints is its offset-gap list, which names every segment not starting at offset 0
    for line in kafka.stderr.splitlines():
        assert re.fullmatch(r"Non-consecutive offsets in .*\.log|  -1 is followed by \d+", line), kafka.stderr
    assert not any("invalid bytes" in line or "is empty" in line for line in kafka.stdout if "index" not in line)
    assert txlog.returncode == 0, txlog.stderr
    txlog_lines = txlog.stdout
    if name == "verify-index-only":
        assert txlog_lines[-1].startswith("Verified ")
        txlog_lines = txlog_lines[:-1]
    if name == "index-sanity-check":
        assert all(
            line.startswith("Dumping ") or line.endswith(("passed sanity check.", "is empty.")) for line in kafka.stdout
        )
    allowed = ALLOWED.get(name, [])
    assert unexplained(kafka.stdout, txlog_lines, allowed) == []
    assert used_entries(kafka.stdout, txlog_lines, allowed) <= {a.name for a in allowed}
