"""`txlog.spark.read`: batch reads of a store, by the JVM reader where the session has it.

Two formats, each a reader of its own, and no patch of PySpark:

* `"txlog"` is the Python data source (txlog/spark/source.py): every view, batch and
  streaming, on any session where `register()` ran.
* `"txlog_jvm"` (jvm_build.JVM_FORMAT) is the JVM reader (org.txlog.spark.TxlogJvmSource,
  registered under that name by the jar's META-INF/services): batch reads of the record view,
  executing a plan given as the option `txlog.plan`.

`read(spark, path, **options)` takes the `"txlog"` source's options, plans here and loads
`"txlog_jvm"` with the plan when the session has the jar on its classpath (local_session puts
it there) and the view is the records; otherwise, or with `spark.txlog.reader=python`, it loads
`"txlog"`. One planner: txlog/scan/planning.py decides the ranges, their ends (the LSO under
read_committed) and the aborted transactions of each, exactly as it does for the Python source;
`plan_json` hands that plan over. The JVM side only walks the planned bytes, drops control
batches and skips a transactional batch that one of the plan's aborted transactions spans.

Why the plan is made here, in the driver's Python: the planner is Python, and the Python Data
Source API runs a source's methods in Python workers, which cannot hand a read over to a JVM
class. A consequence: a DataFrame of the JVM reader has its plan fixed when `read()` runs, so it
reads the same offsets in every action (the Python source plans again for each action).
"""

from __future__ import annotations

import json
import threading
import warnings
from typing import Any

from txlog.scan.planning import OffsetRange
from txlog.spark.jvm_build import JVM_FORMAT, PROVIDER_CLASS, JarBuildError, jar_path
from txlog.spark.options import FORMAT, SourceOptions, parse_options, plan_batch
from txlog.spark.schemas import record_schema

#: Session conf choosing the reader of `read()`'s record reads: "jvm" (the default: the JVM
#: reader when the session has its jar) or "python" (always the Python source).
READER_CONF = "spark.txlog.reader"
PLAN_OPTION = "txlog.plan"

_warned = False
_warn_lock = threading.Lock()


def read(spark, path: str | None = None, /, **options: Any):
    """A batch DataFrame of the store at `path`, with the `"txlog"` source's options (docs/spark.md).

    Options are keywords as Spark spells them (`subscribe="orders"`, `startingOffsets=...`);
    names with a dot go through a dict: `**{"isolation.level": "read_uncommitted"}`. Values
    are passed as PySpark's `option()` passes them (booleans as "true"/"false", None left out).
    The record view is read by the JVM reader when `jvm_available(spark)`, else, like the
    batches and transactions views, by the Python source. A bad option raises
    IllegalArgumentError here, before Spark is asked anything.
    """
    text = {str(k): (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in options.items() if v is not None}
    if path is not None:
        text["path"] = str(path)
    parsed = parse_options(text, streaming=False)
    if parsed.view == "records" and jvm_available(spark):
        return spark.read.format(JVM_FORMAT).option(PLAN_OPTION, plan_json(parsed)).load()
    # source.py imports pyspark's data source API: only once there is a session
    from txlog.spark.source import TxlogDataSource

    schema = TxlogDataSource(text).schema()  # known here: giving it spares Spark a round trip to a Python worker
    location = text.pop("path")
    return spark.read.format(FORMAT).schema(schema).options(**text).load(location)


def jvm_available(spark) -> bool:
    """Whether `read()` gives `spark`'s record reads to the JVM reader: its class is loadable
    and spark.txlog.reader is not "python".

    The jar must be on the session's classpath from its start (spark.jars, as local_session
    sets it); a session started without it reads with the Python source, with the one warning.
    """
    if (spark.conf.get(READER_CONF, None) or "").lower() == "python":
        return False
    jvm = spark.sparkContext._jvm
    if bool(jvm.org.apache.spark.util.Utils.classIsLoadable(PROVIDER_CLASS)):
        return True
    warn_python_fallback("the session was started without the jar on spark.jars")
    return False


def plan_json(options: SourceOptions) -> str:
    """The batch plan of `options` as the JVM reader's JSON (see Plan.java)."""
    return json.dumps(
        {
            "schema": record_schema(
                include_headers=options.include_headers, include_transaction_columns=options.include_transaction_columns
            ),
            "failOnDataLoss": options.fail_on_data_loss,
            "ranges": [_range_json(r) for r in plan_batch(options)],
        }
    )


def _range_json(r: OffsetRange) -> dict[str, Any]:
    return {
        "topic": r.topic,
        "partition": r.partition,
        "start": r.start,
        "end": r.end,
        "committedOnly": r.committed_only,
        # (producer id, first offset, ABORT marker offset): all the JVM knows of a transaction
        "aborted": [[t.producer_id, t.first_offset, t.last_offset] for t in r.aborted],
        # where to read, and which file the positions are true of (storage/extent.py; Plan.java's Extent)
        "extents": [
            [
                e.log_path,
                e.base_offset,
                e.start_position,
                e.end_position,
                e.start_offset,
                e.end_offset,
                e.device,
                e.inode,
                e.first_base_offset,
                e.first_crc,
            ]
            for e in r.extents
        ],
    }


def warn_python_fallback(reason: str) -> None:
    """Say once per process that record reads use the (slower) Python source, and why."""
    global _warned
    with _warn_lock:
        if _warned:
            return
        _warned = True
    warnings.warn(
        f"txlog: the JVM reader is not available ({reason}); txlog.spark.read uses the "
        f"Python source, several times slower. Install a JDK with javac (e.g. openjdk-17-jdk-headless) "
        f"and start the session with txlog.spark.local_session(), or spark.jars set to "
        f"txlog.spark.jvm_build.jar_path()",
        RuntimeWarning,
        stacklevel=4,
    )  # the caller of local_session, register or read


def try_jar_path() -> str | None:
    """The built jar, or None (with the one warning) when there is no JDK or the build fails."""
    try:
        return jar_path()
    except (JarBuildError, OSError) as exc:  # OSError: e.g. a cache directory that cannot be written
        warn_python_fallback(str(exc))
        return None
