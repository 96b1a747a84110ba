"""The group APIs on the real broker over a real socket: a 3-member rebalance driven by raw
requests, commits answered only once durable in __consumer_offsets, the internal topic's
protection, group metrics, and groups and offsets loaded again after a restart."""

from __future__ import annotations

import trio

from triolog.broker.coordinator.group.group_metadata_manager import OFFSETS_TOPIC, partition_for
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode

from .inprocess import Client, metric, running_broker, wait_until

GROUP_PROPS = {"group_initial_rebalance_delay_ms": "0", "offsets_topic_num_partitions": "4",
               "group_min_session_timeout_ms": "500"}


def join_request(c: Client, member_id: str = "", group: str = "g", metadata: bytes = b"sub") -> m.JoinGroupRequest:
    return m.JoinGroupRequest(id=c.next_id(), client_id="app", group_id=group, member_id=member_id,
                              session_timeout_ms=10_000, rebalance_timeout_ms=10_000, protocol_type="consumer",
                              protocols=(m.JoinGroupProtocol(name="range", metadata=metadata),))


async def form_group(clients: list[Client], group: str = "g") -> tuple[list[str], str, int]:
    """Every client joins (MEMBER_ID_REQUIRED, then again with its id) and syncs; (ids, leader, generation)."""
    ids = []
    for c in clients:
        first = await c.call(join_request(c, group=group))
        assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
        ids.append(first["member_id"])
    joined: dict[str, dict] = {}
    async with trio.open_nursery() as nursery:
        for c, mid in zip(clients, ids):
            async def rejoin(c=c, mid=mid):
                joined[mid] = await c.call(join_request(c, mid, group=group))
            nursery.start_soon(rejoin)
    assert {j["error_code"] for j in joined.values()} == {0}
    generation = joined[ids[0]]["generation_id"]
    leader = joined[ids[0]]["leader"]
    assert {j["generation_id"] for j in joined.values()} == {generation}
    assert sorted(x["member_id"] for x in joined[leader]["members"]) == sorted(ids)
    synced: dict[str, dict] = {}
    async with trio.open_nursery() as nursery:
        for c, mid in zip(clients, ids):
            async def sync(c=c, mid=mid):
                assignments = tuple(m.SyncGroupAssignment(member_id=x, assignment=b"for " + x.encode())
                                    for x in ids) if mid == leader else ()
                synced[mid] = await c.call(m.SyncGroupRequest(id=c.next_id(), group_id=group,
                                                              generation_id=generation, member_id=mid,
                                                              assignments=assignments))
            nursery.start_soon(sync)
    assert {mid: s["assignment"] for mid, s in synced.items()} == {mid: b"for " + mid.encode() for mid in ids}
    return ids, leader, generation


def commit_request(c: Client, offsets: dict[int, int], group: str = "g", generation: int = -1,
                   member: str = "", topic: str = "t") -> m.OffsetCommitRequest:
    return m.OffsetCommitRequest(id=c.next_id(), group_id=group, generation_id=generation, member_id=member,
                                 topics=(m.OffsetCommitTopic(name=topic, partitions=tuple(
                                     m.OffsetCommitPartition(partition=p, committed_offset=o)
                                     for p, o in offsets.items())),))


async def fetched(c: Client, group: str = "g") -> dict[tuple[str, int], int]:
    doc = await c.call(m.OffsetFetchRequest(id=c.next_id(), group_id=group))
    assert doc["error_code"] == 0
    return {(t["name"], p["partition"]): p["committed_offset"] for t in doc["topics"] for p in t["partitions"]}


async def test_three_members_rebalance_commit_and_describe_over_raw_requests(tmp_path):
    async with running_broker(tmp_path, **GROUP_PROPS) as (server, port):
        clients = [await Client.connect(port) for _ in range(3)]
        found = await clients[0].call(m.FindCoordinatorRequest(id=clients[0].next_id(), key="g"))
        assert (found["error_code"], found["node_id"], found["port"]) == (0, server.config.node_id, port)
        ids, leader, generation = await form_group(clients)
        assert all(mid.startswith("app-") for mid in ids)
        c = clients[0]
        await c.create("t", 2)
        me = ids[0]
        beat = await c.call(m.HeartbeatRequest(id=c.next_id(), group_id="g", generation_id=generation, member_id=me))
        assert beat["error_code"] == 0
        done = await c.call(commit_request(c, {0: 42, 1: 7}, generation=generation, member=me))
        assert [p["error_code"] for p in done["topics"][0]["partitions"]] == [0, 0]
        # Answered only once durable: the record is below the partition's recovery point.
        log = server.topics.log(OFFSETS_TOPIC, partition_for("g", 4))
        assert log.recovery_point == log.log_end_offset > 0
        assert await fetched(c) == {("t", 0): 42, ("t", 1): 7}
        described = (await c.call(m.DescribeGroupsRequest(id=c.next_id(), groups=("g", "nope"))))["groups"]
        assert described[0]["group_state"] == "Stable" and described[0]["protocol_data"] == "range"
        assert {x["member_id"]: x["member_assignment"] for x in described[0]["members"]} == \
            {mid: b"for " + mid.encode() for mid in ids}
        assert {x["client_host"] for x in described[0]["members"]} == {"/127.0.0.1"}
        assert described[1]["group_state"] == "Dead"
        listed = await c.call(m.ListGroupsRequest(id=c.next_id()))
        assert listed["groups"] == [{"group_id": "g", "protocol_type": "consumer", "group_state": "Stable"}]
        # A member leaves: the others must rejoin.
        left = await clients[2].call(m.LeaveGroupRequest(id=clients[2].next_id(), group_id="g",
                                                         members=(m.MemberIdentity(member_id=ids[2]),)))
        assert left["members"][0]["error_code"] == 0
        beat = await c.call(m.HeartbeatRequest(id=c.next_id(), group_id="g", generation_id=generation, member_id=me))
        assert beat["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS
        assert metric(server, "triolog_group_rebalances_total") == 2
        assert metric(server, "triolog_group_committed_offset", group="g", topic="t", partition="0") == 42
        assert metric(server, "triolog_group_offset_commit_latency_seconds_count") == 1


async def test_group_lag_is_log_end_offset_minus_committed(tmp_path):
    async with running_broker(tmp_path, **GROUP_PROPS) as (server, port):
        c = await Client.connect(port)
        await c.create("events", 1)
        await c.produce("events", [b"a", b"b", b"c", b"d", b"e"])
        await c.call(commit_request(c, {0: 2}, group="lagging", topic="events"))
        assert metric(server, "triolog_group_lag", group="lagging", topic="events", partition="0") == 3


async def test_internal_topic_is_marked_and_cannot_be_written_or_deleted_by_clients(tmp_path):
    async with running_broker(tmp_path, **GROUP_PROPS) as (server, port):
        c = await Client.connect(port)
        assert (await c.call(m.FindCoordinatorRequest(id=c.next_id(), key="g")))["error_code"] == 0
        meta = await c.call(m.MetadataRequest(id=c.next_id(), topics=None))
        topics = {t["name"]: t for t in meta["topics"]}
        assert topics[OFFSETS_TOPIC]["internal"] is True and len(topics[OFFSETS_TOPIC]["partitions"]) == 4
        configs = server.topics.config_for(OFFSETS_TOPIC)
        assert configs.value_of("cleanup.policy") == ("compact",)
        assert configs.value_of("segment.bytes") == server.config.offsets_topic_segment_bytes
        refused = await c.produce(OFFSETS_TOPIC, [b"forged"])
        assert refused["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert "cannot append to internal topic" in refused["error_message"]
        assert server.topics.log(OFFSETS_TOPIC, 0).log_end_offset == 0
        created = await c.create(OFFSETS_TOPIC, 1)
        assert created["error_code"] == ErrorCode.INVALID_REQUEST and "prohibited" in created["error_message"]
        deleted = await c.call(m.DeleteTopicsRequest(id=c.next_id(), topics=(OFFSETS_TOPIC,)))
        assert deleted["topics"][0]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert server.topics.get(OFFSETS_TOPIC) is not None


async def test_no_offsets_topic_until_a_group_api_needs_it(tmp_path):
    async with running_broker(tmp_path, **GROUP_PROPS) as (server, port):
        c = await Client.connect(port)
        assert (await c.call(m.ListGroupsRequest(id=c.next_id())))["groups"] == []
        early = await c.create(OFFSETS_TOPIC, 1)  # a client cannot make it first, with its own settings
        assert early["error_code"] == ErrorCode.INVALID_REQUEST
        assert server.topics.get(OFFSETS_TOPIC) is None
        await c.create("t", 1)
        await c.call(commit_request(c, {0: 1}))
        assert server.topics.get(OFFSETS_TOPIC).num_partitions == 4


async def test_find_coordinator_answers_groups_and_transactional_ids(tmp_path):
    """key_type 0 finds the group coordinator, 1 the transaction coordinator: on one broker, itself."""
    async with running_broker(tmp_path, **GROUP_PROPS) as (server, port):
        c = await Client.connect(port)
        txn = await c.call(m.FindCoordinatorRequest(id=c.next_id(), key="my-txn", key_type=1))
        assert (txn["error_code"], txn["node_id"], txn["port"]) == (0, 0, port)
        assert server.topics.get("__transaction_state") is not None, "created on first use"
        group = await c.call(m.FindCoordinatorRequest(id=c.next_id(), key="g"))
        assert (group["error_code"], group["node_id"], group["port"]) == (0, 0, port)
        empty = await c.call(m.FindCoordinatorRequest(id=c.next_id(), key="", key_type=1))
        assert empty["error_code"] == ErrorCode.INVALID_REQUEST


async def test_commit_for_a_partition_that_does_not_exist_is_refused(tmp_path):
    async with running_broker(tmp_path, **GROUP_PROPS) as (server, port):
        c = await Client.connect(port)
        await c.create("t", 2)
        done = await c.call(commit_request(c, {0: 5, 2: 6}))
        assert [p["error_code"] for p in done["topics"][0]["partitions"]] == \
            [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        missing = await c.call(commit_request(c, {0: 1}, topic="nope"))
        assert missing["topics"][0]["partitions"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert await fetched(c) == {("t", 0): 5}


async def test_groups_and_offsets_come_back_after_a_restart(tmp_path):
    async with running_broker(tmp_path, **GROUP_PROPS) as (server, port):
        clients = [await Client.connect(port) for _ in range(2)]
        ids, leader, generation = await form_group(clients, group="kept")
        c = clients[0]
        await c.create("t", 4)
        for offset in range(1, 6):
            await c.call(commit_request(c, {0: offset * 10}, group="kept", generation=generation, member=ids[0]))
        await c.call(commit_request(c, {3: 99}, group="simple"))
    async with running_broker(tmp_path, **GROUP_PROPS) as (server, port):
        c = await Client.connect(port)

        async def loaded():
            doc = await c.call(m.OffsetFetchRequest(id=c.next_id(), group_id="kept"))
            return doc if doc["error_code"] != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else None

        while (await loaded()) is None:
            await trio.sleep(0.01)
        assert await fetched(c, "kept") == {("t", 0): 50}
        assert await fetched(c, "simple") == {("t", 3): 99}
        described = (await c.call(m.DescribeGroupsRequest(id=c.next_id(), groups=("kept",))))["groups"][0]
        assert described["group_state"] == "Stable"
        assert {x["member_id"]: x["member_assignment"] for x in described["members"]} == \
            {mid: b"for " + mid.encode() for mid in ids}
        beat = await c.call(m.HeartbeatRequest(id=c.next_id(), group_id="kept", generation_id=generation,
                                               member_id=ids[1]))
        assert beat["error_code"] == 0  # the member carries on with its generation


async def test_parked_join_is_answered_when_the_broker_shuts_down(tmp_path):
    async with running_broker(tmp_path, group_initial_rebalance_delay_ms="600000",
                              offsets_topic_num_partitions="1") as (server, port):
        c = await Client.connect(port)
        mid = (await c.call(join_request(c)))["member_id"]
        await c.send_request(join_request(c, mid))
        await wait_until(lambda: mid in server.groups.coordinator.groups["g"].members, what="the join parked")
        server.shutdown()
        answer = await c.receive_doc()
        assert answer["error_code"] == ErrorCode.NOT_COORDINATOR


async def test_expired_offsets_are_tombstoned_by_the_expiry_task(tmp_path):
    from triolog.broker.server.app import BrokerServer
    from triolog.broker.storage.clock import ManualClock

    from .inprocess import broker_config

    clock = ManualClock()
    config = broker_config(tmp_path, offsets_retention_minutes="1", offsets_retention_check_interval_ms="20",
                           **GROUP_PROPS)
    server = BrokerServer(config, clock=clock)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.run)
        try:
            c = await Client.connect(address.port)
            await c.create("t", 2)
            await c.call(commit_request(c, {0: 5}, group="old"))
            clock.advance(30_000)
            await c.call(commit_request(c, {1: 6}, group="old"))
            log = server.topics.log(OFFSETS_TOPIC, partition_for("old", 4))
            assert log.log_end_offset == 2
            clock.advance(30_000)  # the first commit is a minute old: expired, the second is not
            await wait_until(lambda: log.log_end_offset == 3, what="the expiry tombstone")
            assert await fetched(c, "old") == {("t", 1): 6}
            clock.advance(30_000)
            await wait_until(lambda: log.log_end_offset == 4, what="the second tombstone")
            assert await fetched(c, "old") == {}
            assert (await c.call(m.ListGroupsRequest(id=c.next_id())))["groups"] == []
        finally:
            server.shutdown()


async def test_deleting_a_topic_removes_the_groups_offsets_for_it(tmp_path):
    async with running_broker(tmp_path, **GROUP_PROPS) as (server, port):
        c = await Client.connect(port)
        await c.create("gone", 2)
        await c.create("kept", 1)
        await c.call(commit_request(c, {0: 3, 1: 4}, topic="gone"))
        await c.call(commit_request(c, {0: 5}, topic="kept"))
        await c.call(commit_request(c, {1: 9}, group="only-gone", topic="gone"))
        log = server.topics.log(OFFSETS_TOPIC, partition_for("g", 4))
        written = log.log_end_offset
        deleted = await c.call(m.DeleteTopicsRequest(id=c.next_id(), topics=("gone",)))
        assert deleted["topics"][0]["error_code"] == 0
        await wait_until(lambda: log.log_end_offset == written + 2, what="tombstones of the deleted topic's offsets")
        assert await fetched(c) == {("kept", 0): 5}
        assert await fetched(c, "only-gone") == {}
        assert [g["group_id"] for g in (await c.call(m.ListGroupsRequest(id=c.next_id())))["groups"]] == ["g"]


async def test_stores_asked_for_in_the_same_tick_are_appended_in_that_order(tmp_path):
    from triolog.broker.coordinator.group.group_metadata_manager import offset_commit_key

    async with running_broker(tmp_path, **GROUP_PROPS) as (server, port):
        c = await Client.connect(port)
        await c.create("t", 1)
        await c.call(commit_request(c, {0: 1}))  # creates __consumer_offsets
        partition = partition_for("g", 4)
        placed: list[tuple[int, int]] = []
        for i in range(20):  # trio may run tasks started in one tick in either order: many tries
            for n in range(2):
                server.groups.writer.store(partition, [(offset_commit_key("g", "t", n), None)],
                                     lambda error, offset, n=n: placed.append((n, offset)))
            await wait_until(lambda: len(placed) == 2 * (i + 1), what="both stores")
        for first, second in zip(placed[::2], placed[1::2]):
            (n1, o1), (n2, o2) = sorted([first, second])
            assert o1 < o2, placed  # the first asked for is first in the log
