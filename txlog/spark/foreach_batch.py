"""`txlog.spark.write_batch`: the exactly-once sink for `foreachBatch` users.

It drives the `txlog` format's batch writer (txlog/spark/writer.py) with the query id and batch id
as options, so it has the same transactions and the same replay guard as `df.write`; this module
imports no Spark itself, so `import txlog.spark` stays free of it.
"""

from __future__ import annotations

from txlog.errors import IllegalArgumentError
from txlog.spark.options import FORMAT


def write_batch(df, batch_id: int, *, query_id: str, path: str, topic: str | None = None) -> None:
    """Write `df` as batch `batch_id` of query `query_id`, exactly once: a second call with the same
    (query id, batch id) - the micro-batch `foreachBatch` replays after a restart - writes nothing.

        def to_txlog(df, batch_id):
            txlog.spark.write_batch(df, batch_id, query_id="orders-out", path=store, topic="out")

        stream.writeStream.foreachBatch(to_txlog).option("checkpointLocation", ck).start()

    The batches of one query id must come in increasing order: a batch id at or below the latest
    decided one counts as decided (as Delta's txnVersion and Iceberg's checkpoint id do).
    `df`'s session must have the txlog source registered (txlog.spark.register).
    """
    if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
        raise IllegalArgumentError(f"batch_id must be an int >= 0, not {batch_id!r}")
    writer = df.write.format(FORMAT).mode("append").option("queryId", query_id).option("batchId", str(batch_id))
    if topic is not None:
        writer = writer.option("topic", topic)
    writer.save(path)
