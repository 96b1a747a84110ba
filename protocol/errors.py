"""Kafka's error codes, and the record-format exceptions that map onto them.

Wire errors are data (a code per partition); inside the process they are exceptions. Each
exception class names the code it becomes, so the server's mapping table stays one line each.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from . import kafka as _kafka  # noqa: F401  (first: it loads kio with hypothesis hidden, see there)

# isort: split
from kio.schema.errors import ErrorCode as _KafkaErrorCode

if TYPE_CHECKING:

    class _ErrorCodeType(enum.EnumMeta):
        """What a type checker sees: the members are made at import from kio's list (below), so
        it cannot list them; every ``ErrorCode.NAME`` is an ErrorCode (the names the sources use
        are checked by tests/protocol/test_enum_names.py)."""

        def __getattr__(cls, name: str) -> ErrorCode: ...

    class ErrorCode(enum.IntEnum, metaclass=_ErrorCodeType):
        pass
else:

    class ErrorCode(enum.IntEnum):
        """Kafka's error codes, every one, by Kafka's names (kio's, upper-cased as Kafka's Java enum
        spells them). The numbers come from kio, which generates them from Kafka's own list, so no
        code is typed here: the Kafka listener's adapters send the codes the msgpack protocol never
        needs (INVALID_REQUIRED_ACKS...) from this same enum."""

        _ignore_ = "_kafka_code"
        for _kafka_code in _KafkaErrorCode:
            vars()[_kafka_code.name.upper()] = _kafka_code.value


#: The codes the broker's handlers answer with, on either listener: the msgpack protocol's
#: error codes (docs/protocol.md's table lists exactly these; the client has an exception class
#: for each). Where a code's use in triolog needs saying, the comment above it says it.
BROKER_CODES: frozenset[ErrorCode] = frozenset(
    {
        # An unexpected server-side failure; the broker logs the traceback.
        ErrorCode.UNKNOWN_SERVER_ERROR,
        ErrorCode.NONE,
        # The requested offset is below the log start offset or above the log end offset.
        ErrorCode.OFFSET_OUT_OF_RANGE,
        # A batch failed its CRC, size or structural checks.
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        # Cluster: the partition has no leader now (its replicas are down or being elected).
        ErrorCode.LEADER_NOT_AVAILABLE,
        # Cluster: this broker does not lead the partition (the client's metadata is stale).
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        # Cluster: the request's leader epoch is older than the leader's (a newer leader exists).
        ErrorCode.FENCED_LEADER_EPOCH,
        # Cluster: the request's leader epoch is newer than this broker knows yet.
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        # Cluster, produce with acks -1: fewer in-sync replicas than min.insync.replicas; nothing written.
        ErrorCode.NOT_ENOUGH_REPLICAS,
        # Cluster, produce with acks -1: written, but the ISR shrank below min.insync.replicas before
        # every in-sync replica had it; not acknowledged.
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
        # A batch is larger than max.message.bytes (or a record set larger than a segment).
        ErrorCode.MESSAGE_TOO_LARGE,
        # offset_commit: committed_metadata longer than offset.metadata.max.bytes.
        ErrorCode.OFFSET_METADATA_TOO_LARGE,
        # The group coordinator is still loading its __consumer_offsets partition.
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        # The group's __consumer_offsets partition is not served by this broker.
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.INVALID_TOPIC_EXCEPTION,
        # A group request names a generation that is not the group's current one.
        ErrorCode.ILLEGAL_GENERATION,
        # A member's protocol type or protocols do not match the group's.
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
        ErrorCode.INVALID_GROUP_ID,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.INVALID_SESSION_TIMEOUT,
        # The group is rebalancing: the member must join again.
        ErrorCode.REBALANCE_IN_PROGRESS,
        ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        # The principal may not perform the operation on the consumer group (ACLs).
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        # The principal may not perform the operation on the cluster resource (ACLs).
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        # A record timestamp lies outside the allowed window, or the client set LogAppendTime.
        ErrorCode.INVALID_TIMESTAMP,
        # sasl_handshake: the client asked for a SASL mechanism the listener does not enable.
        ErrorCode.UNSUPPORTED_SASL_MECHANISM,
        # A SASL request out of order (sasl_authenticate before sasl_handshake, or a step too many).
        ErrorCode.ILLEGAL_SASL_STATE,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.TOPIC_ALREADY_EXISTS,
        ErrorCode.INVALID_PARTITIONS,
        ErrorCode.INVALID_REPLICATION_FACTOR,
        # create_topics: a replica_assignment Kafka would refuse (see the request).
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ErrorCode.INVALID_CONFIG,
        ErrorCode.INVALID_REQUEST,
        # Magic < 2 on produce: triolog stores only RecordBatch v2.
        ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        ErrorCode.POLICY_VIOLATION,
        # An idempotent producer's batch does not follow its last sequence for the partition.
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        # An idempotent producer's batch is older than the batches the broker remembers for it.
        ErrorCode.DUPLICATE_SEQUENCE_NUMBER,
        # A batch's producer epoch is older than the producer id's current epoch.
        ErrorCode.INVALID_PRODUCER_EPOCH,
        # The principal may not use the transactional id (ACLs).
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        # An ACL or credential request to a broker that has no authorizer or SASL configured.
        ErrorCode.SECURITY_DISABLED,
        # The log directory failed an I/O operation and went offline.
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.SASL_AUTHENTICATION_FAILED,
        # The partition has no state for the producer id and the batch does not start at sequence 0.
        ErrorCode.UNKNOWN_PRODUCER_ID,
        # delete_groups: the group still has members.
        ErrorCode.NON_EMPTY_GROUP,
        ErrorCode.GROUP_ID_NOT_FOUND,
        # join_group: the first join of a member gets its id with this error and joins again with it.
        ErrorCode.MEMBER_ID_REQUIRED,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        # A batch is well-formed but breaks a rule (bad offsets, keyless record on a compacted topic).
        ErrorCode.INVALID_RECORD,
        # The request would pass the principal's controller mutation quota.
        ErrorCode.THROTTLING_QUOTA_EXCEEDED,
        # alter/describe user SCRAM credentials: the user has no credential for that mechanism.
        ErrorCode.RESOURCE_NOT_FOUND,
        # alter user SCRAM credentials: one user and mechanism named twice in one request.
        ErrorCode.DUPLICATE_RESOURCE,
        # A SCRAM credential the broker refuses: iterations outside 4096..16384, empty user, short salt.
        ErrorCode.UNACCEPTABLE_CREDENTIAL,
        # Transactions (Kafka's codes; see docs/protocol.md's transaction APIs).
        ErrorCode.OPERATION_NOT_ATTEMPTED,
        ErrorCode.INVALID_TXN_STATE,
        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
        ErrorCode.INVALID_TRANSACTION_TIMEOUT,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.TRANSACTION_COORDINATOR_FENCED,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
    }
)


class TriologError(Exception):
    """Base of every error that has a wire error code."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR


class CorruptRecordError(TriologError):
    """Bytes that are not a valid record batch: bad CRC, impossible sizes, truncated records."""

    code = ErrorCode.CORRUPT_MESSAGE


class InvalidRecordError(TriologError):
    """A structurally valid batch that breaks a rule of the log (offsets, keys, control flags)."""

    code = ErrorCode.INVALID_RECORD


class RecordTooLargeError(TriologError):
    code = ErrorCode.MESSAGE_TOO_LARGE


class InvalidTimestampError(TriologError):
    code = ErrorCode.INVALID_TIMESTAMP
    #: The refused record's timestamp, where the error is about one (the codec's walk sets it).
    timestamp: int | None = None


class UnsupportedForMessageFormatError(TriologError):
    code = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


class OffsetOutOfRangeError(TriologError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


class StorageError(TriologError):
    """A disk operation failed; the log directory is taken offline rather than serve half-written data."""

    code = ErrorCode.KAFKA_STORAGE_ERROR


class InvalidTopicError(TriologError):
    """A topic name Kafka would refuse; it never reaches the file system."""

    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class UnknownTopicOrPartitionError(TriologError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class LeaderNotAvailableError(TriologError):
    code = ErrorCode.LEADER_NOT_AVAILABLE


class NotLeaderOrFollowerError(TriologError):
    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class FencedLeaderEpochError(TriologError):
    code = ErrorCode.FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(TriologError):
    code = ErrorCode.UNKNOWN_LEADER_EPOCH


class NotEnoughReplicasError(TriologError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS


class NotEnoughReplicasAfterAppendError(TriologError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


class NotControllerError(TriologError):
    """A request only the controller answers (ElectLeaders) reached another broker."""

    code = ErrorCode.NOT_CONTROLLER


class TopicAlreadyExistsError(TriologError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(TriologError):
    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(TriologError):
    code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignmentError(TriologError):
    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class InvalidConfigError(TriologError):
    code = ErrorCode.INVALID_CONFIG


class InvalidRequestError(TriologError):
    code = ErrorCode.INVALID_REQUEST


class RequestTimedOutError(TriologError):
    code = ErrorCode.REQUEST_TIMED_OUT


class PolicyViolationError(TriologError):
    code = ErrorCode.POLICY_VIOLATION


class OutOfOrderSequenceNumberError(TriologError):
    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceNumberError(TriologError):
    """A batch older than the broker's window of a producer's batches: it was appended before.

    ``flush_before``: the original lies below this offset (the first offset of the oldest batch
    the broker remembers), -1 if unknown; acks=all answers once the log is fsynced up to it."""

    code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER

    def __init__(self, *args, flush_before: int = -1) -> None:
        super().__init__(*args)
        self.flush_before = flush_before


class InvalidProducerEpochError(TriologError):
    code = ErrorCode.INVALID_PRODUCER_EPOCH


class UnknownProducerIdError(TriologError):
    code = ErrorCode.UNKNOWN_PRODUCER_ID


class InvalidTxnStateError(TriologError):
    """A producer's batch breaks its transaction's state: a non-transactional batch while its
    transaction is open (Kafka's InvalidTxnStateException)."""

    code = ErrorCode.INVALID_TXN_STATE


class TransactionCoordinatorFencedError(TriologError):
    """A transaction marker from a coordinator epoch older than the one the partition has seen."""

    code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class ProducerFencedError(TriologError):
    """A newer producer with the same transactional id has the epoch (Kafka's ProducerFencedException)."""

    code = ErrorCode.PRODUCER_FENCED


class TopicAuthorizationFailedError(TriologError):
    """The principal may not do this to the topic (Kafka's ACLs)."""

    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED


class GroupAuthorizationFailedError(TriologError):
    code = ErrorCode.GROUP_AUTHORIZATION_FAILED


class ClusterAuthorizationFailedError(TriologError):
    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
