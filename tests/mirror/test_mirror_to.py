"""`txlog mirror --to` against the rig's real Kafka 4.4 broker (tests/kafka_rig): exactly once under kill -9.

The store holds every codec, committed and aborted transactions over two partitions, plain
records, null keys and values, empty values and headers. The mirror is killed (SIGKILL) at
random moments several times, then runs with --follow while a producer keeps writing (and is
killed once more there). At the end the broker's read_committed consumer must return, per
partition and in order, exactly what read_committed shows of the store: nothing lost, nothing
twice, no aborted record; and Kafka's own `kafka-transactions.sh find-hanging` finds nothing.
`--big` kills more often over more data.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from confluent_kafka import Consumer, TopicPartition

from storage.store import Store
from tests.cli.cli_helpers import ROOT, assert_one_error, txlog
from tests.kafka_rig.kafka_dist import run_tool
from tests.mirror.cluster_reads import cluster_rows, mirror_positions
from tests.mirror.store_data import (
    CODECS,
    committed_rows,
    split_transactions,
    transaction_parts,
    write_mixed,
    write_transactions,
)
from txlog.mirror.common import Progress
from txlog.mirror.to_cluster import mirror_to

TRANSACTIONS_TOOL = "org.apache.kafka.tools.TransactionsCommand"
CONFIGS_TOOL = "org.apache.kafka.tools.ConfigCommand"
#: A bound for the --follow mirror to catch up (a hang, not a speed check).
CATCH_UP_DEADLINE_S = 300.0


def _mirror_process(store_dir: str, bootstrap: str, topic: str, name: str, *extra: str) -> subprocess.Popen:
    """`txlog mirror --to` as a real process (it is killed with SIGKILL), small transactions so a kill lands mid-run."""
    env = {**os.environ, "PYTHONPATH": ROOT, "NO_COLOR": "1"}
    command = [sys.executable, "-m", "cli.main", "--data-dir", store_dir, "mirror", "--to", bootstrap]
    command += ["-t", topic, "--name", name, "--transaction-bytes", "400", *extra]
    return subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _kill_at_random(proc: subprocess.Popen, rng: random.Random, moved: Callable[[], bool] | None = None) -> bool:
    """SIGKILL at a random moment (whatever it is doing then: starting, producing, committing), or let it end;
    whether it was killed. With `moved`, the moment is 0-0.4 s after `moved()` first says the mirror committed."""
    if moved is not None:
        while proc.poll() is None and not moved():
            time.sleep(0.05)
    try:
        proc.wait(timeout=rng.uniform(0, 0.4) if moved is not None else rng.uniform(0.1, 1.2))
        killed = False
    except subprocess.TimeoutExpired:
        proc.kill()
        killed = True
    proc.communicate()
    return killed


def _hanging(bootstrap: str) -> list[str]:
    out = run_tool(TRANSACTIONS_TOOL, "--bootstrap-server", bootstrap, "find-hanging", "--broker-id", "1").stdout
    return [line for line in out.splitlines()[1:] if line.strip()]


def _wait_caught_up(bootstrap: str, name: str, store: Store, topic: str, proc: subprocess.Popen) -> None:
    """Until the mirror's committed positions reach read_committed's end of every partition of the store."""
    ends = {p: store.partition(topic, p).last_stable_offset for p in store.partitions(topic)}
    deadline = time.monotonic() + CATCH_UP_DEADLINE_S
    while mirror_positions(bootstrap, name, topic, len(ends)) != ends:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"the mirror did not catch up: {ends}"
        time.sleep(0.5)


def test_kill9_at_random_moments_then_follow_mirrors_every_committed_record_once(kafka_broker, tmp_path, big):
    rng = random.Random(os.environ.get("TXLOG_MIRROR_SEED", "27"))
    store_dir, topic, name = str(tmp_path / "store"), "mirrored", f"m-{tmp_path.name}"
    store = Store.open(store_dir)
    store.create_topic(topic, 2, {"retention.ms": 86_400_000 * 30})
    # enough data that a quiet machine's mirror is still copying when the kills come (at least one must cut it short)
    write_mixed(store, topic, 30 if big else 15)
    kills = 12 if big else 3

    parts = transaction_parts(store, topic)
    assert sum(len(by_partition) == 2 for by_partition in parts.values()) > 20
    ends = {p: store.partition(topic, p).last_stable_offset for p in (0, 1)}
    cut_short = 0  # kills that left the mirror with work to do (the others came before it began or after it ended)
    positions = mirror_positions(kafka_broker.bootstrap, name, topic, 2)
    for attempt in range(kills * 3):  # a kill that came after the mirror ended does not count: try again
        before = positions

        def moved(before: dict[int, int] = before) -> bool:
            return mirror_positions(kafka_broker.bootstrap, name, topic, 2) != before

        # the first kill at any moment (start-up included), the others once the mirror is copying
        proc = _mirror_process(store_dir, kafka_broker.bootstrap, topic, name)
        killed = _kill_at_random(proc, rng, moved if attempt else None)
        positions = mirror_positions(kafka_broker.bootstrap, name, topic, 2)
        # where the killed mirror's last committed transaction left it: no source transaction half copied
        assert split_transactions(parts, positions) == []
        cut_short += killed and positions != ends
        if cut_short == kills or positions == ends:
            break
    assert cut_short >= 1

    follow = _mirror_process(store_dir, kafka_broker.bootstrap, topic, name, "--follow")
    for round_ in range(2):
        for codec in CODECS:
            write_transactions(
                store, topic, round_ * 100, 8 if big else 3, tid=f"later-{codec}", codec=codec, lopsided=round_ == 1
            )
        if round_ == 0:  # once more while following: killed between (or inside) its transactions
            time.sleep(rng.uniform(0.2, 2.0))
            follow.kill()
            follow.communicate()
            follow = _mirror_process(store_dir, kafka_broker.bootstrap, topic, name, "--follow")
    _wait_caught_up(kafka_broker.bootstrap, name, store, topic, follow)
    follow.send_signal(signal.SIGTERM)
    _, err = follow.communicate(timeout=120)
    assert follow.returncode == 130, err
    assert "Traceback" not in err and "(stopped)" in err.splitlines()[-1]

    expected = committed_rows(store, topic)
    got = cluster_rows(kafka_broker.bootstrap, topic, 2)
    assert sum(map(len, expected.values())) > 100
    assert not any(
        value is not None and value.startswith(b"aborted") for rows in got.values() for _, value, _, _ in rows
    )
    for p in (0, 1):
        assert got[p] == expected[p]  # every committed record once, in order, keys/values/headers/timestamps kept
    assert _hanging(kafka_broker.bootstrap) == []
    described = run_tool(
        CONFIGS_TOOL, "--bootstrap-server", kafka_broker.bootstrap, "--describe", "--entity-type", "topics",
        "--entity-name", topic,
    ).stdout  # fmt: skip
    assert f"retention.ms={86_400_000 * 30}" in described


def test_a_second_run_mirrors_only_what_was_committed_since(kafka_broker, tmp_path):
    store_dir, topic, name = str(tmp_path / "store"), "again", f"m-{tmp_path.name}"
    store = Store.open(store_dir)
    store.create_topic(topic, 2)
    write_transactions(store, topic, 0, 4, tid="a")
    first = txlog(
        "mirror", "--to", kafka_broker.bootstrap, "-t", topic, "--name", name, data_dir=store_dir, timeout=180
    )
    assert first.returncode == 0, first.stderr
    assert "Mirrored 12 records" in first.stderr  # transactions 0..3, 2 aborted: 3 committed x 4 records
    write_transactions(store, topic, 4, 3, tid="a")  # 4..6, 5 aborted: 2 x 4 records
    second = txlog(
        "mirror", "--to", kafka_broker.bootstrap, "-t", topic, "--name", name, data_dir=store_dir, timeout=180
    )
    assert second.returncode == 0, second.stderr
    assert "Mirrored 8 records" in second.stderr
    assert cluster_rows(kafka_broker.bootstrap, topic, 2) == committed_rows(store, topic)
    # the group offset is the source position; its metadata the cluster partition's end (group cut-over's mapping)
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": name})
    try:
        committed = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=30)
        for tp in committed:
            assert tp.offset == store.partition(topic, tp.partition).log_end_offset
            last = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=30)[1] - 2  # its marker
            assert tp.metadata == f"target={last + 1}"
    finally:
        consumer.close()


def test_a_topic_with_another_partition_count_on_the_cluster_is_one_error(kafka_broker, kafka_topic, tmp_path):
    topic = kafka_topic(partitions=3)
    store = Store.open(str(tmp_path / "store"))
    store.create_topic(topic, 2)
    proc = txlog("mirror", "--to", kafka_broker.bootstrap, "-t", topic, data_dir=str(tmp_path / "store"), timeout=120)
    assert "2 partitions in the source and 3 in the target" in assert_one_error(proc)


def test_a_setting_the_kafka_client_refuses_is_one_error(kafka_broker, tmp_path):
    store = Store.open(str(tmp_path / "store"))
    store.create_topic("t", 1)
    proc = txlog(
        "mirror", "--to", kafka_broker.bootstrap, "-t", "t", "-X", "no.such.setting=1", data_dir=str(tmp_path / "store")
    )
    assert "no.such.setting" in assert_one_error(proc)


def test_mistakes_on_the_command_line_are_one_error(tmp_path):
    store = Store.open(str(tmp_path / "store"))
    store.create_topic("t", 1)
    data_dir = str(tmp_path / "store")
    assert "exactly one of --to" in assert_one_error(txlog("mirror", "-t", "t", data_dir=data_dir))
    assert "exactly one of --to" in assert_one_error(
        txlog("mirror", "--to", "a:1", "--from", "b:1", "-t", "t", data_dir=data_dir)
    )
    assert "key=value" in assert_one_error(txlog("mirror", "--to", "a:1", "-t", "t", "-X", "oops", data_dir=data_dir))
    assert "set by the mirror" in assert_one_error(
        txlog("mirror", "--to", "a:1", "-t", "t", "-X", "transactional.id=x", data_dir=data_dir)
    )
    assert "does not exist" in assert_one_error(txlog("mirror", "--to", "a:1", "-t", "nope", data_dir=data_dir))
    assert "--all" in assert_one_error(txlog("mirror", "--to", "a:1", data_dir=data_dir))


def test_no_transaction_the_mirror_commits_splits_a_source_transaction(kafka_broker, tmp_path):
    """After every cluster transaction (the progress callback), the committed positions cut no committed
    source transaction in two: its parts in both partitions are copied by the same cluster transaction.
    Lopsided transactions make the partitions' read budgets end at different transactions."""
    store, topic, name = Store.open(str(tmp_path / "store")), "atomic", f"m-{tmp_path.name}"
    store.create_topic(topic, 2)
    write_mixed(store, topic, 6)
    parts = transaction_parts(store, topic)
    seen: list[dict[int, int]] = []

    def after_each_transaction(progress: Progress) -> None:
        seen.append(mirror_positions(kafka_broker.bootstrap, name, topic, 2))

    summary = mirror_to(
        store, kafka_broker.bootstrap, [topic], group=name, progress=after_each_transaction, round_bytes=400
    )
    assert summary.transactions > 20 and len(seen) > summary.transactions
    assert [split for positions in seen for split in split_transactions(parts, positions)] == []
    assert cluster_rows(kafka_broker.bootstrap, topic, 2) == committed_rows(store, topic)
