"""The JVM reader's Python half: the plan it executes, and routing `format("txlog")` batch reads to it.

One planner: txlog/spark/planning.py decides the ranges, their ends (the LSO under
read_committed) and the aborted transactions of each, exactly as it does for the Python
source; `plan_json` hands that plan to the JVM provider (org.txlog.spark.TxlogJvmSource) as
the option `txlog.plan`. The JVM side only walks the planned bytes, drops control batches and
skips a transactional batch that one of the plan's aborted transactions spans.

Why routing lives here, in the driver's Python: the planner is Python, and the Python Data
Source API runs a source's methods in Python workers, which cannot hand a read over to a JVM
class. So on a session where the jar is loaded, `DataFrameReader.load` of format "txlog"
(record view, batch query, no user schema) plans here and loads the JVM provider with the
plan; everything else (streaming, the batches and transactions views, sessions without the
jar, or `spark.txlog.reader=python`) goes to the Python source untouched. A consequence: the
plan is fixed when `load()` runs, so one DataFrame reads the same offsets in every action.
"""

from __future__ import annotations

import json
import threading
import warnings
from typing import Any

from storage.log_files import log_file
from txlog.spark.jvm_build import PROVIDER_CLASS, JarBuildError, jar_path
from txlog.spark.options import FORMAT, SourceOptions, parse_options
from txlog.spark.planning import OffsetRange, plan_batch
from txlog.spark.schemas import record_schema

#: Session conf choosing the reader of batch record reads: "jvm" (set by register() when the jar
#: is on the session) or "python". Set it to "python" to force the Python source.
READER_CONF = "spark.txlog.reader"
PLAN_OPTION = "txlog.plan"

_warned = False
_warn_lock = threading.Lock()


def plan_json(options: SourceOptions) -> str:
    """The batch plan of `options` as the JVM reader's JSON (see Plan.java)."""
    return json.dumps({
        "schema": record_schema(include_headers=options.include_headers,
                                include_transaction_columns=options.include_transaction_columns),
        "failOnDataLoss": options.fail_on_data_loss,
        "ranges": [_range_json(r) for r in plan_batch(options)],
    })


def _range_json(r: OffsetRange) -> dict[str, Any]:
    return {
        "topic": r.topic, "partition": r.partition, "start": r.start, "end": r.end,
        "committedOnly": r.committed_only,
        # (producer id, first offset, ABORT marker offset): all the JVM knows of a transaction
        "aborted": [[t.producer_id, t.first_offset, t.last_offset] for t in r.aborted],
        "extents": [[log_file(e.directory, e.base_offset), e.base_offset, e.start_position, e.end_position]
                    for e in r.extents],
    }


def warn_python_fallback(reason: str) -> None:
    """Say once per process that batch reads use the (slower) Python source, and why."""
    global _warned
    with _warn_lock:
        if _warned:
            return
        _warned = True
    warnings.warn(f"txlog: the JVM reader is not available ({reason}); spark.read.format('txlog') uses the "
                  f"Python source, several times slower. Install a JDK with javac (e.g. openjdk-17-jdk-headless) "
                  f"and start the session with txlog.spark.local_session(), or spark.jars set to "
                  f"txlog.spark.jvm_build.jar_path()", RuntimeWarning, stacklevel=4)  # the caller of local_session or register


def try_jar_path() -> str | None:
    """The built jar, or None (with the one warning) when there is no JDK or the build fails."""
    try:
        return jar_path()
    except (JarBuildError, OSError) as exc:  # OSError: e.g. a cache directory that cannot be written
        warn_python_fallback(str(exc))
        return None


def enable(spark) -> bool:
    """Route `spark`'s batch record reads to the JVM reader if its class is loaded; True if routed.

    The jar must be on the session's classpath from its start (spark.jars, as local_session
    sets it); a session started without it keeps the Python source, with the one warning.
    """
    if (spark.conf.get(READER_CONF, None) or "").lower() == "python":
        return False
    jvm = spark.sparkContext._jvm
    loadable = bool(jvm.org.apache.spark.util.Utils.classIsLoadable(PROVIDER_CLASS))
    if not loadable:
        warn_python_fallback("the session was started without the jar on spark.jars")
        return False
    spark.conf.set(READER_CONF, "jvm")
    install_routing()
    return True


def install_routing() -> None:
    """Wrap PySpark's DataFrameReader once so `load()` of format "txlog" can go to the JVM reader."""
    from pyspark.sql.readwriter import DataFrameReader

    if getattr(DataFrameReader, "_txlog_routing", False):
        return
    original = {name: getattr(DataFrameReader, name) for name in ("format", "option", "options", "schema", "load")}

    def format(self, source):
        self.__dict__["_txlog_format"] = source
        return original["format"](self, source)

    def option(self, key, value):
        if value is not None:
            _recorded(self)[key] = value
        return original["option"](self, key, value)

    def options(self, **opts):
        _recorded(self).update({k: v for k, v in opts.items() if v is not None})
        return original["options"](self, **opts)

    def schema(self, schema):
        self.__dict__["_txlog_schema"] = True  # a user schema: the Python source decides what it means
        return original["schema"](self, schema)

    def load(self, path=None, format=None, schema=None, **opts):
        df = _routed(self, path, format, schema, opts)
        return df if df is not None else original["load"](self, path, format, schema, **opts)

    for name, fn in (("format", format), ("option", option), ("options", options), ("schema", schema),
                     ("load", load)):
        fn.__doc__ = original[name].__doc__
        setattr(DataFrameReader, name, fn)
    DataFrameReader._txlog_routing = True


def _recorded(reader) -> dict:
    return reader.__dict__.setdefault("_txlog_options", {})


def _routed(reader, path, fmt, schema, opts):
    """The JVM reader's DataFrame for a batch record read of format "txlog" on a routed session, else None."""
    source = fmt if fmt is not None else reader.__dict__.get("_txlog_format")
    if source is None or str(source).lower() != FORMAT or isinstance(path, (list, tuple)) \
            or schema is not None or "_txlog_schema" in reader.__dict__:
        return None
    spark = reader._spark
    if (spark.conf.get(READER_CONF, None) or "").lower() != "jvm":
        return None
    given = {**_recorded(reader), **{k: v for k, v in opts.items() if v is not None}}
    if path is not None:
        given["path"] = path
    text = {str(k): (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in given.items()}
    options = parse_options(text, streaming=False)
    if options.view != "records":
        return None
    return spark.read.format(PROVIDER_CLASS).option(PLAN_OPTION, plan_json(options)).load()
