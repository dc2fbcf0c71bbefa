"""Typed errors of the segment store, named after Kafka's protocol errors.

Each class carries Kafka's numeric error code so that higher layers (the
exactly-once layer, the CLI) can report them the way Kafka users know them.
`txlog.errors` re-exports everything here; the storage package cannot import
upwards, so the definitions live at the bottom of the dependency chain.
"""

from __future__ import annotations


class KafkaError(Exception):
    """Base of every error txlog raises on purpose.

    `code` is Kafka's error code (-1 for errors Kafka has no code for) and
    `retriable` says whether retrying the same request may succeed.
    """

    code = -1
    retriable = False


class CorruptRecordError(KafkaError):
    """Bytes on disk or on the wire are not a valid record batch (CORRUPT_MESSAGE).

    `path` and `position` name where the bad bytes are, so an operator can
    look at them with `txlog inspect`.
    """

    code = 2

    def __init__(self, message: str, *, path: str | None = None, position: int | None = None):
        where = ""
        if path is not None:
            where = f" in {path}"
        if position is not None:
            where += f" at byte {position}"
        super().__init__(message + where)
        self.path = path
        self.position = position


class InvalidRecordError(KafkaError):
    """A well-formed batch that breaks a rule of the log (INVALID_RECORD)."""

    code = 87


class UnsupportedCompressionTypeError(KafkaError):
    code = 76


class OffsetOutOfRangeError(KafkaError):
    code = 1


class UnknownTopicOrPartitionError(KafkaError):
    code = 3


class RecordTooLargeError(KafkaError):
    """A batch larger than the topic's `max.message.bytes` (MESSAGE_TOO_LARGE)."""

    code = 10


class InvalidTopicError(KafkaError):
    code = 17


class InvalidTimestampError(KafkaError):
    code = 32


class TopicAlreadyExistsError(KafkaError):
    code = 36


class InvalidPartitionsError(KafkaError):
    code = 37


class InvalidConfigurationError(KafkaError):
    code = 40


class InvalidRequestError(KafkaError):
    code = 42


class OutOfOrderSequenceError(KafkaError):
    code = 45


class DuplicateSequenceError(KafkaError):
    code = 46


class InvalidProducerEpochError(KafkaError):
    code = 47


class InvalidTxnStateError(KafkaError):
    code = 48


class InvalidProducerIdMappingError(KafkaError):
    code = 49


class TransactionCoordinatorFencedError(KafkaError):
    code = 52


class UnsupportedForMessageFormatError(KafkaError):
    """Data in a message format this reader does not handle: pre-0.11 magic 0/1 (UNSUPPORTED_FOR_MESSAGE_FORMAT)."""

    code = 43


class InconsistentTopicIdError(KafkaError):
    """A partition's recorded topic id is not the topic's (INCONSISTENT_TOPIC_ID)."""

    code = 103


class KafkaStorageError(KafkaError):
    """The disk failed us (KAFKA_STORAGE_ERROR): ENOSPC, EIO, a failed fsync.

    After this error the handle that raised it refuses further writes; the
    next open recovers from what is on disk.
    """

    code = 56


class FileReplacedError(KafkaStorageError):
    """A file this process had open was removed or replaced by another under its name.

    Retention and the log cleaner's swap (storage/log_cleaner.py) do this to readers that
    take no lock: the reader's view is stale, and it lists the segments again and retries
    the read from the same offset (docs/DESIGN.md §3).
    """


class UnknownProducerIdError(KafkaError):
    """The partition has no state for this producer id and the batch does not start a new one."""

    code = 59


class ProducerFencedError(KafkaError):
    code = 90


class CorruptSnapshotError(KafkaError):
    """A producer-state snapshot failed its version, size or CRC check."""


class CorruptIndexError(KafkaError):
    """An offset, time or transaction index failed its sanity check."""


class ReadOnlyStoreError(KafkaError):
    """A write was attempted on a store opened read-only (e.g. a real Kafka data directory)."""
