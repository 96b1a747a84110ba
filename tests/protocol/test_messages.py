"""The message layer: every API's request and response through a client and a broker end wired
together with no network (as h11's tests do), every validation message, fuzzing, zero-copy parts."""

from __future__ import annotations

import dataclasses
import re
import types
from typing import Annotated, Any, Union, get_args, get_origin, get_type_hints

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.frames import (
    NEED_DATA,
    FrameDecoder,
    LocalProtocolError,
    RemoteProtocolError,
    encode_frame,
    frame_prefix,
)
from triolog.protocol.messages import (
    REQUEST_TYPES,
    RESPONSE_TYPES,
    SUPPORTED_APIS,
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterConfigsTopic,
    ApiVersionsRequest,
    ApiVersionsResponse,
    BrokerMetadata,
    ConfigEntry,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreateTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsPartition,
    DeleteRecordsPartitionResult,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteRecordsTopic,
    DeleteRecordsTopicResult,
    DeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeLogDirsTopic,
    LogDirPartition,
    LogDirPartitionError,
    LogDirResult,
    LogDirTopic,
    LogDirTopicError,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    ExternalBin,
    FetchPartition,
    FetchPartitionResult,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    FetchTopicResult,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    IntRange,
    JoinGroupMember,
    JoinGroupProtocol,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    ListOffsetsPartition,
    ListOffsetsPartitionResult,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
    ListOffsetsTopicResult,
    MetadataRequest,
    MemberIdentity,
    MemberResponse,
    MetadataResponse,
    NewTopic,
    OffsetCommitPartition,
    OffsetCommitPartitionResult,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetCommitTopicResult,
    OffsetFetchPartitionResult,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopic,
    OffsetFetchTopicResult,
    OneOf,
    PartitionMetadata,
    ProducePartition,
    ProducePartitionResult,
    ProduceRequest,
    ProduceResponse,
    ProduceTopic,
    ProduceTopicResult,
    Request,
    RequestError,
    Response,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
    TopicMetadata,
    TopicResult,
    Unique,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    error_response,
    pack_parts,
    parts_length,
)

INVALID = ErrorCode.INVALID_REQUEST

# A consumer group of two members reading the 4 partitions of "orders" with the range assignor.
# Member ids are Kafka's: the client id, "-", a UUID. The metadata and assignments are Kafka's
# ConsumerProtocol bytes, as a Kafka 3.x client writes them (the same bytes kafka-python encodes).
MEMBER_1 = "consumer-orders-app-1-0c4e3a9e-5d0b-4f4e-9b6a-1f2d8e7c6b5a"
MEMBER_2 = "consumer-orders-app-2-7a1b9c3d-2e4f-4a6b-8c0d-3e5f7a9b1c2d"
#: Subscription v3: topics ["orders"], user_data nil, owned_partitions [], generation_id -1, rack_id nil.
SUBSCRIPTION = bytes.fromhex("0003 00000001 0006 6f7264657273 ffffffff 00000000 ffffffff ffff")
#: Assignment v3: orders [0, 1] (and [2, 3]), user_data nil.
ASSIGNMENT_1 = bytes.fromhex("0003 00000001 0006 6f7264657273 00000002 00000000 00000001 ffffffff")
ASSIGNMENT_2 = bytes.fromhex("0003 00000001 0006 6f7264657273 00000002 00000002 00000003 ffffffff")

EXAMPLE_REQUESTS: dict[str, Request] = {
    "api_versions": ApiVersionsRequest(id=1, client_id="tests"),
    "metadata": MetadataRequest(id=2, topics=("orders", "payments")),
    "create_topics": CreateTopicsRequest(
        id=3,
        topics=(
            NewTopic(name="orders", num_partitions=3, replication_factor=1, configs={"cleanup.policy": "compact"}),
            NewTopic(name="placed", num_partitions=-1, replication_factor=-1, replica_assignment=((1, 2), (2, 1))),
        ),
        validate_only=True,
    ),
    "delete_topics": DeleteTopicsRequest(id=4, topics=("orders",)),
    "describe_configs": DescribeConfigsRequest(id=5, topics=("orders",), brokers=("0",)),
    "alter_configs": AlterConfigsRequest(
        id=6,
        topics=(AlterConfigsTopic(name="orders", configs={"retention.ms": "60000"}, delete=("segment.bytes",),
                                  append={"cleanup.policy": "compact"}),),
    ),
    "create_partitions": CreatePartitionsRequest(
        id=23, topics=(CreatePartitionsTopic(name="orders", count=6),), timeout_ms=30000, validate_only=True
    ),
    "produce": ProduceRequest(
        id=7,
        acks=-1,
        timeout_ms=30000,
        topics=(
            ProduceTopic(
                name="orders",
                partitions=(
                    ProducePartition(partition=0, records=b"\x00" * 70),
                    ProducePartition(partition=1, records=b"\x01" * 70),
                ),
            ),
        ),
    ),
    "fetch": FetchRequest(
        id=8,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=52428800,
        isolation_level=1,
        topics=(
            FetchTopic(
                name="orders",
                partitions=(
                    FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1048576),
                    FetchPartition(partition=1, fetch_offset=42, partition_max_bytes=1048576),
                ),
            ),
        ),
    ),
    "list_offsets": ListOffsetsRequest(
        id=9,
        topics=(
            ListOffsetsTopic(
                name="orders",
                partitions=(
                    ListOffsetsPartition(partition=0, timestamp=-2),
                    ListOffsetsPartition(partition=1, timestamp=1_700_000_000_000),
                ),
            ),
        ),
    ),
    "delete_records": DeleteRecordsRequest(
        id=10,
        topics=(DeleteRecordsTopic(name="orders", partitions=(DeleteRecordsPartition(partition=0, offset=-1),)),),
    ),
    "describe_log_dirs": DescribeLogDirsRequest(
        id=11, topics=(DescribeLogDirsTopic(name="orders", partitions=(0, 1)), DescribeLogDirsTopic(name="payments")),
    ),
    # An idempotent producer's first request, as Kafka's client sends it (no transactional id).
    "init_producer_id": InitProducerIdRequest(
        id=12, client_id="orders-producer", transaction_timeout_ms=2147483647, producer_id=-1, producer_epoch=-1
    ),
    "find_coordinator": FindCoordinatorRequest(id=13, client_id="consumer-orders-app-1", key="orders-app", key_type=0),
    # The second join of a new member, with the id its first join was given (MEMBER_ID_REQUIRED).
    "join_group": JoinGroupRequest(
        id=14,
        client_id="consumer-orders-app-1",
        group_id="orders-app",
        session_timeout_ms=45000,
        rebalance_timeout_ms=300000,
        member_id=MEMBER_1,
        protocol_type="consumer",
        protocols=(
            JoinGroupProtocol(name="range", metadata=SUBSCRIPTION),
            JoinGroupProtocol(name="roundrobin", metadata=SUBSCRIPTION),
        ),
    ),
    # The leader's sync: every member's assignment.
    "sync_group": SyncGroupRequest(
        id=15,
        group_id="orders-app",
        generation_id=3,
        member_id=MEMBER_1,
        protocol_type="consumer",
        protocol_name="range",
        assignments=(
            SyncGroupAssignment(member_id=MEMBER_1, assignment=ASSIGNMENT_1),
            SyncGroupAssignment(member_id=MEMBER_2, assignment=ASSIGNMENT_2),
        ),
    ),
    "heartbeat": HeartbeatRequest(id=16, group_id="orders-app", generation_id=3, member_id=MEMBER_1),
    "leave_group": LeaveGroupRequest(
        id=17,
        group_id="orders-app",
        members=(MemberIdentity(member_id=MEMBER_2, reason="the consumer is being closed"),),
    ),
    "offset_commit": OffsetCommitRequest(
        id=18,
        group_id="orders-app",
        generation_id=3,
        member_id=MEMBER_1,
        topics=(
            OffsetCommitTopic(
                name="orders",
                partitions=(
                    OffsetCommitPartition(partition=0, committed_offset=1042),
                    OffsetCommitPartition(partition=1, committed_offset=987, committed_metadata="batch 17"),
                ),
            ),
        ),
    ),
    "offset_fetch": OffsetFetchRequest(
        id=19, group_id="orders-app", topics=(OffsetFetchTopic(name="orders", partitions=(0, 1, 2)),)
    ),
    "list_groups": ListGroupsRequest(id=20, states_filter=("Stable", "Empty")),
    "describe_groups": DescribeGroupsRequest(id=21, groups=("orders-app", "billing")),
    "delete_groups": DeleteGroupsRequest(id=22, groups_names=("old-reports", "orders-app")),
    "sasl_handshake": m.SaslHandshakeRequest(id=23, mechanism="SCRAM-SHA-512"),
    "sasl_authenticate": m.SaslAuthenticateRequest(id=24, auth_bytes=b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL"),
    "create_acls": m.CreateAclsRequest(id=25, creations=(m.AclEntry(resource_type="TOPIC", resource_name="orders", pattern_type="LITERAL", principal="User:alice", host="*", operation="READ", permission_type="ALLOW"),)),
    "describe_acls": m.DescribeAclsRequest(id=26, resource_type="TOPIC", resource_name="orders", pattern_type="MATCH",
                                           principal="User:alice", host="*", operation="ANY", permission_type="ANY"),
    "delete_acls": m.DeleteAclsRequest(id=27, filters=(m.AclFilter(resource_type="TOPIC", resource_name="orders",
                                                                   pattern_type="LITERAL", principal="User:alice",
                                                                   host="*", operation="READ",
                                                                   permission_type="ALLOW"),)),
    "describe_user_scram_credentials": m.DescribeUserScramCredentialsRequest(id=28, users=("alice",)),
    "alter_user_scram_credentials": m.AlterUserScramCredentialsRequest(
        id=29, deletions=(m.ScramCredentialDeletion(name="bob", mechanism="SCRAM-SHA-256"),),
        upsertions=(m.ScramCredentialUpsertion(name="alice", mechanism="SCRAM-SHA-512", iterations=8192,
                                               salt=b"0123456789abcdef", salted_password=b"\x01" * 64),)),
    "describe_client_quotas": m.DescribeClientQuotasRequest(id=30, components=(
        m.QuotaFilterComponent(entity_type="user", match_type="exact", match="alice"),), strict=True),
    "alter_client_quotas": m.AlterClientQuotasRequest(id=31, validate_only=True, entries=(m.QuotaAlteration(
        entity=(m.QuotaEntityPart(entity_type="user", entity_name="alice"), m.QuotaEntityPart(entity_type="client-id")), ops=(m.QuotaOp(key="producer_byte_rate", value=1048576),
                             m.QuotaOp(key="consumer_byte_rate", remove=True))),)),
    "add_partitions_to_txn": m.AddPartitionsToTxnRequest(id=32, transactional_id="tx", producer_id=7, producer_epoch=2,
                                                         topics=(m.TxnTopic(name="t", partitions=(0, 1)),)),
    "add_offsets_to_txn": m.AddOffsetsToTxnRequest(id=33, transactional_id="tx", producer_id=7, producer_epoch=2, group_id="g"),
    "end_txn": m.EndTxnRequest(id=34, transactional_id="tx", producer_id=7, producer_epoch=2, committed=True),
    "txn_offset_commit": m.TxnOffsetCommitRequest(id=35, transactional_id="tx", group_id="g", producer_id=7, producer_epoch=2,
                                                  generation_id=4, member_id="m-1", group_instance_id="i-1", topics=(
        m.OffsetCommitTopic(name="t", partitions=(m.OffsetCommitPartition(partition=0, committed_offset=10,
                                                                          committed_leader_epoch=3, committed_metadata="x"),)),)),
    "write_txn_markers": m.WriteTxnMarkersRequest(id=36, markers=(m.TxnMarker(
        producer_id=7, producer_epoch=2, committed=False, topics=(m.TxnTopic(name="t", partitions=(0,)),), coordinator_epoch=5,
        transaction_version=2),)),
    "describe_transactions": m.DescribeTransactionsRequest(id=37, transactional_ids=("tx", "ty")),
    "list_transactions": m.ListTransactionsRequest(id=38, state_filters=("Ongoing",), producer_id_filters=(7,),
                                                   duration_filter_ms=60000),
    "describe_producers": m.DescribeProducersRequest(id=39, topics=(m.TxnTopic(name="t", partitions=(0,)),)),
}

EXAMPLE_RESPONSES: dict[str, Response] = {
    "api_versions": ApiVersionsResponse(id=1, broker_version="0.1.0"),
    "metadata": MetadataResponse(
        id=2,
        brokers=(BrokerMetadata(node_id=0, host="127.0.0.1", port=9092),),
        controller_id=0,
        topics=(
            TopicMetadata(
                name="orders",
                partitions=(PartitionMetadata(partition=0, leader=0, log_start_offset=0, high_watermark=17),),
            ),
            TopicMetadata(
                name="payments",
                error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                error_message="topic 'payments' does not exist",
            ),
        ),
    ),
    "create_topics": CreateTopicsResponse(
        id=3, topics=(CreateTopicResult(name="orders", num_partitions=3, configs={"cleanup.policy": "compact"}),)
    ),
    "delete_topics": DeleteTopicsResponse(id=4, topics=(TopicResult(name="orders"),)),
    "describe_configs": DescribeConfigsResponse(
        id=5,
        topics=(
            DescribeConfigsResult(
                name="orders",
                configs={
                    "cleanup.policy": ConfigEntry(value="compact", source="topic"),
                    "retention.ms": ConfigEntry(value="604800000", source="default"),
                },
            ),
        ),
        brokers=(
            DescribeConfigsResult(
                name="0",
                configs={
                    "log.retention.hours": ConfigEntry(value="24", source="broker", read_only=True),
                    "log.retention.ms": ConfigEntry(value=None, source="default", read_only=True),
                },
            ),
        ),
    ),
    "alter_configs": AlterConfigsResponse(
        id=6,
        topics=(
            TopicResult(
                name="orders", error_code=ErrorCode.INVALID_CONFIG, error_message="retention.ms must be a long"
            ),
        ),
    ),
    "create_partitions": CreatePartitionsResponse(
        id=23,
        topics=(
            TopicResult(
                name="orders",
                error_code=ErrorCode.INVALID_PARTITIONS,
                error_message="Topic currently has 8 partitions, which is higher than the requested 6.",
            ),
        ),
    ),
    "produce": ProduceResponse(
        id=7,
        topics=(
            ProduceTopicResult(
                name="orders",
                partitions=(
                    ProducePartitionResult(partition=0, base_offset=100, log_start_offset=0),
                    ProducePartitionResult(
                        partition=1, error_code=ErrorCode.CORRUPT_MESSAGE, error_message="batch CRC mismatch"
                    ),
                ),
            ),
        ),
    ),
    "fetch": FetchResponse(
        id=8,
        topics=(
            FetchTopicResult(
                name="orders",
                partitions=(
                    FetchPartitionResult(
                        partition=0, high_watermark=5, last_stable_offset=5, log_start_offset=0, records=b"\x00" * 80
                    ),
                ),
            ),
        ),
    ),
    "list_offsets": ListOffsetsResponse(
        id=9,
        topics=(
            ListOffsetsTopicResult(
                name="orders", partitions=(ListOffsetsPartitionResult(partition=0, timestamp=-1, offset=0),)
            ),
        ),
    ),
    "delete_records": DeleteRecordsResponse(
        id=10,
        topics=(
            DeleteRecordsTopicResult(
                name="orders", partitions=(DeleteRecordsPartitionResult(partition=0, low_watermark=5),)
            ),
        ),
    ),
    "describe_log_dirs": DescribeLogDirsResponse(
        id=11,
        log_dirs=(
            LogDirResult(path="/var/lib/triolog", total_bytes=10**12, usable_bytes=6 * 10**11, topics=(
                LogDirTopic(name="orders", partitions=(
                    LogDirPartition(partition=0, size_bytes=4096, segments=2, log_start_offset=0, log_end_offset=17),
                )),
            )),
            LogDirResult(path="/mnt/broken", error_code=ErrorCode.KAFKA_STORAGE_ERROR,
                         error_message="log directory /mnt/broken is offline after an I/O error"),
        ),
        errors=(
            LogDirTopicError(name="orders", partitions=(LogDirPartitionError(
                partition=1, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                error_message="partition 1 does not exist: topic 'orders' has partitions 0..0"),)),
            LogDirTopicError(name="payments", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             error_message="topic 'payments' does not exist"),
        ),
    ),
    "init_producer_id": InitProducerIdResponse(id=12, producer_id=4000, producer_epoch=0),
    "find_coordinator": FindCoordinatorResponse(id=13, node_id=0, host="127.0.0.1", port=9092),
    # The leader's answer: the members and their subscriptions, for it to run the assignor on.
    "join_group": JoinGroupResponse(
        id=14,
        generation_id=3,
        protocol_type="consumer",
        protocol_name="range",
        leader=MEMBER_1,
        member_id=MEMBER_1,
        members=(
            JoinGroupMember(member_id=MEMBER_1, metadata=SUBSCRIPTION),
            JoinGroupMember(member_id=MEMBER_2, metadata=SUBSCRIPTION),
        ),
    ),
    "sync_group": SyncGroupResponse(id=15, protocol_type="consumer", protocol_name="range", assignment=ASSIGNMENT_1),
    "heartbeat": HeartbeatResponse(id=16),
    "leave_group": LeaveGroupResponse(id=17, members=(MemberResponse(member_id=MEMBER_2),)),
    "offset_commit": OffsetCommitResponse(
        id=18,
        topics=(
            OffsetCommitTopicResult(
                name="orders",
                partitions=(OffsetCommitPartitionResult(partition=0), OffsetCommitPartitionResult(partition=1)),
            ),
        ),
    ),
    "offset_fetch": OffsetFetchResponse(
        id=19,
        topics=(
            OffsetFetchTopicResult(
                name="orders",
                partitions=(
                    OffsetFetchPartitionResult(partition=0, committed_offset=1042, metadata=""),
                    OffsetFetchPartitionResult(partition=1, committed_offset=987, metadata="batch 17"),
                    OffsetFetchPartitionResult(partition=2),  # nothing committed: -1
                ),
            ),
        ),
    ),
    "list_groups": ListGroupsResponse(
        id=20, groups=(ListedGroup(group_id="orders-app", protocol_type="consumer", group_state="Stable"),)
    ),
    "describe_groups": DescribeGroupsResponse(
        id=21,
        groups=(
            DescribedGroup(
                group_id="orders-app",
                group_state="Stable",
                protocol_type="consumer",
                protocol_data="range",
                members=(
                    DescribedGroupMember(member_id=MEMBER_1, client_id="consumer-orders-app-1",
                                         client_host="/127.0.0.1", member_metadata=SUBSCRIPTION,
                                         member_assignment=ASSIGNMENT_1),
                    DescribedGroupMember(member_id=MEMBER_2, client_id="consumer-orders-app-2",
                                         client_host="/127.0.0.1", member_metadata=SUBSCRIPTION,
                                         member_assignment=ASSIGNMENT_2),
                ),
            ),
            DescribedGroup(group_id="billing", group_state="Dead"),  # an unknown group
        ),
    ),
    "delete_groups": DeleteGroupsResponse(
        id=22,
        results=(
            DeletableGroupResult(group_id="old-reports"),
            DeletableGroupResult(group_id="orders-app", error_code=ErrorCode.NON_EMPTY_GROUP,
                                 error_message="group 'orders-app' has 2 members: only an empty group can be deleted"),
        ),
    ),
    "sasl_handshake": m.SaslHandshakeResponse(id=23, mechanisms=("SCRAM-SHA-256", "SCRAM-SHA-512")),
    "sasl_authenticate": m.SaslAuthenticateResponse(
        id=24, auth_bytes=b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096"),
    "create_acls": m.CreateAclsResponse(id=25, results=(m.AclResult(),)),
    "describe_acls": m.DescribeAclsResponse(id=26, acls=(m.AclEntry(resource_type="TOPIC", resource_name="orders", pattern_type="LITERAL", principal="User:alice", host="*", operation="READ", permission_type="ALLOW"),)),
    "delete_acls": m.DeleteAclsResponse(id=27, filter_results=(m.DeleteAclsFilterResult(matching_acls=(m.AclEntry(resource_type="TOPIC", resource_name="orders", pattern_type="LITERAL", principal="User:alice", host="*", operation="READ", permission_type="ALLOW"),)),)),
    "describe_user_scram_credentials": m.DescribeUserScramCredentialsResponse(id=28, results=(
        m.UserScramCredentials(user="alice", credential_infos=(
            m.CredentialInfo(mechanism="SCRAM-SHA-256", iterations=4096),
            m.CredentialInfo(mechanism="SCRAM-SHA-512", iterations=8192))),)),
    "alter_user_scram_credentials": m.AlterUserScramCredentialsResponse(id=29, results=(
        m.AlterUserScramCredentialsResult(user="bob", error_code=ErrorCode.RESOURCE_NOT_FOUND,
                                          error_message="Attempt to delete a user credential that does not exist: "
                                                        "bob SCRAM-SHA-256"),
        m.AlterUserScramCredentialsResult(user="alice"))),
    "describe_client_quotas": m.DescribeClientQuotasResponse(id=30, entries=(
        m.QuotaEntry(entity=(m.QuotaEntityPart(entity_type="user", entity_name="alice"), m.QuotaEntityPart(entity_type="client-id")), values={"producer_byte_rate": 1048576}),)),
    "alter_client_quotas": m.AlterClientQuotasResponse(id=31, entries=(m.QuotaAlterationResult(entity=(m.QuotaEntityPart(entity_type="user", entity_name="alice"), m.QuotaEntityPart(entity_type="client-id"))),)),
    "add_partitions_to_txn": m.AddPartitionsToTxnResponse(id=32, topics=(m.TxnTopicResult(name="t", partitions=(
        m.TxnPartitionResult(partition=0), m.TxnPartitionResult(partition=1, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                                error_message="no partition 1"))),)),
    "add_offsets_to_txn": m.AddOffsetsToTxnResponse(id=33),
    "end_txn": m.EndTxnResponse(id=34, producer_id=7, producer_epoch=3),
    "txn_offset_commit": m.TxnOffsetCommitResponse(id=35, topics=(m.OffsetCommitTopicResult(name="t", partitions=(
        m.OffsetCommitPartitionResult(partition=0),)),)),
    "write_txn_markers": m.WriteTxnMarkersResponse(id=36, markers=(m.TxnMarkerResult(producer_id=7, topics=(
        m.TxnTopicResult(name="t", partitions=(m.TxnPartitionResult(partition=0),)),)),)),
    "describe_transactions": m.DescribeTransactionsResponse(id=37, transactions=(
        m.TransactionDescription(transactional_id="tx", state="Ongoing", transaction_timeout_ms=60000,
                                 transaction_start_time_ms=1700000000000, producer_id=7, producer_epoch=2,
                                 topics=(m.TxnTopic(name="t", partitions=(0, 1)),)),
        m.TransactionDescription(transactional_id="ty", error_code=ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
                                 error_message="no such transactional id"))),
    "list_transactions": m.ListTransactionsResponse(id=38, transactions=(
        m.TransactionListing(transactional_id="tx", producer_id=7, state="Ongoing"),)),
    "describe_producers": m.DescribeProducersResponse(id=39, topics=(m.ProducersTopicResult(name="t", partitions=(
        m.ProducersPartitionResult(partition=0, active_producers=(m.ProducerState(
            producer_id=7, producer_epoch=2, last_sequence=41, last_timestamp=1700000000000, coordinator_epoch=5,
            current_txn_start_offset=100),)),)),)),
}


# --- helpers ---------------------------------------------------------------------------------


def carry(data: bytes, decoder: FrameDecoder, chunk: int) -> list[bytes]:
    """What the other end reads when ``data`` arrives ``chunk`` bytes at a time."""
    frames = []
    for start in range(0, len(data), chunk):
        decoder.receive_data(data[start : start + chunk])
        while (frame := decoder.next_frame()) is not NEED_DATA:
            frames.append(frame)
    return frames


def wire(request: Request) -> dict[str, Any]:
    """The request as the broker's msgpack decoder sees it, to be broken on purpose."""
    return msgpack.unpackb(encode_request(request), raw=False)


def refuse(doc: Any) -> RequestError:
    with pytest.raises(RequestError) as info:
        decode_request(msgpack.packb(doc, use_bin_type=True))
    return info.value


_PATH_TOKEN = re.compile(r"\.?([a-z_]+)|\[(\d+)\]|\['([^']*)'\]")


def path_keys(path: str) -> list[str | int]:
    """'topics[0].configs['a.b']' -> ['topics', 0, 'configs', 'a.b']"""
    keys: list[str | int] = []
    for name, index, key in _PATH_TOKEN.findall(path):
        keys.append(int(index) if index else name or key)
    assert "".join(m.group(0) for m in _PATH_TOKEN.finditer(path)) == path
    return keys


def replace(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    *parents, last = path_keys(path)
    node: Any = doc
    for key in parents:
        node = node[key]
    node[last] = value
    return doc


def delete(doc: dict[str, Any], path: str) -> dict[str, Any]:
    *parents, last = path_keys(path)
    node: Any = doc
    for key in parents:
        node = node[key]
    del node[last]
    return doc


def field_paths(doc: Any, path: str = "") -> set[str]:
    """Every map key and array element below the envelope, indices normalised to []."""
    paths = set()
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        if path == "" and key in ("api", "v", "id", "client_id"):
            continue
        if isinstance(key, int):
            child = f"{path}[]"
        elif path.endswith(("configs", "append", "subtract")):
            child = f"{path}['{key}']"
        else:
            child = f"{path}.{key}" if path else key
        paths.add(child)
        paths |= field_paths(value, child)
    return paths


# --- strategies derived from the schema: every API, every field ------------------------------

_SCALAR_STRATEGIES = {
    int: st.integers(),
    bool: st.booleans(),
    str: st.text(max_size=12),
    bytes: st.binary(max_size=40),
}


def strategy_for(tp: Any) -> st.SearchStrategy[Any]:
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        base, *constraints = args
        for constraint in constraints:
            if isinstance(constraint, IntRange):
                return st.integers(constraint.lo, constraint.hi)
            if isinstance(constraint, OneOf):
                return st.sampled_from(constraint.values)
            if isinstance(constraint, Unique):
                key = (lambda x: getattr(x, constraint.key)) if constraint.key else (lambda x: x)
                return st.lists(strategy_for(get_args(base)[0]), max_size=3, unique_by=key).map(tuple)
        return strategy_for(base)
    if origin in (Union, types.UnionType):
        options = [strategy_for(a) for a in args if a not in (type(None), ExternalBin)]
        return st.one_of(options + [st.none()] if type(None) in args else options)
    if origin is tuple:
        return st.lists(strategy_for(args[0]), max_size=3).map(tuple)
    if origin is dict:
        return st.dictionaries(st.text(max_size=12), strategy_for(args[1]), max_size=3)
    if dataclasses.is_dataclass(tp):
        hints = get_type_hints(tp, include_extras=True)
        fields = {}
        for f in dataclasses.fields(tp):
            if f.name == "v":
                fields[f.name] = st.just(1)
            elif f.name == "error_code":
                fields[f.name] = st.sampled_from(ErrorCode)
            elif f.name == "error_message":
                fields[f.name] = st.text(min_size=1, max_size=20)
            else:
                fields[f.name] = strategy_for(hints[f.name])
        return st.builds(tp, **fields)
    return _SCALAR_STRATEGIES[tp]


any_request = st.one_of([strategy_for(cls) for cls in REQUEST_TYPES.values()])
any_response = st.one_of([strategy_for(cls) for cls in RESPONSE_TYPES.values()])

def _msgpack_values(max_leaves: int, max_children: int):
    """Any msgpack document: scalars, lists and maps of them, up to ``max_leaves`` leaves."""
    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**64 - 1)
        | st.floats()
        | st.text(max_size=12)
        | st.binary(max_size=12),
        lambda children: st.lists(children, max_size=max_children)
        | st.dictionaries(st.text(max_size=12) | st.integers(-5, 5), children, max_size=max_children),
        max_leaves=max_leaves,
    )


msgpack_values = _msgpack_values(max_leaves=20, max_children=4)

_ALL_FIELD_NAMES = sorted(
    {f.name for cls in list(REQUEST_TYPES.values()) for f in dataclasses.fields(cls)} - {"id", "v"}
    | {"topics", "partitions", "name", "partition", "records", "fetch_offset", "configs", "timestamp", "offset"}
)
# Request-shaped maps with random values under known names: reaches every field's checks.
#: A request field's random value: msgpack_values, smaller. A map draws each of ~100 optional
#: fields, and every wrong one is refused at its own level, so depth adds time, not cases.
_field_values = _msgpack_values(max_leaves=6, max_children=3)

request_shaped_maps = st.fixed_dictionaries(
    {"api": st.sampled_from(list(SUPPORTED_APIS)), "v": st.just(1), "id": st.integers(0, 3)},
    optional={name: _field_values for name in _ALL_FIELD_NAMES},
)


# --- the envelope and the APIs ---------------------------------------------------------------


def test_supported_apis_lists_every_api_at_version_1():
    assert SUPPORTED_APIS == {
        name: (1, 1)
        for name in (
            "api_versions", "metadata", "create_topics", "delete_topics", "describe_configs",
            "alter_configs", "create_partitions", "produce", "fetch", "list_offsets", "delete_records", "describe_log_dirs",
            "init_producer_id", "find_coordinator", "join_group", "sync_group", "heartbeat", "leave_group",
            "offset_commit", "offset_fetch", "list_groups", "describe_groups", "delete_groups",
            "sasl_handshake", "sasl_authenticate", "create_acls", "describe_acls", "delete_acls",
            "describe_user_scram_credentials", "alter_user_scram_credentials", "describe_client_quotas",
            "alter_client_quotas", "add_partitions_to_txn", "add_offsets_to_txn", "end_txn", "txn_offset_commit",
            "write_txn_markers", "describe_transactions", "list_transactions", "describe_producers",
        )
    }
    assert REQUEST_TYPES.keys() == RESPONSE_TYPES.keys() == SUPPORTED_APIS.keys()
    assert EXAMPLE_REQUESTS.keys() == EXAMPLE_RESPONSES.keys() == SUPPORTED_APIS.keys()


def test_encode_request_writes_the_envelope_and_the_spec_field_names():
    doc = wire(EXAMPLE_REQUESTS["fetch"])
    assert doc == {
        "api": "fetch", "v": 1, "id": 8, "client_id": None,
        "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 52428800, "isolation_level": 1,
        "topics": [{"name": "orders", "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1048576},
            {"partition": 1, "fetch_offset": 42, "partition_max_bytes": 1048576},
        ]}],
    }  # fmt: skip


def test_encode_request_writes_records_as_bin_and_names_as_str():
    payload = encode_request(EXAMPLE_REQUESTS["produce"])
    raw = msgpack.unpackb(payload, raw=True)
    assert raw[b"topics"][0][b"name"] == b"orders"
    assert b"\xa6orders" in payload  # fixstr
    assert b"\xc4\x46" + b"\x00" * 70 in payload  # bin8 of 70 bytes


@pytest.mark.parametrize("api", list(SUPPORTED_APIS))
def test_client_and_broker_exchange_every_api_over_frames(api):
    to_broker, to_client = FrameDecoder(), FrameDecoder()
    request = EXAMPLE_REQUESTS[api]
    (frame,) = carry(encode_frame(encode_request(request)), to_broker, chunk=3)
    received = decode_request(frame)
    assert received == request
    assert type(received).api == api

    response = EXAMPLE_RESPONSES[api]
    assert response.id == received.id
    (frame,) = carry(encode_frame(encode_response(response)), to_client, chunk=5)
    answer = decode_response(frame, api)
    assert answer["id"] == request.id
    assert answer == msgpack.unpackb(encode_response(response), raw=False)


@settings(max_examples=300)
@given(request=any_request)
def test_decode_request_round_trips_any_valid_request(request):
    assert decode_request(encode_request(request)) == request


@settings(max_examples=300)
@given(response=any_response)
def test_decode_response_accepts_any_response_the_broker_can_encode(response):
    payload = encode_response(response)
    answer = decode_response(payload, type(response).api)
    assert answer["id"] == response.id
    assert answer["error_code"] == response.error_code


def test_decode_request_pipelined_frames_come_out_in_order_and_survive_a_bad_one():
    requests = list(EXAMPLE_REQUESTS.values())
    stream = b"".join(encode_frame(encode_request(r)) for r in requests[:5])
    stream += encode_frame(msgpack.packb([1, 2, 3]))
    stream += b"".join(encode_frame(encode_request(r)) for r in requests[5:])
    results: list[Any] = []
    for frame in carry(stream, FrameDecoder(), chunk=len(stream)):
        try:
            results.append(decode_request(frame))
        except RequestError as exc:
            results.append(exc.code)
    assert results == requests[:5] + [INVALID] + requests[5:]


def test_decode_request_fills_the_spec_defaults_of_optional_fields():
    assert decode_request(msgpack.packb({"api": "metadata", "v": 1, "id": 1})) == MetadataRequest(id=1)
    create = decode_request(msgpack.packb({
        "api": "create_topics", "v": 1, "id": 1,
        "topics": [{"name": "t", "num_partitions": 1, "replication_factor": -1}],
    }))  # fmt: skip
    assert create.client_id is None
    assert create.validate_only is False
    assert create.topics[0].configs == {}
    alter = decode_request(
        msgpack.packb({"api": "alter_configs", "v": 1, "id": 1, "topics": [{"name": "t", "configs": {}}]})
    )
    assert alter.topics[0].delete == ()
    fetch = decode_request(msgpack.packb(
        {"api": "fetch", "v": 1, "id": 1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 0, "topics": []}
    ))  # fmt: skip
    assert fetch.isolation_level == 0
    offsets = decode_request(msgpack.packb({"api": "list_offsets", "v": 1, "id": 1, "topics": []}))
    assert offsets.isolation_level == 0


def test_decode_request_nil_means_absent_for_optional_fields():
    doc = wire(EXAMPLE_REQUESTS["create_topics"])
    doc["validate_only"] = None
    doc["client_id"] = None
    doc["topics"][0]["configs"] = None
    request = decode_request(msgpack.packb(doc, use_bin_type=True))
    assert request.validate_only is False
    assert request.client_id is None
    assert request.topics[0].configs == {}


def test_decode_request_metadata_nil_topics_means_all_and_empty_means_none():
    assert decode_request(msgpack.packb({"api": "metadata", "v": 1, "id": 1, "topics": None})).topics is None
    assert decode_request(msgpack.packb({"api": "metadata", "v": 1, "id": 1, "topics": []})).topics == ()


def test_decode_request_ignores_unknown_keys_at_every_level():
    doc = wire(EXAMPLE_REQUESTS["produce"])
    doc["future_flag"] = {"anything": [1, 2, {3: 4}]}
    doc[7] = "non-str keys too"
    doc["topics"][0]["partitions"][0]["producer_hint"] = b"x"
    assert decode_request(msgpack.packb(doc, use_bin_type=True)) == EXAMPLE_REQUESTS["produce"]


def test_request_expects_response_except_produce_with_acks_0():
    assert EXAMPLE_REQUESTS["produce"].expects_response
    assert EXAMPLE_REQUESTS["fetch"].expects_response
    assert not dataclasses.replace(EXAMPLE_REQUESTS["produce"], acks=0).expects_response


# --- request-level errors: the envelope ------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "request must be a map, got an empty frame"),
        (msgpack.packb([1, 2]), "request must be a map, got array"),
        (msgpack.packb(5), "request must be a map, got int"),
        (msgpack.packb(None), "request must be a map, got nil"),
        (msgpack.packb(b"x", use_bin_type=True), "request must be a map, got bin"),
    ],
)
def test_decode_request_refuses_a_document_that_is_not_a_map(payload, message):
    with pytest.raises(RequestError) as info:
        decode_request(payload)
    assert (info.value.code, info.value.message, info.value.request_id) == (INVALID, message, None)


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1",  # never used
        b"\x81\xa2id",  # truncated map
        msgpack.packb({"id": 1}) + b"\x00",  # trailing bytes
        b"\x81\xa2id\xa1\xff",  # invalid UTF-8 in a str
        b"\x91" * 100_000 + b"\x00",  # nested too deeply
        b"\x81\x80\x01",  # a map used as a map key
        b"\xd6\xff\x00",  # truncated ext
    ],
)
def test_decode_request_refuses_bytes_that_are_not_msgpack(payload):
    with pytest.raises(RequestError) as info:
        decode_request(payload)
    assert info.value.code == INVALID
    assert info.value.request_id is None
    assert info.value.message.startswith("request is not a valid msgpack document")


@pytest.mark.parametrize(
    ("id_value", "message"),
    [
        ("missing", "field 'id' is missing"),
        (None, "field 'id' is required, got nil"),
        (-1, "field 'id' must be in [0, 2147483647], got -1"),
        (2**31, "field 'id' must be in [0, 2147483647], got 2147483648"),
        (True, "field 'id' must be an int, got bool"),
        ("7", "field 'id' must be an int, got str"),
        (1.0, "field 'id' must be an int, got float"),
    ],
)
def test_decode_request_refuses_a_bad_id_without_echoing_it(id_value, message):
    doc = wire(EXAMPLE_REQUESTS["api_versions"])
    if id_value == "missing":
        del doc["id"]
    else:
        doc["id"] = id_value
    error = refuse(doc)
    assert (error.code, error.message, error.request_id, error.api) == (INVALID, message, None, None)


def test_decode_request_accepts_the_largest_id():
    assert decode_request(encode_request(ApiVersionsRequest(id=2**31 - 1))).id == 2**31 - 1


@pytest.mark.parametrize(
    ("api", "message"),
    [
        ("missing", "field 'api' is missing"),
        (b"produce", "field 'api' must be a str, got bin"),
        (3, "field 'api' must be a str, got int"),
        ("consume", "field 'api' names no known API: 'consume' (known: " + ", ".join(SUPPORTED_APIS) + ")"),
    ],
)
def test_decode_request_refuses_a_bad_api_and_echoes_the_id(api, message):
    doc = {"v": 1, "id": 77}
    if api != "missing":
        doc["api"] = api
    error = refuse(doc)
    assert (error.code, error.message, error.request_id, error.api) == (INVALID, message, 77, None)


@pytest.mark.parametrize("version", [0, 2, -1, 2**40])
def test_decode_request_refuses_an_unsupported_version_with_its_own_code(version):
    doc = wire(EXAMPLE_REQUESTS["fetch"]) | {"v": version}
    error = refuse(doc)
    assert (error.code, error.request_id, error.api) == (ErrorCode.UNSUPPORTED_VERSION, 8, "fetch")
    assert error.message == f"api 'fetch' does not support v {version}: supported versions are 1 to 1"


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ("missing", "field 'v' is missing"),
        ("1", "field 'v' must be an int, got str"),
        (True, "field 'v' must be an int, got bool"),
    ],
)
def test_decode_request_refuses_a_mistyped_version_as_invalid(version, message):
    doc = wire(EXAMPLE_REQUESTS["fetch"])
    if version == "missing":
        del doc["v"]
    else:
        doc["v"] = version
    error = refuse(doc)
    assert (error.code, error.message, error.request_id, error.api) == (INVALID, message, 8, "fetch")


def test_decode_request_refuses_a_client_id_that_is_not_a_str():
    error = refuse(wire(EXAMPLE_REQUESTS["api_versions"]) | {"client_id": b"bin"})
    assert error.message == "field 'client_id' must be a str, got bin"
    assert (error.request_id, error.api) == (1, "api_versions")


# --- request-level errors: every field of every API ------------------------------------------

#: Each API's fields as they appear in EXAMPLE_REQUESTS, with the msgpack type docs/protocol.md gives.
FIELD_TYPES: dict[str, dict[str, str]] = {
    "api_versions": {},
    "metadata": {"topics": "an array", "topics[1]": "a str", "allow_auto_topic_creation": "a bool"},
    "create_topics": {
        "topics": "an array",
        "topics[0]": "a map",
        "topics[0].name": "a str",
        "topics[0].num_partitions": "an int",
        "topics[0].replication_factor": "an int",
        "topics[0].configs": "a map",
        "topics[0].configs['cleanup.policy']": "a str",
        "topics[1].replica_assignment": "an array",
        "topics[1].replica_assignment[0]": "an array",
        "topics[1].replica_assignment[0][0]": "an int",
        "validate_only": "a bool",
    },
    "delete_topics": {"topics": "an array", "topics[0]": "a str"},
    "describe_configs": {"topics": "an array", "topics[0]": "a str", "brokers": "an array", "brokers[0]": "a str"},
    "alter_configs": {
        "topics": "an array",
        "topics[0]": "a map",
        "topics[0].name": "a str",
        "topics[0].configs": "a map",
        "topics[0].configs['retention.ms']": "a str",
        "topics[0].delete": "an array",
        "topics[0].delete[0]": "a str",
        "topics[0].replace": "a bool",
        "topics[0].append": "a map",
        "topics[0].append['cleanup.policy']": "a str",
        "topics[0].subtract": "a map",
        "validate_only": "a bool",
    },
    "create_partitions": {
        "topics": "an array",
        "topics[0]": "a map",
        "topics[0].name": "a str",
        "topics[0].count": "an int",
        "timeout_ms": "an int",
        "validate_only": "a bool",
    },
    "produce": {
        "acks": "an int",
        "timeout_ms": "an int",
        "topics": "an array",
        "topics[0]": "a map",
        "topics[0].name": "a str",
        "topics[0].partitions": "an array",
        "topics[0].partitions[1]": "a map",
        "topics[0].partitions[1].partition": "an int",
        "topics[0].partitions[1].records": "a bin",
        "transactional_id": "a str",
    },
    "fetch": {
        "max_wait_ms": "an int",
        "min_bytes": "an int",
        "max_bytes": "an int",
        "isolation_level": "an int",
        "topics": "an array",
        "topics[0]": "a map",
        "topics[0].name": "a str",
        "topics[0].partitions": "an array",
        "topics[0].partitions[1]": "a map",
        "topics[0].partitions[1].partition": "an int",
        "topics[0].partitions[1].fetch_offset": "an int",
        "topics[0].partitions[1].partition_max_bytes": "an int",
    },
    "list_offsets": {
        "isolation_level": "an int",
        "topics": "an array",
        "topics[0]": "a map",
        "topics[0].name": "a str",
        "topics[0].partitions": "an array",
        "topics[0].partitions[1]": "a map",
        "topics[0].partitions[1].partition": "an int",
        "topics[0].partitions[1].timestamp": "an int",
    },
    "delete_records": {
        "topics": "an array",
        "topics[0]": "a map",
        "topics[0].name": "a str",
        "topics[0].partitions": "an array",
        "topics[0].partitions[0]": "a map",
        "topics[0].partitions[0].partition": "an int",
        "topics[0].partitions[0].offset": "an int",
    },
    "describe_log_dirs": {
        "topics": "an array",
        "topics[0]": "a map",
        "topics[0].name": "a str",
        "topics[0].partitions": "an array",
        "topics[0].partitions[1]": "an int",
    },
    "init_producer_id": {
        "transactional_id": "a str",
        "transaction_timeout_ms": "an int",
        "producer_id": "an int",
        "producer_epoch": "an int",
    },
    "find_coordinator": {"key": "a str", "key_type": "an int"},
    "join_group": {
        "group_id": "a str",
        "session_timeout_ms": "an int",
        "rebalance_timeout_ms": "an int",
        "member_id": "a str",
        "group_instance_id": "a str",
        "protocol_type": "a str",
        "protocols": "an array",
        "protocols[1]": "a map",
        "protocols[1].name": "a str",
        "protocols[1].metadata": "a bin",
        "reason": "a str",
    },
    "sync_group": {
        "group_id": "a str",
        "generation_id": "an int",
        "member_id": "a str",
        "group_instance_id": "a str",
        "protocol_type": "a str",
        "protocol_name": "a str",
        "assignments": "an array",
        "assignments[1]": "a map",
        "assignments[1].member_id": "a str",
        "assignments[1].assignment": "a bin",
    },
    "heartbeat": {"group_id": "a str", "generation_id": "an int", "member_id": "a str", "group_instance_id": "a str"},
    "leave_group": {
        "group_id": "a str",
        "members": "an array",
        "members[0]": "a map",
        "members[0].member_id": "a str",
        "members[0].group_instance_id": "a str",
        "members[0].reason": "a str",
    },
    "offset_commit": {
        "group_id": "a str",
        "generation_id": "an int",
        "member_id": "a str",
        "group_instance_id": "a str",
        "topics": "an array",
        "topics[0]": "a map",
        "topics[0].name": "a str",
        "topics[0].partitions": "an array",
        "topics[0].partitions[1]": "a map",
        "topics[0].partitions[1].partition": "an int",
        "topics[0].partitions[1].committed_offset": "an int",
        "topics[0].partitions[1].committed_leader_epoch": "an int",
        "topics[0].partitions[1].committed_metadata": "a str",
    },
    "offset_fetch": {
        "group_id": "a str",
        "topics": "an array",
        "topics[0]": "a map",
        "topics[0].name": "a str",
        "topics[0].partitions": "an array",
        "topics[0].partitions[2]": "an int",
        "require_stable": "a bool",
    },
    "list_groups": {"states_filter": "an array", "states_filter[1]": "a str"},
    "describe_groups": {"groups": "an array", "groups[1]": "a str"},
    "delete_groups": {"groups_names": "an array", "groups_names[0]": "a str"},
    "sasl_handshake": {"mechanism": "a str"},
    "sasl_authenticate": {"auth_bytes": "a bin"},
    "create_acls": {"creations": "an array", "creations[0]": "a map", "creations[0].resource_type": "a str",
                    "creations[0].resource_name": "a str", "creations[0].pattern_type": "a str",
                    "creations[0].principal": "a str", "creations[0].host": "a str", "creations[0].operation": "a str",
                    "creations[0].permission_type": "a str"},
    "describe_acls": {"resource_type": "a str", "resource_name": "a str", "pattern_type": "a str",
                      "principal": "a str", "host": "a str", "operation": "a str", "permission_type": "a str"},
    "delete_acls": {"filters": "an array", "filters[0]": "a map", "filters[0].resource_type": "a str",
                    "filters[0].resource_name": "a str", "filters[0].pattern_type": "a str",
                    "filters[0].principal": "a str", "filters[0].host": "a str", "filters[0].operation": "a str",
                    "filters[0].permission_type": "a str"},
    "describe_user_scram_credentials": {"users": "an array", "users[0]": "a str"},
    "alter_user_scram_credentials": {"deletions": "an array", "deletions[0]": "a map", "deletions[0].name": "a str",
                                     "deletions[0].mechanism": "a str", "upsertions": "an array",
                                     "upsertions[0]": "a map", "upsertions[0].name": "a str",
                                     "upsertions[0].mechanism": "a str", "upsertions[0].iterations": "an int",
                                     "upsertions[0].salt": "a bin", "upsertions[0].salted_password": "a bin"},
    "describe_client_quotas": {"components": "an array", "components[0]": "a map",
                               "components[0].entity_type": "a str", "components[0].match_type": "a str",
                               "components[0].match": "a str", "strict": "a bool"},
    "alter_client_quotas": {"entries": "an array", "entries[0]": "a map", "entries[0].entity": "an array",
                            "entries[0].entity[0]": "a map", "entries[0].entity[0].entity_type": "a str",
                            "entries[0].entity[0].entity_name": "a str", "entries[0].ops": "an array",
                            "entries[0].ops[0]": "a map", "entries[0].ops[0].key": "a str",
                            "entries[0].ops[0].value": "an int", "entries[0].ops[1].remove": "a bool",
                            "validate_only": "a bool"},
    "add_partitions_to_txn": {"transactional_id": "a str", "producer_id": "an int", "producer_epoch": "an int",
                              "topics": "an array", "topics[0]": "a map", "topics[0].name": "a str",
                              "topics[0].partitions": "an array", "topics[0].partitions[0]": "an int",
                              "verify_only": "a bool"},
    "add_offsets_to_txn": {"transactional_id": "a str", "producer_id": "an int", "producer_epoch": "an int",
                           "group_id": "a str"},
    "end_txn": {"transactional_id": "a str", "producer_id": "an int", "producer_epoch": "an int", "committed": "a bool"},
    "txn_offset_commit": {"transactional_id": "a str", "group_id": "a str", "producer_id": "an int",
                          "producer_epoch": "an int", "generation_id": "an int", "member_id": "a str",
                          "group_instance_id": "a str", "topics": "an array", "topics[0]": "a map", "topics[0].name": "a str",
                          "topics[0].partitions": "an array", "topics[0].partitions[0]": "a map",
                          "topics[0].partitions[0].partition": "an int",
                          "topics[0].partitions[0].committed_offset": "an int",
                          "topics[0].partitions[0].committed_leader_epoch": "an int",
                          "topics[0].partitions[0].committed_metadata": "a str"},
    "write_txn_markers": {"markers": "an array", "markers[0]": "a map", "markers[0].producer_id": "an int",
                          "markers[0].producer_epoch": "an int", "markers[0].committed": "a bool",
                          "markers[0].topics": "an array", "markers[0].topics[0]": "a map",
                          "markers[0].topics[0].name": "a str", "markers[0].topics[0].partitions": "an array",
                          "markers[0].topics[0].partitions[0]": "an int", "markers[0].coordinator_epoch": "an int",
                          "markers[0].transaction_version": "an int"},
    "describe_transactions": {"transactional_ids": "an array", "transactional_ids[0]": "a str"},
    "list_transactions": {"state_filters": "an array", "state_filters[0]": "a str", "producer_id_filters": "an array",
                          "producer_id_filters[0]": "an int", "duration_filter_ms": "an int"},
    "describe_producers": {"topics": "an array", "topics[0]": "a map", "topics[0].name": "a str",
                           "topics[0].partitions": "an array", "topics[0].partitions[0]": "an int"},
}
#: Fields a request may leave out (or send as nil), with the value the broker then uses.
OPTIONAL_FIELDS: dict[tuple[str, str], Any] = {
    ("metadata", "topics"): None,
    ("metadata", "allow_auto_topic_creation"): True,
    ("create_topics", "validate_only"): False,
    ("create_topics", "topics[0].configs"): {},
    ("create_topics", "topics[1].replica_assignment"): None,
    ("describe_configs", "topics"): (),
    ("describe_configs", "brokers"): (),
    ("alter_configs", "topics[0].delete"): (),
    ("alter_configs", "topics[0].replace"): False,
    ("alter_configs", "topics[0].append"): {},
    ("alter_configs", "topics[0].subtract"): {},
    ("alter_configs", "validate_only"): False,
    ("create_partitions", "timeout_ms"): 60000,
    ("create_partitions", "validate_only"): False,
    ("fetch", "isolation_level"): 0,
    ("list_offsets", "isolation_level"): 0,
    ("describe_log_dirs", "topics"): None,
    ("describe_log_dirs", "topics[0].partitions"): None,
    ("init_producer_id", "transactional_id"): None,
    ("produce", "transactional_id"): None,
    ("add_partitions_to_txn", "verify_only"): False,
    ("init_producer_id", "transaction_timeout_ms"): -1,
    ("init_producer_id", "producer_id"): -1,
    ("init_producer_id", "producer_epoch"): -1,
    ("find_coordinator", "key_type"): 0,
    ("join_group", "rebalance_timeout_ms"): -1,
    ("join_group", "member_id"): "",
    ("join_group", "group_instance_id"): None,
    ("join_group", "reason"): None,
    ("sync_group", "group_instance_id"): None,
    ("sync_group", "protocol_type"): None,
    ("sync_group", "protocol_name"): None,
    ("sync_group", "assignments"): (),
    ("heartbeat", "group_instance_id"): None,
    ("leave_group", "members[0].group_instance_id"): None,
    ("leave_group", "members[0].reason"): None,
    ("offset_commit", "generation_id"): -1,
    ("offset_commit", "member_id"): "",
    ("offset_commit", "group_instance_id"): None,
    ("offset_commit", "topics[0].partitions[1].committed_leader_epoch"): -1,
    ("offset_commit", "topics[0].partitions[1].committed_metadata"): None,
    ("offset_fetch", "topics"): None,
    ("offset_fetch", "require_stable"): False,
    ("list_groups", "states_filter"): (),
    ("create_acls", "creations[0].pattern_type"): "LITERAL",
    ("create_acls", "creations[0].host"): "*",
    ("describe_acls", "resource_type"): "ANY",
    ("describe_acls", "resource_name"): None,
    ("describe_acls", "pattern_type"): "ANY",
    ("describe_acls", "principal"): None,
    ("describe_acls", "host"): None,
    ("describe_acls", "operation"): "ANY",
    ("describe_acls", "permission_type"): "ANY",
    ("delete_acls", "filters[0].resource_type"): "ANY",
    ("delete_acls", "filters[0].resource_name"): None,
    ("delete_acls", "filters[0].pattern_type"): "ANY",
    ("delete_acls", "filters[0].principal"): None,
    ("delete_acls", "filters[0].host"): None,
    ("delete_acls", "filters[0].operation"): "ANY",
    ("delete_acls", "filters[0].permission_type"): "ANY",
    ("describe_user_scram_credentials", "users"): None,
    ("alter_user_scram_credentials", "deletions"): (),
    ("alter_user_scram_credentials", "upsertions"): (),
    ("describe_client_quotas", "components"): (),
    ("describe_client_quotas", "components[0].match_type"): "exact",
    ("describe_client_quotas", "components[0].match"): None,
    ("describe_client_quotas", "strict"): False,
    ("alter_client_quotas", "entries[0].entity[0].entity_name"): None,
    ("alter_client_quotas", "entries[0].ops[0].value"): 0,
    ("alter_client_quotas", "entries[0].ops[1].remove"): False,
    ("alter_client_quotas", "validate_only"): False,
    ("txn_offset_commit", "generation_id"): -1,
    ("txn_offset_commit", "member_id"): "",
    ("txn_offset_commit", "group_instance_id"): None,
    ("txn_offset_commit", "topics[0].partitions[0].committed_leader_epoch"): -1,
    ("txn_offset_commit", "topics[0].partitions[0].committed_metadata"): None,
    ("write_txn_markers", "markers[0].transaction_version"): 0,
    ("list_transactions", "state_filters"): (),
    ("list_transactions", "producer_id_filters"): (),
    ("list_transactions", "duration_filter_ms"): -1,
}
# A value of another msgpack type for each expected type: str for bin and bin for str, an int
# for a bool, a map for an array.
WRONG_VALUE = {"an int": ("7", "str"), "a str": (b"x", "bin"), "a bin": ("x", "str"), "a bool": (1, "int"),
               "an array": ({"a": 1}, "map"), "a map": ([1], "array")}  # fmt: skip

TYPED_FIELDS = [(api, path, expected) for api, paths in FIELD_TYPES.items() for path, expected in paths.items()]
#: Fields proper (map keys of the schema), as opposed to array elements and config entries.
NAMED_FIELDS = [(api, path) for api, path, _ in TYPED_FIELDS if not path.endswith("]")]


@pytest.mark.parametrize("api", list(SUPPORTED_APIS))
def test_field_types_table_covers_every_field_of_the_examples(api):
    normalise = lambda path: re.sub(r"\[\d+\]", "[]", path)  # noqa: E731
    assert field_paths(wire(EXAMPLE_REQUESTS[api])) == {normalise(p) for p in FIELD_TYPES[api]}


@pytest.mark.parametrize(("api", "path", "expected"), TYPED_FIELDS)
def test_decode_request_names_the_field_and_both_types_when_mistyped(api, path, expected):
    value, got = WRONG_VALUE[expected]
    error = refuse(replace(wire(EXAMPLE_REQUESTS[api]), path, value))
    assert error.message == f"field '{path}' must be {expected}, got {got}"
    assert (error.code, error.request_id, error.api) == (INVALID, EXAMPLE_REQUESTS[api].id, api)


@pytest.mark.parametrize(("api", "path"), [(a, p) for a, p, e in TYPED_FIELDS if e == "an int"])
def test_decode_request_does_not_take_a_bool_for_an_int(api, path):
    error = refuse(replace(wire(EXAMPLE_REQUESTS[api]), path, True))
    assert error.message == f"field '{path}' must be an int, got bool"


@pytest.mark.parametrize(("api", "path"), [f for f in NAMED_FIELDS if f not in OPTIONAL_FIELDS])
def test_decode_request_refuses_a_missing_or_nil_required_field(api, path):
    assert refuse(delete(wire(EXAMPLE_REQUESTS[api]), path)).message == f"field '{path}' is missing"
    assert refuse(replace(wire(EXAMPLE_REQUESTS[api]), path, None)).message == f"field '{path}' is required, got nil"


@pytest.mark.parametrize(("api", "path"), list(OPTIONAL_FIELDS))
def test_decode_request_uses_the_default_for_a_missing_or_nil_optional_field(api, path):
    for doc in (delete(wire(EXAMPLE_REQUESTS[api]), path), replace(wire(EXAMPLE_REQUESTS[api]), path, None)):
        request = decode_request(msgpack.packb(doc, use_bin_type=True))
        node: Any = request
        for key in path_keys(path):
            node = node[key] if isinstance(key, int) else getattr(node, key)
        assert node == OPTIONAL_FIELDS[api, path]


INT32 = "in [-2147483648, 2147483647]"
INT64 = "in [-9223372036854775808, 9223372036854775807]"
NON_NEGATIVE = "in [0, 2147483647]"


@pytest.mark.parametrize(
    ("api", "path", "value", "message"),
    [
        ("produce", "acks", 2, "must be one of 0, 1, -1, got 2"),
        ("produce", "acks", -2, "must be one of 0, 1, -1, got -2"),
        ("produce", "timeout_ms", -1, f"must be {NON_NEGATIVE}, got -1"),
        ("produce", "topics[0].partitions[1].partition", 2**31, f"must be {INT32}, got 2147483648"),
        ("fetch", "max_wait_ms", -1, f"must be {NON_NEGATIVE}, got -1"),
        ("fetch", "min_bytes", -1, f"must be {NON_NEGATIVE}, got -1"),
        ("fetch", "max_bytes", 2**31, f"must be {NON_NEGATIVE}, got 2147483648"),
        ("fetch", "isolation_level", 2, "must be one of 0, 1, got 2"),
        ("fetch", "topics[0].partitions[1].fetch_offset", 2**63, f"must be {INT64}, got 9223372036854775808"),
        ("fetch", "topics[0].partitions[1].partition_max_bytes", -1, f"must be {NON_NEGATIVE}, got -1"),
        ("fetch", "topics[0].partitions[1].partition", -(2**31) - 1, f"must be {INT32}, got -2147483649"),
        ("list_offsets", "isolation_level", -1, "must be one of 0, 1, got -1"),
        ("list_offsets", "topics[0].partitions[1].timestamp", -4,
         "must be -1 (latest), -2 (earliest), -3 (max timestamp) or a time in ms, got -4"),
        ("create_topics", "topics[0].num_partitions", 2**31, f"must be {INT32}, got 2147483648"),
        ("create_topics", "topics[0].replication_factor", 2**15, "must be in [-32768, 32767], got 32768"),
        ("delete_records", "topics[0].partitions[0].offset", 2**64 - 1, f"must be {INT64}, got 18446744073709551615"),
        ("init_producer_id", "producer_epoch", 2**15, "must be in [-32768, 32767], got 32768"),
        ("init_producer_id", "producer_id", 2**63, f"must be {INT64}, got 9223372036854775808"),
        ("find_coordinator", "key_type", 2, "must be one of 0, 1, got 2"),
        ("join_group", "session_timeout_ms", 2**31, f"must be {INT32}, got 2147483648"),
        ("sync_group", "generation_id", -(2**31) - 1, f"must be {INT32}, got -2147483649"),
        ("offset_commit", "topics[0].partitions[1].committed_offset", 2**63,
         f"must be {INT64}, got 9223372036854775808"),
    ],
)  # fmt: skip
def test_decode_request_refuses_values_outside_their_range(api, path, value, message):
    error = refuse(replace(wire(EXAMPLE_REQUESTS[api]), path, value))
    assert error.message == f"field '{path}' {message}"
    assert (error.code, error.request_id) == (INVALID, EXAMPLE_REQUESTS[api].id)


@pytest.mark.parametrize(
    ("api", "path", "value", "message"),
    [
        ("metadata", "topics", ["a", "b", "a"], "field 'topics[2]' repeats 'a', already given in topics[0]"),
        ("delete_topics", "topics", ["a", "a"], "field 'topics[1]' repeats 'a', already given in topics[0]"),
        ("describe_configs", "topics", ["x", "a", "a"], "field 'topics[2]' repeats 'a', already given in topics[1]"),
        ("alter_configs", "topics[0].delete", ["k", "k"],
         "field 'topics[0].delete[1]' repeats 'k', already given in topics[0].delete[0]"),
        ("produce", "topics[0].partitions[1].partition", 0,
         "field 'topics[0].partitions[1].partition' repeats 0, already given in topics[0].partitions[0]"),
        ("fetch", "topics[0].partitions[1].partition", 0,
         "field 'topics[0].partitions[1].partition' repeats 0, already given in topics[0].partitions[0]"),
        ("list_offsets", "topics[0].partitions[1].partition", 0,
         "field 'topics[0].partitions[1].partition' repeats 0, already given in topics[0].partitions[0]"),
        ("join_group", "protocols[1].name", "range",
         "field 'protocols[1].name' repeats 'range', already given in protocols[0]"),
        ("sync_group", "assignments[1].member_id", MEMBER_1,
         f"field 'assignments[1].member_id' repeats '{MEMBER_1}', already given in assignments[0]"),
        ("offset_commit", "topics[0].partitions[1].partition", 0,
         "field 'topics[0].partitions[1].partition' repeats 0, already given in topics[0].partitions[0]"),
        ("offset_fetch", "topics[0].partitions[2]", 1,
         "field 'topics[0].partitions[2]' repeats 1, already given in topics[0].partitions[1]"),
        ("describe_groups", "groups", ["g", "g"], "field 'groups[1]' repeats 'g', already given in groups[0]"),
        ("delete_groups", "groups_names", ["g", "g"],
         "field 'groups_names[1]' repeats 'g', already given in groups_names[0]"),
    ],
)  # fmt: skip
def test_decode_request_refuses_a_topic_or_partition_given_twice(api, path, value, message):
    error = refuse(replace(wire(EXAMPLE_REQUESTS[api]), path, value))
    assert (error.code, error.message) == (INVALID, message)


@pytest.mark.parametrize(
    "api", ["create_topics", "alter_configs", "produce", "fetch", "list_offsets", "delete_records", "offset_commit",
            "offset_fetch"]
)
def test_decode_request_refuses_the_same_topic_entry_twice(api):
    doc = wire(EXAMPLE_REQUESTS[api])
    doc["topics"] = [doc["topics"][0], doc["topics"][0]]
    assert refuse(doc).message == "field 'topics[1].name' repeats 'orders', already given in topics[0]"


def test_decode_request_refuses_config_maps_with_non_str_keys():
    doc = replace(wire(EXAMPLE_REQUESTS["create_topics"]), "topics[0].configs", {1: "x"})
    assert refuse(doc).message == "field 'topics[0].configs' must have str keys, got int"


def test_decode_request_quotes_long_values_briefly():
    error = refuse({"api": "x" * 10_000, "v": 1, "id": 1})
    quoted, _, known = error.message.partition(" (known: ")
    assert known == ", ".join(SUPPORTED_APIS) + ")"  # the list of APIs is the useful part
    assert len(quoted) < 120 and "x" * 100 not in quoted


@pytest.mark.parametrize(
    ("api", "path", "value"),
    [
        ("create_topics", "topics[0].name", "bad/name"),  # INVALID_TOPIC_EXCEPTION
        ("create_topics", "topics[0].name", ""),
        ("create_topics", "topics[0].num_partitions", 0),  # INVALID_PARTITIONS
        ("create_topics", "topics[0].num_partitions", -1),  # the broker default
        ("create_topics", "topics[0].replication_factor", 3),  # INVALID_REPLICATION_FACTOR
        ("create_topics", "topics[0].configs", {"no.such.key": "?"}),  # INVALID_CONFIG
        ("produce", "topics[0].partitions[1].partition", -1),  # UNKNOWN_TOPIC_OR_PARTITION
        ("produce", "topics[0].partitions[1].records", b""),  # CORRUPT_MESSAGE
        ("fetch", "topics[0].partitions[1].fetch_offset", -5),  # OFFSET_OUT_OF_RANGE
        ("list_offsets", "topics[0].partitions[1].timestamp", -3),
        ("delete_records", "topics[0].partitions[0].offset", -2),  # OFFSET_OUT_OF_RANGE
        ("metadata", "topics", ["..", "x" * 300]),  # INVALID_TOPIC_EXCEPTION per topic
    ],
)
def test_decode_request_leaves_per_topic_and_partition_judgements_to_the_broker(api, path, value):
    request = decode_request(msgpack.packb(replace(wire(EXAMPLE_REQUESTS[api]), path, value), use_bin_type=True))
    node: Any = request
    for key in path_keys(path):
        node = node[key] if isinstance(key, int) else getattr(node, key)
    assert node == (tuple(value) if isinstance(value, list) else value)


# --- fuzzing: nothing but RequestError, ever ------------------------------------------------


def decode_or_error(payload: bytes) -> Request | RequestError:
    try:
        return decode_request(payload)
    except RequestError as exc:
        assert exc.code in (INVALID, ErrorCode.UNSUPPORTED_VERSION)
        assert exc.message
        return exc


@settings(max_examples=500)
@given(payload=st.binary(max_size=200))
def test_decode_request_random_bytes_raise_only_request_error(payload):
    decode_or_error(payload)


@settings(max_examples=300)
@given(doc=msgpack_values)
def test_decode_request_random_documents_raise_only_request_error(doc):
    decode_or_error(msgpack.packb(doc, use_bin_type=True))


@settings(max_examples=200)
@given(doc=request_shaped_maps)
def test_decode_request_random_fields_raise_only_request_error_and_echo_the_id(doc):
    result = decode_or_error(msgpack.packb(doc, use_bin_type=True))
    if isinstance(result, RequestError):
        if list(doc).index("id") > 2 and result.request_id is None:
            # Fields before the id passed the object budget: the count stopped before reaching it.
            assert "msgpack objects" in result.message or "no string may be longer" in result.message
            return
        assert result.request_id == doc["id"]
        assert result.api == doc["api"]


@settings(max_examples=300)
@given(request=any_request, data=st.data())
def test_decode_request_any_mutation_of_a_valid_request_raises_only_request_error(request, data):
    doc = wire(request)
    node: Any = doc
    while True:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            break
        key = data.draw(st.sampled_from(keys))
        if not isinstance(node[key], (dict, list)) or data.draw(st.booleans()):
            if data.draw(st.booleans()):
                node[key] = data.draw(msgpack_values)
            elif isinstance(node, dict):
                del node[key]
            else:
                node.pop(key)
            break
        node = node[key]
    result = decode_or_error(msgpack.packb(doc, use_bin_type=True))
    if isinstance(result, RequestError) and type(doc.get("id")) is int and doc["id"] == request.id:
        assert result.request_id == request.id


@settings(max_examples=300)
@given(payload=st.binary(max_size=200) | msgpack_values.map(lambda v: msgpack.packb(v, use_bin_type=True)))
def test_decode_response_random_input_raises_only_remote_protocol_error(payload):
    for api in ("produce", "fetch", "metadata"):
        try:
            decode_response(payload, api)
        except RemoteProtocolError:
            pass


# --- the client side: encoding refuses what the broker would refuse ---------------------------


def produce_records(records: Any) -> ProduceRequest:
    partition = ProducePartition(partition=0, records=records)
    return ProduceRequest(id=1, acks=1, timeout_ms=0, topics=(ProduceTopic(name="t", partitions=(partition,)),))


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (dataclasses.replace(EXAMPLE_REQUESTS["produce"], acks=2), "field 'acks' must be one of 0, 1, -1, got 2"),
        (produce_records("text"), "field 'topics[0].partitions[0].records' must be a bin, got str"),
        (ApiVersionsRequest(id=-1), "field 'id' must be in [0, 2147483647], got -1"),
        (produce_records(bytearray(b"x")), "field 'topics[0].partitions[0].records' must be a bin, got bytearray"),
        (MetadataRequest(id=1, topics=("a", "a")), "field 'topics[1]' repeats 'a', already given in topics[0]"),
    ],
)  # fmt: skip
def test_encode_request_refuses_what_a_broker_would_refuse(request_, message):
    with pytest.raises(LocalProtocolError) as info:
        encode_request(request_)
    assert message in str(info.value)


def test_encode_request_can_send_an_unsupported_version_on_purpose():
    error = refuse(wire(dataclasses.replace(EXAMPLE_REQUESTS["metadata"], v=2)))
    assert error.code == ErrorCode.UNSUPPORTED_VERSION


# --- responses -------------------------------------------------------------------------------

SPEC_RESPONSE_KEYS: dict[str, dict[str, set[str]]] = {
    "api_versions": {"": {"apis", "broker_version"}, "apis[]": {"name", "min_version", "max_version"}},
    "metadata": {
        "": {"brokers", "controller_id", "topics"},
        "brokers[]": {"node_id", "host", "port", "rack"},
        "topics[]": {"name", "error_code", "error_message", "internal", "partitions"},
        "topics[].partitions[]": {"partition", "leader", "error_code", "error_message", "log_start_offset",
                                  "high_watermark", "leader_epoch", "replicas", "isr", "offline_replicas"},
    },
    "create_topics": {
        "": {"topics"},
        "topics[]": {"name", "error_code", "error_message", "num_partitions", "configs"},
    },
    "delete_topics": {"": {"topics"}, "topics[]": {"name", "error_code", "error_message"}},
    "describe_configs": {
        "": {"topics", "brokers"},
        "topics[]": {"name", "error_code", "error_message", "configs"},
        "topics[].configs[]": {"value", "source", "read_only", "is_sensitive"},
        "brokers[]": {"name", "error_code", "error_message", "configs"},
        "brokers[].configs[]": {"value", "source", "read_only", "is_sensitive"},
    },
    "alter_configs": {"": {"topics"}, "topics[]": {"name", "error_code", "error_message"}},
    "create_partitions": {"": {"topics"}, "topics[]": {"name", "error_code", "error_message"}},
    "produce": {
        "": {"topics", "throttle_ms"},
        "topics[]": {"name", "partitions"},
        "topics[].partitions[]": {"partition", "error_code", "error_message", "base_offset", "log_append_time",
                                  "log_start_offset"},
    },
    "fetch": {
        "": {"throttle_ms", "topics"},
        "topics[]": {"name", "partitions"},
        "topics[].partitions[]": {"partition", "error_code", "error_message", "high_watermark", "last_stable_offset",
                                  "log_start_offset", "aborted_transactions", "records"},
    },
    "list_offsets": {
        "": {"topics"},
        "topics[]": {"name", "partitions"},
        "topics[].partitions[]": {"partition", "error_code", "error_message", "timestamp", "offset"},
    },
    "delete_records": {
        "": {"topics"},
        "topics[]": {"name", "partitions"},
        "topics[].partitions[]": {"partition", "error_code", "error_message", "low_watermark"},
    },
    "describe_log_dirs": {
        "": {"log_dirs", "errors"},
        "log_dirs[]": {"path", "error_code", "error_message", "total_bytes", "usable_bytes", "topics"},
        "log_dirs[].topics[]": {"name", "partitions"},
        "log_dirs[].topics[].partitions[]": {"partition", "size_bytes", "segments", "log_start_offset",
                                             "log_end_offset"},
        "errors[]": {"name", "error_code", "error_message", "partitions"},
        "errors[].partitions[]": {"partition", "error_code", "error_message"},
    },
    "init_producer_id": {"": {"producer_id", "producer_epoch"}},
    "find_coordinator": {"": {"node_id", "host", "port"}},
    "join_group": {
        "": {"generation_id", "protocol_type", "protocol_name", "leader", "skip_assignment", "member_id", "members"},
        "members[]": {"member_id", "group_instance_id", "metadata"},
    },
    "sync_group": {"": {"protocol_type", "protocol_name", "assignment"}},
    "heartbeat": {"": set()},
    "leave_group": {"": {"members"}, "members[]": {"member_id", "group_instance_id", "error_code", "error_message"}},
    "offset_commit": {
        "": {"topics"},
        "topics[]": {"name", "partitions"},
        "topics[].partitions[]": {"partition", "error_code", "error_message"},
    },
    "offset_fetch": {
        "": {"topics"},
        "topics[]": {"name", "partitions"},
        "topics[].partitions[]": {"partition", "error_code", "error_message", "committed_offset",
                                  "committed_leader_epoch", "metadata"},
    },
    "list_groups": {"": {"groups"}, "groups[]": {"group_id", "protocol_type", "group_state"}},
    "describe_groups": {
        "": {"groups"},
        "groups[]": {"group_id", "error_code", "error_message", "group_state", "protocol_type", "protocol_data",
                     "members"},
        "groups[].members[]": {"member_id", "group_instance_id", "client_id", "client_host", "member_metadata",
                               "member_assignment"},
    },
    "delete_groups": {"": {"results"}, "results[]": {"group_id", "error_code", "error_message"}},
    "sasl_handshake": {"": {"mechanisms"}},
    "sasl_authenticate": {"": {"auth_bytes", "session_lifetime_ms"}},
    "create_acls": {"": {"results"}, "results[]": {"error_code", "error_message"}},
    "describe_acls": {"": {"acls"}, "acls[]": {"resource_type", "resource_name", "pattern_type", "principal", "host",
                                               "operation", "permission_type"}},
    "delete_acls": {"": {"filter_results"}, "filter_results[]": {"error_code", "error_message", "matching_acls"},
                    "filter_results[].matching_acls[]": {"resource_type", "resource_name", "pattern_type",
                                                         "principal", "host", "operation", "permission_type"}},
    "describe_user_scram_credentials": {"": {"results"}, "results[]": {"user", "error_code", "error_message",
                                                                       "credential_infos"},
                                        "results[].credential_infos[]": {"mechanism", "iterations"}},
    "alter_user_scram_credentials": {"": {"results"}, "results[]": {"user", "error_code", "error_message"}},
    "describe_client_quotas": {"": {"entries"}, "entries[]": {"entity", "values"},
                               "entries[].entity[]": {"entity_type", "entity_name"}},
    "alter_client_quotas": {"": {"entries"}, "entries[]": {"error_code", "error_message", "entity"},
                            "entries[].entity[]": {"entity_type", "entity_name"}},
    "add_partitions_to_txn": {"": {"topics"}, "topics[]": {"name", "partitions"},
                              "topics[].partitions[]": {"partition", "error_code", "error_message"}},
    "add_offsets_to_txn": {"": set()},
    "end_txn": {"": {"producer_id", "producer_epoch"}},
    "txn_offset_commit": {"": {"topics"}, "topics[]": {"name", "partitions"},
                          "topics[].partitions[]": {"partition", "error_code", "error_message"}},
    "write_txn_markers": {"": {"markers"}, "markers[]": {"producer_id", "topics"},
                          "markers[].topics[]": {"name", "partitions"},
                          "markers[].topics[].partitions[]": {"partition", "error_code", "error_message"}},
    "describe_transactions": {"": {"transactions"}, "transactions[]": {
        "transactional_id", "error_code", "error_message", "state", "transaction_timeout_ms",
        "transaction_start_time_ms", "producer_id", "producer_epoch", "topics"},
        "transactions[].topics[]": {"name", "partitions"}},
    "list_transactions": {"": {"unknown_state_filters", "transactions"},
                          "transactions[]": {"transactional_id", "producer_id", "state"}},
    "describe_producers": {"": {"topics"}, "topics[]": {"name", "partitions"},
                           "topics[].partitions[]": {"partition", "error_code", "error_message", "active_producers"},
                           "topics[].partitions[].active_producers[]": {
                               "producer_id", "producer_epoch", "last_sequence", "last_timestamp",
                               "coordinator_epoch", "current_txn_start_offset"}},
}  # fmt: skip


def key_sets(doc: Any, path: str = "") -> dict[str, set[str]]:
    """The keys of every map in a response, by path; config maps are data, so their entries are []."""
    found: dict[str, set[str]] = {}
    if isinstance(doc, dict):
        data_map = path.endswith(("configs", "].values"))  # str-keyed maps of data: configs, quota values
        if not data_map:
            found[path] = set(doc)
        for key, value in doc.items():
            child = f"{path}[]" if data_map else (f"{path}.{key}" if path else key)
            for sub, keys in key_sets(value, child).items():
                found.setdefault(sub, set()).update(keys)
    elif isinstance(doc, list):
        for item in doc:
            for sub, keys in key_sets(item, f"{path}[]").items():
                found.setdefault(sub, set()).update(keys)
    return found


@pytest.mark.parametrize("api", list(SUPPORTED_APIS))
def test_encode_response_writes_exactly_the_spec_fields(api):
    doc = msgpack.unpackb(encode_response(EXAMPLE_RESPONSES[api]), raw=False)
    expected = dict(SPEC_RESPONSE_KEYS[api])
    expected[""] = expected[""] | {"id", "error_code", "error_message"}
    assert key_sets(doc) == expected


def test_encode_response_writes_error_codes_as_plain_ints_and_records_as_bin():
    payload = encode_response(EXAMPLE_RESPONSES["produce"])
    doc = msgpack.unpackb(payload, raw=False)
    assert doc["topics"][0]["partitions"][1]["error_code"] == 2
    assert type(doc["topics"][0]["partitions"][1]["error_code"]) is int
    fetch = msgpack.unpackb(encode_response(EXAMPLE_RESPONSES["fetch"]), raw=False)
    assert fetch["topics"][0]["partitions"][0]["records"] == b"\x00" * 80


def test_api_versions_response_lists_every_supported_api_by_default():
    doc = msgpack.unpackb(encode_response(ApiVersionsResponse(id=1, broker_version="0.1.0")), raw=False)
    assert {a["name"]: (a["min_version"], a["max_version"]) for a in doc["apis"]} == SUPPORTED_APIS


@pytest.mark.parametrize(
    "response",
    [
        ProduceResponse(id=1, error_code=ErrorCode.INVALID_REQUEST),
        ProduceResponse(id=1, topics=(ProduceTopicResult(name="t", partitions=(ProducePartitionResult(
            partition=0, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=""),)),)),
        MetadataResponse(id=1, topics=(TopicMetadata(name="t", error_code=ErrorCode.INVALID_TOPIC_EXCEPTION),)),
    ],
)  # fmt: skip
def test_encode_response_refuses_an_error_code_without_a_message(response):
    with pytest.raises(LocalProtocolError, match="must say what went wrong"):
        encode_response(response)


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (MetadataResponse(id=1, brokers=(BrokerMetadata(node_id=0, host="h", port=70000),)),
         "field 'brokers[0].port' must be in [0, 65535], got 70000"),
        (ProduceResponse(id=-5), "field 'id' must be in [0, 2147483647], got -5"),
        (DescribeConfigsResponse(id=1, topics=(DescribeConfigsResult(
            name="t", configs={"a": ConfigEntry(value="1", source="env")}),)),
         "field 'topics[0].configs['a'].source' must be one of 'topic', 'broker', 'default', got 'env'"),
    ],
)  # fmt: skip
def test_encode_response_refuses_values_outside_the_spec(response, message):
    with pytest.raises(LocalProtocolError) as info:
        encode_response(response)
    assert message in str(info.value)


def test_error_response_echoes_the_id_and_leaves_the_api_fields_empty():
    doc = error_response(7, ErrorCode.INVALID_REQUEST, "field 'acks' must be one of 0, 1, -1, got 2", "produce")
    assert doc == {
        "id": 7,
        "error_code": 42,
        "error_message": "field 'acks' must be one of 0, 1, -1, got 2",
        "topics": [],
        "throttle_ms": 0,
    }
    assert decode_response(encode_response(doc), "produce")["error_code"] == ErrorCode.INVALID_REQUEST


def test_error_response_without_a_readable_id_or_api_has_only_the_envelope():
    doc = error_response(None, ErrorCode.INVALID_REQUEST, "request must be a map, got array")
    assert doc == {"id": None, "error_code": 42, "error_message": "request must be a map, got array"}


def test_error_response_for_api_versions_still_lists_the_supported_versions():
    error = refuse(wire(dataclasses.replace(EXAMPLE_REQUESTS["api_versions"], v=3)))
    doc = error_response(error.request_id, error.code, error.message, error.api)
    assert doc["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert {a["name"] for a in doc["apis"]} == set(SUPPORTED_APIS)


def test_error_response_refuses_an_empty_message():
    with pytest.raises(LocalProtocolError):
        error_response(1, ErrorCode.INVALID_REQUEST, "")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([1], "response must be a map, got array"),
        ({"error_code": 0, "error_message": None}, "field 'id' is missing"),
        ({"id": 1, "error_message": None}, "field 'error_code' is missing"),
        ({"id": 1, "error_code": "0", "error_message": None}, "field 'error_code' must be an int, got str"),
        ({"id": 1, "error_code": 0, "error_message": None, "throttle_ms": 0}, "field 'topics' is missing"),
        ({"id": 1, "error_code": 0, "error_message": None, "throttle_ms": 0, "topics": [{"name": "t", "partitions": [
            {"partition": 0, "error_message": None, "base_offset": 0, "log_append_time": -1,
             "log_start_offset": 0}]}]},
         "field 'topics[0].partitions[0].error_code' is missing"),
    ],
)  # fmt: skip
def test_decode_response_refuses_a_malformed_response(doc, message):
    with pytest.raises(RemoteProtocolError) as info:
        decode_response(msgpack.packb(doc), "produce")
    assert message in str(info.value)


def test_decode_response_refuses_fetched_records_that_are_not_bin():
    doc = msgpack.unpackb(encode_response(EXAMPLE_RESPONSES["fetch"]), raw=False)
    doc["topics"][0]["partitions"][0]["records"] = "text"
    with pytest.raises(RemoteProtocolError) as info:
        decode_response(msgpack.packb(doc), "fetch")
    assert "field 'topics[0].partitions[0].records' must be a bin, got str" in str(info.value)


def test_decode_response_refuses_bytes_that_are_not_msgpack():
    with pytest.raises(RemoteProtocolError, match="not a valid msgpack document"):
        decode_response(b"\xc1", "fetch")


def test_decode_response_accepts_an_error_response_without_api_fields():
    doc = decode_response(msgpack.packb({"id": None, "error_code": 42, "error_message": "bad"}), "fetch")
    assert doc == {"id": None, "error_code": 42, "error_message": "bad"}


def test_decode_response_refuses_an_unknown_api_as_our_own_mistake():
    with pytest.raises(LocalProtocolError):
        decode_response(encode_response(EXAMPLE_RESPONSES["fetch"]), "consume")


# --- zero-copy fetch: ExternalBin parts --------------------------------------------------------


def fetch_response(records: list[bytes | ExternalBin]) -> FetchResponse:
    return FetchResponse(
        id=3,
        topics=(
            FetchTopicResult(
                name="orders",
                partitions=tuple(
                    FetchPartitionResult(
                        partition=i, high_watermark=9, last_stable_offset=9, log_start_offset=0, records=r
                    )
                    for i, r in enumerate(records)
                ),
            ),
        ),
    )


def send(parts: list[bytes | ExternalBin], files: dict[object, bytes]) -> bytes:
    """What a server writes: the prefix, then each part, file regions copied from ``files``."""
    out = [frame_prefix(parts_length(parts))]
    for part in parts:
        out.append(files[part.ref] if isinstance(part, ExternalBin) else part)
    return b"".join(out)


@pytest.mark.parametrize("size", [0, 1, 255, 256, 65535, 65536, 100_000])
def test_pack_parts_sends_the_same_bytes_as_packing_the_records(size):
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    parts = pack_parts(fetch_response([ExternalBin(size, "segment-0")]))
    assert send(parts, {"segment-0": data}) == encode_frame(encode_response(fetch_response([data])))


@settings(max_examples=200)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 70_000)), max_size=5))
def test_pack_parts_decodes_like_a_plain_response_for_any_mix_of_parts(layout):
    files = {i: bytes([i]) * size for i, (_, size) in enumerate(layout)}
    records = [ExternalBin(len(files[i]), i) if external else files[i] for i, (external, _) in enumerate(layout)]
    parts = pack_parts(fetch_response(records))
    assert sum(isinstance(p, ExternalBin) for p in parts) == sum(external for external, _ in layout)
    assert all(type(a) is not type(b) for a, b in zip(parts, parts[1:]))  # bytes parts merged
    (frame,) = carry(send(parts, files), FrameDecoder(), chunk=4096)
    plain = encode_response(fetch_response(list(files.values())))
    assert msgpack.unpackb(frame, raw=False) == msgpack.unpackb(plain, raw=False)
    assert decode_response(frame, "fetch") == decode_response(plain, "fetch")


def test_parts_length_counts_external_bytes_without_reading_them():
    parts = pack_parts({"records": ExternalBin(1_000_000, "file"), "after": 1})
    assert [type(p) for p in parts] == [bytes, ExternalBin, bytes]
    assert parts_length(parts) == len(parts[0]) + 1_000_000 + len(parts[2])
    assert parts[0].endswith(b"\xc6\x00\x0f\x42\x40")  # bin32 header for 1,000,000


def test_pack_parts_refuses_values_msgpack_cannot_hold():
    with pytest.raises(LocalProtocolError, match="cannot pack"):
        pack_parts({"records": ExternalBin(1, "f"), "oops": object()})


def test_pack_parts_without_external_bins_is_one_msgpack_document():
    response = EXAMPLE_RESPONSES["fetch"]
    assert pack_parts(response) == [encode_response(response)]


def test_pack_parts_validates_responses_like_encode_response():
    with pytest.raises(LocalProtocolError, match="must say what went wrong"):
        pack_parts(FetchResponse(id=1, error_code=ErrorCode.UNKNOWN_SERVER_ERROR))


def test_encode_response_points_to_pack_parts_for_external_bins():
    with pytest.raises(LocalProtocolError, match="pack_parts"):
        encode_response(fetch_response([ExternalBin(10, "f")]))


@pytest.mark.parametrize("length", [-1, 2**32])
def test_external_bin_refuses_a_length_a_bin_cannot_hold(length):
    with pytest.raises(LocalProtocolError):
        ExternalBin(length, "f")


# --- what a request frame may decode to (protocol.request_limits) ----------------------------

from triolog.protocol.request_limits import (  # noqa: E402
    ENVELOPE_OBJECTS,
    MAX_STR_BYTES,
    OBJECTS_PER_ENTRY,
    RequestBudgetError,
    RequestLimits,
    count_objects,
    scan_request,
)

_scalars = (
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=40) | st.binary(max_size=300)
    | st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=20))
)
# Up to 60 leaves: the header sizes come from each value's own size, not from the leaf count
# (strings and binaries up to 300 bytes reach the 8- and 16-bit lengths, containers of 16 to 20
# entries the 16-bit ones), and 60 still nests deeply; 200 made these three tests a fifth of the
# protocol suite's time.
_documents = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=20)
    | st.dictionaries(st.text(max_size=8) | st.integers(-5, 300), children, max_size=20),
    max_leaves=60,
)


def _objects_in(value) -> int:
    """Objects in the decoded form of a document: each scalar, container and map key counts one."""
    if isinstance(value, msgpack.ExtType):  # a namedtuple, but one msgpack object
        return 1
    if isinstance(value, dict):
        return 1 + sum(_objects_in(k) + _objects_in(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return 1 + sum(_objects_in(v) for v in value)
    return 1


@given(_documents, st.booleans())
@settings(max_examples=300)
def test_count_objects_counts_what_msgpack_builds(document, as_bytearray):
    packed = msgpack.packb(document, use_bin_type=True)
    data = bytearray(packed) if as_bytearray else packed
    expected = _objects_in(msgpack.unpackb(packed, raw=False, strict_map_key=False))
    assert count_objects(data, 10**6) == expected
    assert count_objects(data, expected) == expected
    assert count_objects(data, expected - 1) == expected  # "more than the limit": limit + 1


@given(_documents, st.integers(0, 50))
@settings(max_examples=200)
def test_scan_request_counts_a_request_map_exactly_and_reads_its_id_and_api(document, request_id):
    doc = {"api": "fetch", "id": request_id, "v": 1, "extra": document}
    packed = msgpack.packb(doc, use_bin_type=True)
    scan = scan_request(packed, RequestLimits())
    assert scan.objects == _objects_in(doc)
    assert (scan.request_id, scan.api) == (request_id, "fetch")


@given(st.binary(max_size=200))
@settings(max_examples=300)
def test_scan_request_never_raises_on_arbitrary_bytes_but_budget_errors(data):
    try:
        scan_request(data, RequestLimits(max_partitions=1))
    except RequestBudgetError:
        pass
    # and decode_request turns whatever these bytes are into a RequestError or a request
    try:
        decode_request(data, RequestLimits(max_partitions=1))
    except RequestError:
        pass


def _empty_maps_bomb(n: int, **envelope) -> bytes:
    """{**envelope, "x": [{}, {}, ...]}: n bytes of empty maps, ~70 bytes each once decoded."""
    head = msgpack.packb(envelope, use_bin_type=True)
    body = b"\xa1x\xdd" + n.to_bytes(4, "big") + b"\x80" * n
    return bytes([head[0] + 1]) + head[1:] + body  # one more pair in the fixmap


def test_decode_request_refuses_a_16_mib_bomb_before_building_it():
    import tracemalloc

    payload = _empty_maps_bomb(16 << 20, api="produce", id=42, v=1)
    tracemalloc.start()
    try:
        error = refuse_payload(payload)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # before the walk, 16 MiB of empty maps decoded to ~1.4 GiB
    budget = ENVELOPE_OBJECTS + OBJECTS_PER_ENTRY["produce"] * 10_000
    assert (error.code, error.request_id, error.api) == (INVALID, 42, "produce")
    assert f"at least {(16 << 20) + 9} msgpack objects" in error.message
    assert f"produce requests may hold at most {budget}" in error.message
    assert "max.broker.partitions=10000" in error.message


def test_decode_request_refuses_nested_bombs_that_announce_little_at_each_level():
    # fixmaps of 15 empty maps: no single container is large, the total is
    inner = b"\x8f" + b"".join(msgpack.packb(i) + b"\x80" for i in range(15))
    count = 200_000 // 31
    payload = msgpack.packb({"api": "metadata", "id": 9, "v": 1}) + b""
    payload = bytes([payload[0] + 1]) + payload[1:] + b"\xa1x\xdd" + count.to_bytes(4, "big") + inner * count
    error = refuse_payload(payload)
    assert (error.code, error.request_id, error.api) == (INVALID, 9, "metadata")
    assert "metadata requests may hold at most 20256" in error.message


def test_decode_request_budget_follows_the_api_and_max_broker_partitions():
    limits = RequestLimits(max_partitions=100)
    assert limits.max_objects("api_versions") == ENVELOPE_OBJECTS
    assert limits.max_objects("fetch") == ENVELOPE_OBJECTS + 16 * 100
    # api_versions holds no list: a few hundred objects of padding are refused...
    padded = {"api": "api_versions", "v": 1, "id": 3, "pad": [0] * ENVELOPE_OBJECTS}
    error = refuse_payload(msgpack.packb(padded), limits)
    assert (error.request_id, error.api) == (3, "api_versions")
    # ...while a fetch naming 100 partitions (the broker's whole cap) is fine
    fetch = FetchRequest(id=4, max_wait_ms=0, min_bytes=1, max_bytes=1, topics=tuple(
        FetchTopic(name=f"t{i}", partitions=(FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1),))
        for i in range(100)))
    assert decode_request(encode_request(fetch), limits) == fetch
    # and naming more than the broker can hold is refused
    bigger = dataclasses.replace(fetch, topics=fetch.topics + tuple(
        FetchTopic(name=f"u{i}", partitions=(FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1),))
        for i in range(60)))
    assert refuse_payload(encode_request(bigger), limits).api == "fetch"


def test_decode_request_budget_applies_when_the_api_comes_after_the_bulk():
    limits = RequestLimits(max_partitions=10)
    doc = {"pad": [0] * 300, "api": "api_versions", "v": 1, "id": 5}
    error = refuse_payload(msgpack.packb(doc), limits)
    assert error.api == "api_versions"  # read after the padding, then judged by its budget
    # 200 top-level pairs fit the budget of a request of unknown API, not api_versions': refused
    # as soon as "api" is read, before the "id" that follows it
    many_pairs = {f"k{i}": i for i in range(200)} | {"api": "api_versions", "v": 1, "id": 6}
    error = refuse_payload(msgpack.packb(many_pairs), limits)
    assert (error.api, error.request_id) == ("api_versions", None)
    assert "at least 407 msgpack objects" in error.message


def test_decode_request_refuses_a_string_longer_than_kafka_allows():
    doc = {"api": "metadata", "v": 1, "id": 11, "client_id": "c" * (MAX_STR_BYTES + 1)}
    error = refuse_payload(msgpack.packb(doc))
    assert (error.code, error.request_id) == (INVALID, 11)
    assert f"str of {MAX_STR_BYTES + 1} bytes" in error.message
    ok = {"api": "metadata", "v": 1, "id": 12, "client_id": "c" * MAX_STR_BYTES}
    assert decode_request(msgpack.packb(ok)).client_id == "c" * MAX_STR_BYTES


def test_decode_request_caps_msgpack_itself_to_the_frame_and_the_budget():
    limits = RequestLimits(max_partitions=1)
    options = limits.unpack_options(1000, "fetch")
    assert options == {"max_str_len": 1000, "max_bin_len": 1000, "max_ext_len": 1000,
                       "max_array_len": ENVELOPE_OBJECTS + 16, "max_map_len": ENVELOPE_OBJECTS + 16}
    assert limits.unpack_options(10**6, None)["max_str_len"] == MAX_STR_BYTES


def test_decode_request_accepts_a_bytearray_frame():
    request = EXAMPLE_REQUESTS["produce"]
    assert decode_request(bytearray(encode_request(request))) == request


def refuse_payload(payload: bytes, limits: RequestLimits | None = None) -> RequestError:
    with pytest.raises(RequestError) as info:
        decode_request(payload, limits or RequestLimits())
    return info.value
