"""Shared by the Spark tests: producing known records and reading them back through the source."""

from __future__ import annotations

from triolog.client import Producer
from tests.waiting import wait_for

#: Record timestamps the tests choose (ms): well in the past, one second apart per record.
BASE_TS = 1_600_000_000_000


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, *, base_ts: int = BASE_TS,
            headers: bool = False, start: int = 0, batch_size: int = 16384) -> dict[tuple[int, int], tuple[bytes, bytes, int]]:
    """``per_partition`` records into each partition, with known keys, values and timestamps.

    Returns (partition, offset) -> (key, value, timestamp ms) as the broker acknowledged them.
    """
    sent = {}
    with Producer(bootstrap, linger_ms=2, batch_size=batch_size) as producer:
        futures = []
        for p in range(partitions):
            for i in range(start, start + per_partition):
                key, value = f"k{p}-{i}".encode(), f"value {p}-{i}".encode()
                ts = base_ts + i * 1000
                record_headers = [("n", str(i).encode()), ("p", None)] if headers and i % 2 else ()
                futures.append((key, value, ts, producer.send(topic, value, key=key, partition=p, timestamp_ms=ts,
                                                              headers=record_headers)))
        for key, value, ts, future in futures:
            meta = future.get(timeout=30)
            sent[(meta.partition, meta.offset)] = (key, value, ts)
    return sent


def reader(spark, bootstrap: str, **options):
    r = spark.read.format("triolog").option("triolog.bootstrap.servers", bootstrap)
    for name, value in options.items():
        r = r.option(name, value)
    return r


def keyed(rows) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    """(partition, offset) -> (key, value) of collected rows; asserts no (partition, offset) twice."""
    out = {}
    for row in rows:
        where = (row["partition"], row["offset"])
        assert where not in out, f"record {where} read twice"
        out[where] = (bytes(row["key"]) if row["key"] is not None else None, bytes(row["value"]))
    return out


def expected(sent, predicate=lambda partition, offset: True) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    return {where: (key, value) for where, (key, value, _) in sent.items() if predicate(*where)}


def segment_bases(broker, topic: str, partition: int) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (broker.data_dir / f"{topic}-{partition}").glob("*.log"))


def delete_segments(admin, broker, topic: str, partition: int, after: int, timeout_s: float = 15) -> int:
    """Move the log start just past the first segment boundary above ``after`` (delete_records)
    and wait until the broker's retention task has removed the segment files below it.

    Returns the new log start offset: offsets from ``after`` up to it are gone from disk."""
    bases = segment_bases(broker, topic, partition)
    boundary = min(b for b in bases if b > after)
    cut = boundary + 1
    assert admin.delete_records({(topic, partition): cut}) == {(topic, partition): cut}
    wait_for(lambda: segment_bases(broker, topic, partition)[0] == boundary, timeout_s,
             f"segments of {topic}-{partition} below offset {boundary} to be deleted")
    return cut
