"""Consumer groups from the client's side, against the real broker process: joining, sharing
partitions out (range, roundrobin), committing and resuming, auto-commit, leaving on close and
past max_poll_interval_ms, pattern subscriptions, the trio consumer, and the admin calls."""

from __future__ import annotations

import itertools
import threading

import pytest
import trio

from tests.e2e.broker_process import InProcessBroker
from tests.waiting import wait_for
from triolog.client import AdminClient, Consumer, Producer
from triolog.client.errors import CommitFailedError
from triolog.client.errors import UnknownMemberIdError
from triolog.client.types import NewTopic, TopicPartition

_groups = itertools.count()

#: Fast groups: no initial rebalance delay, short sessions allowed.
GROUP_BROKER_CONFIG = ("group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=1000")
FAST = dict(session_timeout_ms=6000, heartbeat_interval_ms=300, fetch_max_wait_ms=100)


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory) -> InProcessBroker:
    process = InProcessBroker(tmp_path_factory.mktemp("group-broker") / "data", GROUP_BROKER_CONFIG).start()
    yield process
    process.stop()


@pytest.fixture
def boot(group_broker) -> str:
    return f"127.0.0.1:{group_broker.port}"


@pytest.fixture
def group(request) -> str:
    return f"g-{request.node.name[:60]}-{next(_groups)}"


def make_topic(boot: str, name: str, partitions: int, records: int = 0) -> list[bytes]:
    with AdminClient(boot) as admin:
        admin.create_topics([NewTopic(name, partitions)])
    values = [f"{name}-{i}".encode() for i in range(records)]
    if records:
        with Producer(boot) as producer:
            for i, value in enumerate(values):
                producer.send(name, value, partition=i % partitions)
    return values


def consume(consumer: Consumer, count: int, timeout_s: float = 20) -> list:
    got: list = []
    wait_for(lambda: got.extend(r for rs in consumer.poll(200).values() for r in rs) or len(got) >= count,
             timeout_s, f"{count} records")
    return got


def poll_until(consumers: list[Consumer], condition, timeout_s: float = 30, what: str = "the group") -> None:
    """Poll every consumer (each in its own thread, as separate processes would) until ``condition()``."""
    done = threading.Event()

    def keep_polling(consumer):
        while not done.is_set():
            consumer.poll(100)

    threads = [threading.Thread(target=keep_polling, args=(c,)) for c in consumers[1:]]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: consumers[0].poll(100) is not None and condition(), timeout_s, what, interval_s=0)
    finally:
        done.set()
        for thread in threads:
            thread.join()


def test_a_member_consumes_everything_commits_and_a_new_one_resumes_there(boot, group, topic):
    values = make_topic(boot, topic, 3, 30)
    with Consumer(boot, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False, **FAST) as first:
        first.subscribe([topic])
        got = consume(first, 30)
        assert sorted(r.value for r in got) == sorted(values)
        assert first.assignment() == {TopicPartition(topic, p) for p in range(3)}
        # commit only what was processed of partition 0: up to its 5th record
        part0 = [r for r in got if r.partition == 0]
        first.commit({TopicPartition(topic, 0): part0[4].offset + 1})
        assert first.committed((topic, 0)) == part0[4].offset + 1
        assert first.committed((topic, 1)) is None
    with Consumer(boot, group_id=group, auto_offset_reset="latest", enable_auto_commit=False, **FAST) as second:
        second.subscribe([topic])
        again = consume(second, 5)
        # partition 0 resumes at the committed offset; 1 and 2 have none: auto_offset_reset=latest
        assert [r.value for r in again] == [r.value for r in part0[5:]]


def test_auto_commit_commits_positions_on_close(boot, group, topic):
    make_topic(boot, topic, 2, 20)
    with Consumer(boot, group_id=group, auto_offset_reset="earliest", **FAST) as consumer:
        consumer.subscribe(topic)
        consume(consumer, 20)
    with AdminClient(boot) as admin:
        assert admin.list_consumer_group_offsets(group) == {TopicPartition(topic, 0): 10, TopicPartition(topic, 1): 10}
        # close() also left the group: it is Empty at once, not after a session timeout
        assert admin.describe_consumer_groups([group])[group].state == "Empty"


@pytest.mark.parametrize("strategy, expected", [
    ("range", [[0, 1, 2], [3, 4, 5]]),
    ("roundrobin", [[0, 2, 4], [1, 3, 5]]),
])
def test_two_members_share_the_partitions_with_the_chosen_assignor(boot, group, topic, strategy, expected):
    make_topic(boot, topic, 6)
    listener_calls = []

    class Listener:
        def on_partitions_revoked(self, revoked):
            listener_calls.append(("revoked", len(revoked)))

        def on_partitions_assigned(self, assigned):
            listener_calls.append(("assigned", len(assigned)))

    config = dict(FAST, partition_assignment_strategy=(strategy,))
    with Consumer(boot, group_id=group, **config) as a, Consumer(boot, group_id=group, **config) as b:
        a.subscribe([topic], listener=Listener())
        poll_until([a], lambda: len(a.assignment()) == 6, what="the first member's assignment")
        b.subscribe([topic])
        poll_until([a, b], lambda: len(a.assignment()) == 3 and len(b.assignment()) == 3, what="the rebalance")
        with AdminClient(boot) as admin:
            description = admin.describe_consumer_groups([group])[group]
        assert description.state == "Stable" and description.partition_assignor == strategy
        members = sorted(description.members)  # by member id: the assignors' order
        assert [sorted(tp.partition for tp in m.assignment) for m in members] == expected
        assert {tp for m in members for tp in m.assignment} == {TopicPartition(topic, p) for p in range(6)}
        assert listener_calls[:3] == [("assigned", 6), ("revoked", 6), ("assigned", 3)]


def test_a_member_that_stops_polling_leaves_and_its_commit_fails_until_it_polls_again(boot, group, topic):
    make_topic(boot, topic, 2, 10)
    with Consumer(boot, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                  max_poll_interval_ms=1500, **FAST) as consumer:
        consumer.subscribe([topic])
        consume(consumer, 10)
        with AdminClient(boot) as admin:
            # the heartbeat thread leaves the group once poll() is 1.5 s overdue (Kafka's rule)
            wait_for(lambda: admin.describe_consumer_groups([group])[group].state == "Empty", 15,
                     "the member to leave")
        with pytest.raises(CommitFailedError):
            consumer.commit()
        poll_until([consumer], lambda: len(consumer.assignment()) == 2, what="the rejoin")
        consumer.commit()
        assert consumer.committed((topic, 0)) == 5


def test_pattern_subscription_takes_matching_topics_only(boot, group, topic):
    for suffix in ("a", "b", "other"):
        make_topic(boot, f"{topic}.{suffix}", 2, 4)
    with Consumer(boot, group_id=group, auto_offset_reset="earliest", **FAST) as consumer:
        consumer.subscribe(pattern=rf"{topic.replace('.', '[.]')}[.](a|b)")
        got = consume(consumer, 8)
        assert {r.topic for r in got} == {f"{topic}.a", f"{topic}.b"}
        assert consumer.subscription() == {f"{topic}.a", f"{topic}.b"}


def test_subscribe_rules(boot):
    with Consumer(boot) as plain:
        with pytest.raises(ValueError, match="needs a group_id"):
            plain.subscribe(pattern="x.*")
        with pytest.raises(ValueError, match="group_id"):
            plain.commit()
    with Consumer(boot, group_id="rules", **FAST) as member:
        member.subscribe(["t"])
        with pytest.raises(ValueError, match="unsubscribe"):
            member.assign([("t", 0)])
    with pytest.raises(ValueError, match="heartbeat_interval_ms"):
        Consumer(boot, group_id="g", session_timeout_ms=1000, heartbeat_interval_ms=1000)
    with pytest.raises(ValueError, match="partition_assignment_strategy"):
        Consumer(boot, group_id="g", partition_assignment_strategy=("sticky",))


def test_manual_assignment_commits_as_a_simple_group(boot, group, topic):
    """assign() with a group_id: no membership, commits with generation -1 (Kafka's 'simple' group)."""
    make_topic(boot, topic, 1, 5)
    with Consumer(boot, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        consumer.assign([(topic, 0)])
        consume(consumer, 5)
        consumer.commit()
        assert consumer.committed((topic, 0)) == 5


def test_async_consumer_joins_commits_and_leaves(boot, group, topic):
    from triolog.client.aio import AsyncAdminClient, AsyncConsumer

    values = make_topic(boot, topic, 3, 12)

    async def main():
        async with AsyncConsumer(boot, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                                 **FAST) as consumer:
            consumer.subscribe([topic])
            got = []
            with trio.fail_after(20):
                while len(got) < 12:
                    got += [r for rs in (await consumer.poll(200)).values() for r in rs]
            await consumer.commit()
            assert await consumer.committed((topic, 1)) == 4
            async with AsyncAdminClient(boot) as admin:
                described = (await admin.describe_consumer_groups([group]))[group]
                assert described.state == "Stable" and len(described.members) == 1
            return got

    got = trio.run(main)
    assert sorted(r.value for r in got) == sorted(values)
    with AdminClient(boot) as admin:
        assert admin.describe_consumer_groups([group])[group].state == "Empty"


def test_admin_lists_describes_resets_and_deletes_groups(boot, group, topic):
    make_topic(boot, topic, 2, 10)
    with Consumer(boot, group_id=group, auto_offset_reset="earliest", **FAST) as consumer, AdminClient(boot) as admin:
        consumer.subscribe([topic])
        consume(consumer, 10)
        assert (group, "consumer", "Stable") in admin.list_consumer_groups()
        assert group not in [g.group_id for g in admin.list_consumer_groups(("Empty",))]
        with pytest.raises(UnknownMemberIdError):  # offsets of a live group cannot be set from outside
            admin.alter_consumer_group_offsets(group, {(topic, 0): 0})
        errors = admin.delete_consumer_groups([group], raise_errors=False)
        assert type(errors[group]).__name__ == "NonEmptyGroupError"
    with AdminClient(boot) as admin:
        admin.alter_consumer_group_offsets(group, {(topic, 0): 1})
        assert admin.list_consumer_group_offsets(group)[TopicPartition(topic, 0)] == 1
        assert admin.describe_consumer_groups(["no-such-group"])["no-such-group"].state == "Dead"
        assert admin.delete_consumer_groups([group]) == {group: None}
        assert admin.list_consumer_group_offsets(group) == {}
        assert type(admin.delete_consumer_groups([group], raise_errors=False)[group]).__name__ == "GroupIdNotFoundError"


def test_auto_commit_before_revoking_hands_partitions_over_without_duplicates(boot, group, topic):
    """Eager rebalance with auto-commit on: before rejoining, a member commits what its polls
    returned, so the member taking a partition over starts where it stopped (Kafka's onJoinPrepare)."""
    values = make_topic(boot, topic, 4, 40)
    # auto_commit_interval_ms is long: only the commit before revoking can have committed
    config = dict(FAST, auto_offset_reset="earliest", auto_commit_interval_ms=600_000)
    with Consumer(boot, group_id=group, **config) as a, Consumer(boot, group_id=group, **config) as b:
        a.subscribe([topic])
        got_a = consume(a, 40)
        assert sorted(r.value for r in got_a) == sorted(values)
        b.subscribe([topic])
        got_b: list = []

        def rebalanced():
            got_b.extend(r for rs in b.poll(50).values() for r in rs)
            return len(a.assignment()) == 2 and len(b.assignment()) == 2

        poll_until([a], rebalanced, what="the rebalance")  # b is polled by the condition
        # b resumed at a's positions: nothing read twice
        assert got_b == [] and all(b.committed(tp) == 10 for tp in b.assignment())
        with Producer(boot) as producer:
            for p in range(4):
                producer.send(topic, b"late", partition=p)
        late = consume(b, 2)
        assert [r.value for r in late] == [b"late", b"late"] and {r.offset for r in late} == {10}


def test_a_subscribed_topic_created_later_is_assigned_once_it_exists(boot, group, topic):
    """The leader watches the partition counts it assigned: a topic created (or grown) after
    the group formed starts a rebalance that assigns it (Kafka's leader does the same)."""
    with Consumer(boot, group_id=group, auto_offset_reset="earliest", **FAST) as consumer:
        consumer.subscribe([topic])
        poll_until([consumer], lambda: consumer.subscription() == {topic} and consumer._core.group.active,
                   what="the group to form with nothing to assign")
        assert consumer.assignment() == set()
        values = make_topic(boot, topic, 2, 6)
        got = consume(consumer, 6)
        assert sorted(r.value for r in got) == sorted(values)
        assert consumer.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}


def test_two_trio_consumers_rebalance_and_split_the_records(boot, group, topic):
    """Two AsyncConsumers in one trio run: the second's join reaches the first through its
    heartbeat task (REBALANCE_IN_PROGRESS), both end with 2 of the 4 partitions, and with
    commits after processing every record is processed once, before and after the rebalance."""
    from triolog.client.aio import AsyncConsumer

    values = make_topic(boot, topic, 4, 40)
    seen: dict[str, list] = {"a": [], "b": []}
    config = dict(FAST, auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=3)

    async def member(name: str, consumer, done: trio.Event) -> None:
        consumer.subscribe([topic])
        while not done.is_set():
            polled = await consumer.poll(100)
            for records in polled.values():
                seen[name].extend(r.value for r in records)
            if polled:
                await consumer.commit()

    async def wait_until(condition) -> None:
        with trio.fail_after(30):
            while not condition():
                await trio.sleep(0.02)

    async def main():
        done = trio.Event()
        async with AsyncConsumer(boot, group_id=group, **config) as a, \
                AsyncConsumer(boot, group_id=group, **config) as b:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(member, "a", a, done)
                await wait_until(lambda: len(seen["a"]) >= 5)
                nursery.start_soon(member, "b", b, done)
                await wait_until(lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2)
                more = await trio.to_thread.run_sync(
                    lambda: [v for v in make_values(boot, topic, 4, 40, start=40)])
                await wait_until(lambda: len(seen["a"]) + len(seen["b"]) >= 80)
                done.set()
            return a.assignment() | b.assignment(), more

    owned, more = trio.run(main)
    assert len(owned) == 4
    assert seen["b"], "the second member never got records"
    assert sorted(seen["a"] + seen["b"]) == sorted(values + more)


def make_values(boot: str, name: str, partitions: int, records: int, start: int) -> list[bytes]:
    values = [f"{name}-{i}".encode() for i in range(start, start + records)]
    with Producer(boot) as producer:
        for i, value in enumerate(values):
            producer.send(name, value, partition=i % partitions)
    return values


def test_subscribing_again_during_a_join_rejoins_with_the_new_topics(tmp_path, topic):
    # Kafka's initial rebalance delay holds the first member's join (the one with its member id)
    # for 2 s on this broker, so the resubscription lands while that join is surely in flight
    # (on the shared broker, with no delay, a slow machine could see the join finish first).
    slow_join = InProcessBroker(tmp_path / "data", ("group.initial.rebalance.delay.ms=2000",)).start()
    try:
        boot = f"127.0.0.1:{slow_join.port}"
        make_topic(boot, f"{topic}.a", 1, 2)
        make_topic(boot, f"{topic}.b", 1, 2)
        with Consumer(boot, group_id="resubscribing", auto_offset_reset="earliest", **FAST) as consumer:
            consumer.subscribe([f"{topic}.a"])
            # poll(0) until the join with the member id (after MEMBER_ID_REQUIRED) is written and
            # its answer not yet taken: later polls await it
            group_state = consumer._core.group
            wait_for(lambda: consumer.poll(0) == {} and group_state.member_id and group_state._join is not None,
                     10, "a join in flight with a member id")
            consumer.subscribe([f"{topic}.a", f"{topic}.b"])
            got = consume(consumer, 4)
            assert {r.topic for r in got} == {f"{topic}.a", f"{topic}.b"}
            assert consumer.assignment() == {TopicPartition(f"{topic}.a", 0), TopicPartition(f"{topic}.b", 0)}
    finally:
        slow_join.stop()


def test_an_unexpected_sync_group_error_rejoins_after_a_backoff_instead_of_raising():
    from types import SimpleNamespace

    from triolog.client.consumer_core import ConsumerConfig
    from triolog.client.consumer_coordinator import ConsumerCoordinator
    from triolog.client.ops import Call
    from triolog.protocol.errors import ErrorCode

    coordinator = ConsumerCoordinator(SimpleNamespace(config=ConsumerConfig(group_id="g")))
    op = coordinator._on_join_response_op({"error_code": 0, "member_id": "m", "generation_id": 1,
                                           "protocol_name": "range", "leader": "other"})
    assert isinstance(next(op), Call)  # the follower's sync_group
    with pytest.raises(StopIteration) as stop:  # the leader's assignment could not be stored
        op.send({"error_code": ErrorCode.UNKNOWN_SERVER_ERROR, "error_message": "too large", "assignment": b""})
    assert stop.value.value is False and coordinator.rejoin_needed  # False: back off, then join again


def test_a_member_with_a_group_instance_id_sends_leave_group_on_close():
    from types import SimpleNamespace

    from triolog.client.consumer_core import ConsumerConfig
    from triolog.client.consumer_coordinator import ConsumerCoordinator
    from triolog.client.ops import Call
    from triolog.protocol import messages as m

    coordinator = ConsumerCoordinator(SimpleNamespace(config=ConsumerConfig(group_id="g", group_instance_id="i1")))
    coordinator.member_id, coordinator.generation, coordinator.coordinator = "m", 3, ("localhost", 1)
    op = coordinator.leave_op("closing")
    call = next(op)  # the broker has no static membership: leave, or the member lingers a session
    assert isinstance(call, Call) and isinstance(call.request, m.LeaveGroupRequest)
    assert [member.member_id for member in call.request.members] == ["m"]
    with pytest.raises(StopIteration):
        op.send({"error_code": 0, "members": []})
    assert coordinator.member_id == "" and coordinator.generation == -1


def test_admin_offset_reset_retries_when_every_partition_says_the_coordinator_is_busy():
    from triolog.client.admin_core import AdminCore
    from triolog.client.ops import Call, Sleep
    from triolog.protocol.errors import ErrorCode

    def answer(code):
        return {"error_code": 0, "topics": [{"name": "t", "partitions": [
            {"partition": 0, "error_code": code}, {"partition": 1, "error_code": code}]}]}

    from triolog.protocol import messages as m

    def to_the_commit(effect):
        """Past the broker and coordinator lookups that come first (answered plainly)."""
        while isinstance(effect, Call) and not isinstance(effect.request, m.OffsetCommitRequest):
            effect = op.send({"error_code": 0, "brokers": [], "topics": []})
        return effect

    op = AdminCore().alter_group_offsets_op("g", {("t", 0): 1, ("t", 1): 2})
    assert isinstance(to_the_commit(next(op)), Call)
    assert isinstance(op.send(answer(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)), Sleep)  # per partition: retry
    assert isinstance(to_the_commit(op.send(None)), Call)
    with pytest.raises(StopIteration):
        op.send(answer(0))


def test_no_heartbeat_is_sent_while_a_join_is_parked_on_the_coordinator_connection():
    from types import SimpleNamespace

    from triolog.client.consumer_core import ConsumerConfig
    from triolog.client.consumer_coordinator import STABLE, ConsumerCoordinator

    coordinator = ConsumerCoordinator(SimpleNamespace(config=ConsumerConfig(group_id="g")))
    coordinator.state, coordinator.coordinator, coordinator.next_heartbeat = STABLE, ("localhost", 1), 0.0
    coordinator.member_id, coordinator.generation = "m", 1
    coordinator._join = (object(), float("inf"))  # a rejoin parked at the broker
    assert list(coordinator.heartbeat_op()) == []
