"""The cyclic GC kept quiet while a command streams records (`consume`, `inspect`).

A command that decodes hundreds of thousands of records allocates a few GC-tracked
objects per record (a record tuple, its headers list), almost all of them freed by
reference counting a moment later. With the default threshold (700 net allocations)
the collector ran every poll while a poll's records were alive, and its full
collections walked every object the imports had left behind: together about a third
of `txlog consume`'s time (tests/benchmarks/bench_consume_inspect.py). Here the objects
that exist before the loop are frozen out of collections, and a young-generation
collection waits for 100,000 net allocations: records that are freed in time never
count towards it, while garbage cycles (which are never freed) still trigger a
collection after that many, so memory stays bounded in a `--follow` that runs for days.
The process's settings are restored afterwards.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: Net allocations of GC-tracked objects before a young-generation collection (default 700).
YOUNG_THRESHOLD = 100_000


@contextmanager
def quiet_gc() -> Iterator[None]:
    """Freeze what exists now and raise the young-generation threshold, for the block."""
    saved = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(saved[0], YOUNG_THRESHOLD), *saved[1:])
    try:
        yield
    finally:
        gc.set_threshold(*saved)
        gc.unfreeze()
