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


class KafkaTimeoutError(KafkaError):
    """A client-side wait ran out (Kafka's TimeoutException; kafka-python's KafkaTimeoutError).

    The producer raises it when `send` blocked past max_block_ms on a full buffer, when a
    batch stayed unsent past delivery_timeout_ms, and when flush() or a future's get()
    was given a timeout that passed. The records concerned may still be sent later.
    """

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


# ---- consumer group membership (KIP-848's errors where the model is KIP-848's) ----------------------


class UnknownMemberIdError(KafkaError):
    """The group does not know this member: it never joined, left, or was expired (UNKNOWN_MEMBER_ID).

    A consumer that gets it has lost its partitions and must rejoin with a new member id.
    """

    code = 25


class IllegalGenerationError(KafkaError):
    """A commit named a generation the group is not at (ILLEGAL_GENERATION, the classic protocol's name)."""

    code = 22


class FencedMemberEpochError(KafkaError):
    """A heartbeat carried a member epoch the coordinator no longer accepts (FENCED_MEMBER_EPOCH).

    The member was fenced: its partitions may already belong to others, so it must
    treat them as lost and rejoin.
    """

    code = 110


class StaleMemberEpochError(KafkaError):
    """An offset commit carried an older member epoch than the member's current one (STALE_MEMBER_EPOCH)."""

    code = 113


class FencedInstanceIdError(KafkaError):
    """Another member now holds this static group.instance.id (FENCED_INSTANCE_ID)."""

    code = 82


class UnreleasedInstanceIdError(KafkaError):
    """A static member joined while the live holder of its group.instance.id still runs (UNRELEASED_INSTANCE_ID)."""

    code = 111


class GroupNotEmptyError(KafkaError):
    """The operation needs a group without live members (NON_EMPTY_GROUP)."""

    code = 68


class UnsupportedAssignorError(KafkaError):
    """The group's members asked for an assignor the coordinator does not have (UNSUPPORTED_ASSIGNOR)."""

    code = 112


class InvalidReplicationFactorError(KafkaError):
    """A replication factor a one-node cluster cannot give (txlog serve: only 1 or -1, the default)."""

    code = 38


class InvalidReplicaAssignmentError(KafkaError):
    """A manual partition assignment naming a broker other than the one node, or not 0..n-1."""

    code = 39


class SaslAuthenticationFailedError(KafkaError):
    """A SASL login failed: wrong password, unknown user or a malformed exchange (SASL_AUTHENTICATION_FAILED).

    The message is what the client is told, so it never names which part was wrong beyond what
    Kafka's own messages say, and never carries a password.
    """

    code = 58


class ExportTargetError(KafkaError):
    """The path an export writes to holds something else than the table asked for, or the offsets
    its table records do not fit the store (a topic deleted and created again, another store)."""


class ClusterError(KafkaError):
    """A Kafka cluster a mirror talks to refused or failed a request (`txlog mirror`).

    The message names the broker's error (Kafka's name, e.g. TOPIC_AUTHORIZATION_FAILED) as the
    Kafka client reported it, so a user sees the cluster's own words, not a traceback.
    """
