"""Kafka's error codes, and the record-format exceptions that map onto them.

Wire errors are data (a code per partition); inside the process they are exceptions. Each
exception class names the code it becomes, so the server's mapping table stays one line each.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """Kafka's numbers and names, as used by the wire protocol."""

    #: An unexpected server-side failure; the broker logs the traceback.
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    #: The requested offset is below the log start offset or above the log end offset.
    OFFSET_OUT_OF_RANGE = 1
    #: A batch failed its CRC, size or structural checks.
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    REQUEST_TIMED_OUT = 7
    #: A batch is larger than max.message.bytes (or a record set larger than a segment).
    MESSAGE_TOO_LARGE = 10
    #: offset_commit: committed_metadata longer than offset.metadata.max.bytes.
    OFFSET_METADATA_TOO_LARGE = 12
    #: The group coordinator is still loading its __consumer_offsets partition.
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    #: The group's __consumer_offsets partition is not served by this broker.
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    #: A group request names a generation that is not the group's current one.
    ILLEGAL_GENERATION = 22
    #: A member's protocol type or protocols do not match the group's.
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    #: The group is rebalancing: the member must join again.
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    #: The principal may not perform the operation on the consumer group (ACLs).
    GROUP_AUTHORIZATION_FAILED = 30
    #: The principal may not perform the operation on the cluster resource (ACLs).
    CLUSTER_AUTHORIZATION_FAILED = 31
    #: A record timestamp lies outside the allowed window, or the client set LogAppendTime.
    INVALID_TIMESTAMP = 32
    #: sasl_handshake: the client asked for a SASL mechanism the listener does not enable.
    UNSUPPORTED_SASL_MECHANISM = 33
    #: A SASL request out of order (sasl_authenticate before sasl_handshake, or a step too many).
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_CONFIG = 40
    INVALID_REQUEST = 42
    #: Magic < 2 on produce: triolog stores only RecordBatch v2.
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    #: An idempotent producer's batch does not follow its last sequence for the partition.
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    #: An idempotent producer's batch is older than the batches the broker remembers for it.
    DUPLICATE_SEQUENCE_NUMBER = 46
    #: A batch's producer epoch is older than the producer id's current epoch.
    INVALID_PRODUCER_EPOCH = 47
    #: The principal may not use the transactional id (ACLs).
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    #: An ACL or credential request to a broker that has no authorizer or SASL configured.
    SECURITY_DISABLED = 54
    #: The log directory failed an I/O operation and went offline.
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    #: The partition has no state for the producer id and the batch does not start at sequence 0.
    UNKNOWN_PRODUCER_ID = 59
    #: delete_groups: the group still has members.
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    #: join_group: the first join of a member gets its id with this error and joins again with it.
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    #: A batch is well-formed but breaks a rule (bad offsets, keyless record on a compacted topic).
    INVALID_RECORD = 87
    #: The request would pass the principal's controller mutation quota.
    THROTTLING_QUOTA_EXCEEDED = 89
    #: alter/describe user SCRAM credentials: the user has no credential for that mechanism.
    RESOURCE_NOT_FOUND = 91
    #: alter user SCRAM credentials: one user and mechanism named twice in one request.
    DUPLICATE_RESOURCE = 92
    #: A SCRAM credential the broker refuses: iterations outside 4096..16384, empty user, short salt.
    UNACCEPTABLE_CREDENTIAL = 93


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


class TopicAlreadyExistsError(TriologError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(TriologError):
    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(TriologError):
    code = ErrorCode.INVALID_REPLICATION_FACTOR


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


class TopicAuthorizationFailedError(TriologError):
    """The principal may not do this to the topic (Kafka's ACLs)."""

    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED


class GroupAuthorizationFailedError(TriologError):
    code = ErrorCode.GROUP_AUTHORIZATION_FAILED


class ClusterAuthorizationFailedError(TriologError):
    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
