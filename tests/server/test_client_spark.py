"""Spark's own Kafka source (spark-sql-kafka-0-10, from Maven Central) reads a topic through the
server with kafka.isolation.level=read_committed, and equals txlog's Spark source reading the
same data directory (a txlog store behind `txlog serve`; the broker's own log directory, which
txlog reads as a Kafka data directory). Slow (a Spark session in a child process): one test,
small data."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.server.client_checks import input_values, produce_inputs, write_aborted
from tests.server.endpoints import topic_name

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPARK_TIMEOUT_S = 900


def test_spark_kafka_source_reads_committed_records_as_txlogs_source_does(endpoint, request):
    topic = topic_name(request.node.nodeid, "t")
    endpoint.create_topic(topic, 3)
    first = produce_inputs(endpoint.bootstrap, topic, 30)
    write_aborted(endpoint.bootstrap, topic, ["aborted"] * 6)
    produce_inputs(endpoint.bootstrap, topic, 6)  # committed records after the aborted ones

    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    command = [sys.executable, "-m", "tests.server.spark_kafka_read", endpoint.bootstrap, topic, endpoint.data_dir]
    result = subprocess.run(command, capture_output=True, text=True, timeout=SPARK_TIMEOUT_S, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    answer = json.loads(result.stdout.strip().splitlines()[-1])

    values = [row[3] for row in answer["kafka"]]
    assert sorted(values) == sorted(first + input_values(6))  # the aborted six are not there
    # offsets jump over the aborted records and their markers: they were written
    assert max(row[1] for row in answer["kafka"]) >= 30 // 3 + 6 // 3 + 2
    assert answer["txlog"] == answer["kafka"]
