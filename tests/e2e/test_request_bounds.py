"""Bounds on what clients can take from the real broker process: memory under a flood of msgpack
bombs (below queued.max.request.bytes plus a fixed overhead), descriptors (the soft
RLIMIT_NOFILE raised to the hard one; EMFILE on accept survived), time (SIGTERM does not wait out
long polls) and partitions (max.broker.partitions checked before a create starts)."""

from __future__ import annotations

import signal
import socket
import threading
import time

import msgpack
import pytest

from triolog.protocol.records import build_batch, iter_batches
from tests.waiting import wait_for

from .broker_process import BrokerProcess, WireClient

NONE = 0
INVALID_REQUEST = 42
POLICY_VIOLATION = 44
MIB = 1 << 20


@pytest.fixture
def start_broker(tmp_path):
    started: list[BrokerProcess] = []

    def start(*overrides: str, metrics: bool = False, rlimit_nofile=None, name: str = "data") -> BrokerProcess:
        broker = BrokerProcess(tmp_path / name, tuple(overrides), metrics=metrics, rlimit_nofile=rlimit_nofile)
        started.append(broker)
        return broker.start()

    yield start
    for broker in started:
        broker.kill()


def events(broker: BrokerProcess, name: str) -> list[dict]:
    return [e for e in broker.events() if e.get("event") == name]


# -- memory --------------------------------------------------------------------------------------


def _bombs(size: int, request_id: int) -> list[bytes]:
    """Two shapes of msgpack bomb of ``size`` bytes: one array of empty maps, and a long array of
    small maps of empty maps (no container is large, the total is)."""
    flat = b"\x84\xa3api\xa7produce\xa2id" + msgpack.packb(request_id) + b"\xa1v\x01\xa1x\xdd"
    flat += (size - len(flat) - 4).to_bytes(4, "big") + b"\x80" * (size - len(flat) - 4)
    inner = b"\x8f" + b"".join(msgpack.packb(i) + b"\x80" for i in range(15))
    count = size // len(inner)
    nested = b"\x84\xa3api\xa5fetch\xa2id" + msgpack.packb(request_id) + b"\xa1v\x01\xa1x\xdd"
    nested += count.to_bytes(4, "big") + inner * count
    return [flat, nested]


def test_a_flood_of_msgpack_bombs_stays_within_the_request_pool_and_others_are_served(start_broker):
    pool, frame_limit = 32 * MIB, 8 * MIB
    broker = start_broker(f"queued.max.request.bytes={pool}", f"socket.request.max.bytes={frame_limit}")
    victim = broker.client()
    assert victim.call_map("api_versions")["error_code"] == NONE
    baseline_kb = broker.status("VmRSS")
    answers, errors, victim_answers = [], [], []
    stop = threading.Event()

    def attack(index: int) -> None:
        client = WireClient("127.0.0.1", broker.port, timeout_s=60)
        try:
            for round_ in range(3):
                for bomb in _bombs(frame_limit - 16, index * 10 + round_):
                    client.send_frame(bomb)
                    answers.append(client.recv_doc())
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            client.close()

    def keep_asking() -> None:
        while not stop.is_set():
            victim_answers.append(victim.call_map("api_versions")["error_code"])

    attackers = [threading.Thread(target=attack, args=(i,)) for i in range(8)]
    asker = threading.Thread(target=keep_asking)
    asker.start()
    for t in attackers:
        t.start()
    for t in attackers:
        t.join(120)
    stop.set()
    asker.join(30)
    assert not errors, errors
    assert len(answers) == 8 * 3 * 2
    for doc in answers:
        assert doc["error_code"] == INVALID_REQUEST and "msgpack objects" in doc["error_message"], doc
        assert doc["id"] is not None  # read before the walk gave up, so echoed
    assert victim_answers and set(victim_answers) == {NONE}
    # 48 bombs of 8 MiB each decoded to ~600 MiB before the object budget; now the broker holds
    # at most the pool's worth of frames, plus a fixed overhead.
    grown_mib = (broker.status("VmHWM") - baseline_kb) / 1024
    assert grown_mib < pool / MIB + 32, f"peak RSS grew {grown_mib:.0f} MiB"
    assert broker.process.poll() is None


# -- descriptors ---------------------------------------------------------------------------------


def test_startup_raises_the_soft_open_file_limit_to_the_hard_one(start_broker):
    broker = start_broker(rlimit_nofile=(256, 4096))
    (event,) = events(broker, "open_file_limit")
    assert (event["soft_before"], event["soft"], event["hard"]) == (256, 4096, 4096)
    limits = open(f"/proc/{broker.process.pid}/limits").read()
    assert any(line.startswith("Max open files") and line.split()[3:5] == ["4096", "4096"]
               for line in limits.splitlines()), limits


def test_running_out_of_descriptors_on_accept_keeps_the_listener(start_broker):
    broker = start_broker(rlimit_nofile=(64, 64))
    first = broker.client()
    assert first.call_map("api_versions")["error_code"] == NONE
    free = 64 - broker.open_descriptors()
    crowd = []
    for _ in range(free + 10):  # more than the broker has descriptors for; the kernel queues them
        crowd.append(socket.create_connection(("127.0.0.1", broker.port), timeout=10))
    wait_for(lambda: events(broker, "accept_failed"), 10, "accept to fail with EMFILE")
    assert events(broker, "accept_failed")[0]["error"] == "EMFILE"
    assert first.call_map("api_versions")["error_code"] == NONE  # connections already open are served
    for sock in crowd:
        sock.close()

    def served() -> bool:
        try:
            client = WireClient("127.0.0.1", broker.port, timeout_s=2)
            try:
                return client.call_map("api_versions")["error_code"] == NONE
            finally:
                client.close()
        except OSError:
            return False

    wait_for(served, 20, "a new connection to be accepted and served once descriptors are free")
    assert broker.process.poll() is None


def test_waiting_connections_at_max_connections_hold_no_broker_descriptor(start_broker):
    broker = start_broker("max.connections=2")
    open_ = [broker.client(), broker.client()]
    for client in open_:
        assert client.call_map("api_versions")["error_code"] == NONE
    before = broker.open_descriptors()
    waiting = [WireClient("127.0.0.1", broker.port) for _ in range(20)]
    for client in waiting:
        client.send_frame(msgpack.packb({"api": "api_versions", "v": 1, "id": 1}))
    assert all(not client.is_closed(0.05) for client in waiting)  # connected, unanswered, open
    assert broker.open_descriptors() <= before  # none accepted
    open_[0].close()  # a slot frees: exactly one waiting connection is accepted and answered
    answered: list[WireClient] = []

    def poll() -> list[WireClient]:
        answered.extend(c for c in waiting if _answered(c))
        return answered

    wait_for(poll, 10, "a waiting connection to be served")
    assert len(poll()) == 1
    assert open_[1].call_map("api_versions")["error_code"] == NONE


def _answered(client: WireClient) -> bool:
    client.sock.settimeout(0.01)
    try:
        return client.recv_doc()["error_code"] == NONE
    except (socket.timeout, BlockingIOError):
        return False
    finally:
        client.sock.settimeout(10)


# -- time ----------------------------------------------------------------------------------------


def test_sigterm_answers_waiting_long_polls_and_exits_without_waiting_them_out(start_broker):
    broker = start_broker(metrics=True)
    client = broker.client()
    assert client.call_map("create_topics", topics=[
        {"name": "stopping", "num_partitions": 1, "replication_factor": 1, "configs": {}}])["topics"][0]["error_code"] == 0
    poller = broker.client()
    poller.send_frame(msgpack.packb({"api": "fetch", "v": 1, "id": 5, "max_wait_ms": 3_600_000, "min_bytes": 1,
                                     "max_bytes": MIB, "topics": [{"name": "stopping", "partitions": [
                                         {"partition": 0, "fetch_offset": 0, "partition_max_bytes": MIB}]}]}))
    wait_for(lambda: broker.sample("triolog_server_delayed_fetches") == 1, 10, "the long poll to park")
    started = time.monotonic()
    assert broker.stop(signal.SIGTERM, timeout_s=30) == 0
    assert time.monotonic() - started < 15
    doc = poller.recv_doc()
    part = doc["topics"][0]["partitions"][0]
    assert doc["id"] == 5 and part["error_code"] == NONE and part["records"] == b""


# -- partitions ----------------------------------------------------------------------------------


def _create(client, name, partitions, validate_only=False) -> dict:
    return client.call_map("create_topics", validate_only=validate_only, topics=[
        {"name": name, "num_partitions": partitions, "replication_factor": 1, "configs": {}}])["topics"][0]


def test_max_broker_partitions_refuses_a_create_whole_before_it_starts(start_broker, tmp_path):
    broker = start_broker("max.broker.partitions=20", "num.partitions=6")
    client = broker.client()
    assert _create(client, "big", 15)["error_code"] == NONE
    for validate_only in (True, False):
        refused = _create(client, "huge", 10, validate_only)
        assert refused["error_code"] == POLICY_VIOLATION, refused
        assert "max.broker.partitions=20" in refused["error_message"]
        assert "25 partitions" in refused["error_message"] and "nothing was created" in refused["error_message"]
    assert not any(p.name.startswith("huge-") for p in (tmp_path / "data").iterdir())
    # auto-creation (by metadata only; produce never creates) counts too: num.partitions=6 no longer fits
    meta = client.call_map("metadata", topics=["auto"])
    assert meta["topics"][0]["error_code"] == POLICY_VIOLATION
    assert _create(client, "fits", 5)["error_code"] == NONE  # exactly up to the cap
    assert _create(client, "one-more", 1)["error_code"] == POLICY_VIOLATION
    names = [t["name"] for t in client.call_map("metadata", topics=None)["topics"]]
    assert sorted(names) == ["big", "fits"]
    client.close()

    assert broker.stop() == 0
    broker = start_broker("max.broker.partitions=20", "num.partitions=6")  # same data dir
    client = broker.client()
    meta = client.call_map("metadata", topics=None)
    assert sorted((t["name"], len(t["partitions"])) for t in meta["topics"]) == [("big", 15), ("fits", 5)]
    produced = client.call_map("produce", acks=-1, timeout_ms=5000, topics=[{"name": "big", "partitions": [
        {"partition": 14, "records": build_batch([(b"k", b"after", int(time.time() * 1000), ())])}]}])
    assert produced["topics"][0]["partitions"][0]["error_code"] == NONE
    fetched = client.call_map("fetch", max_wait_ms=0, min_bytes=1, max_bytes=MIB, topics=[{"name": "big", "partitions": [
        {"partition": 14, "fetch_offset": 0, "partition_max_bytes": MIB}]}])
    records = fetched["topics"][0]["partitions"][0]["records"]
    assert [r.value for b in iter_batches(records) for r in b.records] == [b"after"]
