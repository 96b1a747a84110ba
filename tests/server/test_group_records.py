"""__consumer_offsets records: Kafka's bytes (golden vectors computed with Java), Java's
String.hashCode partitioning, and replaying a partition (last record per key wins)."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from triolog.broker.coordinator.group.group_metadata import OffsetAndMetadata, subscription_topics
from triolog.broker.coordinator.group.group_metadata_manager import (
    GroupKey,
    LoadedPartition,
    OffsetKey,
    StoredGroup,
    StoredMember,
    group_metadata_key,
    group_metadata_value,
    java_string_hash,
    offset_commit_key,
    offset_commit_value,
    partition_for,
    read_group_value,
    read_key,
    read_offset_value,
)


def test_java_string_hash_and_partition_match_kafka():
    # Values computed with Java 17's String.hashCode and Kafka's Utils.abs(h) % 50.
    cases = {"my-group": (-1906497762, 12), "test-group": (627841412, 12), "": (0, 0),
             "console-consumer-12345": (158455506, 6), "grüppe-😀": (-1039948164, 14)}
    for group, (h, p) in cases.items():
        assert java_string_hash(group) == h, group
        assert partition_for(group, 50) == p, group


def test_int_min_hash_goes_to_partition_zero_as_utils_abs_makes_it():
    assert java_string_hash("polygenelubricants") == -2 ** 31
    assert partition_for("polygenelubricants", 50) == 0  # Python's abs() would give 48


def test_offset_commit_key_and_value_bytes_are_kafkas():
    assert offset_commit_key("my-group", "orders", 3).hex() == "0001" "0008" "6d792d67726f7570" "0006" \
        "6f7264657273" "00000003"
    value = offset_commit_value(OffsetAndMetadata(42, -1, "", 1700000000000))
    assert value.hex() == "0003" "000000000000002a" "ffffffff" "0000" "0000018bcfe56800"
    assert group_metadata_key("my-group").hex() == "0002" "0008" "6d792d67726f7570"


def test_group_metadata_value_v3_layout():
    member = StoredMember("m-1", None, "c", "/127.0.0.1", 300000, 45000, b"\x00\x01", b"\x02")
    value = group_metadata_value(StoredGroup("consumer", 7, "range", "m-1", 1700000000000, (member,)))
    expected = (struct.pack(">h", 3) + b"\x00\x08consumer" + struct.pack(">i", 7) + b"\x00\x05range"
                + b"\x00\x03m-1" + struct.pack(">q", 1700000000000) + struct.pack(">i", 1)
                + b"\x00\x03m-1" + b"\xff\xff" + b"\x00\x01c" + b"\x00\x0a/127.0.0.1"
                + struct.pack(">ii", 300000, 45000) + struct.pack(">i", 2) + b"\x00\x01"
                + struct.pack(">i", 1) + b"\x02")
    assert value == expected
    assert read_group_value(value) == StoredGroup("consumer", 7, "range", "m-1", 1700000000000, (member,))


def test_empty_group_record_has_null_protocol_and_leader():
    value = group_metadata_value(StoredGroup("consumer", 3, None, None, 5, ()))
    assert value == struct.pack(">h", 3) + b"\x00\x08consumer" + struct.pack(">i", 3) + b"\xff\xff\xff\xff" \
        + struct.pack(">qi", 5, 0)


def test_older_and_flexible_offset_values_are_read():
    v1 = struct.pack(">hq", 1, 9) + b"\x00\x02md" + struct.pack(">qq", 100, 200)
    assert read_offset_value(v1) == OffsetAndMetadata(9, -1, "md", 100, 200)
    v4 = struct.pack(">hqi", 4, 9, 2) + bytes([3]) + b"md" + struct.pack(">q", 100) + b"\x00"
    assert read_offset_value(v4) == OffsetAndMetadata(9, 2, "md", 100)
    assert read_key(struct.pack(">h", 0) + b"\x00\x01g\x00\x01t" + struct.pack(">i", 1)) == OffsetKey("g", "t", 1)
    assert read_key(struct.pack(">h", 5) + b"junk") is None  # KIP-848 record types are skipped


@given(group=st.text(max_size=30), topic=st.text(min_size=1, max_size=30), partition=st.integers(0, 2 ** 31 - 1),
       offset=st.integers(-1, 2 ** 63 - 1), epoch=st.integers(-1, 2 ** 31 - 1), metadata=st.text(max_size=50),
       ts=st.integers(0, 2 ** 62))
def test_offset_records_round_trip(group, topic, partition, offset, epoch, metadata, ts):
    assert read_key(offset_commit_key(group, topic, partition)) == OffsetKey(group, topic, partition)
    entry = OffsetAndMetadata(offset, epoch, metadata, ts)
    assert read_offset_value(offset_commit_value(entry)) == entry
    assert read_key(group_metadata_key(group)) == GroupKey(group)


def test_replay_keeps_the_last_record_per_key_and_honours_tombstones():
    loaded = LoadedPartition()
    v = lambda o: offset_commit_value(OffsetAndMetadata(o, -1, "", 1))  # noqa: E731
    group_value = group_metadata_value(StoredGroup("consumer", 1, None, None, 1, ()))
    loaded.replay([
        (0, offset_commit_key("g", "t", 0), v(5)),
        (1, offset_commit_key("g", "t", 1), v(6)),
        (2, offset_commit_key("g", "t", 0), v(9)),
        (3, offset_commit_key("g", "t", 1), None),
        (4, group_metadata_key("g"), group_value),
        (5, group_metadata_key("h"), group_value),
        (6, group_metadata_key("h"), None),
        (7, b"\x00", b"garbage"),
    ])
    assert {tp: o.offset for tp, o in loaded.offsets["g"].items()} == {("t", 0): 9}
    assert loaded.offsets["g"][("t", 0)].record_offset == 2
    assert set(loaded.groups) == {"g"} and loaded.removed_groups == {"h"}
    assert loaded.skipped == 1


def test_subscription_topics_read_every_version():
    v0 = bytes.fromhex("0000" "00000001" "0006" "6f7264657273" "ffffffff")
    v3 = bytes.fromhex("0003" "00000001" "0006" "6f7264657273" "ffffffff" "00000000" "ffffffff" "ffff")
    assert subscription_topics(v0) == subscription_topics(v3) == {"orders"}
