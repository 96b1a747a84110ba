"""Three consumer processes in one group over a 6-partition topic, committing after processing:
every record is processed exactly once across a member's kill -9 and a new member joining, and a
member started after the others stopped resumes from the committed offsets, also after a broker
kill -9 and restart.

How "exactly once" is judged, honestly. Each member (tests/e2e/group_member.py) writes every
poll's records to its file as a batch, flushed, BEFORE committing the batch's end offsets with
the batch id as the commit metadata. A record counts as processed only if its batch's commit
really landed: that is read from the broker itself, the OffsetCommit records of the group in
``__consumer_offsets`` (decoded here from Kafka's bytes, by hand), never from what a member
believed. So a member killed after writing a batch but before (or while) committing it does not
count that batch, and the partition's next owner, resuming from the last landed commit, must
process those records again; a member killed after its commit landed but before it could write
"committed" still counts, and the next owner must NOT process them again. A commit refused
because the group rebalanced (CommitFailedError: the member lost the partition) lands nothing.
The check: per partition, the landed batches cover offsets 0..end with no gap and no overlap,
and their values are the records produced at those offsets.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.e2e.broker_process import ROOT
from tests.waiting import wait_for
from triolog.client import AdminClient, Consumer, Producer
from triolog.client.types import NewTopic, TopicPartition

TOPIC, GROUP, PARTITIONS = "orders", "order-processors", 6


class Member:
    def __init__(self, bootstrap: str, out_dir: Path, name: str) -> None:
        self.name, self.path = name, out_dir / f"{name}.jsonl"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.group_member", bootstrap, GROUP, TOPIC, str(self.path), name],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})

    def lines(self) -> list[dict]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:  # the last line of a process killed mid-write
                pass
        return out

    def partitions(self) -> list[int] | None:
        joined = [line["joined"] for line in self.lines() if "joined" in line]
        return joined[-1] if joined else None

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(timeout=30) == 0

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)


def landed_commits(bootstrap: str) -> dict[tuple[str, int], list[int]]:
    """(batch id, partition) -> committed offsets of every OffsetCommit record of GROUP/TOPIC
    in __consumer_offsets (key v0/v1: group, topic, partition; value v0-v3: offset, metadata)."""
    with AdminClient(bootstrap) as admin:
        partitions = [p.partition for p in admin.describe_topics(["__consumer_offsets"])["__consumer_offsets"].partitions]
    tps = [TopicPartition("__consumer_offsets", p) for p in partitions]
    out: dict[tuple[str, int], list[int]] = {}
    records = []
    with Consumer(bootstrap, auto_offset_reset="earliest") as reader:
        reader.assign(tps)
        ends = reader.end_offsets(tps)
        deadline = time.monotonic() + 60
        while any(reader.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "__consumer_offsets not read to its end within 60 s"
            for batch in reader.poll(500, 10_000).values():
                records += batch
    for record in records:
        key = record.key
        if key is None or struct.unpack_from(">h", key)[0] not in (0, 1) or record.value is None:
            continue
        pos = 2
        fields = []
        for _ in range(2):
            (size,) = struct.unpack_from(">h", key, pos)
            fields.append(key[pos + 2:pos + 2 + size].decode())
            pos += 2 + size
        (partition,) = struct.unpack_from(">i", key, pos)
        if fields != [GROUP, TOPIC]:
            continue
        value = record.value
        (version,) = struct.unpack_from(">h", value)
        (offset,) = struct.unpack_from(">q", value, 2)
        pos = 10 + (4 if version >= 3 else 0)
        (size,) = struct.unpack_from(">h", value, pos)
        metadata = value[pos + 2:pos + 2 + size].decode()
        out.setdefault((metadata, partition), []).append(offset)
    return out


def test_every_record_processed_exactly_once_across_a_kill_and_a_join(broker_factory, tmp_path):
    broker = broker_factory("group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=1000",
                            process=True)  # killed -9 below
    bootstrap = f"127.0.0.1:{broker.port}"
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS)])
    produced: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    lock = threading.Lock()

    def produce(start: int, count: int, pause_s: float = 0.0) -> None:
        with Producer(bootstrap, linger_ms=2) as producer:
            for i in range(start, start + count):
                value = f"record-{i}"
                partition = i % PARTITIONS
                producer.send(TOPIC, value.encode(), partition=partition).get(timeout=30)
                with lock:
                    produced[partition].append(value)
                if pause_s and i % 50 == 0:
                    time.sleep(pause_s)

    produce(0, 600)
    out_dir = tmp_path / "members"
    out_dir.mkdir()
    members = [Member(bootstrap, out_dir, f"m{i}") for i in range(3)]
    try:
        wait_for(lambda: all(m.partitions() is not None and len(m.partitions()) == 2 for m in members), 60,
                 "three members with two partitions each")
        feeder = threading.Thread(target=produce, args=(600, 1500, 0.02))
        feeder.start()

        def processed_batches(member):
            return sum(1 for line in member.lines() if "committed" in line)

        wait_for(lambda: processed_batches(members[0]) >= 5, 60, "m0 to be processing")
        members[0].kill()  # kill -9, mid-stream: maybe between processing and committing
        survivors = members[1:]
        wait_for(lambda: all(m.partitions() is not None and len(m.partitions()) == 3 for m in survivors), 60,
                 "the two survivors to take over m0's partitions")
        members.append(Member(bootstrap, out_dir, "m3"))  # a new member joins
        wait_for(lambda: all(m.partitions() is not None and len(m.partitions()) == 2 for m in members[1:]), 60,
                 "three live members with two partitions each again")
        feeder.join()
        with AdminClient(bootstrap) as admin:
            ends = {tp.partition: a.offset for tp, a in
                    admin.list_offsets({TopicPartition(TOPIC, p): -1 for p in range(PARTITIONS)}).items()}
            wait_for(lambda: {tp.partition: o for tp, o in admin.list_consumer_group_offsets(GROUP).items()} == ends,
                     60, "the group to commit every partition's log end")
        for member in members[1:]:
            member.stop()
        # Restart: a fresh member, alone, resumes from the committed offsets (not from earliest).
        produce(2100, 60)
        members.append(Member(bootstrap, out_dir, "m4"))
        with AdminClient(bootstrap) as admin:
            wait_for(lambda: all(o == ends[tp.partition] + 10 for tp, o in
                                 admin.list_consumer_group_offsets(GROUP).items()), 60, "m4 to commit the new records")
        members[-1].stop()
        # A broker kill -9 and restart: the group's commits were fsynced before they were
        # answered, so a fresh member resumes from them, not from the start of the log.
        broker.kill()
        broker.start()
        produce(2160, 12)
        members.append(Member(bootstrap, out_dir, "m5"))
        with AdminClient(bootstrap) as admin:
            wait_for(lambda: all(o == ends[tp.partition] + 12 for tp, o in
                                 admin.list_consumer_group_offsets(GROUP).items()), 60, "m5 to commit the new records")
        members[-1].stop()
    finally:
        for member in members:
            if member.process.poll() is None:
                member.process.kill()

    landed = landed_commits(bootstrap)
    batches = [line for m in members for line in m.lines() if "batch" in line]
    counted = [b for b in batches if b["last"] + 1 in landed.get((b["batch"], b["partition"]), ())]
    print(f"{len(batches)} batches processed, {len(counted)} with a landed commit; m0 killed after "
          f"{sum(1 for b in batches if b['batch'].startswith('m0:'))} partition-batches")
    for partition in range(PARTITIONS):
        spans = sorted((b["first"], b["last"], b["values"]) for b in counted if b["partition"] == partition)
        expected_offset, values = 0, []
        for first, last, batch_values in spans:
            assert first == expected_offset, f"partition {partition}: gap or overlap at {expected_offset}: {first}"
            assert len(batch_values) == last - first + 1
            values += batch_values
            expected_offset = last + 1
        assert values == produced[partition], f"partition {partition}"
    m4 = [b for b in batches if b["batch"].startswith("m4:")]
    assert sorted(v for b in m4 for v in b["values"]) == sorted(f"record-{i}" for i in range(2100, 2160))
    m5 = [b for b in batches if b["batch"].startswith("m5:")]
    assert sorted(v for b in m5 for v in b["values"]) == sorted(f"record-{i}" for i in range(2160, 2172))
    # the kill really happened mid-stream: m0 processed some batches and the others went on after it
    assert any(b["batch"].startswith("m0:") for b in counted)
    assert any(b["batch"].startswith("m3:") for b in counted)
