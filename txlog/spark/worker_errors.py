"""txlog's own errors out of a PySpark Python worker as their one-line message, not a traceback.

PySpark runs a Python data source's methods in Python workers and hands a failure to the
JVM as the text `pyspark.util.handle_worker_exception` formats: the whole traceback,
unless the environment variable SPARK_HIDE_TRACEBACK is set when it formats, in which case
only the exception's own line ("txlog.errors.IllegalArgumentError: option ..."). For an
error txlog raises on purpose (a bad option, a missing topic, deleted offsets) that line is
all a user needs, so `one_line_errors` sets it just before such an error leaves txlog's
code. Only that worker process sees it, and PySpark's workers exit after reporting a
failure (pyspark/sql/worker/utils.py, pyspark/sql/streaming/python_streaming_source_runner.py),
so no later traceback, of a user's UDF say, is shortened. Any other exception (a bug) keeps
its traceback.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from storage.errors import KafkaError

#: The variable pyspark.util.handle_worker_exception reads when it formats a worker's failure.
HIDE_TRACEBACK = "SPARK_HIDE_TRACEBACK"


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Let a txlog error raised inside reach Spark as its one-line message."""
    try:
        yield
    except KafkaError:
        os.environ[HIDE_TRACEBACK] = "1"
        raise
