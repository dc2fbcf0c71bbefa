"""txlog: Kafka's exactly-once machinery as an embedded, file-backed Python tool.

This package is the exactly-once layer over `storage` (producers, consumers,
transaction coordinator, group offsets, the Spark source).
"""

__version__ = "0.1.0"
