"""The follower's Fetch v12 codec against kio's (generated from Kafka's own schemas): a request
we encode is what kio reads, a response kio writes is what we read."""

from __future__ import annotations

import io
import struct

import pytest
from hypothesis import given, settings, strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from triolog.protocol.frames import NEED_DATA, FrameDecoder, RemoteProtocolError
from triolog.protocol.kafka.replica_fetch import (
    EpochEndOffset,
    PartitionFetch,
    decode_replica_fetch_response,
    encode_replica_fetch,
    response_correlation_id,
)
from triolog.protocol.kafka.schema import build
from triolog.protocol.records import Record, encode_batch

REQUEST = load_request_schema(1, 12)
RESPONSE = load_response_schema(1, 12)


def kio_read_request(frame: bytes):
    (length,) = struct.unpack_from(">i", frame)
    assert length == len(frame) - 4
    body = frame[4:]
    header, size = entity_reader(REQUEST.__header_schema__)(body, 0)
    request, rest = entity_reader(REQUEST)(body, size)
    assert size + rest == len(body)  # nothing left over
    return header, request


def kio_write_response(correlation_id: int, body: dict) -> bytes:
    """A response frame body (no length prefix), as a Kafka broker writes it."""
    buffer = io.BytesIO()
    header_cls = RESPONSE.__header_schema__
    entity_writer(header_cls)(buffer, header_cls(correlation_id=correlation_id))
    entity_writer(RESPONSE)(buffer, build(RESPONSE, body))
    return buffer.getvalue()


def partition_data(index: int, **fields) -> dict:
    return {"partition_index": index, "error_code": 0, "high_watermark": 0, "last_stable_offset": 0,
            "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
            "records": b"", **fields}


# -- requests -----------------------------------------------------------------------------------


def test_request_reads_back_with_kio():
    partitions = [
        PartitionFetch("orders", 0, current_leader_epoch=3, fetch_offset=100, last_fetched_epoch=2,
                       log_start_offset=7, partition_max_bytes=1 << 20),
        PartitionFetch("clicks", 4, current_leader_epoch=0, fetch_offset=0, last_fetched_epoch=-1,
                       log_start_offset=0, partition_max_bytes=512),
        PartitionFetch("orders", 2, current_leader_epoch=5, fetch_offset=2**40, last_fetched_epoch=5,
                       log_start_offset=2**39, partition_max_bytes=2**31 - 1),
    ]
    frame = encode_replica_fetch(42, "broker-2-fetcher-0", 2, 500, 1, 10 << 20, partitions)
    header, request = kio_read_request(frame)
    assert (header.request_api_key, header.request_api_version) == (1, 12)
    assert header.correlation_id == 42 and header.client_id == "broker-2-fetcher-0"
    assert request.replica_id == 2
    assert request.max_wait.total_seconds() * 1000 == 500
    assert (request.min_bytes, request.max_bytes, request.isolation_level) == (1, 10 << 20, 0)
    assert (request.session_id, request.session_epoch) == (0, -1)  # a full fetch, no session
    assert request.cluster_id is None and request.rack_id == "" and request.forgotten_topics_data == ()
    # grouped by topic, in first-seen order, partitions in their order
    assert [t.topic for t in request.topics] == ["orders", "clicks"]
    decoded = [
        PartitionFetch(t.topic, p.partition, p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch,
                       p.log_start_offset, p.partition_max_bytes)
        for t in request.topics for p in t.partitions
    ]
    assert decoded == [partitions[0], partitions[2], partitions[1]]


def test_request_with_no_partitions_and_a_null_client_id():
    header, request = kio_read_request(encode_replica_fetch(1, None, 0, 0, 0, 0, []))
    assert header.client_id is None and request.topics == ()


@settings(deadline=None, max_examples=60)
@given(
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    client_id=st.text(max_size=300),
    topics=st.dictionaries(
        st.text(min_size=1, max_size=200),
        st.lists(
            st.tuples(st.integers(0, 2**31 - 1), st.integers(-1, 2**31 - 1), st.integers(0, 2**63 - 1),
                      st.integers(-1, 2**31 - 1), st.integers(-1, 2**63 - 1), st.integers(0, 2**31 - 1)),
            max_size=4,
        ),
        max_size=150,  # > 127 topics: a two-byte varint length
    ),
)
def test_request_round_trip_property(correlation_id, client_id, topics):
    partitions = [PartitionFetch(name, *fields) for name, parts in topics.items() for fields in parts]
    header, request = kio_read_request(
        encode_replica_fetch(correlation_id, client_id, 3, 100, 1, 1000, partitions))
    assert header.correlation_id == correlation_id and header.client_id == client_id
    decoded = [
        PartitionFetch(t.topic, p.partition, p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch,
                       p.log_start_offset, p.partition_max_bytes)
        for t in request.topics for p in t.partitions
    ]
    assert decoded == partitions


# -- responses ----------------------------------------------------------------------------------


def test_response_with_records_and_watermarks():
    records = encode_batch([Record(10 + i, 1000 + i, b"k", b"v" * i) for i in range(5)], base_offset=10)
    body = kio_write_response(9, {
        "throttle_time": 0, "error_code": 0, "session_id": 0,
        "responses": [{"topic": "orders", "partitions": [
            partition_data(0, high_watermark=15, last_stable_offset=15, log_start_offset=3, records=records),
            partition_data(1, high_watermark=0, log_start_offset=0, records=None),  # null records
            partition_data(2, high_watermark=7, log_start_offset=0, records=b""),  # empty records
        ]}],
    })
    response = decode_replica_fetch_response(body)
    assert response.correlation_id == 9 and response.error_code == 0
    assert response_correlation_id(body) == 9
    first, null, empty = response.partitions
    assert (first.topic, first.partition, first.error_code) == ("orders", 0, 0)
    assert (first.high_watermark, first.last_stable_offset, first.log_start_offset) == (15, 15, 3)
    assert first.records == records and first.diverging_epoch is None
    assert null.records == b"" and empty.records == b""
    assert empty.high_watermark == 7


def test_response_diverging_epoch_and_errors():
    body = kio_write_response(-5, {
        "throttle_time": 25, "error_code": 0, "session_id": 0,
        "responses": [
            {"topic": "a", "partitions": [
                partition_data(0, high_watermark=100, log_start_offset=0,
                               diverging_epoch={"epoch": 4, "end_offset": 77}),
                partition_data(1, error_code=74, high_watermark=-1, log_start_offset=-1),  # FENCED_LEADER_EPOCH
            ]},
            {"topic": "b", "partitions": [
                partition_data(3, error_code=1, high_watermark=50, log_start_offset=20,  # OFFSET_OUT_OF_RANGE
                               current_leader={"leader_id": 2, "leader_epoch": 9},
                               snapshot_id={"end_offset": 5, "epoch": 1},
                               aborted_transactions=[{"producer_id": 8, "first_offset": 3}]),
                # epoch 0 ending at offset 0 is a divergence too (not the -1/-1 of none)
                partition_data(4, diverging_epoch={"epoch": 0, "end_offset": 0}),
            ]},
        ],
    })
    response = decode_replica_fetch_response(body)
    assert response.correlation_id == -5 and response.throttle_time_ms == 25
    a0, a1, b3, b4 = response.partitions
    assert a0.diverging_epoch == EpochEndOffset(4, 77) and a0.records == b""
    assert (a1.topic, a1.partition, a1.error_code, a1.high_watermark) == ("a", 1, 74, -1)
    assert (b3.topic, b3.partition, b3.error_code, b3.log_start_offset) == ("b", 3, 1, 20)
    assert b3.diverging_epoch is None and b3.current_leader == (2, 9)
    assert b4.diverging_epoch == EpochEndOffset(0, 0)


def test_top_level_error():
    body = kio_write_response(3, {"throttle_time": 0, "error_code": 70, "session_id": 0, "responses": []})
    response = decode_replica_fetch_response(body)
    assert (response.error_code, response.partitions) == (70, ())


def test_large_records_survive_two_byte_and_longer_varints():
    records = encode_batch([Record(i, 0, None, bytes([i % 256]) * 300) for i in range(400)], base_offset=0)
    assert len(records) > 2**14  # a three-byte compact length
    body = kio_write_response(1, {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": "t" * 200, "partitions": [partition_data(0, records=records, high_watermark=400)]}]})
    [result] = decode_replica_fetch_response(body).partitions
    assert result.records == records and result.topic == "t" * 200


def test_truncated_response_is_a_protocol_error():
    body = kio_write_response(1, {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": "t", "partitions": [partition_data(0, records=b"x" * 100,
                                                     diverging_epoch={"epoch": 1, "end_offset": 2})]}]})
    decode_replica_fetch_response(body)
    for cut in (2, 10, len(body) // 2, len(body) - 1):
        with pytest.raises(RemoteProtocolError):
            decode_replica_fetch_response(body[:cut])


def test_frames_from_a_byte_stream():
    """The follower splits what it reads into frames with the protocol's FrameDecoder."""
    bodies = [kio_write_response(i, {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": []})
              for i in range(3)]
    stream = b"".join(struct.pack(">i", len(b)) + b for b in bodies)
    decoder = FrameDecoder()
    frames = []
    for i in range(0, len(stream), 5):
        decoder.receive_data(stream[i:i + 5])
        while (frame := decoder.next_frame()) is not NEED_DATA:
            frames.append(decode_replica_fetch_response(frame).correlation_id)
    assert frames == [0, 1, 2]
