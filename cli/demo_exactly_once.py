"""The demo's second half: the exactly-once layer, through the public `txlog` API.

5. the three delivery semantics under the same injected faults (sent / written / duplicated / lost);
6. a committed and an aborted transaction, seen through read_uncommitted and read_committed;
7. a zombie producer fenced by a newer instance of its transactional id;
8. a process killed with SIGKILL in the middle of a commit (after the decision, before all
   markers), and the next coordinator call rolling the commit forward.

Each claim is checked through the Narrator, like the first half.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

DELIVERY_TOPIC = "txlog-demo-delivery"
TXN_TOPIC = "txlog-demo-txn"
DELIVERY_RECORDS = 100
FAULT_RATE = 0.2
CRASH_TIMEOUT = 30.0

# The fault the child meets: SIGKILL right after the first COMMIT marker is durable (the decision,
# PREPARE_COMMIT, is already on disk). The coordinator's marker writes are WriteTxnMarkers calls
# through the producer's transport, so the plan names that call; nothing is patched.
CRASH_STEP, CRASH_ACTION, CRASH_OCCURRENCE = "WriteTxnMarkers", "kill-after", 1

# Runs in a child process: commit a transaction over two partitions under that fault plan.
_CRASHING_COMMIT = """
import sys
import txlog
from txlog.tools.fault_injection import FaultInjectingTransport, StepFault
from txlog.transport import Transport
plan = txlog.FaultPlan(steps=[StepFault(sys.argv[3], sys.argv[4], int(sys.argv[5]))])
store = txlog.Store.open(sys.argv[1])
p = txlog.Producer(store, transactional_id="demo-crash", transport=FaultInjectingTransport(Transport(store), plan))
p.init_transactions()
p.begin_transaction()
for part in (0, 1):
    p.send(sys.argv[2], value=b"committed before the crash %d" % part, partition=part)
p.commit_transaction()
"""


def _recreate(store: Any, topic: str, partitions: int) -> None:
    if store.has_topic(topic):
        store.delete_topic(topic)
    store.create_topic(topic, partitions)


def _values(store: Any, topic: str, isolation: str) -> list[bytes]:
    import txlog

    with txlog.Consumer(store, isolation_level=isolation, enable_auto_commit=False) as c:
        c.assign([txlog.TopicPartition(topic, p) for p in range(store.partition_count(topic))])
        return [r.value for r in c]


def show_delivery_semantics(n: Any, store: Any) -> None:
    from txlog.tools.delivery import DeliveryMode, compare_delivery_semantics

    n.heading("5. Delivery semantics under the same injected faults")
    n.para(
        f"{DELIVERY_RECORDS} numbered records are sent one request each, through a transport that loses "
        f"about {FAULT_RATE:.0%} of requests or acknowledgements, or delivers a request late (after the "
        "client gave up on it). Each mode meets the same seeded faults; the log is then counted."
    )
    _recreate(store, DELIVERY_TOPIC, 1)
    reports = compare_delivery_semantics(
        store, records=DELIVERY_RECORDS, fault_rate=FAULT_RATE, seed=7, topic=DELIVERY_TOPIC
    )
    n.table(
        [(r.mode.value, r.sent, r.acknowledged, r.written, r.duplicated, r.lost) for r in reports],
        ("settings", "sent", "acknowledged", "written", "duplicated", "lost"),
    )
    by = {r.mode: r for r in reports}
    most, least = by[DeliveryMode.AT_MOST_ONCE], by[DeliveryMode.AT_LEAST_ONCE]
    n.expect(most.lost > 0 and most.duplicated == 0, "at-most-once loses records and never duplicates")
    n.expect(least.lost == 0 and least.duplicated > 0, "at-least-once duplicates records and never loses")
    n.expect(
        all(
            by[m].lost == by[m].duplicated == 0 and by[m].written == DELIVERY_RECORDS
            for m in (DeliveryMode.EXACTLY_ONCE, DeliveryMode.EXACTLY_ONCE_TRANSACTIONAL)
        ),
        "idempotence and transactions neither lose nor duplicate",
    )
    n.para(
        "Retries without idempotence write a record twice when only its acknowledgement was lost; with "
        "idempotence the log recognises the retry by producer id and sequence."
    )


def show_client_transactions(n: Any, store: Any) -> None:
    import txlog

    n.heading("6. Transactions: read_uncommitted sees everything, read_committed only what committed")
    _recreate(store, TXN_TOPIC, 2)
    p = txlog.Producer(store, transactional_id="demo-app")
    p.init_transactions()
    rows = []
    for outcome in ("commit", "abort"):
        p.begin_transaction()
        for part in (0, 1):
            p.send(TXN_TOPIC, value=f"{outcome}ted {part}".encode(), partition=part)
        p.flush()
        rows.append(
            (
                f"{outcome} pending",
                len(_values(store, TXN_TOPIC, "read_uncommitted")),
                len(_values(store, TXN_TOPIC, "read_committed")),
            )
        )
        p.commit_transaction() if outcome == "commit" else p.abort_transaction()
        rows.append(
            (
                f"after {outcome}",
                len(_values(store, TXN_TOPIC, "read_uncommitted")),
                len(_values(store, TXN_TOPIC, "read_committed")),
            )
        )
    n.table(rows, ("moment", "read_uncommitted records", "read_committed records"))
    n.expect(
        [r[1:] for r in rows] == [(2, 0), (2, 2), (4, 2), (4, 2)],
        "read_committed shows a transaction only once committed, and never an aborted one",
    )

    n.heading("7. A zombie is fenced by a newer instance of its transactional id")
    p.begin_transaction()
    p.send(TXN_TOPIC, value=b"zombie write", partition=0)
    p.flush()
    newer = txlog.Producer(store, transactional_id="demo-app")
    newer.init_transactions()
    n.para(
        f"The first instance (producer {p.producer_id}, epoch {p.producer_epoch}) has a transaction open "
        f"when a second instance starts: init_transactions bumps the epoch to {newer.producer_epoch} and "
        "aborts what the first left open."
    )
    try:
        p.commit_transaction()
        fenced = "COMMITTED"
    except txlog.errors.ProducerFencedError as exc:
        fenced = f"ProducerFencedError: {exc}"
    n.table([("zombie commit_transaction()", fenced)], ("attempt", "result"))
    n.expect(fenced.startswith("ProducerFencedError"), "the zombie's commit is refused")
    n.expect(
        b"zombie write" not in _values(store, TXN_TOPIC, "read_committed"),
        "the zombie's write is never read_committed-visible",
    )
    newer.close()
    p.close()


def show_crash_mid_commit(n: Any, store: Any, data_dir: str) -> None:
    import txlog

    n.heading("8. kill -9 in the middle of a commit: the decision stands")
    n.para(
        "A child process commits a transaction over two partitions and is killed with SIGKILL as soon as "
        "the first partition has its marker: the decision (PREPARE_COMMIT) is on disk, one partition is "
        f"marked, the other is not. (Its fault plan: {CRASH_ACTION} {CRASH_STEP} #{CRASH_OCCURRENCE}.)"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [_repo_root(), os.environ.get("PYTHONPATH")])))
    child = subprocess.run(
        [sys.executable, "-c", _CRASHING_COMMIT, data_dir, TXN_TOPIC, CRASH_STEP, CRASH_ACTION, str(CRASH_OCCURRENCE)],
        env=env,
        capture_output=True,
        timeout=CRASH_TIMEOUT,
    )
    killed = child.returncode == -signal.SIGKILL
    snapshot = txlog.Store.open(data_dir, read_only=True)  # what is on disk, touching nothing
    try:
        before = txlog.TransactionCoordinator(snapshot).describe("demo-crash")
    finally:
        snapshot.close()
    lso = [store.partition(TXN_TOPIC, part).last_stable_offset for part in (0, 1)]
    ends = [store.partition(TXN_TOPIC, part).log_end_offset for part in (0, 1)]
    with txlog.Admin(store) as live:
        live.abort_expired_transactions()  # any coordinator call rolls decided transactions forward
        after = live.coordinator.describe("demo-crash")
    visible = sum(v.startswith(b"committed before the crash") for v in _values(store, TXN_TOPIC, "read_committed"))
    n.table(
        [
            ("child exit", "SIGKILL" if killed else child.returncode),
            ("state left in __transaction_state", before.state.state.kafka_name if before else "?"),
            ("last stable offset / log end, partitions 0 and 1", f"{lso} / {ends}"),
            ("state after the next coordinator call", after.state.state.kafka_name if after else "?"),
            ("records of that transaction read_committed sees", visible),
        ],
        ("step", "observed"),
    )
    n.expect(
        killed and before is not None and before.state.state.name == "PREPARE_COMMIT",
        "the child died after the decision, before completing the commit",
    )
    n.expect(
        after is not None and after.state.state.name == "COMPLETE_COMMIT" and visible == 2,
        "the next coordinator call completes the commit on every partition",
    )


def _repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
