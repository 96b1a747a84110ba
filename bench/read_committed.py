"""read_committed against read_uncommitted: records/s reading one partition whose transactions
abort 1% of the time (issue 26's goal: read_committed at >= 0.9x).

The partition is written through the Log API as the coordinator's markers will be: transactions of
``--batches`` batches of ``--records`` records from ``--producers`` idempotent producer ids, taking
turns, each ended by a COMMIT or (every ``--abort-every``-th) an ABORT marker, plus a share of plain
batches. Two readers, each run ``--runs`` times (medians printed):

* the Log API: Log.read from offset 0 to the end in ``--fetch-bytes`` reads, each region's bytes
  read from the file and its batch headers walked (what a fetch costs the broker, without the
  network), with FetchIsolation.HIGH_WATERMARK and TXN_COMMITTED;
* the Kafka listener: an in-process broker serving the same partition, read with Kafka Fetch v11
  requests (isolation_level 0 and 1, ``--fetch-bytes`` per partition) on one connection, each
  response decoded and its batch headers walked: the broker's side of a consumer's reads;
* confluent-kafka's consumer (``--kafka``, default on when confluent-kafka is installed) with
  isolation.level read_uncommitted and read_committed (records delivered to the application per
  second; read_committed delivers fewer, the aborted ones). librdkafka filters aborted records
  itself, record by record, and that client-side work shows in its ratio: the broker serves the
  two alike (the previous line).

    python bench/read_committed.py [--transactions 20000] [--runs 3] [--no-kafka]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from triolog.broker.storage.log import FetchIsolation, Log  # noqa: E402
from triolog.protocol.record_batch import CONTROL_FLAG, split_batches  # noqa: E402
from triolog.protocol.records import Record, encode_batch  # noqa: E402


def fill(log: Log, args) -> tuple[int, int]:
    """Write the transactions; returns (data records, records in aborted transactions)."""
    now = int(time.time() * 1000)
    value = b"v" * args.value_bytes
    sequences = [0] * args.producers
    records = aborted = 0
    for txn in range(args.transactions):
        pid = txn % args.producers
        abort = txn % args.abort_every == args.abort_every - 1
        for _ in range(args.batches):
            batch = encode_batch([Record(i, now, b"key-%d" % i, value) for i in range(args.records)],
                                 producer_id=pid, producer_epoch=0, base_sequence=sequences[pid],
                                 is_transactional=True)
            sequences[pid] += args.records
            log.append_as_leader(batch)
            records += args.records
            aborted += args.records if abort else 0
        log.append_end_txn_marker(pid, 0, 0, committed=not abort, leader_epoch=0)
        if txn % 10 == 0:  # some plain batches between the transactions
            log.append_as_leader(encode_batch([Record(i, now, b"plain", value) for i in range(args.records)]))
            records += args.records
    return records, aborted


def read_through_log(log: Log, isolation: FetchIsolation, fetch_bytes: int) -> tuple[int, float, int]:
    """(data records returned, seconds, aborted transactions listed) reading the whole partition."""
    offset, count, listed = 0, 0, 0
    started = time.perf_counter()
    end = log.last_stable_offset if isolation is FetchIsolation.TXN_COMMITTED else log.high_watermark
    while offset < end:
        info = log.read(offset, fetch_bytes, isolation=isolation)
        if info.region is None:
            break
        if info.aborted_transactions is not None:
            listed += len(info.aborted_transactions)
        data = info.region.read_bytes()
        for _, header in split_batches(data):
            if not header.attributes & CONTROL_FLAG:
                count += header.records_count
            offset = header.next_offset
    return count, time.perf_counter() - started, listed


def read_through_kafka_fetch(address: str, isolation_level: int, end: int, fetch_bytes: int) -> tuple[int, float]:
    """(data records returned, seconds) reading the partition with raw Kafka Fetch v11 requests."""
    from tests.kafka.kafka_wire import connect, decode_response, encode_request, read_frame
    from triolog.protocol.kafka.schema import build, request_class

    offset, count = 0, 0
    with connect(address) as sock:
        started = time.perf_counter()
        while offset < end:
            body = build(request_class(1, 11), {
                "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 64 << 20,
                "isolation_level": isolation_level, "session_epoch": -1, "topics": [{"topic": "bench", "partitions": [
                    {"partition": 0, "fetch_offset": offset, "partition_max_bytes": fetch_bytes}]}]})
            sock.sendall(encode_request(1, 11, 1, body))
            partition = decode_response(1, 11, read_frame(sock))[1].responses[0].partitions[0]
            if not partition.records:
                break
            for _, header in split_batches(partition.records):
                if not header.attributes & CONTROL_FLAG:
                    count += header.records_count
                offset = header.next_offset
        return count, time.perf_counter() - started


def read_through_kafka(bootstrap: str, topic: str, isolation: str, expected: int) -> tuple[int, float]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{isolation}-{time.monotonic()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": isolation, "fetch.wait.max.ms": 10})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        count, idle = 0, 0
        started = time.perf_counter()
        finished = started
        while count < expected and idle < 20:
            messages = consumer.consume(10_000, 0.5)
            idle = 0 if messages else idle + 1
            count += len(messages)
            if messages:
                finished = time.perf_counter()
        return count, finished - started
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=20_000)
    parser.add_argument("--batches", type=int, default=1, help="batches per transaction")
    parser.add_argument("--records", type=int, default=10, help="records per batch")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--producers", type=int, default=10)
    parser.add_argument("--abort-every", type=int, default=100, help="every N-th transaction aborts (1%%)")
    parser.add_argument("--fetch-bytes", type=int, default=1 << 20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--kafka", action=argparse.BooleanOptionalAction, default=None)
    args = parser.parse_args()
    if args.kafka is None:
        try:
            import confluent_kafka  # noqa: F401

            args.kafka = True
        except ImportError:
            args.kafka = False

    from triolog.client import AdminClient
    from triolog.client.types import NewTopic
    from triolog.testing import InProcessBroker

    with tempfile.TemporaryDirectory() as tmp:
        broker = InProcessBroker(Path(tmp) / "data", ("log.segment.bytes=104857600",), kafka=True)
        broker.start()
        try:
            assert broker.server is not None
            with AdminClient(f"127.0.0.1:{broker.port}") as admin:
                admin.create_topics([NewTopic("bench", num_partitions=1)])
            log = broker.server.log_manager.get_log("bench", 0)
            started = time.perf_counter()
            records, aborted = fill(log, args)
            print(f"wrote {records} records ({aborted} in aborted transactions, "
                  f"{aborted / records:.1%}), {log.log_end_offset} offsets, {log.size / 1e6:.1f} MB, "
                  f"{log.num_segments} segments in {time.perf_counter() - started:.1f} s")

            rates: dict[str, list[float]] = {"log uncommitted": [], "log committed": []}
            listed = 0
            for _ in range(args.runs):
                for name, isolation in (("log uncommitted", FetchIsolation.HIGH_WATERMARK),
                                        ("log committed", FetchIsolation.TXN_COMMITTED)):
                    count, seconds, listed_now = read_through_log(log, isolation, args.fetch_bytes)
                    rates[name].append(count / seconds)
                    listed = max(listed, listed_now)
            rates["fetch uncommitted"], rates["fetch committed"] = [], []
            for _ in range(args.runs):
                for name, level in (("fetch uncommitted", 0), ("fetch committed", 1)):
                    count, seconds = read_through_kafka_fetch(
                        f"127.0.0.1:{broker.kafka_port}", level, log.log_end_offset, args.fetch_bytes
                    )
                    assert count == records, f"{name}: {count} records, expected {records}"
                    rates[name].append(count / seconds)
            if args.kafka:
                bootstrap = f"127.0.0.1:{broker.kafka_port}"
                rates["kafka uncommitted"], rates["kafka committed"] = [], []
                for _ in range(args.runs):
                    for name, isolation, expected in (("kafka uncommitted", "read_uncommitted", records),
                                                      ("kafka committed", "read_committed", records - aborted)):
                        count, seconds = read_through_kafka(bootstrap, "bench", isolation, expected)
                        assert count == expected, f"{name}: {count} records, expected {expected}"
                        rates[name].append(count / seconds)
        finally:
            broker.stop()

    medians = {name: statistics.median(values) for name, values in rates.items()}
    print(f"Log API ({args.fetch_bytes} B reads, {listed} aborted transactions listed by read_committed):")
    print(f"  read_uncommitted {medians['log uncommitted']:>12,.0f} records/s")
    print(f"  read_committed   {medians['log committed']:>12,.0f} records/s")
    print(f"  ratio            {medians['log committed'] / medians['log uncommitted']:.3f}")
    print(f"Kafka listener, Fetch v11 ({args.fetch_bytes} B per partition, records returned/s):")
    print(f"  read_uncommitted {medians['fetch uncommitted']:>12,.0f} records/s")
    print(f"  read_committed   {medians['fetch committed']:>12,.0f} records/s")
    print(f"  ratio            {medians['fetch committed'] / medians['fetch uncommitted']:.3f}")
    if args.kafka:
        print("Kafka listener, confluent-kafka consumer (records delivered/s; its own filtering included):")
        print(f"  read_uncommitted {medians['kafka uncommitted']:>12,.0f} records/s")
        print(f"  read_committed   {medians['kafka committed']:>12,.0f} records/s")
        print(f"  ratio            {medians['kafka committed'] / medians['kafka uncommitted']:.3f}")


if __name__ == "__main__":
    main()
