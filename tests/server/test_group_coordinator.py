"""The pure group coordinator under a manual clock: Kafka's classic rebalance protocol, its error
rules, and what it writes to __consumer_offsets (decoded from the records it asks to store)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triolog.broker.coordinator.group.group_coordinator import (
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    CommitRequest,
    GroupConfig,
    GroupCoordinator,
)
from triolog.broker.coordinator.group.group_metadata import GroupState
from triolog.broker.coordinator.group.group_metadata_manager import (
    GroupKey,
    LoadedPartition,
    OffsetKey,
    read_group_value,
    read_key,
    read_offset_value,
)
from triolog.broker.storage.clock import ManualClock
from triolog.protocol.errors import ErrorCode

SESSION = 10_000
REBALANCE = 20_000
PROTOCOLS = (("range", b"sub"),)


class Store:
    """__consumer_offsets as a list of (partition, key, value); completes at once unless held."""

    def __init__(self):
        self.records: list[tuple[int, bytes, bytes | None]] = []
        #: The producer of each record written in a transaction, by its index in ``records``.
        self.producers: dict[int, int] = {}
        self.hold = False
        self.held: list = []
        self.fail: tuple | None = None

    def __call__(self, partition, records, done, producer=None):
        if self.hold:
            self.held.append((partition, records, done, producer))
            return
        self._complete(partition, records, done, producer)

    def _complete(self, partition, records, done, producer=None):
        if self.fail is not None:
            done(self.fail, -1)
            return
        base = len(self.records)
        self.records.extend((partition, k, v) for k, v in records)
        if producer is not None:
            self.producers.update((base + n, producer[0]) for n in range(len(records)))
        done(None, base)

    def release(self):
        held, self.held = self.held, []
        for item in held:
            self._complete(*item)

    def decoded(self):
        out = []
        for _, key, value in self.records:
            parsed = read_key(key)
            if isinstance(parsed, GroupKey):
                out.append((parsed, None if value is None else read_group_value(value)))
            else:
                out.append((parsed, None if value is None else read_offset_value(value)))
        return out


class Answer:
    def __init__(self):
        self.results = []

    def __call__(self, result):
        self.results.append(result)

    @property
    def value(self):
        assert len(self.results) == 1, self.results
        return self.results[0]

    @property
    def done(self):
        return bool(self.results)


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def store():
    return Store()


def make(clock, store, **config):
    config = {"num_partitions": 5, "initial_rebalance_delay_ms": 0, "min_session_timeout_ms": 1000, **config}
    coordinator = GroupCoordinator(GroupConfig(**config), clock, store)
    coordinator.startup(())
    return coordinator


def join(c, member_id="", group="g", protocols=PROTOCOLS, session=SESSION, rebalance=REBALANCE, client="c"):
    answer = Answer()
    c.handle_join_group(group, member_id, None, client, "/h", rebalance, session, "consumer", protocols, answer)
    return answer


def new_member(c, group="g", **kw) -> str:
    answer = join(c, group=group, **kw)
    assert answer.value.error_code is ErrorCode.MEMBER_ID_REQUIRED
    return answer.value.member_id


def sync(c, member_id, generation, assignments=None, group="g"):
    answer = Answer()
    c.handle_sync_group(group, generation, member_id, None, None, assignments or {}, answer)
    return answer


def stable_group(c, n=3):
    """n members through join and sync; their ids (leader first) and the generation."""
    ids = [new_member(c) for _ in range(n)]
    joins = [join(c, mid) for mid in ids]
    c.poll()
    assert all(a.done for a in joins)
    generation = joins[0].value.generation_id
    leader = joins[0].value.leader
    ids.sort(key=lambda mid: mid != leader)
    syncs = [sync(c, mid, generation, {m: m.encode() for m in ids} if mid == leader else None) for mid in ids]
    assert all(s.value.error_code is ErrorCode.NONE for s in syncs)
    return ids, generation


def test_first_join_asks_for_a_member_id_made_of_client_id_and_uuid(clock, store):
    c = make(clock, store)
    answer = join(c, client="app")
    assert answer.value.error_code is ErrorCode.MEMBER_ID_REQUIRED
    assert answer.value.member_id.startswith("app-") and len(answer.value.member_id) == 4 + 36
    assert c.groups["g"].pending_members == {answer.value.member_id}


def test_pending_member_id_expires_after_the_session_timeout(clock, store):
    c = make(clock, store)
    mid = new_member(c)
    clock.advance(SESSION)
    c.poll()
    assert c.groups["g"].pending_members == set()
    assert join(c, mid).value.error_code is ErrorCode.UNKNOWN_MEMBER_ID


def test_initial_rebalance_delay_waits_and_extends_while_members_keep_joining(clock, store):
    c = make(clock, store, initial_rebalance_delay_ms=3000)
    a, b = new_member(c), new_member(c)
    first = join(c, a)
    assert c.groups["g"].state is GroupState.PREPARING_REBALANCE and not first.done
    clock.advance(2000)
    second = join(c, b)
    clock.advance(1000)
    c.poll()  # 3000: a member came during the delay: wait another delay
    assert not first.done and not second.done
    clock.advance(2999)
    c.poll()
    assert not first.done
    clock.advance(1)
    c.poll()
    assert first.value.generation_id == second.value.generation_id == 1
    leader = first.value.leader
    assert leader == a
    assert [mid for mid, _, _ in first.value.members] == [a, b] and second.value.members == ()
    assert c.groups["g"].state is GroupState.COMPLETING_REBALANCE


def test_rebalance_completes_as_soon_as_every_member_rejoined(clock, store):
    c = make(clock, store)
    ids, generation = stable_group(c)
    assert c.groups["g"].state is GroupState.STABLE
    joiner = new_member(c)
    late = join(c, joiner)
    assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
    beats = [c.handle_heartbeat("g", generation, mid) for mid in ids]
    assert all(b[0] is ErrorCode.REBALANCE_IN_PROGRESS for b in beats)
    rejoins = [join(c, mid) for mid in ids]
    assert all(r.done for r in rejoins) and late.done  # no timer needed
    assert {r.value.generation_id for r in rejoins} == {generation + 1}
    assert c.groups["g"].state is GroupState.COMPLETING_REBALANCE


def test_a_leader_that_does_not_rejoin_is_dropped_when_its_session_ends_and_a_new_leader_chosen(clock, store):
    c = make(clock, store)
    (leader, b, d), generation = stable_group(c)
    rejoin_b = join(c, b, protocols=(("range", b"changed"),))  # changed metadata: rebalance
    rejoin_d = join(c, d)
    clock.advance(SESSION - 1)
    c.poll()
    assert not rejoin_b.done
    clock.advance(1)
    c.poll()
    assert rejoin_b.value.generation_id == rejoin_d.value.generation_id == generation + 1
    assert rejoin_b.value.leader in (b, d) and rejoin_b.value.leader != leader
    assert set(c.groups["g"].members) == {b, d}
    assert c.handle_heartbeat("g", generation + 1, leader)[0] is ErrorCode.UNKNOWN_MEMBER_ID


def test_members_that_do_not_rejoin_within_the_rebalance_timeout_are_dropped(clock, store):
    c = make(clock, store)
    long_session = REBALANCE * 2
    ids = [new_member(c, session=long_session) for _ in range(2)]
    joins = [join(c, mid, session=long_session) for mid in ids]
    c.poll()
    generation = joins[0].value.generation_id
    leader = joins[0].value.leader
    other = next(mid for mid in ids if mid != leader)
    sync(c, other, generation)
    sync(c, leader, generation, {mid: b"" for mid in ids})
    rejoin = join(c, leader, session=long_session)  # the leader rejoins: rebalance; the other stays silent
    clock.advance(REBALANCE - 1)
    c.poll()
    assert not rejoin.done
    clock.advance(1)
    c.poll()
    assert rejoin.value.generation_id == generation + 1 and set(c.groups["g"].members) == {leader}


def test_protocol_vote_picks_the_most_preferred_protocol_all_support(clock, store):
    c = make(clock, store)
    prefs = [(("range", b"1"), ("roundrobin", b"2")), (("roundrobin", b"3"), ("range", b"4")),
             (("roundrobin", b"5"), ("range", b"6"), ("sticky", b"7"))]
    ids = [new_member(c) for _ in prefs]
    answers = [join(c, mid, protocols=p) for mid, p in zip(ids, prefs)]
    c.poll()  # the initial delay (0 ms) is over
    chosen = {a.value.protocol_name for a in answers}
    assert chosen == {"roundrobin"}
    leader = next(a for a in answers if a.value.members)
    assert [meta for _, _, meta in leader.value.members] == [b"2", b"3", b"5"]


def test_inconsistent_protocols_are_refused(clock, store):
    c = make(clock, store)
    stable_group(c, 1)
    answer = join(c, protocols=(("roundrobin", b""),))
    assert answer.value.error_code is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    other_type = Answer()
    c.handle_join_group("g", "", None, "c", "/h", REBALANCE, SESSION, "connect", PROTOCOLS, other_type)
    assert other_type.value.error_code is ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_sync_followers_wait_for_the_leader_then_everyone_gets_its_assignment(clock, store):
    c = make(clock, store)
    ids = [new_member(c) for _ in range(3)]
    joins = [join(c, mid) for mid in ids]
    c.poll()
    leader = joins[0].value.leader
    followers = [mid for mid in ids if mid != leader]
    waiting = [sync(c, mid, 1) for mid in followers]
    assert not any(w.done for w in waiting)
    store.hold = True
    lead = sync(c, leader, 1, {mid: mid.encode() for mid in ids[:2]})  # the third gets an empty one
    assert not lead.done and c.groups["g"].state is GroupState.COMPLETING_REBALANCE  # not yet durable
    store.release()
    got = {mid: a.value.assignment for mid, a in zip([*followers, leader], [*waiting, lead])}
    assert got == {ids[0]: ids[0].encode(), ids[1]: ids[1].encode(), ids[2]: b""}
    assert c.groups["g"].state is GroupState.STABLE
    (key, value), = store.decoded()
    assert key == GroupKey("g") and value.generation == 1 and value.protocol == "range" and value.leader == leader
    assert {m.member_id: m.assignment for m in value.members} == got
    assert all(m.subscription == b"sub" and m.client_host == "/h" for m in value.members)
    # Stable: a late sync gets its assignment at once.
    assert sync(c, ids[0], 1).value.assignment == ids[0].encode()


def test_sync_errors(clock, store):
    c = make(clock, store)
    ids, generation = stable_group(c, 2)
    assert sync(c, "nobody", generation).value.error_code is ErrorCode.UNKNOWN_MEMBER_ID
    assert sync(c, ids[0], generation + 5).value.error_code is ErrorCode.ILLEGAL_GENERATION
    assert sync(c, ids[0], generation, group="other").value.error_code is ErrorCode.UNKNOWN_MEMBER_ID
    answer = Answer()
    c.handle_sync_group("g", generation, ids[0], "consumer", "roundrobin", {}, answer)
    assert answer.value.error_code is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    join(c, ids[0])  # leader rejoins: PreparingRebalance
    assert sync(c, ids[1], generation).value.error_code is ErrorCode.REBALANCE_IN_PROGRESS


def test_failed_group_store_fails_the_syncs_and_rebalances(clock, store):
    c = make(clock, store)
    ids = [new_member(c) for _ in range(2)]
    joins = [join(c, mid) for mid in ids]
    c.poll()
    leader = joins[0].value.leader
    follower = next(mid for mid in ids if mid != leader)
    waiting = sync(c, follower, 1)
    store.fail = (ErrorCode.KAFKA_STORAGE_ERROR, "disk gone")
    lead = sync(c, leader, 1, {mid: b"x" for mid in ids})
    assert lead.value.error_code is waiting.value.error_code is ErrorCode.NOT_COORDINATOR  # storeGroup's mapping
    assert c.groups["g"].state is GroupState.PREPARING_REBALANCE


@pytest.mark.parametrize("stored, sync_code, commit_code", [
    (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_COORDINATOR, ErrorCode.NOT_COORDINATOR),
    (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.REQUEST_TIMED_OUT),
    (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.INVALID_COMMIT_OFFSET_SIZE),
    (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_NOT_AVAILABLE),
])
def test_store_failures_are_mapped_as_kafkas_group_metadata_manager_does(clock, store, stored, sync_code,
                                                                         commit_code):
    c = make(clock, store)
    store.fail = (stored, "failed")
    ids = [new_member(c) for _ in range(2)]
    joins = [join(c, mid) for mid in ids]
    c.poll()
    leader = joins[0].value.leader
    follower = next(mid for mid in ids if mid != leader)
    waiting = sync(c, follower, 1)
    lead = sync(c, leader, 1, {mid: b"x" for mid in ids})
    assert lead.value.error_code is waiting.value.error_code is sync_code
    assert commit(c, (0, 1), group="simple").value[0][0] is commit_code
    store.fail = None
    assert commit(c, (0, 1), group="simple").value == [None]
    store.fail = (stored, "failed")
    answer = Answer()
    c.handle_delete_groups(["simple"], answer)
    assert answer.value["simple"][0] is sync_code


def test_a_member_that_never_syncs_is_removed_after_the_rebalance_timeout(clock, store):
    c = make(clock, store)
    ids = [new_member(c, session=REBALANCE * 2) for _ in range(2)]  # sessions outlast the sync deadline
    joins = [join(c, mid, session=REBALANCE * 2) for mid in ids]
    c.poll()
    leader = joins[0].value.leader
    follower = next(mid for mid in ids if mid != leader)
    store.hold = True
    lead = sync(c, follower, 1)  # only the follower syncs; the leader never does
    clock.advance(REBALANCE)
    c.poll()
    assert lead.value.error_code is ErrorCode.REBALANCE_IN_PROGRESS
    assert set(c.groups["g"].members) == {follower}
    assert c.groups["g"].state is GroupState.PREPARING_REBALANCE


def test_a_follower_syncing_after_the_group_is_stable_survives_the_sync_deadline(clock, store):
    c = make(clock, store)
    ids = [new_member(c) for _ in range(2)]
    joins = [join(c, mid) for mid in ids]
    c.poll()
    leader = joins[0].value.leader
    follower = next(mid for mid in ids if mid != leader)
    assert sync(c, leader, 1, {mid: mid.encode() for mid in ids}).value.error_code is ErrorCode.NONE
    assert c.groups["g"].state is GroupState.STABLE
    assert sync(c, follower, 1).value.assignment == follower.encode()  # late: the group is already Stable
    for _ in range(2 * REBALANCE // (SESSION // 2)):  # both heartbeat well past the sync deadline
        clock.advance(SESSION // 2)
        assert c.handle_heartbeat("g", 1, leader) is None
        assert c.handle_heartbeat("g", 1, follower) is None
        c.poll()
    assert set(c.groups["g"].members) == set(ids) and c.groups["g"].state is GroupState.STABLE


def test_many_heartbeats_keep_one_timer_entry_per_member(clock, store):
    c = make(clock, store)
    (a, b), generation = stable_group(c, 2)
    before = len(c._timers)
    for _ in range(5_000):
        clock.advance(1)
        assert c.handle_heartbeat("g", generation, a) is None
        assert c.handle_heartbeat("g", generation, b) is None
        c.poll()
    assert len(c._timers) <= before  # 10 000 heartbeats added no entry (one per heartbeat before)
    clock.advance(SESSION - 1)  # still alive one ms before the last heartbeat's deadline ...
    c.poll()
    assert set(c.groups["g"].members) == {a, b}
    clock.advance(1)  # ... and removed at it
    c.poll()
    assert not c.groups["g"].members


def test_heartbeat_rules_and_session_expiry(clock, store):
    c = make(clock, store)
    (a, b), generation = stable_group(c, 2)
    assert c.handle_heartbeat("g", generation, a) is None
    assert c.handle_heartbeat("g", generation - 1, a)[0] is ErrorCode.ILLEGAL_GENERATION
    assert c.handle_heartbeat("g", generation, "x")[0] is ErrorCode.UNKNOWN_MEMBER_ID
    assert c.handle_heartbeat("none", generation, a)[0] is ErrorCode.UNKNOWN_MEMBER_ID
    for _ in range(5):  # a keeps heartbeating, b is silent
        clock.advance(SESSION // 2)
        assert c.handle_heartbeat("g", generation, a) in (None, (ErrorCode.REBALANCE_IN_PROGRESS, ANY))
        c.poll()
    assert set(c.groups["g"].members) == {a}
    assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
    rejoin = join(c, a)
    assert rejoin.value.generation_id == generation + 1 and rejoin.value.leader == a


class _Any:
    def __eq__(self, other):
        return True


ANY = _Any()


def test_leave_group_removes_members_and_the_last_leave_empties_the_group(clock, store):
    c = make(clock, store)
    (a, b), generation = stable_group(c, 2)
    store.records.clear()
    error, per_member = c.handle_leave_group("g", [b, "ghost"])
    assert error is None and per_member[0] is None and per_member[1][0] is ErrorCode.UNKNOWN_MEMBER_ID
    assert c.handle_heartbeat("g", generation, a)[0] is ErrorCode.REBALANCE_IN_PROGRESS
    c.handle_leave_group("g", [a])
    group = c.groups["g"]
    assert group.state is GroupState.EMPTY and group.generation_id == generation + 1
    (key, value), = store.decoded()
    assert key == GroupKey("g") and value.members == () and value.protocol is None
    _, unknown = c.handle_leave_group("nope", ["x"])
    assert unknown[0][0] is ErrorCode.UNKNOWN_MEMBER_ID


def test_join_error_rules(clock, store):
    c = make(clock, store, max_size=2)
    answer = join(c, group="")
    assert answer.value.error_code is ErrorCode.INVALID_GROUP_ID
    assert join(c, session=999).value.error_code is ErrorCode.INVALID_SESSION_TIMEOUT
    assert join(c, session=1_800_001).value.error_code is ErrorCode.INVALID_SESSION_TIMEOUT
    assert join(c, "someone", group="unknown").value.error_code is ErrorCode.UNKNOWN_MEMBER_ID
    assert join(c, "not-handed-out").value.error_code is ErrorCode.UNKNOWN_MEMBER_ID
    stable_group(c, 2)
    assert join(c).value.error_code is ErrorCode.GROUP_MAX_SIZE_REACHED


def test_coordinator_not_running_and_loading_partitions(clock, store):
    c = GroupCoordinator(GroupConfig(num_partitions=5, min_session_timeout_ms=1000), clock, store)
    assert join(c).value.error_code is ErrorCode.COORDINATOR_NOT_AVAILABLE
    c.startup(range(5))
    assert join(c).value.error_code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert c.handle_heartbeat("g", 1, "m") is None  # Kafka answers NONE while loading
    assert sync(c, "m", 1).value.error_code is ErrorCode.REBALANCE_IN_PROGRESS
    assert c.handle_fetch_offsets("g", None)[0][0] is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    for p in range(5):
        c.load_partition(p, LoadedPartition())
    assert join(c).value.error_code is ErrorCode.MEMBER_ID_REQUIRED


def commit(c, *offsets, group="g", generation=-1, member="", metadata=None):
    answer = Answer()
    c.handle_commit_offsets(group, generation, member,
                            [CommitRequest("t", p, o, -1, metadata) for p, o in offsets], answer)
    return answer


def test_commit_from_outside_a_group_creates_a_simple_group_visible_only_once_durable(clock, store):
    c = make(clock, store)
    store.hold = True
    answer = commit(c, (0, 10), (1, 20))
    assert not answer.done and c.handle_fetch_offsets("g", [("t", 0)])[1] == [("t", 0, None)]
    store.release()
    assert answer.value == [None, None]
    _, rows = c.handle_fetch_offsets("g", None)
    assert [(t, p, o.offset) for t, p, o in rows] == [("t", 0, 10), ("t", 1, 20)]
    assert [(k, v.offset) for k, v in store.decoded()] == [(OffsetKey("g", "t", 0), 10), (OffsetKey("g", "t", 1), 20)]
    assert len({p for p, _, _ in store.records}) == 1  # one partition, one batch


def test_commit_error_rules(clock, store):
    c = make(clock, store, offset_metadata_max_bytes=4)
    assert commit(c, (0, 1), generation=3).value[0][0] is ErrorCode.ILLEGAL_GENERATION  # unknown group
    (a, b), generation = stable_group(c, 2)
    assert commit(c, (0, 1)).value[0][0] is ErrorCode.UNKNOWN_MEMBER_ID  # outsider, group not empty
    assert commit(c, (0, 1), generation=generation, member="x").value[0][0] is ErrorCode.UNKNOWN_MEMBER_ID
    assert commit(c, (0, 1), generation=generation + 1, member=a).value[0][0] is ErrorCode.ILLEGAL_GENERATION
    result = commit(c, (0, 1), (1, 2), generation=generation, member=a, metadata="12345").value
    assert result[0][0] is ErrorCode.OFFSET_METADATA_TOO_LARGE
    ok = commit(c, (0, 1), generation=generation, member=a, metadata="1234").value
    assert ok == [None]
    join(c, b, protocols=(("range", b"other"),))  # rebalance ...
    join(c, a)
    assert c.groups["g"].state is GroupState.COMPLETING_REBALANCE
    assert commit(c, (0, 2), generation=generation + 1, member=a).value[0][0] is ErrorCode.REBALANCE_IN_PROGRESS
    store.fail = (ErrorCode.REQUEST_TIMED_OUT, "slow disk")
    c.handle_leave_group("g", [a, b])
    assert commit(c, (0, 3)).value[0][0] is ErrorCode.REQUEST_TIMED_OUT
    assert c.handle_fetch_offsets("g", [("t", 0)])[1][0][2].offset == 1


def test_delete_groups(clock, store):
    c = make(clock, store)
    stable_group(c, 1)
    commit(c, (0, 5), group="simple")
    answer = Answer()
    c.handle_delete_groups(["g", "simple", "missing", ""], answer)
    result = answer.value
    assert result["g"][0] is ErrorCode.NON_EMPTY_GROUP
    assert result["simple"] is None
    assert result["missing"][0] is ErrorCode.GROUP_ID_NOT_FOUND
    assert result[""][0] is ErrorCode.INVALID_GROUP_ID
    assert store.decoded()[-1] == (OffsetKey("simple", "t", 0), None)
    assert "simple" not in c.groups and c.handle_fetch_offsets("simple", [("t", 0)])[1][0][2] is None


def test_deleting_a_former_consumer_group_tombstones_its_offsets_and_metadata(clock, store):
    c = make(clock, store)
    (a,), generation = stable_group(c, 1)
    commit(c, (0, 5), (1, 6), generation=generation, member=a)
    c.handle_leave_group("g", [a])
    store.records.clear()
    answer = Answer()
    c.handle_delete_groups(["g"], answer)
    assert answer.value == {"g": None}
    assert sorted(store.decoded(), key=repr) == sorted(
        [(OffsetKey("g", "t", 0), None), (OffsetKey("g", "t", 1), None), (GroupKey("g"), None)], key=repr)


def test_offsets_expire_after_retention_once_the_group_is_empty(clock, store):
    c = make(clock, store, offsets_retention_ms=60_000)
    (a,), generation = stable_group(c, 1)
    commit(c, (0, 5), generation=generation, member=a)
    clock.advance(120_000)
    assert c.cleanup_group_metadata() == 0  # Stable and subscriptions unknown ("sub" is not ConsumerProtocol)
    c.handle_leave_group("g", [a])
    clock.advance(59_999)
    assert c.cleanup_group_metadata() == 0
    clock.advance(1)
    store.records.clear()
    assert c.cleanup_group_metadata() == 1
    assert sorted(store.decoded(), key=repr) == sorted([(OffsetKey("g", "t", 0), None), (GroupKey("g"), None)],
                                                       key=repr)
    assert "g" not in c.groups


def test_simple_group_offsets_expire_from_their_commit_time(clock, store):
    c = make(clock, store, offsets_retention_ms=60_000)
    commit(c, (0, 5))
    clock.advance(30_000)
    commit(c, (1, 6))
    clock.advance(30_000)
    assert c.cleanup_group_metadata() == 1
    assert [p for _, p, _ in c.handle_fetch_offsets("g", None)[1]] == [1]


def test_expiry_keeps_a_new_group_whose_first_commit_is_not_durable_yet(clock, store):
    c = make(clock, store)
    store.hold = True
    answer = commit(c, (0, 5))
    assert c.cleanup_group_metadata() == 0 and "g" in c.groups  # empty, no offsets yet, but one coming
    store.release()
    assert answer.value == [None]
    assert c.handle_fetch_offsets("g", None)[1][0][2].offset == 5


def test_expiry_and_delete_leave_a_partition_alone_while_its_new_commit_is_being_written(clock, store):
    c = make(clock, store, offsets_retention_ms=60_000)
    commit(c, (0, 5), (1, 5))
    clock.advance(60_000)  # both expired ...
    store.hold = True
    answer = commit(c, (0, 6))  # ... but partition 0 has a new commit on its way
    assert c.cleanup_group_metadata() == 1  # partition 1 only
    deleted = Answer()
    c.handle_delete_groups(["g"], deleted)
    assert deleted.value["g"][0] is ErrorCode.NON_EMPTY_GROUP  # commits pending: refused, retry later
    store.release()
    assert answer.value == [None]
    last = {}
    for key, value in store.decoded():
        last[key] = value
    assert last[OffsetKey("g", "t", 0)].offset == 6  # after a restart the acknowledged commit is there
    assert last[OffsetKey("g", "t", 1)] is None
    assert c.handle_fetch_offsets("g", [("t", 0)])[1][0][2].offset == 6


def test_loaded_group_comes_back_stable_and_its_silent_members_expire(clock, store):
    c = make(clock, store)
    (a, b), generation = stable_group(c, 2)
    commit(c, (0, 7), generation=generation, member=a)
    loaded = LoadedPartition()
    loaded.replay((i, k, v) for i, (_, k, v) in enumerate(store.records))
    fresh = make(clock, Store())
    fresh.startup([c.partition_for("g")])
    fresh.load_partition(c.partition_for("g"), loaded)
    group = fresh.groups["g"]
    assert group.state is GroupState.STABLE and group.generation_id == generation
    assert set(group.members) == {a, b} and group.offsets[("t", 0)].offset == 7
    assert sync(fresh, b, generation).value.assignment == b.encode()
    clock.advance(SESSION // 2)
    assert fresh.handle_heartbeat("g", generation, a) is None
    clock.advance(SESSION // 2 - 1)
    fresh.poll()  # b's session (restarted by its sync) is not over yet
    assert set(group.members) == {a, b}
    clock.advance(1)
    fresh.poll()
    assert set(group.members) == {a}  # b silent for a whole session; a heartbeated


def test_a_new_member_that_never_completes_its_join_is_dropped(clock, store):
    c = make(clock, store, initial_rebalance_delay_ms=0)
    (a,), generation = stable_group(c, 1)
    b = new_member(c)
    parked = join(c, b)
    assert not parked.done
    clock.advance(REBALANCE)  # a never rejoins: dropped at the rebalance deadline, b gets generation+1
    c.poll()
    assert parked.value.generation_id == generation + 1 and set(c.groups["g"].members) == {b}
    clock.advance(NEW_MEMBER_JOIN_TIMEOUT_MS)
    c.poll()
    assert set(c.groups["g"].members) == set()  # never synced nor heartbeated


def test_describe_and_list_groups(clock, store):
    c = make(clock, store)
    ids, generation = stable_group(c, 2)
    commit(c, (0, 1), group="simple")
    summary = c.handle_describe_group("g")
    assert summary.state == "Stable" and summary.protocol == "range" and summary.protocol_type == "consumer"
    assert {m.member_id: m.assignment for m in summary.members} == {mid: mid.encode() for mid in ids}
    assert all(m.metadata == b"sub" and m.client_id == "c" for m in summary.members)
    assert c.handle_describe_group("nope").state == "Dead"
    join(c, ids[0])
    preparing = c.handle_describe_group("g")
    assert preparing.state == "PreparingRebalance" and preparing.protocol == ""
    assert all(m.metadata == b"" and m.assignment == b"" for m in preparing.members)
    assert c.handle_list_groups(set()) == (None, [("g", "consumer", "PreparingRebalance"), ("simple", "", "Empty")])
    assert c.handle_list_groups({"Empty"}) == (None, [("simple", "", "Empty")])


# -- property: any interleaving keeps the coordinator's promises ------------------------------------

OPS = st.lists(st.tuples(st.sampled_from(["join", "rejoin", "rejoin", "rejoin", "sync", "sync", "sync", "heartbeat",
                                          "leave", "commit", "advance", "advance"]),
                         st.integers(0, 2), st.sampled_from([0, 1, 500, 3000, 6000, 12_000])), max_size=80)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, delay=st.sampled_from([0, 3000]))
def test_any_interleaving_answers_every_parked_request_exactly_once(ops, delay):
    clock = ManualClock()
    store = Store()
    c = make(clock, store, initial_rebalance_delay_ms=delay)
    ids: dict[int, str] = {}
    answers: list[Answer] = []

    def track(answer):
        answers.append(answer)
        return answer

    for op, who, amount in ops:
        mid = ids.get(who, "")
        if op in ("join", "rejoin"):
            answer = track(join(c, mid if op == "rejoin" else ""))
            if answer.done and answer.value.error_code is ErrorCode.MEMBER_ID_REQUIRED:
                ids[who] = answer.value.member_id
        elif op == "sync" and mid:
            group = c.groups.get("g")
            gen = group.generation_id if group else 0
            track(sync(c, mid, gen, {m: b"x" for m in (group.members if group else ())}))
        elif op == "heartbeat" and mid:
            group = c.groups.get("g")
            c.handle_heartbeat("g", group.generation_id if group else 0, mid)
        elif op == "leave" and mid:
            c.handle_leave_group("g", [mid])
        elif op == "commit":
            group = c.groups.get("g")
            track(commit(c, (0, amount), generation=group.generation_id if group and mid else -1, member=mid))
        elif op == "advance":
            clock.advance(amount)
        c.poll()  # the server's timer task fires what is due at once
        for answer in answers:
            assert len(answer.results) <= 1
        group = c.groups.get("g")
        if group is not None:
            assert group.leader_id is None or group.leader_id in group.members
            assert group.pending_sync_members <= set(group.members)
            assert (group.leader_id is None) == (not group.members)
            if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                assert group.members
    # Everyone goes away: every parked request is answered, the group ends Empty.
    clock.advance(NEW_MEMBER_JOIN_TIMEOUT_MS + 10 * REBALANCE)
    c.poll()
    clock.advance(NEW_MEMBER_JOIN_TIMEOUT_MS + 10 * REBALANCE)
    c.poll()
    assert all(len(answer.results) == 1 for answer in answers)
    group = c.groups.get("g")
    assert group is None or (group.is_in(GroupState.EMPTY) and not group.members)
