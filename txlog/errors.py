"""Every error txlog raises on purpose, named after Kafka's.

The storage layer defines its errors at the bottom of the dependency chain
(`storage.errors`); the ones only the exactly-once layer raises are defined here.
This module is the public place to import all of them from.
"""

from storage.errors import (  # noqa: F401  (re-exported)
    CorruptIndexError,
    CorruptRecordError,
    CorruptSnapshotError,
    DuplicateSequenceError,
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRecordError,
    InvalidRequestError,
    InvalidTimestampError,
    InvalidTopicError,
    InvalidTxnStateError,
    KafkaError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    ReadOnlyStoreError,
    RecordTooLargeError,
    TopicAlreadyExistsError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
    UnknownTopicOrPartitionError,
    UnsupportedCompressionTypeError,
)


class ConcurrentTransactionsError(KafkaError):
    """The transaction has a pending transition (Prepare*); retry once it completes."""
    code = 51
    retriable = True


class InvalidTransactionTimeoutError(KafkaError):
    code = 50


class TransactionAbortableError(KafkaError):
    """The transaction can no longer commit; the producer must abort it."""
    code = 120


class UnstableOffsetCommitError(KafkaError):
    """Offsets of the partition are pending in an open transaction (KIP-447)."""
    code = 88
    retriable = True


class RequestTimedOutError(KafkaError):
    """No acknowledgement came back: the request may or may not have been applied."""
    code = 7
    retriable = True


class CoordinatorNotAvailableError(KafkaError):
    code = 15
    retriable = True


class GroupIdNotFoundError(KafkaError):
    code = 69


class IllegalStateError(KafkaError):
    """A client call out of order (commit without begin, ...); Kafka's client-side IllegalStateException."""
    code = -1


class TransactionOutcomeUnknownError(KafkaError):
    """The commit decision may or may not be durable; retry the commit (never abort blindly)."""
    code = -1
    retriable = True


class IllegalArgumentError(KafkaError, ValueError):
    """A caller passed a value the API cannot accept (Kafka's client-side IllegalArgumentException)."""

    code = -1


class InvalidGroupIdError(KafkaError):
    """The group id is empty or cannot be stored (INVALID_GROUP_ID)."""

    code = 24


class OffsetMetadataTooLargeError(KafkaError):
    """The commit's metadata string exceeds offset.metadata.max.bytes (OFFSET_METADATA_TOO_LARGE)."""

    code = 12


class NoOffsetForPartitionError(KafkaError):
    """No position, no committed offset, and auto_offset_reset='none' (Kafka's NoOffsetForPartitionException)."""

    code = -1
