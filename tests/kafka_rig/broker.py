"""A real Apache Kafka broker on loopback: one KRaft node (broker and controller), free ports.

This is the differential oracle of the test suite (issue 21): data a real broker wrote, and its
own tools' answers, against txlog's. It is a test dependency only. The jars come from
tests/kafka_rig/kafka_dist.py (Maven, cached outside the repository).

The settings are those a single-node cluster needs to run transactions and groups at all
(replication factor and min ISR of the internal topics at 1: Kafka's defaults of 3 and 2 make
InitProducerId wait forever on one broker) plus fast group joins. Topics that need small segments
or compaction get them as topic configs (`create_topic(..., configs=...)`).

As a script it starts a broker for benchmarks and manual runs, prints one line
`bootstrap 127.0.0.1:PORT` and runs until SIGINT/SIGTERM:

    python3 -m tests.kafka_rig.broker [WORK_DIR]
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping

from tests.kafka_rig.kafka_dist import KafkaDistError, classpath, java, run_tool

# Kafka's own log line once the broker serves requests (KafkaRaftServer.startup).
STARTED_LINE = "Kafka Server started"
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 60.0

BASE_PROPS: dict[str, str] = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "num.partitions": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    # the cleaner runs soon after a segment rolls, so compaction tests need not wait long
    "log.cleaner.backoff.ms": "500",
    "auto.create.topics.enable": "false",
}

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka-request.name = kafka.request.logger
logger.kafka-request.level = WARN
"""


def free_port() -> int:
    """A loopback port nobody listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class KafkaBroker:
    """One broker process with its own work directory (`log_dir` holds its data)."""

    def __init__(self, work_dir: str, props: Mapping[str, str] | None = None, heap: str = "512m"):
        self.work_dir = os.path.abspath(work_dir)
        self.log_dir = os.path.join(self.work_dir, "data")
        self.port = free_port()
        self.controller_port = free_port()
        self.props = {**BASE_PROPS, **(props or {})}
        self.heap = heap
        self.process: subprocess.Popen | None = None
        self.started_in_s: float | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def server_log(self) -> str:
        return os.path.join(self.work_dir, "server.log")

    def start(self) -> KafkaBroker:
        """Format the KRaft log directory, start the broker and wait until it serves requests."""
        os.makedirs(self.log_dir, exist_ok=True)
        config = self._write_config()
        began = time.monotonic()
        # a restart (after stop() or kill()) keeps the formatted log directory, as a real broker's does
        if not os.path.exists(os.path.join(self.log_dir, "meta.properties")):
            cluster_id = run_tool("kafka.tools.StorageTool", "random-uuid").stdout.strip().splitlines()[-1]
            run_tool("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", config, "--standalone")
        log4j = os.path.join(self.work_dir, "log4j2.properties")
        with open(log4j, "w") as f:
            f.write(LOG4J2.format(path=self.server_log))
        command = [
            java(),
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            classpath(),
            "kafka.Kafka",
            config,
        ]
        seen = _count(self.server_log, STARTED_LINE)  # a restart appends to the first start's log
        with open(os.path.join(self.work_dir, "stdout.log"), "ab") as stdout:
            self.process = subprocess.Popen(command, stdout=stdout, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_started(began, seen)
        return self

    def _write_config(self) -> str:
        props = {
            **self.props,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "log.dirs": self.log_dir,
        }
        path = os.path.join(self.work_dir, "server.properties")
        with open(path, "w") as f:
            f.writelines(f"{key}={value}\n" for key, value in props.items())
        return path

    def _wait_started(self, began: float, seen: int) -> None:
        assert self.process is not None
        deadline = began + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise KafkaDistError(f"the broker exited {self.process.returncode} while starting:\n{self._log_tail()}")
            if _count(self.server_log, STARTED_LINE) > seen:
                self.started_in_s = time.monotonic() - began
                return
            time.sleep(0.2)
        self.stop()
        raise KafkaDistError(f"the broker did not start within {START_TIMEOUT_S:.0f} s:\n{self._log_tail()}")

    def _log_tail(self, lines: int = 40) -> str:
        text = ""
        for name in ("stdout.log", "server.log"):
            try:
                with open(os.path.join(self.work_dir, name), errors="replace") as f:
                    text += "".join(f.readlines()[-lines:])
            except FileNotFoundError:
                pass
        return text

    def stop(self) -> None:
        """A controlled shutdown (SIGTERM, as kafka-server-stop.sh sends): segments, indexes and
        producer snapshots are flushed and the clean-shutdown marker written; SIGKILL if it hangs."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def kill(self) -> None:
        """kill -9: the crash; start() then recovers the same log directory on the same ports."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def rss_mb(self) -> float:
        """The broker process's resident memory now, in MiB (from /proc)."""
        assert self.process is not None
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def create_topic(self, name: str, partitions: int = 1, configs: Mapping[str, str] | None = None) -> None:
        """Create a topic with Kafka's own kafka-topics tool (TopicCommand)."""
        args = ["--bootstrap-server", self.bootstrap, "--create", "--topic", name, "--partitions", str(partitions)]
        for key, value in (configs or {}).items():
            args += ["--config", f"{key}={value}"]
        run_tool("org.apache.kafka.tools.TopicCommand", *args)

    def partition_dir(self, topic: str, partition: int = 0) -> str:
        return os.path.join(self.log_dir, f"{topic}-{partition}")


def _count(path: str, needle: str) -> int:
    try:
        with open(path, errors="replace") as f:
            return f.read().count(needle)
    except FileNotFoundError:
        return 0


def main(argv: list[str]) -> int:
    work_dir = argv[0] if argv else tempfile.mkdtemp(prefix="kafka-broker.")
    broker = KafkaBroker(work_dir)
    try:
        broker.start()
    except KafkaDistError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    print(f"bootstrap {broker.bootstrap}", flush=True)
    print(f"log.dirs {broker.log_dir} (started in {broker.started_in_s:.1f} s)", file=sys.stderr, flush=True)
    stop = False

    def _stop(signum, frame) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    while not stop and broker.process is not None and broker.process.poll() is None:
        time.sleep(0.5)
    broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
