"""A Spark job writing to txlog in its own process, with faults injected from outside the product.

Run by tests/spark/test_spark_write_faults.py as `python spark_write_worker.py SPEC_JSON`; the
test starts it in a new session (process group) so a kill -9 takes the driver's Python, its JVM
and the JVM's Python workers together, as a machine losing the driver would.

Modes (SPEC["mode"]):
  batch   rows generated from SPEC["rows"] and SPEC["partitions"] (row i -> Spark partition and
          txlog partition i * partitions // rows, so each Spark task writes one txlog partition
          in input order), written with df.write.format("txlog").mode("append").
  stream  the topic SPEC["input"] of the store read with readStream.format("txlog")
          (read_committed, maxOffsetsPerTrigger), value upper-cased, key (and, with
          SPEC["keep_partition"], partition) kept, written with writeStream.format("txlog")
          and a checkpoint; trigger availableNow (runs to the end, exits 0) or continuous
          (processingTime 0, runs until killed).

Faults (SPEC["fault"]), injected by registering a subclass of txlog's data source under the
same format name, defined here in __main__ so Spark's cloudpickle ships it by value to the
Python processes where the writer runs: the commit runs in a Python worker the driver's JVM
starts (pyspark/sql/worker/commit_data_source_write.py and python_streaming_sink_runner.py),
not in this process, so patching txlog.spark.writer here would not reach it.
  kill_commit: "entry"        SIGKILL the driver when the writer's commit is entered (all tasks
                               have succeeded and prepared; nothing decided yet)
               "after_first"  SIGKILL the driver right after the commit completed its first
                               prepared transaction (the decision is taken, some transactions
                               are still prepared)
  kill_batch: the micro-batch whose commit is killed (streams; default 0)
  fail_partitions {"<task partition>": "raise" | "kill"}, fail_after: the first attempt of
               those task partitions hands `fail_after` Arrow batches (or all, if fewer) to the
               writer, which sends them, then raises or SIGKILLs its own Python worker instead of
               ending the input; later attempts run normally
  zombie_partitions {"<task partition>": "fenced" | "prepared"}: attempt 0 of that task
               partition forks a copy of itself that keeps writing the same task partition (the
               same transactional id) while Spark runs attempt 1: a duplicate attempt writing
               concurrently. "fenced": the copy writes half, waits until attempt 1 has sent its
               first batch, then writes the rest and tries to prepare. "prepared": the copy
               writes and prepares everything before attempt 1 starts. Attempt 1 reports
               success only after the copy is done (its outcome is marked zombie-p<n>-<outcome>).

Every writer call leaves a marker file in SPEC["marks"] (write-<stage>-<partition>-<attempt>,
commit-..., killed-..., zombie-...), so the test can check that the fault really happened.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid

#: The job and its faults (filled by main() from argv; captured by value with the functions shipped to Spark).
SPEC: dict = {}
#: The option naming a batch write so that re-running it is a no-op (WRITER's name for it).
QUERY_ID_OPTION = "queryId"


def mark(name: str, text: str = "") -> None:
    """Leave a marker file (unique name: several processes may mark the same event)."""
    with open(os.path.join(SPEC["marks"], f"{name}.{uuid.uuid4().hex[:8]}"), "w") as f:
        f.write(text)


def marked(prefix: str) -> bool:
    return any(n.startswith(prefix) for n in os.listdir(SPEC["marks"]))


def kill_driver(fault: dict, why: str) -> None:
    """SIGKILL the driver's whole process group (Python driver + JVM), then this worker's own group."""
    mark(f"killed-{why}")
    os.killpg(fault["driver_pgid"], signal.SIGKILL)
    os.killpg(os.getpgrp(), signal.SIGKILL)  # pyspark.daemon's group (daemon.py calls setpgid)


# ---- the faulty writer: a subclass of whatever class the source's writer()/streamWriter() returns ----


def _commit(self, messages, *batch_id):
    """The writer's commit (batch: (messages); stream: (messages, batchId)), killed where asked."""
    fault = type(self)._fault
    batch = batch_id[0] if batch_id else None
    mark(f"commit-{batch}")
    where = fault.get("kill_commit")
    if where and (batch is None or batch == fault.get("kill_batch", 0)):
        if where == "entry":
            kill_driver(fault, "entry")
        elif where == "after_first":
            _kill_after_first_completion(fault)
    return type(self)._base.commit(self, messages, *batch_id)


def _kill_after_first_completion(fault: dict) -> None:
    """Make the first completed prepared transaction of this (commit) process kill the driver."""
    from txlog.clients.producer import Producer

    complete = Producer.complete_transaction

    def complete_then_kill(producer, state):
        complete(producer, state)
        kill_driver(fault, "after-first")

    Producer.complete_transaction = complete_then_kill


def _write(self, iterator):
    from pyspark import TaskContext

    fault = type(self)._fault
    ctx = TaskContext.get()
    partition, attempt = ctx.partitionId(), ctx.attemptNumber()
    mark(f"write-{ctx.stageId()}-{partition}-{attempt}")
    fail = fault.get("fail_partitions", {}).get(str(partition))
    if attempt == 0 and fail:
        iterator = _fail_after(iterator, fault.get("fail_after", 2), fail)
    zombie = fault.get("zombie_partitions", {}).get(str(partition))
    if zombie and attempt == 0:
        _fork_zombie_then_fail(self, iterator, partition, zombie)
    if zombie:
        iterator = _mark_when_started(iterator, partition, attempt)
    message = type(self)._base.write(self, _count_rows(iterator, ctx.stageId(), partition, attempt))
    if zombie:
        _wait_for(f"zombie-p{partition}-")  # the copy is done before this attempt reports success
    return message


def _count_rows(iterator, stage: int, partition: int, attempt: int):
    """Pass the batches through; mark how many rows this attempt handed to the writer."""
    rows = 0
    for batch in iterator:
        rows += batch.num_rows
        yield batch
    mark(f"rows-{stage}-{partition}-{attempt}", str(rows))


def _fail_after(iterator, n: int, kind: str):
    """Hand the writer `n` batches (all of them if it has fewer: a stream's tasks may get one), then
    fail the task attempt when the writer asks for more, before it can prepare."""
    for i, batch in enumerate(iterator):
        if i == n:
            break
        yield batch
    mark(f"failed-attempt-{kind}")
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)  # the task's Python worker dies mid-transaction
    raise RuntimeError("injected task failure (first attempt)")


def _mark_when_started(iterator, partition: int, attempt: int):
    """A later attempt: mark once the writer has asked for a second batch, by when its producer is
    initialised (it sent the first), so the copy of attempt 0 goes on only after it was fenced."""
    for i, batch in enumerate(iterator):
        if i == 1:
            mark(f"attempt-started-p{partition}", str(attempt))
        yield batch


def _wait_for(prefix: str, seconds: float = 120.0) -> bool:
    deadline = time.monotonic() + seconds
    while not marked(prefix):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _fork_zombie_then_fail(self, iterator, partition: int, mode: str) -> None:
    """Attempt 0: leave a copy of itself writing this task partition, and fail so Spark runs attempt 1."""
    batches = list(iterator)
    half = max(1, len(batches) // 2)
    pid = os.fork()
    if pid == 0:  # the duplicate attempt: the same task context, the same transactional id
        outcome = "ok"
        try:
            type(self)._base.write(self, _zombie_batches(batches, half, partition, mode))
        except BaseException as e:  # noqa: BLE001 - the outcome is the marker
            outcome = type(e).__name__
        mark(f"zombie-p{partition}-{outcome}")
        os._exit(0)
    # "prepared": the copy's write returned (it prepared) before attempt 1 may start
    _wait_for(f"zombie-p{partition}-" if mode == "prepared" else f"zombie-half-p{partition}")
    raise RuntimeError("injected failure of attempt 0 (its copy keeps writing)")


def _zombie_batches(batches, half: int, partition: int, mode: str):
    for i, batch in enumerate(batches):
        if i == half and mode == "fenced":
            mark(f"zombie-half-p{partition}")
            _wait_for(f"attempt-started-p{partition}")
        yield batch


def faulty(writer, fault: dict):
    """`writer` re-classed as a subclass defined here (shipped by value), committing/writing with faults."""
    base = type(writer)
    cls = type(
        "Faulty" + base.__name__,
        (base,),
        {"__module__": "__main__", "_base": base, "_fault": fault, "commit": _commit, "write": _write},
    )
    writer.__class__ = cls
    return writer


def register_faulty_source(spark, fault: dict) -> None:
    from txlog.spark.source import TxlogDataSource

    class FaultySource(TxlogDataSource):
        def writer(self, schema, overwrite):
            return faulty(super().writer(schema, overwrite), fault)

        def streamWriter(self, schema, overwrite):
            return faulty(super().streamWriter(schema, overwrite), fault)

    spark.dataSource.register(FaultySource)


# ---- the jobs ----------------------------------------------------------------------------------------


def session():
    import txlog.spark

    conf = {"spark.task.maxFailures": "4", "spark.sql.execution.arrow.maxRecordsPerBatch": "16"}
    conf.update(SPEC.get("conf", {}))
    spark = txlog.spark.local_session(SPEC.get("master", "local[2]"), app_name="txlog-write-faults", extra_conf=conf)
    fault = dict(SPEC.get("fault") or {})
    if fault:
        fault["driver_pgid"] = os.getpgrp()
        register_faulty_source(spark, fault)
    return spark


def batch_rows(n: int, partitions: int) -> list[tuple]:
    """(key, value, partition) of row i; the partition is the Spark slice `parallelize` puts it in."""
    return [(f"k{i:06d}", f"v{i}", i * partitions // n) for i in range(n)]


def run_batch(spark, spec: dict) -> None:
    """The batch job of `spec` (also run by the tests in their own session, for the runs without faults)."""
    n, partitions = spec["rows"], spec["partitions"]
    rdd = spark.sparkContext.parallelize(batch_rows(n, partitions), partitions)
    df = spark.createDataFrame(rdd, "key string, value string, partition int")
    writer = df.write.format("txlog").option("topic", spec["topic"]).mode("append")
    if spec.get("query_id"):
        writer = writer.option(QUERY_ID_OPTION, spec["query_id"])
    writer.save(spec["store"])


def run_stream(spark, spec: dict) -> None:
    """The streaming job of `spec` (also run by the tests in their own session, for the runs without faults)."""
    columns = ["key", "upper(cast(value as string)) as value"]
    if spec.get("keep_partition"):
        columns.append("partition")
    source = (
        spark.readStream.format("txlog")
        .option("subscribe", spec["input"])
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(spec.get("per_trigger", 40)))
        .load(spec["store"])
        .selectExpr(*columns)
    )
    writer = source.writeStream.format("txlog").option("topic", spec["topic"])
    writer = writer.option("checkpointLocation", spec["checkpoint"])
    if spec.get("until_killed"):
        writer = writer.trigger(processingTime="0 seconds")
    else:
        writer = writer.trigger(availableNow=True)
    query = writer.start(spec["store"])
    print("started", flush=True)
    query.awaitTermination()
    if query.exception() is not None:
        raise query.exception()


def main() -> None:
    SPEC.update(json.loads(sys.argv[1]))
    spark = session()
    print("session", flush=True)
    {"batch": run_batch, "stream": run_stream}[SPEC["mode"]](spark, SPEC)
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
