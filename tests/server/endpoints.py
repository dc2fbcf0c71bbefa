"""A Kafka-protocol server for the end-to-end client tests: the real Kafka 4.4 broker or `txlog serve`.

The same test runs against both (issue 22: every client test that passes against the broker must
pass against txlog), so it sees only what they share: a bootstrap address, topic creation, and the
process's life (stop, kill -9, start again on the same data and port).
"""

from __future__ import annotations

import os
import re
import subprocess

from storage import Store
from tests.kafka_rig.broker import KafkaBroker
from tests.kafka_rig.kafka_dist import run_tool
from tests.server.serve_process import ServeProcess

# Kafka's tools address a broker by node id (find-hanging --broker-id); both servers are node 1
# (tests/kafka_rig/broker.py BASE_PROPS, txlog/server/broker.py NODE_ID).
NODE_ID = 1


class Endpoint:
    """One server as the tests see it; `kind` is "kafka" or "txlog"."""

    kind: str

    @property
    def bootstrap(self) -> str:
        raise NotImplementedError

    def create_topic(self, name: str, partitions: int = 1) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        """The controlled shutdown (SIGTERM)."""
        raise NotImplementedError

    def kill(self) -> None:
        """kill -9 of the server process."""
        raise NotImplementedError

    def start(self) -> None:
        """Start again on the same data and the same port, after stop() or kill()."""
        raise NotImplementedError

    def tool(self, main_class: str, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
        """One of Kafka's Java tools against this server (`--bootstrap-server` first); it must succeed."""
        return run_tool(main_class, "--bootstrap-server", self.bootstrap, *args, input=input)

    def hanging_transactions(self) -> list[str]:
        """The rows of `kafka-transactions.sh find-hanging --broker-id 1` (its header line dropped)."""
        out = self.tool("org.apache.kafka.tools.TransactionsCommand", "find-hanging", "--broker-id", str(NODE_ID))
        return _table_rows(out.stdout)

    def transaction_states(self) -> dict[str, str]:
        """`kafka-transactions.sh list`: transactional id -> state (Ongoing, CompleteCommit, ...)."""
        out = self.tool("org.apache.kafka.tools.TransactionsCommand", "list")
        return {row.split()[0]: row.split()[3] for row in _table_rows(out.stdout)}


class KafkaEndpoint(Endpoint):
    """The rig's broker; restarts keep its log directory and ports (tests/kafka_rig/broker.py)."""

    kind = "kafka"

    def __init__(self, broker: KafkaBroker):
        self.broker = broker

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    @property
    def data_dir(self) -> str:
        return self.broker.log_dir

    def create_topic(self, name: str, partitions: int = 1) -> None:
        self.broker.create_topic(name, partitions)

    def stop(self) -> None:
        self.broker.stop()

    def kill(self) -> None:
        self.broker.kill()

    def start(self) -> None:
        self.broker.start()


class TxlogEndpoint(Endpoint):
    """`txlog serve` on a fresh store; topics are made in the store itself, which the server shares."""

    kind = "txlog"

    def __init__(self, server: ServeProcess):
        self.server = server

    @property
    def bootstrap(self) -> str:
        return self.server.bootstrap

    @property
    def data_dir(self) -> str:
        return self.server.data_dir

    def create_topic(self, name: str, partitions: int = 1) -> None:
        store = Store.open(self.server.data_dir)
        try:
            store.create_topic(name, partitions)
        finally:
            store.close()

    def stop(self) -> None:
        self.server.stop()

    def kill(self) -> None:
        self.server.kill()

    def start(self) -> None:
        self.server.start()


def _table_rows(text: str) -> list[str]:
    """The data rows of a Kafka tool's tab-separated table: non-blank lines after the header."""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[1:]


def topic_name(node_id: str, suffix: str) -> str:
    """A legal topic name unique to a test (its pytest node id) and a role (Kafka allows
    [A-Za-z0-9._-], at most 249 characters)."""
    base = re.sub(r"[^A-Za-z0-9._-]", "-", node_id.removeprefix("tests/server/test_"))[-200:]
    return f"{base}-{suffix}-{os.getpid()}"
