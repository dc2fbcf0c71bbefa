"""txlog: Kafka's exactly-once machinery as an embedded, file-backed Python tool.

This package is the exactly-once layer over `storage`: producers, consumers, the
transaction coordinator, group offsets, and the consume-transform-produce loop::

    import txlog
    p = txlog.Producer(path, transactional_id="app-1")
    c = txlog.Consumer(path, group_id="group-1", isolation_level="read_committed")
    admin = txlog.Admin(path)
    table = txlog.scan(path, "orders").to_arrow()   # Arrow, pandas, Polars, DuckDB: docs/analysis.md

Names are imported on first use, so `import txlog` (and the CLI's start-up) stays cheap.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "Producer": "txlog.clients.producer",
    "FutureRecordMetadata": "txlog.clients.producer",
    "PreparedTxnState": "txlog.clients.prepared_txn_state",
    "Consumer": "txlog.clients.consumer",
    "Admin": "txlog.clients.admin",
    "TopicPartition": "txlog.topic_partition",
    "OffsetAndMetadata": "txlog.topic_partition",
    "ConsumerRecord": "txlog.consumer_record",
    "RecordMetadata": "txlog.consumer_record",
    "IsolationLevel": "txlog.fetch",
    "TransactionCoordinator": "txlog.coordinator.transaction_coordinator",
    "TransformLoop": "txlog.tools.transform_loop",
    "AbortRequested": "txlog.tools.transform_loop",
    "FaultPlan": "txlog.tools.fault_injection",
    "Fault": "txlog.tools.fault_injection",
    "DeliveryMode": "txlog.tools.delivery",
    "compare_delivery_semantics": "txlog.tools.delivery",
    "Store": "storage.store",
}

#: Sub-packages reached as attributes: `txlog.scan` is a package that is also callable (txlog/scan/__init__.py).
_PACKAGES = ("errors", "scan")

__all__ = sorted([*_EXPORTS, *_PACKAGES]) + ["__version__"]


def __getattr__(name: str):
    if name in _PACKAGES:
        return importlib.import_module(f"txlog.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'txlog' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
