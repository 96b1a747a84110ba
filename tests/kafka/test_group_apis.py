"""The group APIs' Kafka translations, every served version: what a client encodes (kio's writer)
becomes the coordinator's request, and its answer reads back (kio's reader) with the same values.
Pure: no broker."""

from __future__ import annotations

import pytest

from triolog.protocol import messages as m
from triolog.protocol.kafka import group_apis
from triolog.protocol.kafka.apis import KafkaContext
from triolog.protocol.kafka.requests import decode_request, encode_response
from triolog.protocol.kafka.schema import build, request_class
from triolog.protocol.kafka.served import SERVED_VERSIONS

from .kafka_wire import decode_response, encode_request

CTX = KafkaContext(node_id=4, host="kafka.example", port=19092, cluster_id="c")


def _versions(api_key: int) -> list[int]:
    low, high = SERVED_VERSIONS[api_key]
    return list(range(low, high + 1))


def _request(api_key: int, version: int, values: dict):
    frame = encode_request(api_key, version, 9, build(request_class(api_key, version), values), client_id="cid")[4:]
    return decode_request(frame, SERVED_VERSIONS)


def _decoded(request, body):
    frame = b"".join(encode_response(request.api_key, request.version, request.correlation_id, body))
    correlation_id, decoded = decode_response(request.api_key, request.version, frame)
    assert correlation_id == 9
    return decoded


@pytest.mark.parametrize("version", _versions(10))
def test_find_coordinator_answers_the_kafka_listener(version):
    values = {"coordinator_keys": ["g1", "g2"]} if version >= 4 else {"key": "g1", "key_type": 0}
    request = _request(10, version, values)
    internal = group_apis.find_coordinator_to_internal(request, CTX)
    assert [r.key for r in internal] == (["g1", "g2"] if version >= 4 else ["g1"])
    answers = [m.FindCoordinatorResponse(id=9, node_id=4, host="msgpack-host", port=9092) for _ in internal]
    decoded = _decoded(request, group_apis.find_coordinator_to_kafka(answers, request, CTX))
    coordinators = decoded.coordinators if version >= 4 else [decoded]
    assert [(c.node_id, c.host, c.port, int(c.error_code)) for c in coordinators] == [(4, "kafka.example", 19092, 0)] * len(internal)


@pytest.mark.parametrize("version", _versions(11))
def test_join_group_every_version(version):
    request = _request(11, version, {"group_id": "g", "session_timeout": 10000, "rebalance_timeout": 30000,
                                     "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                                     "protocols": [{"name": "range", "metadata": b"sub"}], "reason": "r"})
    internal = group_apis.join_group_to_internal(request, CTX)
    assert (internal.group_id, internal.session_timeout_ms, internal.protocol_type) == ("g", 10000, "consumer")
    assert internal.rebalance_timeout_ms == (30000 if version >= 1 else -1)
    assert internal.protocols == (m.JoinGroupProtocol(name="range", metadata=b"sub"),)
    required = m.JoinGroupResponse(id=9, error_code=79, error_message="member id required", member_id="cid-1")
    follow = group_apis.join_group_follow_up(required, internal, request)
    # Before v4 the client cannot take MEMBER_ID_REQUIRED: the listener joins again with the id itself.
    assert (follow is not None and follow.member_id == "cid-1") is (version < 4)
    joined = m.JoinGroupResponse(id=9, generation_id=3, protocol_type="consumer", protocol_name="range",
                                 leader="cid-1", member_id="cid-1",
                                 members=(m.JoinGroupMember(member_id="cid-1", metadata=b"sub"),))
    decoded = _decoded(request, group_apis.join_group_to_kafka(joined, request, CTX))
    assert (decoded.generation_id, decoded.protocol_name, decoded.leader, decoded.member_id) == (3, "range", "cid-1", "cid-1")
    assert [(p.member_id, p.metadata) for p in decoded.members] == [("cid-1", b"sub")]


@pytest.mark.parametrize("version", _versions(14))
def test_sync_group_every_version(version):
    request = _request(14, version, {"group_id": "g", "generation_id": 3, "member_id": "a", "protocol_type": "consumer",
                                     "protocol_name": "range",
                                     "assignments": [{"member_id": "a", "assignment": b"A"}]})
    internal = group_apis.sync_group_to_internal(request, CTX)
    assert internal.assignments == (m.SyncGroupAssignment(member_id="a", assignment=b"A"),)
    assert internal.protocol_name == ("range" if version >= 5 else None)
    answer = m.SyncGroupResponse(id=9, protocol_type="consumer", protocol_name="range", assignment=b"A")
    assert _decoded(request, group_apis.sync_group_to_kafka(answer, request, CTX)).assignment == b"A"


@pytest.mark.parametrize("version", _versions(13))
def test_leave_group_every_version(version):
    values = ({"group_id": "g", "member_id": "a"} if version < 3 else
              {"group_id": "g", "members": [{"member_id": "a"}, {"member_id": "b"}]})
    request = _request(13, version, values)
    internal = group_apis.leave_group_to_internal(request, CTX)
    assert [p.member_id for p in internal.members] == (["a"] if version < 3 else ["a", "b"])
    answer = m.LeaveGroupResponse(id=9, members=tuple(m.MemberResponse(member_id=p.member_id, error_code=25,
                                                                        error_message="unknown")
                                                       for p in internal.members))
    decoded = _decoded(request, group_apis.leave_group_to_kafka(answer, request, CTX))
    if version < 3:
        assert int(decoded.error_code) == 25  # the one member's code, at the top
    else:
        assert [int(p.error_code) for p in decoded.members] == [25, 25]


@pytest.mark.parametrize("version", _versions(8))
def test_offset_commit_every_version(version):
    request = _request(8, version, {"group_id": "g", "generation_id_or_member_epoch": 2, "member_id": "a",
                                    "retention_time": -1, "topics": [{"name": "t", "partitions": [
                                        {"partition_index": 1, "committed_offset": 42, "committed_leader_epoch": -1,
                                         "committed_metadata": "meta"}]}]})
    internal = group_apis.offset_commit_to_internal(request, CTX)
    assert (internal.group_id, internal.generation_id, internal.member_id) == ("g", 2, "a")
    assert internal.topics == (m.OffsetCommitTopic(name="t", partitions=(
        m.OffsetCommitPartition(partition=1, committed_offset=42, committed_metadata="meta"),)),)
    refused = m.OffsetCommitResponse(id=9, error_code=22, error_message="illegal generation")
    decoded = _decoded(request, group_apis.offset_commit_to_kafka(refused, request, CTX))
    assert [int(p.error_code) for p in decoded.topics[0].partitions] == [22]


@pytest.mark.parametrize("version", _versions(9))
def test_offset_fetch_every_version(version):
    topics = [{"name": "t", "partition_indexes": [0, 1]}]
    values = ({"groups": [{"group_id": "g", "topics": topics}, {"group_id": "h", "topics": None}]} if version >= 8
              else {"group_id": "g", "topics": topics})
    request = _request(9, version, values)
    internal = group_apis.offset_fetch_to_internal(request, CTX)
    assert [(r.group_id, r.topics) for r in internal][:1] == [("g", (m.OffsetFetchTopic(name="t", partitions=(0, 1)),))]
    answers = [m.OffsetFetchResponse(id=9, topics=(m.OffsetFetchTopicResult(name="t", partitions=(
        m.OffsetFetchPartitionResult(partition=0, committed_offset=7), m.OffsetFetchPartitionResult(partition=1)
    )),)) for _ in internal]
    decoded = _decoded(request, group_apis.offset_fetch_to_kafka(answers, request, CTX))
    groups = decoded.groups if version >= 8 else [decoded]
    for group in groups:
        assert [(p.partition_index, p.committed_offset) for p in group.topics[0].partitions] == [(0, 7), (1, -1)]


@pytest.mark.parametrize("version", _versions(16))
def test_list_groups_every_version(version):
    request = _request(16, version, {"states_filter": ["Stable"], "types_filter": ["classic"]})
    internal = group_apis.list_groups_to_internal(request, CTX)
    assert internal.states_filter == (("Stable",) if version >= 4 else ())
    answer = m.ListGroupsResponse(id=9, groups=(m.ListedGroup(group_id="g", protocol_type="consumer", group_state="Stable"),))
    decoded = _decoded(request, group_apis.list_groups_to_kafka(answer, request, CTX))
    assert [g.group_id for g in decoded.groups] == ["g"]


def test_list_groups_of_a_type_other_than_classic_is_empty():
    request = _request(16, 5, {"states_filter": [], "types_filter": ["consumer"]})
    answer = m.ListGroupsResponse(id=9, groups=(m.ListedGroup(group_id="g", protocol_type="consumer", group_state="Stable"),))
    assert _decoded(request, group_apis.list_groups_to_kafka(answer, request, CTX)).groups == ()


@pytest.mark.parametrize("version", _versions(15))
def test_describe_groups_every_version(version):
    request = _request(15, version, {"groups": ["g"], "include_authorized_operations": False})
    answer = m.DescribeGroupsResponse(id=9, groups=(m.DescribedGroup(
        group_id="g", group_state="Stable", protocol_type="consumer", protocol_data="range", members=(
            m.DescribedGroupMember(member_id="a", client_id="c", client_host="/127.0.0.1", member_metadata=b"M",
                                   member_assignment=b"A"),)),))
    assert group_apis.describe_groups_to_internal(request, CTX) == [
        m.DescribeGroupsRequest(id=request.correlation_id, client_id=request.client_id, groups=("g",))]
    decoded = _decoded(request, group_apis.describe_groups_to_kafka([answer], request, CTX))
    (group,) = decoded.groups
    assert (group.group_id, group.group_state, group.protocol_data) == ("g", "Stable", "range")
    assert [(p.member_id, p.client_host, p.member_assignment) for p in group.members] == [("a", "/127.0.0.1", b"A")]


@pytest.mark.parametrize("version", _versions(42))
def test_delete_groups_every_version(version):
    request = _request(42, version, {"groups_names": ["g", "h"]})
    internal = group_apis.delete_groups_to_internal(request, CTX)
    assert internal.groups_names == ("g", "h")
    answer = m.DeleteGroupsResponse(id=9, results=(m.DeletableGroupResult(group_id="g"),
                                                   m.DeletableGroupResult(group_id="h", error_code=68,
                                                                          error_message="not empty")))
    decoded = _decoded(request, group_apis.delete_groups_to_kafka(answer, request, CTX))
    assert [(r.group_id, int(r.error_code)) for r in decoded.results] == [("g", 0), ("h", 68)]
