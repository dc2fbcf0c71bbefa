"""kcat (librdkafka's command-line client) end to end: `-L` metadata, produce lines with `-P`, and
consume them back with `-C -X isolation.level=read_committed`, an aborted transaction unseen."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from storage import Store
from tests.cli.cli_helpers import txlog
from tests.server.client_checks import assert_exactly_once, input_values, record_count, write_aborted
from tests.server.endpoints import topic_name

KCAT_TIMEOUT_S = 300

pytestmark = pytest.mark.skipif(
    shutil.which("kcat") is None, reason="kcat is not installed (Debian package kcat; .ci/run installs it)"
)


def _kcat(*args: str, input: str | None = None) -> str:
    result = subprocess.run(["kcat", *args], input=input, capture_output=True, text=True, timeout=KCAT_TIMEOUT_S)
    assert result.returncode == 0, f"kcat {' '.join(args)} exited {result.returncode}: {result.stderr}"
    return result.stdout


def test_kcat_lists_produces_and_reads_back_committed_lines(endpoint, request, big):
    n = record_count(200, big)
    topic = topic_name(request.node.nodeid, "t")
    endpoint.create_topic(topic, 3)

    metadata = _kcat("-b", endpoint.bootstrap, "-L", "-t", topic)
    assert f'topic "{topic}" with 3 partitions' in metadata
    assert "1 brokers:" in metadata

    lines = input_values(n)
    _kcat("-b", endpoint.bootstrap, "-P", "-t", topic, "-X", "enable.idempotence=true", input="\n".join(lines) + "\n")
    write_aborted(endpoint.bootstrap, topic, ["aborted"] * 9)
    read = _kcat(
        "-b", endpoint.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%s\n",
        "-X", "isolation.level=read_committed",
    )  # fmt: skip
    assert_exactly_once(lines, read.splitlines())
    uncommitted = _kcat(
        "-b", endpoint.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%s\n",
        "-X", "isolation.level=read_uncommitted",
    )  # fmt: skip
    assert uncommitted.splitlines().count("aborted") == 9  # written, and hidden from read_committed


# kcat's -f fields, every one (%R is the value's length as 4 big-endian bytes), and its -J lines.
KCAT_TEXT = "%t|%p|%o|%T|%k|%K|%s|%S|%R|%h|%%\n"


def test_txlog_consume_prints_what_kcat_prints(txlog_server, request):
    """`txlog consume -f FORMAT` and `-J` on a store print what kcat prints reading the same records
    through `txlog serve` (kcat is the oracle of its own formats): null keys and values, headers
    with and without values, bytes that are not UTF-8. Lines are compared sorted, since kcat
    interleaves the partitions."""
    topic = topic_name(request.node.nodeid, "f")
    store = Store.open(txlog_server.data_dir)
    try:
        store.create_topic(topic, 2)
    finally:
        store.close()
    lines = [f"key {i}:value {i}" for i in range(40)] + ["no key here", "null value:", "odd:\xe9t\xe9 \x01"]
    produce = ["-b", txlog_server.bootstrap, "-P", "-t", topic, "-K", ":", "-Z", "-H", "h1=v1", "-H", "h2"]
    _kcat(*produce, input="\n".join(lines) + "\n")
    read = ["-b", txlog_server.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q"]
    for fmt in (["-f", KCAT_TEXT], ["-J"]):
        kcat = subprocess.run(["kcat", *read, *fmt], capture_output=True, timeout=KCAT_TIMEOUT_S)
        assert kcat.returncode == 0, kcat.stderr
        ours = txlog("consume", "-t", topic, *fmt, data_dir=txlog_server.data_dir, text=False)
        assert ours.returncode == 0, ours.stderr
        assert sorted(ours.stdout.splitlines()) == sorted(kcat.stdout.splitlines())
        assert len(kcat.stdout.splitlines()) == len(lines)


def test_txlog_consume_stops_where_kcat_stops(txlog_server, request):
    """kcat's `-o e@MS` (stop at a timestamp) through `txlog serve` is the oracle of `txlog consume -o e@MS`
    on the store: each partition ends before its first record at or past MS, mid-batch, whatever
    timestamps follow it (they go up and down here), and -e exits once every partition has."""
    import txlog as client

    topic = topic_name(request.node.nodeid, "e")
    t0 = 1_700_000_000_000
    deltas = {0: [5, 1, 9, 3, 2, 8, 12, 4, 30], 1: [20, 25, 7, 6, 40, 1, 3]}
    store = Store.open(txlog_server.data_dir)
    try:
        store.create_topic(topic, 2)
        producer = client.Producer(store, linger_ms=1000)  # each partition's records in one batch
        for partition, stamps in deltas.items():
            for i, delta in enumerate(stamps):
                producer.send(topic, value=f"p{partition}r{i}".encode(), partition=partition, timestamp_ms=t0 + delta)
        producer.close()
    finally:
        store.close()
    fmt = ["-f", "%p %o %T %s\n"]
    shown = {}
    for stop in (t0 + 1, t0 + 6, t0 + 21, t0 + 26, t0 + 100):
        read = ["-b", txlog_server.bootstrap, "-C", "-t", topic, "-o", "beginning", "-o", f"e@{stop}", "-e", "-q"]
        kcat = subprocess.run(["kcat", *read, *fmt], capture_output=True, timeout=KCAT_TIMEOUT_S)
        assert kcat.returncode == 0, kcat.stderr
        ours = txlog("consume", "-t", topic, "-o", f"e@{stop}", "-e", *fmt, data_dir=txlog_server.data_dir, text=False)
        assert ours.returncode == 0, ours.stderr
        assert sorted(ours.stdout.splitlines()) == sorted(kcat.stdout.splitlines()), stop
        shown[stop] = len(kcat.stdout.splitlines())
    assert shown == {t0 + 1: 0, t0 + 6: 2, t0 + 21: 8 + 1, t0 + 26: 8 + 4, t0 + 100: 16}
