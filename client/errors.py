"""Typed exceptions: one class per wire error code, plus the few errors only a client can have.

Every class derives from :class:`TriologClientError`, which carries ``code`` (the wire
:class:`triolog.protocol.errors.ErrorCode`, or None for client-side errors) and ``error_message`` (the
broker's words, or ours). :func:`error_for` turns a (code, message) pair from a response into the
right exception, so callers can ``except OffsetOutOfRangeError`` instead of comparing numbers.

``retriable`` is True only where a retry is known to be *safe*: the broker guarantees that nothing
was appended (see :mod:`triolog.client.producer_core` for the full retry rule).
"""

from __future__ import annotations

from triolog.protocol.errors import ErrorCode

__all__ = [
    "BrokerConnectionError",
    "ClientTimeoutError",
    "ClusterAuthorizationFailedError",
    "CommitFailedError",
    "ConcurrentTransactionsError",
    "CoordinatorLoadInProgressError",
    "CoordinatorNotAvailableError",
    "CorruptMessageError",
    "DuplicateResourceError",
    "DuplicateSequenceNumberError",
    "FencedLeaderEpochError",
    "GroupAuthorizationFailedError",
    "GroupIdNotFoundError",
    "GroupMaxSizeReachedError",
    "IllegalGenerationError",
    "IllegalSaslStateError",
    "InconsistentGroupProtocolError",
    "InvalidCommitOffsetSizeError",
    "InvalidConfigError",
    "InvalidGroupIdError",
    "InvalidPartitionsError",
    "InvalidProducerEpochError",
    "InvalidProducerIdMappingError",
    "InvalidRecordError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidResponseError",
    "InvalidSessionTimeoutError",
    "InvalidTimestampError",
    "InvalidTopicError",
    "InvalidTransactionTimeoutError",
    "InvalidTxnStateError",
    "KafkaStorageError",
    "LeaderNotAvailableError",
    "MemberIdRequiredError",
    "MessageTooLargeError",
    "NoOffsetForPartitionError",
    "NonEmptyGroupError",
    "NotCoordinatorError",
    "NotEnoughReplicasAfterAppendError",
    "NotEnoughReplicasError",
    "NotLeaderOrFollowerError",
    "OffsetMetadataTooLargeError",
    "OffsetOutOfRangeError",
    "OperationNotAttemptedError",
    "OutOfOrderSequenceNumberError",
    "PolicyViolationError",
    "ProducerClosedError",
    "ProducerFencedError",
    "RebalanceInProgressError",
    "RecordDeserializationError",
    "RequestNotSentError",
    "RequestTimedOutError",
    "ResourceNotFoundError",
    "ResponseLostError",
    "SaslAuthenticationFailedError",
    "SecurityConfigError",
    "SecurityDisabledError",
    "SerializationError",
    "SslHandshakeError",
    "ThrottlingQuotaExceededError",
    "TopicAlreadyExistsError",
    "TopicAuthorizationFailedError",
    "TransactionCoordinatorFencedError",
    "TransactionalIdAuthorizationFailedError",
    "TransactionAbortedError",
    "TransactionStateError",
    "TransactionalIdNotFoundError",
    "TriologClientError",
    "UnacceptableCredentialError",
    "UnknownLeaderEpochError",
    "UnknownMemberIdError",
    "UnknownProducerIdError",
    "UnknownServerError",
    "UnknownTopicOrPartitionError",
    "UnstableOffsetCommitError",
    "UnsupportedForMessageFormatError",
    "UnsupportedSaslMechanismError",
    "UnsupportedVersionError",
    "error_class",
    "error_for",
]


class TriologClientError(Exception):
    """Base of every error this client raises.

    ``topic``/``partition`` name the entry a per-topic or per-partition error belongs to, when
    there is one, so a caller handling many partitions knows which one failed; ``entity`` the
    ClientQuotaEntity an alter_client_quotas error belongs to.
    """

    code: ErrorCode | int | None = None
    retriable: bool = False
    entity = None

    def __init__(
        self,
        error_message: str | None = None,
        *,
        code: ErrorCode | int | None = None,
        topic: str | None = None,
        partition: int | None = None,
    ) -> None:
        if code is not None:
            self.code = code
        self.error_message = error_message or (self.code.name if isinstance(self.code, ErrorCode) else None)
        self.topic = topic
        self.partition = partition
        super().__init__(self._text())

    def _text(self) -> str:
        where = ""
        if self.topic is not None:
            where = f" [{self.topic}" + (f"-{self.partition}" if self.partition is not None else "") + "]"
        name = self.code.name if isinstance(self.code, ErrorCode) else self.code
        prefix = f"{name}{where}: " if name is not None else (where.strip() + " " if where else "")
        return f"{prefix}{self.error_message or ''}".strip()


# --- one class per wire error code ------------------------------------------------------------


class UnknownServerError(TriologClientError):
    code = ErrorCode.UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(TriologClientError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


class CorruptMessageError(TriologClientError):
    code = ErrorCode.CORRUPT_MESSAGE


class UnknownTopicOrPartitionError(TriologClientError):
    """Safe to retry: the broker refused the request before appending anything."""

    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    retriable = True


class LeaderNotAvailableError(TriologClientError):
    """The partition has no leader now (a cluster electing one): retried after a metadata refresh."""

    code = ErrorCode.LEADER_NOT_AVAILABLE
    retriable = True


class NotLeaderOrFollowerError(TriologClientError):
    """The broker asked does not lead the partition: the client's metadata is stale; retried after
    a metadata refresh, nothing was written."""

    code = ErrorCode.NOT_LEADER_OR_FOLLOWER
    retriable = True


class FencedLeaderEpochError(TriologClientError):
    """The client knew an older leader epoch than the leader's: refresh metadata and retry."""

    code = ErrorCode.FENCED_LEADER_EPOCH
    retriable = True


class UnknownLeaderEpochError(TriologClientError):
    """The client knew a newer leader epoch than the broker has heard of yet: retry."""

    code = ErrorCode.UNKNOWN_LEADER_EPOCH
    retriable = True


class NotEnoughReplicasError(TriologClientError):
    """acks=all with fewer in-sync replicas than min.insync.replicas: nothing was written; retried."""

    code = ErrorCode.NOT_ENOUGH_REPLICAS
    retriable = True


class NotEnoughReplicasAfterAppendError(TriologClientError):
    """acks=all: the records *are* in the leader's log, but the ISR shrank below
    min.insync.replicas before they were committed. Never retried: a retry would append them
    a second time (unless the producer is idempotent)."""

    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


class RequestTimedOutError(TriologClientError):
    """For produce with acks=-1: the records *are* in the log, only the fsync was not confirmed.

    Never retried: a retry would append them a second time.
    """

    code = ErrorCode.REQUEST_TIMED_OUT


class MessageTooLargeError(TriologClientError):
    code = ErrorCode.MESSAGE_TOO_LARGE


class InvalidTopicError(TriologClientError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class TopicAuthorizationFailedError(TriologClientError):
    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED


class InvalidTimestampError(TriologClientError):
    code = ErrorCode.INVALID_TIMESTAMP


class UnsupportedVersionError(TriologClientError):
    code = ErrorCode.UNSUPPORTED_VERSION


class TopicAlreadyExistsError(TriologClientError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(TriologClientError):
    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(TriologClientError):
    code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignmentError(TriologClientError):
    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class InvalidConfigError(TriologClientError):
    code = ErrorCode.INVALID_CONFIG


class InvalidRequestError(TriologClientError):
    code = ErrorCode.INVALID_REQUEST


class UnsupportedForMessageFormatError(TriologClientError):
    code = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


class PolicyViolationError(TriologClientError):
    code = ErrorCode.POLICY_VIOLATION


class KafkaStorageError(TriologClientError):
    code = ErrorCode.KAFKA_STORAGE_ERROR


class SaslAuthenticationFailedError(TriologClientError):
    code = ErrorCode.SASL_AUTHENTICATION_FAILED


class InvalidRecordError(TriologClientError):
    code = ErrorCode.INVALID_RECORD


class OffsetMetadataTooLargeError(TriologClientError):
    code = ErrorCode.OFFSET_METADATA_TOO_LARGE


class CoordinatorLoadInProgressError(TriologClientError):
    """The coordinator is loading the group's offsets; ask again shortly."""

    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    retriable = True


class CoordinatorNotAvailableError(TriologClientError):
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    retriable = True


class NotCoordinatorError(TriologClientError):
    """Find the coordinator again and resend."""

    code = ErrorCode.NOT_COORDINATOR
    retriable = True


class IllegalGenerationError(TriologClientError):
    code = ErrorCode.ILLEGAL_GENERATION


class InconsistentGroupProtocolError(TriologClientError):
    code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL


class InvalidGroupIdError(TriologClientError):
    code = ErrorCode.INVALID_GROUP_ID


class UnknownMemberIdError(TriologClientError):
    code = ErrorCode.UNKNOWN_MEMBER_ID


class InvalidSessionTimeoutError(TriologClientError):
    code = ErrorCode.INVALID_SESSION_TIMEOUT


class RebalanceInProgressError(TriologClientError):
    """The member must join the group again; a consumer does that itself."""

    code = ErrorCode.REBALANCE_IN_PROGRESS


class InvalidCommitOffsetSizeError(TriologClientError):
    code = ErrorCode.INVALID_COMMIT_OFFSET_SIZE


class OutOfOrderSequenceNumberError(TriologClientError):
    """The idempotent producer resolves it itself (see :mod:`triolog.client.producer_core`)."""

    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceNumberError(TriologClientError):
    code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(TriologClientError):
    code = ErrorCode.INVALID_PRODUCER_EPOCH


class UnknownProducerIdError(TriologClientError):
    code = ErrorCode.UNKNOWN_PRODUCER_ID


class NonEmptyGroupError(TriologClientError):
    code = ErrorCode.NON_EMPTY_GROUP


class GroupIdNotFoundError(TriologClientError):
    code = ErrorCode.GROUP_ID_NOT_FOUND


class MemberIdRequiredError(TriologClientError):
    code = ErrorCode.MEMBER_ID_REQUIRED


class GroupMaxSizeReachedError(TriologClientError):
    code = ErrorCode.GROUP_MAX_SIZE_REACHED


class ClusterAuthorizationFailedError(TriologClientError):
    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


class GroupAuthorizationFailedError(TriologClientError):
    code = ErrorCode.GROUP_AUTHORIZATION_FAILED


class UnsupportedSaslMechanismError(TriologClientError):
    code = ErrorCode.UNSUPPORTED_SASL_MECHANISM


class IllegalSaslStateError(TriologClientError):
    code = ErrorCode.ILLEGAL_SASL_STATE


class TransactionalIdAuthorizationFailedError(TriologClientError):
    code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


class SecurityDisabledError(TriologClientError):
    code = ErrorCode.SECURITY_DISABLED


class ThrottlingQuotaExceededError(TriologClientError):
    code = ErrorCode.THROTTLING_QUOTA_EXCEEDED


class ResourceNotFoundError(TriologClientError):
    code = ErrorCode.RESOURCE_NOT_FOUND


class DuplicateResourceError(TriologClientError):
    code = ErrorCode.DUPLICATE_RESOURCE


class OperationNotAttemptedError(TriologClientError):
    """add_partitions_to_txn: another partition of the request failed, so this one was not added."""

    code = ErrorCode.OPERATION_NOT_ATTEMPTED


class InvalidTxnStateError(TriologClientError):
    """A transactional request out of order for the transaction's state (end_txn with none
    open, a plain batch inside an open one)."""

    code = ErrorCode.INVALID_TXN_STATE


class InvalidProducerIdMappingError(TriologClientError):
    """The producer id is not the one the coordinator holds for the transactional id."""

    code = ErrorCode.INVALID_PRODUCER_ID_MAPPING


class InvalidTransactionTimeoutError(TriologClientError):
    """transaction_timeout_ms above transaction.max.timeout.ms (or not positive)."""

    code = ErrorCode.INVALID_TRANSACTION_TIMEOUT


class ConcurrentTransactionsError(TriologClientError):
    """The producer's previous transaction is still being completed: retried shortly."""

    code = ErrorCode.CONCURRENT_TRANSACTIONS
    retriable = True


class TransactionCoordinatorFencedError(TriologClientError):
    """Markers from a coordinator older than the partition's last (a coordinator that moved)."""

    code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class UnstableOffsetCommitError(TriologClientError):
    """A transaction's offset for the partition awaits its commit or abort: retried shortly."""

    code = ErrorCode.UNSTABLE_OFFSET_COMMIT
    retriable = True


class ProducerFencedError(TriologClientError):
    """A newer producer with the same transactional id took over: this one must stop."""

    code = ErrorCode.PRODUCER_FENCED


class TransactionalIdNotFoundError(TriologClientError):
    """describe_transactions: the coordinator knows no such transactional id."""

    code = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


class UnacceptableCredentialError(TriologClientError):
    code = ErrorCode.UNACCEPTABLE_CREDENTIAL


_BY_CODE: dict[int, type[TriologClientError]] = {
    cls.code: cls
    for cls in (
        UnknownServerError,
        OffsetOutOfRangeError,
        CorruptMessageError,
        UnknownTopicOrPartitionError,
        RequestTimedOutError,
        MessageTooLargeError,
        InvalidTopicError,
        TopicAuthorizationFailedError,
        InvalidTimestampError,
        UnsupportedVersionError,
        TopicAlreadyExistsError,
        InvalidPartitionsError,
        InvalidReplicationFactorError,
        InvalidReplicaAssignmentError,
        InvalidConfigError,
        InvalidRequestError,
        UnsupportedForMessageFormatError,
        PolicyViolationError,
        KafkaStorageError,
        SaslAuthenticationFailedError,
        InvalidRecordError,
        OffsetMetadataTooLargeError,
        CoordinatorLoadInProgressError,
        CoordinatorNotAvailableError,
        NotCoordinatorError,
        IllegalGenerationError,
        InconsistentGroupProtocolError,
        InvalidGroupIdError,
        UnknownMemberIdError,
        InvalidSessionTimeoutError,
        RebalanceInProgressError,
        InvalidCommitOffsetSizeError,
        OutOfOrderSequenceNumberError,
        DuplicateSequenceNumberError,
        InvalidProducerEpochError,
        UnknownProducerIdError,
        NonEmptyGroupError,
        GroupIdNotFoundError,
        MemberIdRequiredError,
        GroupMaxSizeReachedError,
        ClusterAuthorizationFailedError,
        GroupAuthorizationFailedError,
        UnsupportedSaslMechanismError,
        IllegalSaslStateError,
        TransactionalIdAuthorizationFailedError,
        SecurityDisabledError,
        ThrottlingQuotaExceededError,
        ResourceNotFoundError,
        DuplicateResourceError,
        UnacceptableCredentialError,
        InvalidTxnStateError,
        OperationNotAttemptedError,
        InvalidProducerIdMappingError,
        InvalidTransactionTimeoutError,
        ConcurrentTransactionsError,
        TransactionCoordinatorFencedError,
        UnstableOffsetCommitError,
        ProducerFencedError,
        TransactionalIdNotFoundError,
        LeaderNotAvailableError,
        NotLeaderOrFollowerError,
        FencedLeaderEpochError,
        UnknownLeaderEpochError,
        NotEnoughReplicasError,
        NotEnoughReplicasAfterAppendError,
    )
}


def error_class(code: int) -> type[TriologClientError]:
    """The exception class for a wire error code; unknown codes get the base class."""
    return _BY_CODE.get(code, TriologClientError)


def error_for(
    code: int, error_message: str | None = None, *, topic: str | None = None, partition: int | None = None
) -> TriologClientError:
    """The exception for a non-zero wire error code, carrying the broker's message."""
    if code == ErrorCode.NONE:
        raise ValueError("error code 0 (NONE) is not an error")
    try:
        code = ErrorCode(code)
    except ValueError:
        pass  # a code this client does not know: keep the number
    return error_class(code)(error_message, code=code, topic=topic, partition=partition)


# --- client-side errors (no wire code) --------------------------------------------------------


class BrokerConnectionError(TriologClientError):
    """The connection to the broker failed."""


class RequestNotSentError(BrokerConnectionError):
    """The connection failed before the whole request frame was written.

    The broker only acts on whole frames, so the request had no effect: safe to retry.
    """

    retriable = True


class ResponseLostError(BrokerConnectionError):
    """The request was written but no response came (connection lost, or request timeout).

    The broker may or may not have acted on it. Retried for produce only by an idempotent producer
    (the broker answers a duplicate with the original offsets); otherwise it could store records twice.
    """


class InvalidResponseError(ResponseLostError):
    """The broker answered with bytes the protocol forbids; the connection is dropped."""


class SslHandshakeError(TriologClientError):
    """Kafka's SslAuthenticationException: the TLS handshake with the broker failed (its
    certificate is not trusted or does not name the host, it refused ours, or the listener does
    not speak TLS). Not retried: the same handshake would fail again."""


class SecurityConfigError(TriologClientError, ValueError):
    """The client's security settings are invalid or do not go together (e.g. SASL without
    credentials, TLS files that do not load)."""


class ClientTimeoutError(TriologClientError):
    """A client-side wait (metadata, ``future.get(timeout)``, buffer space) ran out of time."""


class ProducerClosedError(TriologClientError):
    """send() after close(), or a record still buffered when close() gave up waiting."""


class TransactionStateError(TriologClientError):
    """A transactional producer's method called out of order (send outside a transaction,
    commit_transaction before begin_transaction...), or after the producer hit an error that
    only abort_transaction (abortable) or close() (fatal: fenced by a newer producer) may follow.
    The cause, if any, is chained."""


class TransactionAbortedError(TriologClientError):
    """A record of a transaction that abort_transaction aborted before it was sent."""


class CommitFailedError(TriologClientError):
    """Kafka's CommitFailedException: the commit cannot be done because the group rebalanced
    (or this member left it, past max_poll_interval_ms) and its partitions may belong to another
    member now. Not retriable: poll() again (it rejoins), then process and commit from there."""


class NoOffsetForPartitionError(TriologClientError):
    """The consumer has no position for a partition and ``auto_offset_reset`` is ``"none"``."""


class SerializationError(TriologClientError):
    """A producer's ``key_serializer``/``value_serializer`` raised (the cause is chained) or
    returned something other than bytes, str or None; nothing was queued."""


class RecordDeserializationError(SerializationError):
    """A consumer's ``key_deserializer``/``value_deserializer`` raised for the record at
    ``offset`` (the cause is chained). The position stays at that record: seek past it to go on."""

    def __init__(self, error_message: str | None = None, *, offset: int | None = None, **kwargs) -> None:
        self.offset = offset
        super().__init__(error_message, **kwargs)
