"""The routing rules of triolog.client.cluster, without I/O: which broker each request goes to,
how a request over several leaders is split and its answers merged, and when leaders are looked
up again."""

from __future__ import annotations

from triolog.client.cluster import ANY, ClusterView, merge
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode


def _metadata(leaders: dict[int, int], brokers=(1, 2, 3)) -> dict:
    return {
        "id": 1,
        "error_code": 0,
        "brokers": [{"node_id": b, "host": "127.0.0.1", "port": 9000 + b, "rack": None} for b in brokers],
        "topics": [
            {
                "name": "t",
                "error_code": 0,
                "partitions": [{"partition": p, "leader": node} for p, node in leaders.items()],
            }
        ],
    }


def _fetch(*partitions: int) -> m.FetchRequest:
    parts = tuple(m.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1024) for p in partitions)
    return m.FetchRequest(
        id=0, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=(m.FetchTopic(name="t", partitions=parts),)
    )


def test_a_request_over_several_leaders_is_split_per_leader():
    view = ClusterView()
    view.learn(_metadata({0: 1, 1: 2, 2: 1}))
    routed = view.route(_fetch(0, 1, 2))
    assert {node: [p.partition for t in r.topics for p in t.partitions] for node, r in routed} == {1: [0, 2], 2: [1]}
    assert view.route(_fetch(1)) == [(2, _fetch(1))]  # one leader: the request as it is
    assert view.route(m.MetadataRequest(id=0)) == [(ANY, m.MetadataRequest(id=0))]
    assert view.address(2) == ("127.0.0.1", 9002)


def test_one_known_broker_routes_everything_to_the_bootstrap_connection():
    view = ClusterView()
    view.learn(_metadata({0: 1, 1: 1}, brokers=(1,)))
    assert view.route(_fetch(0, 1)) == [(ANY, _fetch(0, 1))]
    assert view.refresh_due(_fetch(0), 0.0) is None


def test_answers_are_merged_by_topic():
    a = {"id": 1, "error_code": 0, "throttle_ms": 0, "topics": [{"name": "t", "partitions": [{"partition": 0}]}]}
    b = {"id": 2, "error_code": 0, "throttle_ms": 20, "topics": [{"name": "t", "partitions": [{"partition": 1}]}]}
    merged = merge([a, b])
    assert merged["throttle_ms"] == 20
    assert merged["topics"] == [{"name": "t", "partitions": [{"partition": 0}, {"partition": 1}]}]


def test_a_moved_leader_or_a_broken_connection_makes_the_topic_looked_up_again():
    view = ClusterView(retry_backoff_s=0.1)
    view.learn(_metadata({0: 1, 1: 2}))
    assert view.refresh_due(_fetch(0, 1), 10.0) is None  # every leader known
    answer = {
        "topics": [{"name": "t", "partitions": [{"partition": 0, "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER}]}]
    }
    view.note_response(_fetch(0), answer)
    assert view.leader("t", 0) is ANY and view.leader("t", 1) == 2
    assert view.refresh_due(_fetch(1), 10.0) == ["t"]
    assert view.refresh_due(_fetch(1), 10.05) is None  # at most once per retry_backoff
    view.learn(_metadata({0: 3, 1: 2}))
    assert view.leader("t", 0) == 3 and view.refresh_due(_fetch(0), 20.0) is None
    view.note_broken(2)
    assert view.leader("t", 1) is ANY and view.refresh_due(_fetch(0), 30.0) == ["t"]


def test_a_partition_without_a_leader_is_asked_again():
    view = ClusterView(retry_backoff_s=0.1)
    view.learn(_metadata({0: -1, 1: 2}))
    assert view.leader("t", 0) is ANY
    assert view.refresh_due(_fetch(1), 1.0) == ["t"]
    view.learn(_metadata({0: 3, 1: 2}))
    assert view.leader("t", 0) == 3 and view.refresh_due(_fetch(0), 2.0) is None


def _found(node: int) -> dict:
    return {"id": 1, "error_code": 0, "node_id": node, "host": "127.0.0.1", "port": 9000 + node}


def test_transaction_admin_requests_go_to_coordinators_and_leaders():
    """describe_transactions to each id's coordinator (split, answers merged), list_transactions
    to every broker, describe_producers and write_txn_markers to the partitions' leaders."""
    view = ClusterView()
    view.learn(_metadata({0: 1, 1: 2, 2: 3}))
    for key, node in (("a", 2), ("b", 3)):
        view.note_response(m.FindCoordinatorRequest(id=0, key=key, key_type=1), _found(node))
    view.note_response(m.FindCoordinatorRequest(id=0, key="a", key_type=0), _found(1))  # a group "a": another key
    describe = m.DescribeTransactionsRequest(id=0, transactional_ids=("a", "b", "unknown"))
    assert {node: r.transactional_ids for node, r in view.route(describe)} == {2: ("a",), 3: ("b",), ANY: ("unknown",)}
    listing = m.ListTransactionsRequest(id=0)
    assert [node for node, _ in view.route(listing)] == [1, 2, 3]
    merged = merge([{"id": 1, "error_code": 0, "transactions": [{"transactional_id": "a"}]},
                    {"id": 1, "error_code": 0, "transactions": []},
                    {"id": 1, "error_code": 0, "transactions": [{"transactional_id": "b"}]}])
    assert [t["transactional_id"] for t in merged["transactions"]] == ["a", "b"]
    producers = m.DescribeProducersRequest(id=0, topics=(m.TxnTopic(name="t", partitions=(0, 1, 2)),))
    assert {node: r.topics[0].partitions for node, r in view.route(producers)} == {1: (0,), 2: (1,), 3: (2,)}
    marker = m.TxnMarker(producer_id=7, producer_epoch=0, committed=False, coordinator_epoch=0,
                         topics=(m.TxnTopic(name="t", partitions=(2,)),))
    markers = m.WriteTxnMarkersRequest(id=0, markers=(marker,))
    assert view.route(markers) == [(3, markers)]
    # The coordinator moved: forgotten, and the id goes to any broker until found again.
    view.note_response(describe, {"id": 1, "error_code": 0, "transactions": [
        {"transactional_id": "a", "error_code": ErrorCode.NOT_COORDINATOR}]})
    assert view.coordinator(1, "a") is ANY and view.coordinator(1, "b") == 3


def test_group_admin_requests_go_to_their_coordinators():
    view = ClusterView()
    view.learn(_metadata({0: 1}))
    view.note_response(m.FindCoordinatorRequest(id=0, key="g1", key_type=0), _found(2))
    view.note_response(m.FindCoordinatorRequest(id=0, key="g2", key_type=0), _found(3))
    describe = m.DescribeGroupsRequest(id=0, groups=("g1", "g2"))
    assert {node: r.groups for node, r in view.route(describe)} == {2: ("g1",), 3: ("g2",)}
    delete = m.DeleteGroupsRequest(id=0, groups_names=("g2",))
    assert view.route(delete) == [(3, delete)]
    fetch = m.OffsetFetchRequest(id=0, group_id="g1")
    assert view.route(fetch) == [(2, fetch)]
    assert [node for node, _ in view.route(m.ListGroupsRequest(id=0))] == [1, 2, 3]
    merged = merge([{"id": 1, "error_code": 0, "groups": [{"group_id": "g1"}]},
                    {"id": 1, "error_code": 0, "groups": [{"group_id": "g2"}]}])
    assert [g["group_id"] for g in merged["groups"]] == ["g1", "g2"]
    view.note_response(fetch, {"id": 1, "error_code": ErrorCode.NOT_COORDINATOR, "topics": []})
    assert view.coordinator(0, "g1") is ANY and view.coordinator(0, "g2") == 3
