"""Transaction analysis with Spark: a store's records, batches and coordinator history as DataFrames.

    python3 samples/spark_analysis.py [STORE]

Fills STORE (default: a new temporary directory) with orders written by three
transactional producers that commit, abort and time out at different rates, then asks
the questions txlog's Spark views are for: what each isolation level sees, the abort
rate per producer (from the ABORT/COMMIT markers of `view=batches`) and how long
transactions stayed open (from the `__transaction_state` history of
`view=transactions`). Needs the `spark` extra and a Java runtime.
"""

from __future__ import annotations

import sys
import tempfile

import txlog
import txlog.spark

PRODUCERS = {"checkout": 0.0, "billing": 0.25, "flaky": 0.5}  # transactional id -> share of aborts


def fill(path: str) -> None:
    """Twenty transactions per producer, each aborted with that producer's probability (deterministically)."""
    with txlog.Admin(path) as admin:
        if "orders" in admin.list_topics():
            return
        admin.create_topic("orders", 3)
    for tid, abort_share in PRODUCERS.items():
        with txlog.Producer(path, transactional_id=tid) as producer:
            producer.init_transactions()
            for n in range(20):
                producer.begin_transaction()
                for i in range(5):
                    producer.send("orders", f"{tid}-{n}-{i}".encode(), key=f"{n}".encode())  # one partition per txn
                producer.flush()
                if (n % 4) < abort_share * 4:
                    producer.abort_transaction()
                else:
                    producer.commit_transaction()


def main(path: str) -> None:
    fill(path)
    spark = txlog.spark.local_session("local[2]", app_name="txlog-sample")
    # txlog.spark.read: the records by the JVM reader (format "txlog_jvm") when the session has its jar
    committed = txlog.spark.read(spark, path, subscribe="orders").count()
    everything = txlog.spark.read(spark, path, subscribe="orders", **{"isolation.level": "read_uncommitted"}).count()
    print(f"orders: {committed} committed records, {everything} written")

    # the views are the Python source's: format "txlog", which txlog.spark.read uses for them too
    spark.read.format("txlog").option("view", "batches").load(path).createOrReplaceTempView("batches")
    print("abort rate per producer:")
    spark.sql("""
        SELECT producerId, count(*) AS transactions,
               round(avg(CASE WHEN controlType = 'ABORT' THEN 1.0 ELSE 0.0 END), 2) AS abortRate
        FROM batches WHERE topic = 'orders' AND isControl
        GROUP BY producerId ORDER BY producerId
    """).show()

    spark.read.format("txlog").option("view", "transactions").load(path).createOrReplaceTempView("txns")
    print("how long transactions stayed open, per transactional id (ms):")
    spark.sql("""
        SELECT transactionalId, state, count(*) AS n,
               max(unix_millis(transactionLastUpdateTimestamp) - unix_millis(transactionStartTimestamp)) AS maxOpenMs
        FROM txns WHERE state IN ('CompleteCommit', 'CompleteAbort')
        GROUP BY transactionalId, state ORDER BY transactionalId, state
    """).show()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="txlog-spark-sample-") + "/store")
