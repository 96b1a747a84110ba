"""kill -9 of the broker at every step of a transaction's end, then a restart: the transaction
ends the same way on every partition (committed or aborted), never half, and nothing hangs.

The real broker process arms one crash point (``TRIOLOG_CRASH_AT``, broker/crash_points.py) and
kills itself there with SIGKILL: before the PrepareCommit/PrepareAbort record is written (the
outcome is not decided yet: the transaction must end aborted, by its timeout), once it is
durable (decided: every partition must get the outcome), after the marker of the first
partition but before the next (a transaction half-marked on disk), and after every marker but
before CompleteCommit/CompleteAbort. A restart loads __transaction_state and finishes the
transaction; the checker then reads every partition read_committed."""

from __future__ import annotations

import signal
import time

import pytest

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.records import build_batch, iter_batches

from .broker_process import BrokerProcess

PARTITIONS = 3
TIMEOUT_MS = 1500


def _retry(client, make, code_of, deadline_s: float = 20.0) -> dict:
    deadline = time.monotonic() + deadline_s
    while True:
        doc = client.call(make())
        if code_of(doc) not in (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                ErrorCode.COORDINATOR_NOT_AVAILABLE) or time.monotonic() > deadline:
            return doc
        time.sleep(0.02)


def _run_transaction(broker: BrokerProcess, committed: bool) -> int:
    """Create the topic, write one transaction to every partition and end it; the producer id."""
    client = broker.client()
    client.call(m.CreateTopicsRequest(id=client.next_id(), topics=(
        m.NewTopic(name="t", num_partitions=PARTITIONS, replication_factor=1),)))
    init = _retry(client, lambda: m.InitProducerIdRequest(id=client.next_id(), transactional_id="tx",
                                                          transaction_timeout_ms=TIMEOUT_MS),
                  lambda d: d["error_code"])
    assert init["error_code"] == 0, init
    pid, epoch = init["producer_id"], init["producer_epoch"]
    added = client.call(m.AddPartitionsToTxnRequest(id=client.next_id(), transactional_id="tx", producer_id=pid,
                                                    producer_epoch=epoch,
                                                    topics=(m.TxnTopic(name="t", partitions=tuple(range(PARTITIONS))),)))
    assert {p["error_code"] for p in added["topics"][0]["partitions"]} == {0}
    for partition in range(PARTITIONS):
        batch = build_batch([(b"k", b"v%d" % partition, int(time.time() * 1000), ())], producer_id=pid,
                            producer_epoch=epoch, base_sequence=0, is_transactional=True)
        doc = client.call(m.ProduceRequest(id=client.next_id(), acks=-1, timeout_ms=10000, topics=(
            m.ProduceTopic(name="t", partitions=(m.ProducePartition(partition=partition, records=batch),)),),
            transactional_id="tx"))
        assert doc["topics"][0]["partitions"][0]["error_code"] == 0
    try:
        client.call(m.EndTxnRequest(id=client.next_id(), transactional_id="tx", producer_id=pid,
                                    producer_epoch=epoch, committed=committed))
    except (ConnectionError, OSError):
        pass  # the broker died while ending it
    client.close()
    return pid


def _outcome(broker: BrokerProcess, pid: int) -> tuple[list[str], list[int]]:
    """Per partition, once it is stable: "committed" (the record readable read_committed) or
    "aborted" (an ABORT marker of the producer and no readable record); and how many markers of
    the producer each partition holds."""
    client = broker.client()
    deadline = time.monotonic() + 30
    while True:
        request = m.FetchRequest(id=client.next_id(), max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                                 isolation_level=1, topics=(m.FetchTopic(name="t", partitions=tuple(
                                     m.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20)
                                     for p in range(PARTITIONS))),))
        parts = client.call(request)["topics"][0]["partitions"]
        if all(p["last_stable_offset"] == p["high_watermark"] for p in parts):
            break
        assert time.monotonic() < deadline, f"a partition never became stable: {parts}"
        time.sleep(0.05)
    outcomes, counts = [], []
    for part in parts:
        aborted = {t["producer_id"] for t in part["aborted_transactions"] or ()}
        batches = list(iter_batches(part["records"]))
        markers = [b.control_type for b in batches if b.header.is_control and b.header.producer_id == pid]
        assert markers, f"partition {part['partition']} has no marker of the transaction"
        readable = [b for b in batches if not b.header.is_control and b.header.producer_id not in aborted]
        outcomes.append("committed" if readable else "aborted")
        counts.append(len(markers))
    client.close()
    return outcomes, counts


POINTS = [
    # (crash point, whether the outcome is decided by then)
    ("txn.before_write.{prepare}", False),
    ("txn.after_write.{prepare}", True),
    ("txn.marker_appended", True),
    ("txn.before_write.{complete}", True),
]


@pytest.mark.parametrize("committed", [True, False], ids=["commit", "abort"])
@pytest.mark.parametrize(("point", "decided"), POINTS, ids=[p for p, _ in POINTS])
def test_a_kill_at_any_step_of_an_end_leaves_every_partition_alike(tmp_path, point, decided, committed):
    point = point.format(prepare="PrepareCommit" if committed else "PrepareAbort",
                         complete="CompleteCommit" if committed else "CompleteAbort")
    overrides = ("transaction.state.log.num.partitions=1",
                 "transaction.abort.timed.out.transaction.cleanup.interval.ms=200")
    broker = BrokerProcess(tmp_path / "data", overrides, env={"TRIOLOG_CRASH_AT": point}).start()
    pid = _run_transaction(broker, committed)
    assert broker.process.wait(30) == -signal.SIGKILL, "the broker killed itself at the crash point"

    restarted = BrokerProcess(tmp_path / "data", overrides, port=broker.port).start()
    try:
        client = restarted.client()
        final = ("CompleteCommit" if committed else "CompleteAbort") if decided else "CompleteAbort"
        deadline = time.monotonic() + 30  # (Complete* follows the last marker; an undecided one, the timeout)
        while True:
            (state,) = client.call(m.DescribeTransactionsRequest(id=client.next_id(),
                                                                 transactional_ids=("tx",)))["transactions"]
            if state["state"] == final or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert state["state"] == final
        client.close()
        expected = ("committed" if committed else "aborted") if decided else "aborted"
        outcomes, markers = _outcome(restarted, pid)
        assert outcomes == [expected] * PARTITIONS, f"crash at {point}: {outcomes}"
        if point == "txn.marker_appended":
            # The crash came between partitions: the first had its marker, which the restart's
            # coordinator wrote again with the others' (a marker with no open transaction is harmless).
            assert markers == [2, 1, 1]
        elif point.startswith("txn.before_write.Complete"):
            assert markers == [2, 2, 2]  # every marker written before the crash, and again after it
        else:
            assert markers == [1, 1, 1]
    finally:
        restarted.stop()
