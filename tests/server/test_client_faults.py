"""Exactly-once under faults, with real client processes: kill -9 of a transactional
consume-transform-produce application (tests/server/ctp_worker.py) and of the server itself,
and several transactional consumers joining and leaving one group. Afterwards every input is in
the output exactly once under read_committed, and kafka-transactions finds nothing hanging.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from tests.server.client_checks import (
    assert_exactly_once,
    produce_inputs,
    read_values,
    record_count,
    transform,
)
from tests.server.ctp_worker import STUCK_EXIT
from tests.server.endpoints import Endpoint, topic_name

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# bounds on a worker that never gets there: a hang fails the test, a slow machine does not
WAIT_S = 600.0
MAX_RUNS = 3  # of the worker in the server-restart test (see ctp_worker._watchdog)
OPEN_STATES = {"Ongoing", "PrepareCommit", "PrepareAbort"}


class Worker:
    """`python3 -m tests.server.ctp_worker ...` as a child process whose output lines are watched."""

    def __init__(self, endpoint: Endpoint, source: str, sink: str, txn_id: str, *options: str, log_dir: str):
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        command = [sys.executable, "-m", "tests.server.ctp_worker", endpoint.bootstrap, source, sink]
        command += [f"{sink}-group", txn_id, *options]
        self.name = txn_id
        self.stderr_path = os.path.join(log_dir, f"{txn_id}-{time.monotonic_ns()}.log")
        with open(self.stderr_path, "wb") as stderr:
            self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, env=env, text=True)
        self.lines: list[str] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.strip())
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, words: str) -> None:
        """Until the worker printed a line starting with `words`; it must not exit first."""
        with self._changed:
            ok = self._changed.wait_for(lambda: self._printed(words) or self.proc.poll() is not None, WAIT_S)
        assert ok and self._printed(words), f"{self.name} never printed {words!r}: {self.lines[-3:]}\n{self.log()}"

    def _printed(self, words: str) -> bool:
        return any(line.split()[: len(words.split())] == words.split() for line in self.lines)

    def commits_begun_after(self, moment: float) -> int:
        """How many of its committed transactions began after `moment` (a time.monotonic())."""
        return sum(1 for line in self.lines if line.startswith("COMMITTED ") and float(line.split()[2]) > moment)

    def finish(self) -> None:
        """Wait for the worker's own end, which must be a success."""
        code = self.proc.wait(WAIT_S)
        assert code == 0, f"{self.name} exited {code}:\n{self.log()}"

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(WAIT_S)

    def log(self) -> str:
        with open(self.stderr_path, errors="replace") as f:
            return f.read()[-3000:]


def _topics(endpoint: Endpoint, node_id: str, n: int) -> tuple[str, str, list[str]]:
    source, sink = topic_name(node_id, "in"), topic_name(node_id, "out")
    endpoint.create_topic(source, 3)
    endpoint.create_topic(sink, 3)
    return source, sink, produce_inputs(endpoint.bootstrap, source, n)


def _assert_clean_end(endpoint: Endpoint, sink: str, inputs: list[str], txn_ids: list[str]) -> None:
    assert_exactly_once(map(transform, inputs), read_values(endpoint.bootstrap, sink, 3, len(inputs)))
    assert endpoint.hanging_transactions() == []
    states = endpoint.transaction_states()
    assert {txn_id: states.get(txn_id) for txn_id in txn_ids if states.get(txn_id) in OPEN_STATES} == {}


def test_a_killed_application_restarted_with_its_transactional_id_copies_exactly_once(endpoint, request, tmp_path, big):
    n = record_count(300, big)
    source, sink, inputs = _topics(endpoint, request.node.nodeid, n)
    txn_id = f"{sink}-txn"

    first = Worker(endpoint, source, sink, txn_id, "--batch", "10", "--hold-open-after", "3", log_dir=str(tmp_path))
    first.wait_for("HOLDING")  # three transactions committed, the fourth's records written and open
    first.kill()
    second = Worker(endpoint, source, sink, txn_id, "--batch", "10", log_dir=str(tmp_path))
    second.finish()  # its init_transactions fenced the dead one and aborted its open transaction

    _assert_clean_end(endpoint, sink, inputs, [txn_id])
    everything = read_values(endpoint.bootstrap, sink, 3, n, isolation="read_uncommitted")
    assert len(everything) > n  # the open transaction's records reached the log, and stayed unseen


def test_kill_9_of_the_server_mid_stream_and_a_restart_on_the_same_data(own_endpoint, request, tmp_path, big):
    endpoint = own_endpoint
    n = record_count(300, big)
    source, sink, inputs = _topics(endpoint, request.node.nodeid, n)
    txn_id = f"{sink}-txn"

    # --no-rebootstrap: librdkafka's re-bootstrap after its only broker went down leaves
    # send_offsets_to_transaction waiting forever (see ctp_worker._client_config). Should a worker
    # be stuck otherwise (ctp_worker._watchdog), or its producer hit a fatal error, it exits
    # STUCK_EXIT and is started again with its transactional.id, as an operator would
    options = ("--batch", "10", "--pause-ms", "100", "--exit-if-stuck-s", "60", "--transaction-timeout-ms", "60000")
    options += ("--no-rebootstrap",)
    worker = Worker(endpoint, source, sink, txn_id, *options, log_dir=str(tmp_path))
    worker.wait_for("COMMITTED 3")
    endpoint.kill()
    killed_at = time.monotonic()
    endpoint.start()  # same data, same port: the client reconnects to it
    runs = [worker]
    while runs[-1].proc.wait(WAIT_S) == STUCK_EXIT and len(runs) < MAX_RUNS:
        runs.append(Worker(endpoint, source, sink, txn_id, *options, log_dir=str(tmp_path)))
    runs[-1].finish()

    # the process that saw the crash reconnected: a transaction it began once the server was
    # dead was committed by the restarted one
    assert worker.commits_begun_after(killed_at) > 0, f"{[run.lines[-2:] for run in runs]}\n{worker.log()}"
    _assert_clean_end(endpoint, sink, inputs, [txn_id])


def test_transactional_consumers_join_and_leave_one_group(endpoint, request, tmp_path, big):
    n = record_count(600, big)
    source, sink, inputs = _topics(endpoint, request.node.nodeid, n)
    ids = [f"{sink}-txn-{i}" for i in range(4)]
    pace = ("--batch", "5", "--pause-ms", "100")

    def start(i: int, *options: str) -> Worker:
        return Worker(endpoint, source, sink, ids[i], *pace, *options, log_dir=str(tmp_path))

    workers = [start(0), start(1), start(2, "--hold-open-after", "2")]
    workers[2].wait_for("HOLDING")
    workers[2].kill()  # leaves with a transaction open: the broker aborts it at its timeout (10 s)
    workers.append(start(3))  # joins mid-stream
    for worker in (workers[0], workers[1], workers[3]):
        worker.finish()

    _assert_clean_end(endpoint, sink, inputs, ids)
