"""The optional libraries of the analysis wing (pyarrow, pandas, polars, duckdb...), imported on first use.

`import txlog` and the CLI's start-up load none of them; a reader that needs one and finds
it missing gets an ImportError naming the extra that brings it, rather than a bare
"No module named ...".
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: The pyproject extra that installs every library the analysis features use.
EXTRA = "txlog[analysis]"


def optional_module(name: str, purpose: str) -> ModuleType:
    """`import name`, or an ImportError saying what needed it and how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        package = name.split(".")[0]
        raise ImportError(f"{purpose} needs {package}, which is not installed: pip install '{EXTRA}'") from exc
