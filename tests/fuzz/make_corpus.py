"""Writes the seed corpus of the fuzz targets: ``python -m tests.fuzz.make_corpus``.

Deterministic (fixed seeds and timestamps), so re-running it changes nothing unless a seed is
added here. The files are kept in the repository under tests/fuzz/corpus/<target>/; each name
says what the input is. See targets.py for the input formats.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import msgpack
import zstandard

from triolog.protocol import messages as m
from triolog.protocol.frames import encode_frame
from triolog.protocol.record_batch import CRC_OFFSET, CRC_START, CompressionType
from triolog.protocol.records import Record, encode_batch

from .targets import CONFIGS, NOW_MS, validator_input

CORPUS = Path(__file__).resolve().parent / "corpus"

# Config indexes into targets.CONFIGS.
PLAIN, COMPACT, APPEND_TIME, TOPIC_ZSTD, TOPIC_GZIP, TOPIC_LZ4, TOPIC_SNAPPY, TOPIC_NONE, COMPACT_ZSTD, \
    COMPACT_APPEND_TIME, SMALL_MAX, STRICT_TIME = range(len(CONFIGS))


def _records(n: int, *, keyed: bool = True, start_ts: int = NOW_MS - 1000, headers: bool = False,
             tombstone_every: int = 0) -> list[Record]:
    out = []
    for i in range(n):
        value = None if tombstone_every and i % tombstone_every == tombstone_every - 1 else b"value-%d" % i * (1 + i % 3)
        out.append(Record(i, start_ts + i, b"key-%d" % (i % 4) if keyed else None, value,
                          (("h", b"v"), ("n", None)) if headers else ()))
    return out


def _fix_crc(batch: bytes | bytearray) -> bytes:
    out = bytearray(batch)
    from crc32c import crc32c

    struct.pack_into(">I", out, CRC_OFFSET, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


def _patch(batch: bytes, fmt: str, offset: int, value) -> bytes:
    out = bytearray(batch)
    struct.pack_into(fmt, out, offset, value)
    return _fix_crc(out)


def validator_seeds() -> dict[str, bytes]:
    seeds: dict[str, bytes] = {}
    for codec in CompressionType:
        for n in (1, 5, 40):
            batch = encode_batch(_records(n, headers=n == 5, tombstone_every=4 if n == 40 else 0), compression=codec)
            for config, name in ((PLAIN, "plain"), (COMPACT, "compact"), (TOPIC_ZSTD, "topic-zstd"),
                                 (TOPIC_NONE, "topic-none"), (APPEND_TIME, "append-time")):
                seeds[f"valid-{codec.kafka_name}-{n}-{name}"] = validator_input(batch, config)
        seeds[f"valid-{codec.kafka_name}-keyless-plain"] = validator_input(
            encode_batch(_records(3, keyed=False), compression=codec), PLAIN, offset_index=2)
        seeds[f"valid-{codec.kafka_name}-compact-zstd"] = validator_input(
            encode_batch(_records(6), compression=codec), COMPACT_ZSTD, fix_crc=True)
    for config in (TOPIC_GZIP, TOPIC_LZ4, TOPIC_SNAPPY, COMPACT_APPEND_TIME, SMALL_MAX, STRICT_TIME):
        seeds[f"valid-none-config-{config}"] = validator_input(encode_batch(_records(4)), config, offset_index=1)
    idempotent = encode_batch(_records(3), producer_id=42, producer_epoch=1, base_sequence=10)
    seeds["valid-idempotent"] = validator_input(idempotent, PLAIN)
    seeds["valid-transactional"] = validator_input(
        encode_batch(_records(2), producer_id=42, producer_epoch=1, base_sequence=0, is_transactional=True), PLAIN)

    # Known-nasty: each breaks one rule a header-only check cannot see (issue 10, item 2) or
    # one the header check must refuse; CRCs are valid so the records are reached.
    two = encode_batch(_records(2))
    seeds["nasty-count-claims-3-holds-2"] = validator_input(
        _fix_crc(bytearray(_patch(_patch(two, ">i", 57, 3), ">i", 23, 2))), PLAIN, fix_crc=True)
    five = encode_batch(_records(8)[:5], last_offset_delta=7)
    seeds["nasty-count-claims-8-holds-5"] = validator_input(_patch(five, ">i", 57, 8), PLAIN, fix_crc=True)
    seeds["nasty-garbage-records"] = validator_input(
        _fix_crc(two[:61] + bytes(range(256))[: len(two) - 61]), PLAIN, fix_crc=True, fix_length=True)
    seeds["nasty-gzip-flag-over-plain-bytes"] = validator_input(_patch(two, ">h", 21, 1), PLAIN, fix_crc=True)
    seeds["nasty-zstd-flag-over-plain-bytes-compact"] = validator_input(_patch(two, ">h", 21, 4), COMPACT)
    gappy = encode_batch([Record(0, NOW_MS, b"a", b"1"), Record(5, NOW_MS, b"b", b"2"), Record(6, NOW_MS, b"c", b"3")])
    seeds["nasty-offset-deltas-0-5-6-header-says-2"] = validator_input(_patch(gappy, ">i", 23, 2), PLAIN)
    # Inner offset deltas the recompression path (topic codec != producer codec) cannot rebuild:
    # record 0's delta byte (at 64: length, attributes, timestamp delta 0 come first) set to -1 or 1.
    for delta, name in ((1, "negative"), (2, "repeated")):
        batch = bytearray(encode_batch([Record(0, NOW_MS, b"a", b"1"), Record(1, NOW_MS, b"b", b"2")]))
        assert batch[64] == 0
        batch[64] = delta  # zig-zag: 1 is -1, 2 is +1
        seeds[f"nasty-offset-delta-{name}-recompressed"] = validator_input(_fix_crc(batch), TOPIC_ZSTD)
    seeds["nasty-max-timestamp-below-records"] = validator_input(
        encode_batch(_records(4), max_timestamp=NOW_MS - 1000), PLAIN)
    seeds["nasty-max-timestamp-below-records-strict"] = validator_input(
        encode_batch(_records(4), max_timestamp=NOW_MS - 1000), STRICT_TIME)
    seeds["nasty-record-timestamp-far-future"] = validator_input(
        encode_batch([Record(0, NOW_MS, b"a", b"1"), Record(1, NOW_MS + 10**9, b"b", b"2"),
                      Record(2, NOW_MS, b"c", b"3")], max_timestamp=NOW_MS), STRICT_TIME)
    seeds["nasty-control-batch"] = validator_input(
        encode_batch([Record(0, NOW_MS, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], is_control=True,
                     producer_id=1, producer_epoch=0, base_sequence=0), PLAIN)
    seeds["nasty-idempotent-without-sequence"] = validator_input(
        encode_batch(_records(2), producer_id=7, producer_epoch=0), PLAIN)
    seeds["nasty-append-time-from-producer"] = validator_input(
        encode_batch(_records(2), timestamp_type=1), PLAIN)
    seeds["nasty-keyless-on-compacted"] = validator_input(encode_batch(_records(3, keyed=False)), COMPACT)
    seeds["nasty-two-batches"] = validator_input(two + two, PLAIN)
    seeds["nasty-legacy-magic-1"] = validator_input(
        struct.pack(">qiibI", 0, 30, 0, 1, 0) + bytes(22), PLAIN)
    seeds["nasty-empty-batch"] = validator_input(encode_batch([]), PLAIN)
    seeds["nasty-base-offset-nonzero"] = validator_input(_patch(two, ">q", 0, 9), PLAIN)
    seeds["nasty-too-large-for-small-max"] = validator_input(encode_batch(_records(40)), SMALL_MAX)
    seeds["nasty-varint-overflow"] = validator_input(
        _fix_crc(two[:61] + b"\xff" * (len(two) - 61)), PLAIN, fix_crc=True)
    seeds["nasty-negative-key-length"] = validator_input(
        encode_batch([Record(0, NOW_MS, None, b"x")]), COMPACT)
    seeds["nasty-delete-horizon-from-producer"] = validator_input(
        encode_batch(_records(2), delete_horizon_ms=NOW_MS), PLAIN)
    # Decompression bombs: a few hundred bytes that inflate to 16 MiB of zeros (one "record").
    zeros = bytes(16 << 20)
    bomb_zstd = bytearray(encode_batch([Record(0, NOW_MS, b"k", b"v")], compression=CompressionType.ZSTD))
    body = zstandard.ZstdCompressor(level=19, write_content_size=False).compress(zeros)
    seeds["nasty-zstd-bomb-16mib-compact"] = validator_input(bytes(bomb_zstd[:61]) + body, COMPACT,
                                                             fix_crc=True, fix_length=True)
    seeds["nasty-zstd-bomb-16mib-topic-gzip"] = validator_input(bytes(bomb_zstd[:61]) + body, TOPIC_GZIP,
                                                                fix_crc=True, fix_length=True)
    body = gzip.compress(bytes(4 << 20), 9, mtime=0)
    bomb_gzip = _patch(bytes(bomb_zstd[:61]), ">h", 21, 1)
    seeds["nasty-gzip-bomb-4mib-compact"] = validator_input(bomb_gzip + body, COMPACT, fix_crc=True, fix_length=True)
    return seeds


def _produce_records() -> bytes:
    return encode_batch(_records(3))


#: Kafka's ConsumerProtocol Subscription v3 of topic "t" and Assignment v3 of t [0, 1] (docs/protocol.md).
SUBSCRIPTION = bytes.fromhex("0003 00000001 0001 74 ffffffff 00000000 ffffffff ffff")
ASSIGNMENT = bytes.fromhex("0003 00000001 0001 74 00000002 00000000 00000001 ffffffff")


def requests_seeds() -> dict[str, bytes]:
    records = _produce_records()
    requests = {
        "api_versions": m.ApiVersionsRequest(id=1, client_id="fuzz"),
        "metadata-all": m.MetadataRequest(id=2),
        "metadata-some": m.MetadataRequest(id=3, topics=("a", "b.c")),
        "create_topics": m.CreateTopicsRequest(id=4, topics=(
            m.NewTopic(name="t", num_partitions=3, replication_factor=1,
                       configs={"cleanup.policy": "compact", "segment.bytes": "1024"}),
            m.NewTopic(name="u", num_partitions=-1, replication_factor=-1)), validate_only=True),
        "delete_topics": m.DeleteTopicsRequest(id=5, topics=("t",)),
        "describe_configs": m.DescribeConfigsRequest(id=6, topics=("t", "u"), brokers=("", "0")),
        "alter_configs": m.AlterConfigsRequest(id=7, topics=(
            m.AlterConfigsTopic(name="t", configs={"retention.ms": "1000"}, delete=("segment.bytes",),
                                append={"cleanup.policy": "compact"}),
            m.AlterConfigsTopic(name="u", configs={"retention.ms": "1000"}, replace=True)), validate_only=True),
        "create_partitions": m.CreatePartitionsRequest(id=25, topics=(
            m.CreatePartitionsTopic(name="t", count=4), m.CreatePartitionsTopic(name="u", count=1)),
            timeout_ms=30000),
        "produce-acks-all": m.ProduceRequest(id=8, acks=-1, timeout_ms=30000, topics=(
            m.ProduceTopic(name="t", partitions=(m.ProducePartition(partition=0, records=records),
                                                 m.ProducePartition(partition=1, records=records))),)),
        "produce-acks-0": m.ProduceRequest(id=9, acks=0, timeout_ms=0, topics=(
            m.ProduceTopic(name="t", partitions=(m.ProducePartition(partition=0, records=records),)),)),
        "fetch": m.FetchRequest(id=10, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=1, topics=(
            m.FetchTopic(name="t", partitions=(
                m.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=65536),
                m.FetchPartition(partition=2, fetch_offset=-5, partition_max_bytes=0))),)),
        "list_offsets": m.ListOffsetsRequest(id=11, topics=(
            m.ListOffsetsTopic(name="t", partitions=(
                m.ListOffsetsPartition(partition=0, timestamp=-1), m.ListOffsetsPartition(partition=1, timestamp=-2),
                m.ListOffsetsPartition(partition=2, timestamp=-3),
                m.ListOffsetsPartition(partition=3, timestamp=NOW_MS))),)),
        "delete_records": m.DeleteRecordsRequest(id=12, topics=(
            m.DeleteRecordsTopic(name="t", partitions=(m.DeleteRecordsPartition(partition=0, offset=-1),
                                                       m.DeleteRecordsPartition(partition=1, offset=10))),)),
        "describe_log_dirs": m.DescribeLogDirsRequest(id=13, topics=(
            m.DescribeLogDirsTopic(name="t", partitions=(0, 7)), m.DescribeLogDirsTopic(name="u"))),
        "init_producer_id": m.InitProducerIdRequest(id=14, transaction_timeout_ms=2**31 - 1),
        "find_coordinator": m.FindCoordinatorRequest(id=15, key="g"),
        "join_group": m.JoinGroupRequest(id=16, group_id="g", session_timeout_ms=45000, rebalance_timeout_ms=300000,
                                         protocol_type="consumer", protocols=(
                                             m.JoinGroupProtocol(name="range", metadata=SUBSCRIPTION),
                                             m.JoinGroupProtocol(name="roundrobin", metadata=SUBSCRIPTION))),
        "sync_group": m.SyncGroupRequest(id=17, group_id="g", generation_id=1, member_id="m-1", assignments=(
            m.SyncGroupAssignment(member_id="m-1", assignment=ASSIGNMENT),
            m.SyncGroupAssignment(member_id="m-2", assignment=b""))),
        "heartbeat": m.HeartbeatRequest(id=18, group_id="g", generation_id=1, member_id="m-1"),
        "leave_group": m.LeaveGroupRequest(id=19, group_id="g", members=(m.MemberIdentity(member_id="m-1"),)),
        "offset_commit": m.OffsetCommitRequest(id=20, group_id="g", topics=(m.OffsetCommitTopic(name="t", partitions=(
            m.OffsetCommitPartition(partition=0, committed_offset=42),
            m.OffsetCommitPartition(partition=1, committed_offset=-1, committed_metadata="x"))),)),
        "offset_fetch": m.OffsetFetchRequest(id=21, group_id="g", topics=(
            m.OffsetFetchTopic(name="t", partitions=(0, 1)),)),
        "list_groups": m.ListGroupsRequest(id=22, states_filter=("Stable",)),
        "describe_groups": m.DescribeGroupsRequest(id=23, groups=("g", "h")),
        "delete_groups": m.DeleteGroupsRequest(id=24, groups_names=("g",)),
        "sasl_handshake": m.SaslHandshakeRequest(id=26, mechanism="SCRAM-SHA-256"),
        "sasl_authenticate": m.SaslAuthenticateRequest(id=27, auth_bytes=b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL"),
        "create_acls": m.CreateAclsRequest(id=28, creations=(m.AclEntry(
            resource_type="TOPIC", resource_name="t", pattern_type="PREFIXED", principal="User:alice", host="*",
            operation="READ", permission_type="ALLOW"),)),
        "describe_acls": m.DescribeAclsRequest(id=29, resource_type="TOPIC", resource_name="t", pattern_type="MATCH"),
        "delete_acls": m.DeleteAclsRequest(id=30, filters=(m.AclFilter(principal="User:alice"), m.AclFilter())),
        "describe_user_scram_credentials": m.DescribeUserScramCredentialsRequest(id=31, users=("alice",)),
        "alter_user_scram_credentials": m.AlterUserScramCredentialsRequest(
            id=32, deletions=(m.ScramCredentialDeletion(name="bob", mechanism="SCRAM-SHA-256"),),
            upsertions=(m.ScramCredentialUpsertion(name="alice", mechanism="SCRAM-SHA-512", iterations=4096,
                                                   salt=b"0123456789ab", salted_password=b"\x00" * 64),)),
        "describe_client_quotas": m.DescribeClientQuotasRequest(id=33, components=(
            m.QuotaFilterComponent(entity_type="client-id", match_type="any"),)),
        "alter_client_quotas": m.AlterClientQuotasRequest(id=34, entries=(m.QuotaAlteration(
            entity=(m.QuotaEntityPart(entity_type="user"),), ops=(m.QuotaOp(key="producer_byte_rate", value=1000),)),)),
        "add_partitions_to_txn": m.AddPartitionsToTxnRequest(id=35, transactional_id="tx", producer_id=0,
                                                             producer_epoch=0, topics=(m.TxnTopic(name="t", partitions=(0,)),)),
        "add_offsets_to_txn": m.AddOffsetsToTxnRequest(id=36, transactional_id="tx", producer_id=0, producer_epoch=0,
                                                       group_id="g"),
        "end_txn": m.EndTxnRequest(id=37, transactional_id="tx", producer_id=0, producer_epoch=0, committed=False),
        "txn_offset_commit": m.TxnOffsetCommitRequest(id=38, transactional_id="tx", group_id="g", producer_id=0,
                                                      producer_epoch=0, topics=(m.OffsetCommitTopic(name="t", partitions=(
                                                          m.OffsetCommitPartition(partition=0, committed_offset=1),)),)),
        "write_txn_markers": m.WriteTxnMarkersRequest(id=39, markers=(m.TxnMarker(
            producer_id=0, producer_epoch=0, committed=True, topics=(m.TxnTopic(name="t", partitions=(0,)),),
            coordinator_epoch=0),)),
        "describe_transactions": m.DescribeTransactionsRequest(id=40, transactional_ids=("tx",)),
        "list_transactions": m.ListTransactionsRequest(id=41),
        "describe_producers": m.DescribeProducersRequest(id=42, topics=(m.TxnTopic(name="t", partitions=(0,)),)),
    }
    assert {type(r).api for r in requests.values()} == set(m.REQUEST_TYPES), "a seed for every API"
    seeds = {f"valid-{name}": b"\x00" + encode_frame(m.encode_request(r)) for name, r in requests.items()}
    pipelined = b"".join(encode_frame(m.encode_request(r)) for r in requests.values())
    seeds["valid-all-pipelined-chunked"] = b"\x07" + pipelined
    seeds["valid-produce-byte-by-byte"] = b"\x01" + encode_frame(m.encode_request(requests["produce-acks-all"]))

    def raw(doc, chunking: int = 0) -> bytes:
        return bytes([chunking]) + encode_frame(msgpack.packb(doc, use_bin_type=True))

    base = {"api": "metadata", "v": 1, "id": 1}
    seeds.update({
        "nasty-unknown-api": raw({**base, "api": "no_such_api"}),
        "nasty-unsupported-version": raw({**base, "v": 2}),
        "nasty-negative-id": raw({**base, "id": -1}),
        "nasty-bool-id": raw({**base, "id": True}),
        "nasty-int64-for-int32": raw({"api": "fetch", "v": 1, "id": 1, "max_wait_ms": 2**40, "min_bytes": 0,
                                      "max_bytes": 0, "topics": []}),
        "nasty-uint64": raw({**base, "id": 2**64 - 1}),
        "nasty-str-for-bin-records": raw({"api": "produce", "v": 1, "id": 1, "acks": 1, "timeout_ms": 0, "topics": [
            {"name": "t", "partitions": [{"partition": 0, "records": "text"}]}]}),
        "nasty-duplicate-topics": raw({"api": "delete_topics", "v": 1, "id": 1, "topics": ["a", "a"]}),
        "nasty-duplicate-partitions": raw({"api": "list_offsets", "v": 1, "id": 1, "topics": [
            {"name": "t", "partitions": [{"partition": 0, "timestamp": -1}, {"partition": 0, "timestamp": -2}]}]}),
        "nasty-nil-required": raw({"api": "produce", "v": 1, "id": 1, "acks": None, "timeout_ms": 0, "topics": []}),
        "nasty-float-for-int": raw({**base, "id": 1.5}),
        "nasty-int-keys": raw({1: 2, "api": "metadata", "v": 1, "id": 1}),
        "nasty-array-not-map": raw([1, 2, 3]),
        "nasty-ext-type": b"\x00" + encode_frame(msgpack.packb({**base, "topics": msgpack.ExtType(5, b"xyz")})),
        "nasty-configs-non-str": raw({"api": "alter_configs", "v": 1, "id": 1, "topics": [
            {"name": "t", "configs": {"a": 1, "b": None}}]}),
        "nasty-empty-frame": b"\x00" + encode_frame(b""),
        "nasty-frame-too-large": b"\x00" + struct.pack(">I", 2**31) + b"\x80",
        "nasty-truncated-frame": b"\x00" + struct.pack(">I", 100) + b"\x83\xa3api",
        "nasty-trailing-bytes": b"\x00" + encode_frame(msgpack.packb(base) + b"\xc0"),
        "nasty-invalid-utf8": b"\x00" + encode_frame(b"\x83\xa3api\xa3\xff\xfe\xfd\xa1v\x01\xa2id\x01"),
        "nasty-array-as-map-key": b"\x00" + encode_frame(b"\x82\x91\x01\x01\xa3api\xa8metadata"),
        "nasty-map-as-map-key": b"\x00" + encode_frame(b"\x81\x81\x01\x01\x01"),
        "nasty-array32-claims-4g": b"\x00" + encode_frame(b"\xdd\xff\xff\xff\xff\x01"),
        "nasty-map32-claims-4g": b"\x00" + encode_frame(b"\xdf\xff\xff\xff\xff\x01"),
        "nasty-deep-arrays": b"\x00" + encode_frame(b"\x91" * 2000 + b"\xc0"),
        "nasty-deep-maps": b"\x00" + encode_frame(b"\x81\xa1k" * 1000 + b"\xc0"),
        "nasty-wide-empty-maps": b"\x00" + encode_frame(b"\xdc\x10\x00" + b"\x80" * 4096),
        "nasty-unknown-key-bomb": b"\x00" + encode_frame(
            b"\x84\xa3api\xa8metadata\xa1v\x01\xa2id\x01\xa5extra\xdc\x10\x00" + b"\x90" * 4096),
        "nasty-huge-str-header": b"\x00" + encode_frame(b"\xdb\xff\xff\xff\xf0abc"),
    })
    return seeds


REQUEST_DICT_WORDS = [
    "api", "v", "id", "client_id", "topics", "partitions", "partition", "records", "name", "acks", "timeout_ms",
    "max_wait_ms", "min_bytes", "max_bytes", "isolation_level", "fetch_offset", "partition_max_bytes",
    "timestamp", "offset", "num_partitions", "replication_factor", "configs", "validate_only", "delete",
    "transactional_id", "producer_id", "producer_epoch", "key", "key_type", "group_id", "member_id",
    "generation_id", "session_timeout_ms", "rebalance_timeout_ms", "protocol_type", "protocols", "metadata",
    "assignments", "assignment", "members", "committed_offset", "groups", "groups_names",
    *m.REQUEST_TYPES,
]


def kafka_requests_seeds() -> dict[str, bytes]:
    """One frame body per Kafka API and version the listener serves, as kio writes them, with
    realistic values where an API carries data (a real batch in Produce, names, offsets, groups)."""
    from triolog.protocol.kafka.schema import build, request_class, write_parts
    from triolog.protocol.kafka.served import SERVED_VERSIONS

    records = _produce_records()
    values = {
        0: {"acks": -1, "timeout": 30000, "topic_data": [{"name": "t", "partition_data": [
            {"index": 0, "records": records}, {"index": 1, "records": records}]}]},
        1: {"max_wait": 500, "min_bytes": 1, "max_bytes": 1 << 20, "session_epoch": -1, "topics": [
            {"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 5, "partition_max_bytes": 65536}]}]},
        2: {"replica_id": -1, "topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}]}]},
        3: {"topics": [{"name": "t", "topic_id": None}], "allow_auto_topic_creation": True},
        8: {"group_id": "g", "generation_id_or_member_epoch": 1, "member_id": "m", "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 7, "committed_metadata": ""}]}]},
        9: {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}],
            "groups": [{"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]}]},
        10: {"key": "g", "coordinator_keys": ["g"]},
        11: {"group_id": "g", "session_timeout": 10000, "rebalance_timeout": 30000, "member_id": "",
             "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b"\x00\x01\x00\x00\x00\x01\x00\x01t"}]},
        14: {"group_id": "g", "generation_id": 1, "member_id": "m", "assignments": [{"member_id": "m", "assignment": b"a"}]},
        19: {"topics": [{"name": "t", "num_partitions": 3, "replication_factor": 1, "assignments": [],
                         "configs": [{"name": "cleanup.policy", "value": "compact"}]}], "timeout": 1000},
        32: {"resources": [{"resource_type": 2, "resource_name": "t", "configuration_keys": None}]},
        37: {"topics": [{"name": "t", "count": 4, "assignments": None}], "timeout": 1000},
        44: {"resources": [{"resource_type": 2, "resource_name": "t", "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "1000"}]}]},
    }
    seeds = {}
    for key, (low, high) in sorted(SERVED_VERSIONS.items()):
        for version in range(low, high + 1):
            cls = request_class(key, version)
            header = build(cls.__header_schema__, request_api_key=key, request_api_version=version,
                           correlation_id=7, client_id="fuzz")
            seeds[f"kafka-{key}-v{version}"] = b"".join(write_parts([header, build(cls, values.get(key, {}))]))
    return seeds


def request_dictionary() -> str:
    """A libFuzzer dictionary: each field and API name as a msgpack fixstr, plus msgpack type bytes."""
    lines = []
    for word in REQUEST_DICT_WORDS:
        token = msgpack.packb(word)
        lines.append('"' + "".join(f"\\x{b:02x}" for b in token) + '"')
    for token in (b"\xc0", b"\xc2", b"\xc3", b"\xc4", b"\xcc", b"\xcd", b"\xce", b"\xcf", b"\xd0", b"\xd3",
                  b"\xdc", b"\xdd", b"\xde", b"\xdf", b"\xd9", b"\xff", b"\x80", b"\x90", b"\xa0"):
        lines.append('"' + "".join(f"\\x{b:02x}" for b in token) + '"')
    return "# msgpack tokens of the request schema (generated by tests/fuzz/make_corpus.py)\n" + "\n".join(lines) + "\n"


def main() -> None:
    for target, seeds in (("requests", requests_seeds()), ("validator", validator_seeds()),
                          ("kafka_requests", kafka_requests_seeds())):
        directory = CORPUS / target
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in seeds.items():
            (directory / name).write_bytes(data)
    (CORPUS.parent / "requests.dict").write_text(request_dictionary())


if __name__ == "__main__":
    main()
