"""txlog's segment store: Kafka-compatible log files, producer state, recovery, locking.

Knows batches, segments, indexes, producer state and recovery; knows nothing of
coordinators, consumer groups, the CLI or Spark (docs/DESIGN.md §1).
"""

from storage.config import TopicConfig
from storage.log_cleaner import CleanerStats
from storage.partition_log import AppendResult, BatchAppendResult, PartitionLog
from storage.store import PartitionDescription, Store, TopicDescription

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
