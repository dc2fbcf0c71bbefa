"""`txlog.scan`: a store's records as Arrow, for pandas, Polars and DuckDB, without a JVM.

    import txlog
    table = txlog.scan("/path/to/store", "orders").to_arrow()

The package is itself callable (`txlog.scan(...)` is `txlog.scan.scan(...)`): Python sets
a package's submodules as attributes of their parent, so `txlog.scan` is this module as
soon as any of its modules is imported, and a plain function of that name in `txlog`
would be replaced by it. Calling the module keeps `txlog.scan(...)` working either way.

Its modules: `planning` (what to read, fixed once: the planner the Spark source uses
too), `range_reader` (one planned range as Arrow batches, through the Consumer's
visibility rule), `arrow_columns` (the record view's columns), `api` (`scan` and `Scan`).
Importing this package loads no optional library; pyarrow is loaded on the first scan.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

from txlog.scan.api import Scan, scan

__all__ = ["Scan", "scan"]


class _CallableModule(ModuleType):
    """This package's type: calling it calls `scan`."""

    def __call__(self, *args: Any, **kwargs: Any) -> Scan:
        return scan(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
