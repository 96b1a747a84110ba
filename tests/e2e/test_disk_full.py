"""A full disk, for real: the broker runs on a 4 MiB tmpfs in a private mount namespace.

``unshare -m`` gives the broker process its own mount namespace, where a tiny tmpfs is mounted
over its data directory; the test fills and empties that tmpfs through ``/proc/<pid>/root``
(the broker's view of the file system). Requires root and util-linux's ``unshare`` (as CI has):
without them this test fails, it does not skip.

What it checks (issue 10, item 5): an index page is never written unbacked (a sparse mmapped
page on a full tmpfs is a SIGBUS that kills the broker); a produce that finds no space answers
KAFKA_STORAGE_ERROR and leaves nothing behind; the partition stays online and every
acknowledged record stays readable while the disk is full; writes resume by themselves once
space returns, at the next offset.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.records import build_batch, iter_batches

from .broker_process import ROOT, BrokerProcess

TMPFS_SIZE = "4m"


class TmpfsBrokerProcess(BrokerProcess):
    """The broker with a tmpfs of TMPFS_SIZE mounted over its data directory, in its own mount
    namespace (the mount disappears with the process)."""

    def start(self, timeout_s: float = 30.0) -> "TmpfsBrokerProcess":
        args = [
            "unshare", "-m", "--propagation", "private", "sh", "-c",
            'mount -t tmpfs -o size="$1" tmpfs "$2" && shift 2 && exec "$@"', "sh", TMPFS_SIZE, str(self.data_dir),
            sys.executable, "-m", "triolog.broker.cli", "serve",
            "--override", f"log.dirs={self.data_dir}",
            "--override", "listeners=PLAINTEXT://127.0.0.1:0",
            "--override", "kafka.listeners=",
            "--override", "metrics.listener=",
            "--override", "logger.format=json",
        ]
        for item in self.overrides:
            args += ["--override", item]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=log, cwd=ROOT,
                                            env={**os.environ, "PYTHONPATH": str(ROOT)})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            started = self._started_events()
            if started:
                self.port = started[-1]["port"]
                return self
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited with {self.process.returncode}:\n{self.log_text()}")
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not start within {timeout_s} s:\n{self.log_text()}")

    def path_inside(self, relative: str) -> Path:
        """A path in the broker's mount namespace (its tmpfs), seen from this process."""
        return Path(f"/proc/{self.process.pid}/root") / str(self.data_dir).lstrip("/") / relative


def _require_namespaces() -> None:
    if shutil.which("unshare") is None:
        pytest.fail("test_disk_full needs util-linux's unshare (apt-get install util-linux)")
    if os.geteuid() != 0:
        pytest.fail("test_disk_full needs root to mount a tmpfs in a private mount namespace "
                    "(CI runs the suite as root)")


@pytest.fixture
def tmpfs_broker(tmp_path):
    _require_namespaces()
    broker = TmpfsBrokerProcess(tmp_path / "data", ("log.flush.offset.checkpoint.interval.ms=600000",))
    try:
        yield broker.start()
    finally:
        broker.kill()


def _produce(client, values, acks=-1):
    now = int(time.time() * 1000)
    response = client.call(m.ProduceRequest(
        id=client.next_id(), acks=acks, timeout_ms=10_000,
        topics=(m.ProduceTopic(name="full", partitions=(
            m.ProducePartition(partition=0, records=build_batch([(b"k", v, now, ()) for v in values])),)),),
    ))
    return response["topics"][0]["partitions"][0]


def _fetch_all(client) -> list[bytes]:
    values, offset = [], 0
    while True:
        response = client.call(m.FetchRequest(
            id=client.next_id(), max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
            topics=(m.FetchTopic(name="full", partitions=(
                m.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20),)),),
        ))
        result = response["topics"][0]["partitions"][0]
        assert result["error_code"] == 0, result
        batch_values = [r.value for b in iter_batches(result["records"]) for r in b.records if r.offset >= offset]
        if not batch_values:
            return values
        values.extend(batch_values)
        offset += len(batch_values)


def _fill(path: Path) -> None:
    """Write ``path`` until the tmpfs has no page left."""
    chunk = b"\xee" * 4096
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break


def test_disk_full_answers_storage_error_keeps_data_readable_and_writes_resume(tmpfs_broker):
    broker = tmpfs_broker
    client = broker.client()
    # index.interval.bytes=1: every batch after the first gets an index entry
    response = client.call(m.CreateTopicsRequest(id=client.next_id(), topics=(m.NewTopic(
        name="full", num_partitions=1, replication_factor=1, configs={"index.interval.bytes": "1"}),)))
    assert response["topics"][0]["error_code"] == 0
    acknowledged = [b"first"]
    assert _produce(client, acknowledged)["error_code"] == 0  # the log's first page now exists

    # Fill the tmpfs to the last page. The next small batches still fit the log's first page, but
    # their index entries go to the index's first page: a sparse page there was a SIGBUS.
    filler = broker.path_inside("filler")
    _fill(filler)
    for i in range(5):
        value = b"small-%d" % i
        try:
            assert _produce(client, [value])["error_code"] == 0
        except ConnectionError:
            code = broker.process.wait(10)
            pytest.fail(f"the broker died (exit {code}, -7 is SIGBUS) writing an index entry on a full disk")
        acknowledged.append(value)
    assert broker.process.poll() is None, broker.log_text()

    # Now the log's page is full too: every produce is refused, with nothing written
    refused = 0
    for i in range(200):
        result = _produce(client, [b"x%d-" % i + b"y" * 300])
        if result["error_code"] == 0:
            acknowledged.append(b"x%d-" % i + b"y" * 300)
            continue
        assert result["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR, result
        refused += 1
        if refused == 5:
            break
    assert refused == 5, "the 4 MiB tmpfs never filled up"
    assert broker.process.poll() is None, broker.log_text()
    # the partition stays online and readable while the disk is full
    assert _fetch_all(client) == acknowledged

    # space comes back: writes resume by themselves, at the next offset
    filler.unlink()
    result = _produce(client, [b"after"])
    assert result["error_code"] == 0, result
    assert result["base_offset"] == len(acknowledged)
    acknowledged.append(b"after")
    assert _fetch_all(client) == acknowledged
    client.close()
    assert broker.stop() == 0, broker.log_text()
    assert "offline" not in broker.log_text()
