"""txlog's segment store: Kafka-compatible log files, producer state, recovery, locking.

Knows batches, segments, indexes, producer state and recovery; knows nothing of
coordinators, consumer groups, the CLI or Spark (docs/DESIGN.md §1).

The names below are imported on first use (PEP 562), so importing one module of the
package (`storage.records`, `storage.errors`) does not load all of them: every `txlog`
command pays for only the modules it uses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage.config import TopicConfig
    from storage.log_cleaner import CleanerStats
    from storage.partition_log import AppendResult, BatchAppendResult, PartitionLog
    from storage.store import PartitionDescription, Store, TopicDescription

_EXPORTS = {
    "AppendResult": "storage.partition_log",
    "BatchAppendResult": "storage.partition_log",
    "CleanerStats": "storage.log_cleaner",
    "PartitionDescription": "storage.store",
    "PartitionLog": "storage.partition_log",
    "Store": "storage.store",
    "TopicConfig": "storage.config",
    "TopicDescription": "storage.store",
}

__all__ = [
    "AppendResult",
    "BatchAppendResult",
    "CleanerStats",
    "PartitionDescription",
    "PartitionLog",
    "Store",
    "TopicConfig",
    "TopicDescription",
]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'storage' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
