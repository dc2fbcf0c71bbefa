"""The record view's Spark schema: Spark's Kafka source columns, plus txlog's optional ones.

Kept in Spark's DDL so a user can compare it line by line with the Kafka source's
documentation; the views (batches, transactions) keep their schemas beside their readers.
"""

from __future__ import annotations

#: Spark's Kafka source, column for column (`timestampType` is 0 CreateTime, 1 LogAppendTime).
KAFKA_COLUMNS = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
)
#: With includeHeaders=true, as Spark's Kafka source.
HEADERS_COLUMN = "headers array<struct<key: string, value: binary>>"
#: With includeTransactionColumns=true: who wrote each record, from its batch header.
TRANSACTION_COLUMNS = "producerId long, producerEpoch int, sequence int, isTransactional boolean"


def record_schema(*, include_headers: bool, include_transaction_columns: bool) -> str:
    parts = [KAFKA_COLUMNS]
    if include_headers:
        parts.append(HEADERS_COLUMN)
    if include_transaction_columns:
        parts.append(TRANSACTION_COLUMNS)
    return ", ".join(parts)
