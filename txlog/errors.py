"""Every error txlog raises on purpose, named after Kafka's.

The storage layer defines its errors at the bottom of the dependency chain
(`storage.errors`); this module is the public place to import them from.
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
