"""Our transactional producer (Kafka's names: init_transactions, begin_transaction,
send_offsets_to_transaction, commit_transaction, abort_transaction) against the real broker:
what a read_committed reader sees, a new epoch per transaction, a zombie fenced, the
consume-transform-produce loop, and the calls out of order refused before anything is sent."""

from __future__ import annotations

import time

import pytest

from tests.txn_reading import committed_values
from triolog.client import AdminClient, Consumer, NewTopic, Producer
from triolog.client.errors import ProducerFencedError, TransactionAbortedError, TransactionStateError
from triolog.client.transactions import ConsumerGroupMetadata, TxnState
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode


def read_committed(broker, topic: str, partitions: int = 1) -> list[bytes]:
    """Every partition read with isolation_level 1, aborted transactions dropped as Kafka's
    consumer drops them; waits until each partition is stable."""
    wire = broker.client()
    values: list[bytes] = []
    try:
        for partition in range(partitions):
            deadline = time.monotonic() + 20
            while True:
                part = wire.call(m.FetchRequest(
                    id=wire.next_id(), max_wait_ms=0, min_bytes=1, max_bytes=1 << 24, isolation_level=1,
                    topics=(m.FetchTopic(name=topic, partitions=(
                        m.FetchPartition(partition=partition, fetch_offset=0, partition_max_bytes=1 << 24),)),)),
                )["topics"][0]["partitions"][0]
                if part["last_stable_offset"] == part["high_watermark"] or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            values += committed_values(part)
    finally:
        wire.close()
    return values


def test_commit_and_abort_across_partitions(broker, bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 3, 1)])
    with Producer(bootstrap, transactional_id=f"{topic}-tx", linger_ms=1) as producer:
        producer.init_transactions()
        epoch = producer.metrics()["producer-id"], producer._core.idempotence.producer_epoch
        producer.begin_transaction()
        futures = [producer.send(topic, b"c%d" % i, partition=i % 3) for i in range(9)]
        producer.commit_transaction()
        assert all(f.get(5).offset >= 0 for f in futures)
        # Every transaction gets a new epoch (transaction version 2): sequences start over.
        assert producer._core.idempotence.producer_epoch == epoch[1] + 1
        producer.begin_transaction()
        sent = [producer.send(topic, b"a%d" % i, partition=i % 3) for i in range(6)]
        producer.flush()
        producer.abort_transaction()
        assert all(f.exception() is None for f in sent), "in the log, then aborted"
        producer.begin_transaction()
        producer.send(topic, b"after", partition=0)
        producer.commit_transaction()
        assert producer._txn.commits == 2 and producer._txn.aborts == 1
    assert sorted(read_committed(broker, topic, 3)) == sorted([b"c%d" % i for i in range(9)] + [b"after"])


def test_abort_drops_what_was_not_sent(broker, bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 1, 1)])
    with Producer(bootstrap, transactional_id=f"{topic}-tx", linger_ms=60_000, batch_size=1 << 20) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        queued = producer.send(topic, b"never")  # lingering: not sent yet
        producer.abort_transaction()
        assert isinstance(queued.exception(), TransactionAbortedError)
    assert read_committed(broker, topic) == []


def test_a_zombie_is_fenced_by_a_newer_producer(broker, bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 1, 1)])
    zombie = Producer(bootstrap, transactional_id=f"{topic}-tx", linger_ms=1)
    zombie.init_transactions()
    zombie.begin_transaction()
    zombie.send(topic, b"zombie").get(10)
    with Producer(bootstrap, transactional_id=f"{topic}-tx", linger_ms=1) as successor:
        successor.init_transactions()  # aborts the zombie's transaction, fences its epoch
        successor.begin_transaction()
        successor.send(topic, b"successor")
        successor.commit_transaction()
    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()
    assert zombie._txn.state is TxnState.FATAL_ERROR
    with pytest.raises(TransactionStateError):
        zombie.begin_transaction()
    zombie.close()
    assert read_committed(broker, topic) == [b"successor"]


def test_consume_transform_produce_commits_offsets_with_the_output(broker, bootstrap, admin, topic):
    source, sink, group = f"{topic}-in", f"{topic}-out", f"{topic}-g"
    admin.create_topics([NewTopic(source, 1, 1), NewTopic(sink, 1, 1)])
    with Producer(bootstrap) as plain:
        for n in range(20):
            plain.send(source, b"%d" % n)

    def run(limit: int, commit: bool) -> None:
        with Consumer(bootstrap, group_id=group, enable_auto_commit=False, auto_offset_reset="earliest") as consumer, \
                Producer(bootstrap, transactional_id=f"{topic}-ctp", linger_ms=1) as producer:
            consumer.subscribe([source])
            producer.init_transactions()
            producer.begin_transaction()
            taken: dict = {}
            while sum(len(v) for v in taken.values()) < limit:
                for tp, records in consumer.poll(500, max_records=limit - sum(len(v) for v in taken.values())).items():
                    for record in records:
                        producer.send(sink, record.value + b"!")
                    taken.setdefault(tp, []).extend(records)
            offsets = {tp: records[-1].offset + 1 for tp, records in taken.items()}
            metadata = consumer.group_metadata()
            assert isinstance(metadata, ConsumerGroupMetadata) and metadata.generation_id >= 0
            producer.send_offsets_to_transaction(offsets, metadata)
            (producer.commit_transaction if commit else producer.abort_transaction)()

    run(8, commit=True)
    run(8, commit=False)  # neither its output nor its offsets stay
    run(12, commit=True)  # from offset 8 again
    assert read_committed(broker, sink) == [b"%d!" % n for n in range(20)]


def test_calls_out_of_order_are_refused_before_anything_is_sent(bootstrap, topic):
    with Producer(bootstrap, transactional_id=f"{topic}-tx") as producer:
        with pytest.raises(TransactionStateError, match="uninitialized"):
            producer.begin_transaction()
        producer.init_transactions()
        with pytest.raises(TransactionStateError, match="begin_transaction"):
            producer.send(topic, b"outside")
        with pytest.raises(TransactionStateError):
            producer.commit_transaction()
        producer.begin_transaction()
        with pytest.raises(TransactionStateError):
            producer.begin_transaction()
        producer.commit_transaction()  # an empty transaction: nothing to end
    with Producer(bootstrap) as plain, pytest.raises(TransactionStateError, match="transactional_id"):
        plain.init_transactions()
    with pytest.raises(ValueError, match="idempotence"):
        Producer(bootstrap, transactional_id="x", enable_idempotence=False)
    with pytest.raises(ValueError, match="acks"):
        Producer(bootstrap, transactional_id="x", acks=1)


def _consume(bootstrap: str, topic: str, isolation_level: str, partitions: int = 1, idle_polls: int = 6) -> list:
    with Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50,
                  isolation_level=isolation_level) as consumer:
        consumer.assign([(topic, p) for p in range(partitions)])
        values, idle = [], 0
        while idle < idle_polls:
            polled = consumer.poll(100)
            idle = 0 if polled else idle + 1
            values += [r.value for records in polled.values() for r in records]
        return values


def test_a_read_committed_consumer_skips_aborted_and_stops_at_an_open_transaction(broker, bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 1, 1)])
    with Producer(bootstrap, transactional_id=f"{topic}-a", linger_ms=1) as a, \
            Producer(bootstrap, transactional_id=f"{topic}-b", linger_ms=1) as b, \
            Producer(bootstrap, linger_ms=1) as plain:
        a.init_transactions()
        b.init_transactions()
        for n in range(4):
            a.begin_transaction()
            a.send(topic, b"a%d" % n)
            a.flush()
            if n % 2:
                a.abort_transaction()
            else:
                a.commit_transaction()
            plain.send(topic, b"p%d" % n).get(5)
        b.begin_transaction()
        b.send(topic, b"open").get(5)  # open: holds the last stable offset
        plain.send(topic, b"after").get(5)
        assert _consume(bootstrap, topic, "read_committed") == [b"a0", b"p0", b"p1", b"a2", b"p2", b"p3"]
        assert _consume(bootstrap, topic, "read_uncommitted") == [
            b"a0", b"p0", b"a1", b"p1", b"a2", b"p2", b"a3", b"p3", b"open", b"after"]
        with Consumer(bootstrap, isolation_level="read_committed") as consumer:
            (end,) = consumer.end_offsets([(topic, 0)]).values()
            # a0 C p0 a1 A p1 a2 C p2 a3 A p3 | open at 12: the last stable offset
            assert end == 12
        b.commit_transaction()
        assert _consume(bootstrap, topic, "read_committed")[-2:] == [b"open", b"after"]
    with pytest.raises(ValueError, match="isolation_level"):
        Consumer(bootstrap, isolation_level="serializable")


def test_the_trio_producer_commits_aborts_and_sends_offsets(broker, bootstrap, admin, topic):
    import trio

    from triolog.client.aio import AsyncConsumer, AsyncProducer

    source, sink = f"{topic}-in", f"{topic}-out"
    admin.create_topics([NewTopic(source, 1, 1), NewTopic(sink, 2, 1)])
    with Producer(bootstrap) as plain:
        for n in range(6):
            plain.send(source, b"%d" % n)

    async def main():
        async with AsyncConsumer(bootstrap, group_id=f"{topic}-g", enable_auto_commit=False,
                                 auto_offset_reset="earliest") as consumer, \
                AsyncProducer(bootstrap, transactional_id=f"{topic}-aio", linger_ms=1) as producer:
            consumer.subscribe([source])
            await producer.init_transactions()
            producer.begin_transaction()
            taken = []
            while len(taken) < 6:
                for records in (await consumer.poll(500)).values():
                    taken += records
            for record in taken:
                await producer.send(sink, record.value, partition=int(record.value) % 2)
            await producer.send_offsets_to_transaction({record_tp(taken[-1]): taken[-1].offset + 1},
                                                       consumer.group_metadata())
            await producer.commit_transaction()
            producer.begin_transaction()
            await producer.send(sink, b"aborted", partition=0)
            await producer.abort_transaction()
            with pytest.raises(TransactionStateError):
                await producer.send(sink, b"outside")
        async with AsyncConsumer(bootstrap, group_id=f"{topic}-g", enable_auto_commit=False,
                                 isolation_level="read_committed") as consumer:
            assert await consumer.committed((source, 0)) == 6

    def record_tp(record):
        from triolog.client import TopicPartition

        return TopicPartition(record.topic, record.partition)

    trio.run(main)
    assert sorted(read_committed(broker, sink, 2)) == sorted(b"%d" % n for n in range(6))


def test_the_transactions_cli_lists_describes_and_aborts_a_hanging_transaction(broker, bootstrap, admin, topic):
    import json

    from triolog.testing import run_cli

    admin.create_topics([NewTopic(topic, 1, 1)])
    with Producer(bootstrap, transactional_id=f"{topic}-tx", linger_ms=1) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"open").get(5)
        listed = run_cli("transactions", "--bootstrap-server", bootstrap, "--list", "--state", "Ongoing", "-J")
        assert {"transactional_id": f"{topic}-tx", "producer_id": producer.metrics()["producer-id"],
                "state": "Ongoing"} in json.loads(listed.stdout)
        described = run_cli("transactions", "--bootstrap-server", bootstrap, "--describe",
                            "--transactional-id", f"{topic}-tx")
        assert described.code == 0 and "Ongoing" in described.stdout.decode() and f"{topic}-0" in described.stdout.decode()
        producers = json.loads(run_cli("transactions", "--bootstrap-server", bootstrap, "--describe-producers",
                                       "--topic", topic, "--partition", "0", "-J").stdout)
        assert [p["current_transaction_start_offset"] for p in producers] == [0]
        consumed = run_cli("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
                           "--isolation-level", "read_committed", "--timeout-ms", "500")
        assert consumed.stdout == b"", "an open transaction is not read_committed"
        producer.commit_transaction()
    consumed = run_cli("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
                       "--isolation-level", "read_committed", "--timeout-ms", "500")
    assert consumed.stdout == b"open\n"


def _raw_transactional_produce(wire, topic: str, pid: int, epoch: int, value: bytes,
                               transactional_id: str | None) -> int:
    from triolog.protocol.records import build_batch

    batch = build_batch([(None, value, int(time.time() * 1000), ())], producer_id=pid, producer_epoch=epoch,
                        base_sequence=0, is_transactional=True)
    return wire.call(m.ProduceRequest(id=wire.next_id(), acks=-1, timeout_ms=5000, topics=(
        m.ProduceTopic(name=topic, partitions=(m.ProducePartition(partition=0, records=batch),)),),
        transactional_id=transactional_id))["topics"][0]["partitions"][0]["error_code"]


def test_a_batch_for_a_partition_never_added_is_refused_not_left_hanging(broker, bootstrap, admin, topic):
    """KIP-890 part 1: a buggy producer that skips add_partitions_to_txn gets INVALID_TXN_STATE
    from the partition leader, which asked the coordinator; no transaction is left open to hold
    read_committed consumers back. A transactional batch must name its transactional id."""
    admin.create_topics([NewTopic(topic, 1, 1)])
    wire = broker.client()
    try:
        for _ in range(200):  # (the first use creates and loads __transaction_state)
            init = wire.call(m.InitProducerIdRequest(id=wire.next_id(), transactional_id=f"{topic}-tx",
                                                   transaction_timeout_ms=60_000))
            if init["error_code"] != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                break
            time.sleep(0.02)
        assert init["error_code"] == 0, init
        pid, epoch = init["producer_id"], init["producer_epoch"]
        assert _raw_transactional_produce(wire, topic, pid, epoch, b"never added", f"{topic}-tx") == \
            ErrorCode.INVALID_TXN_STATE
        assert _raw_transactional_produce(wire, topic, pid, epoch, b"no id", None) == \
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert _raw_transactional_produce(wire, topic, pid, epoch, b"not its id", f"{topic}-other") == \
            ErrorCode.INVALID_PRODUCER_ID_MAPPING
    finally:
        wire.close()
    with Producer(bootstrap) as plain:
        plain.send(topic, b"behind").get(5)
    assert read_committed_end(bootstrap, topic) == 1, "nothing hangs: only the plain record is in the log"
    assert read_committed(broker, topic) == [b"behind"]


def test_the_transactions_cli_aborts_a_hanging_transaction(unverified_broker, topic):
    """Without verification (a broker configured as Kafka before 3.6), a producer's transactional
    batch its coordinator never heard of holds the last stable offset until kafka-transactions.sh's
    abort, by the transaction's start offset, ends it."""
    from triolog.testing import run_cli

    bootstrap = f"127.0.0.1:{unverified_broker.port}"
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
    with Producer(bootstrap) as plain:
        plain.send(topic, b"before").get(5)
    wire = unverified_broker.client()
    pid = wire.call(m.InitProducerIdRequest(id=wire.next_id()))["producer_id"]
    assert _raw_transactional_produce(wire, topic, pid, 0, b"hanging", "any") == 0
    wire.close()
    with Producer(bootstrap) as plain:
        plain.send(topic, b"behind").get(5)
    assert read_committed_end(bootstrap, topic) == 1
    aborted = run_cli("transactions", "--bootstrap-server", bootstrap, "--abort", "--topic", topic,
                      "--partition", "0", "--start-offset", "1")
    assert aborted.code == 0, aborted.stderr
    assert read_committed_end(bootstrap, topic) == 4
    consumed = run_cli("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
                       "--isolation-level", "read_committed", "--timeout-ms", "500")
    assert consumed.stdout == b"before\nbehind\n"
    missing = run_cli("transactions", "--bootstrap-server", bootstrap, "--abort", "--topic", topic,
                      "--partition", "0", "--start-offset", "1")
    assert missing.code == 1 and "no open transaction" in missing.stderr


def read_committed_end(bootstrap: str, topic: str) -> int:
    with Consumer(bootstrap, isolation_level="read_committed") as consumer:
        return consumer.end_offsets([(topic, 0)])[(topic, 0)]


def test_a_failed_send_makes_the_transaction_abortable_and_abort_recovers(broker, bootstrap, admin, topic):
    from triolog.client.errors import MessageTooLargeError

    admin.create_topics([NewTopic(topic, 1, 1, configs={"max.message.bytes": "2000"})])
    with Producer(bootstrap, transactional_id=f"{topic}-tx", linger_ms=1) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        kept = producer.send(topic, b"in the aborted transaction")
        kept.get(5)
        too_large = producer.send(topic, b"x" * 5000)
        with pytest.raises(MessageTooLargeError):
            too_large.get(10)
        assert producer._txn.state is TxnState.ABORTABLE_ERROR
        with pytest.raises(TransactionStateError, match="must be aborted") as refused:
            producer.commit_transaction()
        assert isinstance(refused.value.__cause__, MessageTooLargeError)
        with pytest.raises(TransactionStateError, match="must be aborted"):
            producer.send(topic, b"more")
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"committed")
        producer.commit_transaction()
    assert read_committed(broker, topic) == [b"committed"]


def test_admin_describes_producers_and_aborts_a_hanging_transaction_by_producer(unverified_broker, topic):
    """kafka-transactions.sh abort's other form: the producer id, epoch and coordinator epoch
    (from describe-producers) instead of the start offset."""
    import json

    from triolog.client import TopicPartition
    from triolog.testing import run_cli

    bootstrap = f"127.0.0.1:{unverified_broker.port}"
    admin = AdminClient(bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    with Producer(bootstrap, linger_ms=1) as plain:
        plain.send(topic, b"before").get(5)
    wire = unverified_broker.client()
    pid = wire.call(m.InitProducerIdRequest(id=wire.next_id()))["producer_id"]
    assert _raw_transactional_produce(wire, topic, pid, 0, b"hanging", "any") == 0
    wire.close()
    described = admin.describe_producers([(topic, 0)])[TopicPartition(topic, 0)]
    admin.close()
    (hanging,) = [p for p in described if p.producer_id == pid]
    assert (hanging.producer_epoch, hanging.current_transaction_start_offset) == (0, 1)
    assert read_committed_end(bootstrap, topic) == 1
    usage = run_cli("transactions", "--bootstrap-server", bootstrap, "--abort", "--topic", topic,
                    "--partition", "0", "--producer-id", str(pid))
    assert usage.code != 0 and "--producer-epoch" in usage.stderr
    aborted = run_cli("transactions", "--bootstrap-server", bootstrap, "--abort", "--topic", topic, "--partition", "0",
                      "--producer-id", str(pid), "--producer-epoch", "0",
                      "--coordinator-epoch", str(max(hanging.coordinator_epoch, 0)))
    assert aborted.code == 0, aborted.stderr
    assert read_committed_end(bootstrap, topic) == 3  # before, hanging, its ABORT marker
    after = json.loads(run_cli("transactions", "--bootstrap-server", bootstrap, "--describe-producers",
                               "--topic", topic, "--partition", "0", "-J").stdout)
    assert [p["current_transaction_start_offset"] for p in after if p["producer_id"] == pid] == [-1]
    consumed = run_cli("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
                       "--isolation-level", "read_committed", "--timeout-ms", "500")
    assert consumed.stdout == b"before\n"
    uncommitted = run_cli("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
                          "--isolation-level", "read_uncommitted", "--timeout-ms", "500")
    assert uncommitted.stdout == b"before\nhanging\n"


def test_a_transaction_the_coordinator_timed_out_is_aborted_and_the_producer_goes_on(tmp_path, topic):
    """KIP-588: the coordinator aborts a transaction past transaction.timeout.ms with a bumped
    epoch; the producer's next send is refused (INVALID_PRODUCER_EPOCH, abortable, not fatal),
    abort_transaction is taken as a retry of that abort, and the next transaction commits."""
    from tests.e2e.broker_process import InProcessBroker
    from triolog.client import AdminClient
    from triolog.client.errors import InvalidProducerEpochError

    broker = InProcessBroker(tmp_path / "data", (
        "transaction.abort.timed.out.transaction.cleanup.interval.ms=100",)).start()
    try:
        bootstrap = f"127.0.0.1:{broker.port}"
        with AdminClient(bootstrap) as admin:
            admin.create_topics([NewTopic(topic, 1, 1)])
        with Producer(bootstrap, transactional_id=f"{topic}-tx", linger_ms=1, transaction_timeout_ms=300) as producer:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(topic, b"timed out").get(5)
            deadline = time.monotonic() + 10
            while read_committed_end(bootstrap, topic) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)  # until the coordinator's abort marker is in the log
            assert read_committed_end(bootstrap, topic) == 2
            late = producer.send(topic, b"after the timeout")
            with pytest.raises(InvalidProducerEpochError):
                late.get(10)
            assert producer._txn.state is TxnState.ABORTABLE_ERROR
            producer.abort_transaction()
            producer.begin_transaction()
            producer.send(topic, b"next")
            producer.commit_transaction()
        assert read_committed(broker, topic) == [b"next"]
    finally:
        broker.stop()


def test_a_transaction_prepared_by_one_producer_is_committed_by_another(broker, bootstrap, admin, topic):
    """resume_transaction: the two-phase sink's coordinator ends what a task prepared and left
    open (the producer that prepared it is closed by then)."""
    admin.create_topics([NewTopic(topic, 2, 1)])
    tid = f"{topic}-tx"
    prepared = []
    for values, partition in (([b"a0", b"a1"], 0), ([b"b0"], 1)):
        with Producer(bootstrap, transactional_id=tid, linger_ms=1) as task:
            task.init_transactions()
            task.begin_transaction()
            for value in values:
                task.send(topic, value, partition=partition)
            task.flush()
            prepared.append(task.producer_id_and_epoch())
        # (the second init fences the first task and aborts what it prepared)
    with Consumer(bootstrap, isolation_level="read_committed") as consumer:
        assert consumer.end_offsets([(topic, 1)])[(topic, 1)] == 0, "the second is open: nothing stable yet"
    with Producer(bootstrap, transactional_id=tid) as stale:
        stale.resume_transaction(*prepared[0])
        with pytest.raises(ProducerFencedError):
            stale.commit_transaction()
    with Producer(bootstrap, transactional_id=tid) as driver:
        driver.resume_transaction(*prepared[1])
        with pytest.raises(TransactionStateError, match="resumed transaction can only be committed or aborted"):
            driver.send(topic, b"more", partition=1)
        driver.commit_transaction()
        with pytest.raises(TransactionStateError):
            driver.resume_transaction(*prepared[1])
    assert sorted(read_committed(broker, topic, 2)) == [b"b0"]
