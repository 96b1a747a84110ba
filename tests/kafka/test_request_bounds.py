"""Kafka request frames are bounded before kio decodes them: a Produce request naming more
partitions than the broker may hold, or any other request over a megabyte, is refused unread,
fast; every request a client builds within the bounds passes."""

from __future__ import annotations

import struct
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triolog.protocol.kafka.request_bounds import MAX_GROUP_ENTRIES, MAX_SMALL_FRAME_BYTES, RequestTooLarge, check_request
from triolog.protocol.kafka.requests import MalformedRequest
from triolog.protocol.kafka.schema import build, request_class
from triolog.protocol.kafka.served import SERVED_VERSIONS

from tests.e2e.broker_process import KEEP_OLD_RECORDS, BrokerProcess
from tests.waiting import wait_for

from .kafka_wire import connect, encode_request, read_frame


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory) -> BrokerProcess:
    """A broker process, not the in-process one of conftest: a test reads its peak memory."""
    broker = BrokerProcess(tmp_path_factory.mktemp("kafka") / "data", KEEP_OLD_RECORDS, kafka=True).start()
    yield broker
    broker.kill()


PRODUCE_VERSIONS = list(range(SERVED_VERSIONS[0][0], SERVED_VERSIONS[0][1] + 1))


def _produce(version: int, topics: list[tuple[str, list[bytes | None]]], transactional_id=None) -> bytes:
    body = build(request_class(0, version), {"transactional_id": transactional_id, "acks": -1, "timeout": 30000,
                                             "topic_data": [{"name": name, "partition_data": [
                                                 {"index": i, "records": r} for i, r in enumerate(records)]}
                                                 for name, records in topics]})
    return encode_request(0, version, 1, body)[4:]


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@settings(max_examples=25, deadline=None)
@given(topics=st.lists(st.tuples(st.text(min_size=1, max_size=30),
                                 st.lists(st.one_of(st.none(), st.binary(max_size=300)), min_size=0, max_size=6)),
                       max_size=5),
       transactional_id=st.one_of(st.none(), st.text(max_size=10)))
def test_produce_requests_within_the_bound_pass_and_one_entry_more_is_refused(version, topics, transactional_id):
    frame = _produce(version, topics, transactional_id)
    entries = len(topics) + sum(len(records) for _, records in topics)
    check_request(frame, max_partitions=(entries + 1) // 2)  # counted: topics and partitions
    if entries >= 2:
        with pytest.raises(RequestTooLarge):
            check_request(frame, max_partitions=(entries - 2) // 2)


@pytest.mark.parametrize("version", [3, 9])
def test_a_produce_bomb_is_refused_in_milliseconds(version):
    # One topic claiming 12 million partitions of empty records: 100 MB of wire, refused unread.
    entry = struct.pack(">ii", 0, -1) if version < 9 else struct.pack(">i", 0) + b"\x00\x00"
    count = struct.pack(">i", 12_000_000) if version < 9 else b"\x81\xb6\xdc\x05"  # uvarint 12M+1
    body = _bomb(version, count, entry)
    started = time.perf_counter()
    with pytest.raises(RequestTooLarge):
        check_request(body, max_partitions=10_000)
    assert time.perf_counter() - started < 0.05


def _bomb(version: int, count: bytes, entry: bytes) -> bytes:
    """A produce request of one topic whose partition array is ``count`` then entries (2M of them)."""
    flexible = version >= 9
    header = struct.pack(">hhih", 0, version, 1, 1) + b"c" + (b"\x00" if flexible else b"")
    txn = b"\x00" if flexible else struct.pack(">h", -1)
    topics = b"\x02" if flexible else struct.pack(">i", 1)
    name = (b"\x02t" if flexible else struct.pack(">h", 1) + b"t")
    return header + txn + struct.pack(">hi", -1, 30000) + topics + name + count + entry * 2_000_000


def test_a_produce_of_many_empty_topics_is_refused_too():
    header = struct.pack(">hhih", 0, 3, 1, 1) + b"c" + struct.pack(">h", -1) + struct.pack(">hi", 1, 1000)
    frame = header + struct.pack(">i", 30_000) + (struct.pack(">h", 1) + b"t" + struct.pack(">i", 0)) * 30_000
    started = time.perf_counter()
    with pytest.raises(RequestTooLarge):
        check_request(frame, max_partitions=10_000)
    assert time.perf_counter() - started < 0.05


def test_a_request_of_any_other_api_over_a_megabyte_is_refused_unread():
    names = [{"topic_id": None, "name": ""}] * (MAX_SMALL_FRAME_BYTES // 2)
    frame = encode_request(3, 9, 1, build(request_class(3, 9), {"topics": names}))[4:]
    with pytest.raises(RequestTooLarge):
        check_request(frame, max_partitions=10_000)
    small = encode_request(3, 9, 1, build(request_class(3, 9), {"topics": names[:1000]}))[4:]
    check_request(small, max_partitions=10_000)


def _vm_hwm_kb(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_the_broker_closes_amplifying_requests_without_growing(kafka_broker, bootstrap):
    from kio.schema.api_versions.v0.request import ApiVersionsRequest

    pid = kafka_broker.process.pid
    before = _vm_hwm_kb(pid)
    # A Metadata request of 2,000,000 empty names (4 MB): 2M objects had kio read it.
    payload = struct.pack(">hhih", 3, 9, 5, 1) + b"c" + b"\x00" + b"\x81\x89\x7a" + b"\x01\x00" * 2_000_000 + b"\x00" * 4
    with connect(bootstrap) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        assert read_frame(sock) is None  # closed
    bomb = _bomb(9, b"\x81\xb6\xdc\x05", struct.pack(">i", 0) + b"\x00\x00")
    with connect(bootstrap) as sock:
        sock.sendall(struct.pack(">i", len(bomb)) + bomb)
        assert read_frame(sock) is None
    wait_for(lambda: len([e for e in kafka_broker.events() if e.get("event") == "kafka_request_too_large"]) >= 2,
             10, "both refusals logged")
    with connect(bootstrap) as sock:  # and it serves on
        sock.sendall(encode_request(18, 0, 8, ApiVersionsRequest()))
        assert read_frame(sock) is not None
    # The frames themselves (4 and 12 MB) were held while read; nothing near what decoding needs.
    assert _vm_hwm_kb(pid) - before < 64 * 1024


def test_an_array_longer_than_the_frame_is_refused_before_kio_reserves_memory_for_it():
    # kio trusts an array's length and reserves room for it: a mutated OffsetFetch claiming 2^31-1
    # partition indexes made it ask for gigabytes and abort the broker. Refused by the walk instead.
    good = encode_request(9, 7, 1, build(request_class(9, 7), {"group_id": "g", "topics": [
        {"name": "t", "partition_indexes": [0, 1, 2]}]}))[4:]
    at = good.index(b"\x04\x00\x00\x00\x00")  # the compact array of 3 indexes, then index 0
    bomb = good[:at] + b"\xff\xff\xff\xff\x07" + good[at + 1:]  # uvarint 2^31, an array of 2^31-1
    with pytest.raises(MalformedRequest, match="array of 2147483646 entries"):
        check_request(bomb, max_partitions=10_000, served=SERVED_VERSIONS)
    check_request(good, max_partitions=10_000, served=SERVED_VERSIONS)


@pytest.mark.parametrize("api_key", sorted(k for k in SERVED_VERSIONS if k != 0))
def test_every_served_request_built_by_kio_passes_the_walk(api_key):
    low, high = SERVED_VERSIONS[api_key]
    for version in range(low, high + 1):
        frame = encode_request(api_key, version, 1, build(request_class(api_key, version), {}))[4:]
        check_request(frame, max_partitions=10_000, served=SERVED_VERSIONS)
        with pytest.raises(MalformedRequest):  # and the same cut short by a byte is refused
            check_request(frame[:-1], max_partitions=10_000, served=SERVED_VERSIONS)


def _frame(api_key: int, version: int, values: dict) -> bytes:
    return encode_request(api_key, version, 1, build(request_class(api_key, version), values))[4:]


#: Requests of the APIs naming topics and partitions, of one topic and ``n`` partitions.
_PARTITION_REQUESTS = {
    "Fetch": lambda n: _frame(1, 12, {"topics": [{"topic": "t", "partitions": [
        {"partition": i} for i in range(n)]}]}),
    "ListOffsets": lambda n: _frame(2, 7, {"topics": [{"name": "t", "partitions": [
        {"partition_index": i, "timestamp": -1} for i in range(n)]}]}),
    "OffsetCommit": lambda n: _frame(8, 8, {"group_id": "g", "topics": [{"name": "t", "partitions": [
        {"partition_index": i, "committed_offset": 1} for i in range(n)]}]}),
    "OffsetFetch": lambda n: _frame(9, 8, {"groups": [{"group_id": "g", "topics": [
        {"name": "t", "partition_indexes": list(range(n))}]}]}),
    "DeleteRecords": lambda n: _frame(21, 2, {"topics": [{"name": "t", "partitions": [
        {"partition_index": i, "offset": 1} for i in range(n)]}]}),
}


@pytest.mark.parametrize("api", sorted(_PARTITION_REQUESTS))
def test_requests_naming_partitions_are_bounded_by_twice_max_broker_partitions(api):
    # Each entry costs the event loop a translation, a handler call and an answer to encode:
    # 55,000 ListOffsets partitions held it 0.7 s, 30,000 Fetch partitions 1.4 s.
    make = _PARTITION_REQUESTS[api]
    groups = 1 if api == "OffsetFetch" else 0  # its group is an entry too
    check_request(make(2 * 1000 - 1 - groups), max_partitions=1000, served=SERVED_VERSIONS)
    with pytest.raises(RequestTooLarge, match="max.broker.partitions"):
        check_request(make(2 * 1000 - groups), max_partitions=1000, served=SERVED_VERSIONS)


@pytest.mark.parametrize("api_key, version, field", [(10, 4, "coordinator_keys"), (15, 5, "groups"),
                                                     (42, 2, "groups_names")])
def test_requests_naming_groups_are_bounded_by_max_group_entries(api_key, version, field):
    # FindCoordinator v4 of 190,000 keys held the event loop 6 s, DescribeGroups of 130,000 groups 8 s.
    names = [f"g{i}" for i in range(MAX_GROUP_ENTRIES + 1)]
    check_request(_frame(api_key, version, {field: names[:-1]}), max_partitions=10, served=SERVED_VERSIONS)
    started = time.perf_counter()
    with pytest.raises(RequestTooLarge, match=f"{MAX_GROUP_ENTRIES} entries"):
        check_request(_frame(api_key, version, {field: names}), max_partitions=10, served=SERVED_VERSIONS)
    assert time.perf_counter() - started < 0.5


def test_the_group_apis_carrying_opaque_bytes_may_exceed_a_megabyte():
    # A large group's member metadata, assignments and committed metadata legitimately exceed
    # 1 MiB: JoinGroup, SyncGroup and OffsetCommit go up to socket.request.max.bytes.
    blob = b"m" * (2 * MAX_SMALL_FRAME_BYTES)
    for frame in (
            _frame(11, 9, {"group_id": "g", "member_id": "", "protocol_type": "consumer",
                           "protocols": [{"name": "range", "metadata": blob}]}),
            _frame(14, 5, {"group_id": "g", "generation_id": 1, "member_id": "m",
                           "assignments": [{"member_id": "m", "assignment": blob}]}),
            _frame(8, 8, {"group_id": "g", "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 1, "committed_metadata": "x" * len(blob)}]}]})):
        check_request(frame, max_partitions=10, served=SERVED_VERSIONS)
    with pytest.raises(RequestTooLarge, match="bytes any such request needs"):  # others still may not
        check_request(_frame(15, 5, {"groups": ["g" * (2 * MAX_SMALL_FRAME_BYTES // 3)] * 3}), max_partitions=10,
                      served=SERVED_VERSIONS)
