"""Read one topic with Spark's own Kafka source through a bootstrap address (read_committed), and
optionally with txlog's Spark source from a data directory; print both as JSON on stdout.

A child process of tests/server/test_client_spark.py: the connector's jars must be on
`spark.jars` when the session starts, and the test run's shared session may have started without
them.

    python3 -m tests.server.spark_kafka_read BOOTSTRAP TOPIC [DATA_DIR]
"""

from __future__ import annotations

import json
import sys

from tests.server.spark_kafka_dist import jars


def _rows(df) -> list[list]:
    rows = df.selectExpr("partition", "offset", "CAST(key AS STRING)", "CAST(value AS STRING)").collect()
    return sorted([list(row) for row in rows])


def main(argv: list[str]) -> int:
    import txlog.spark

    bootstrap, topic = argv[0], argv[1]
    spark = txlog.spark.local_session(
        "local[2]", app_name="spark-kafka-source", extra_conf={"spark.jars": ",".join(jars())}
    )
    try:
        kafka_df = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .option("kafka.isolation.level", "read_committed")
            .load()
        )
        answer = {"kafka": _rows(kafka_df)}
        if len(argv) > 2:
            answer["txlog"] = _rows(
                txlog.spark.read(
                    spark,
                    argv[2],
                    subscribe=topic,
                    startingOffsets="earliest",
                    endingOffsets="latest",
                    **{"kafka.isolation.level": "read_committed"},
                )  # fmt: skip
            )
    finally:
        spark.stop()
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
