"""The real broker (BrokerServer) run inside the test's trio loop, and a raw protocol client over a
real socket on 127.0.0.1. In-process, a test can run the server under trio's MockClock, look at
its state (the request pool, parked long polls) to wait for a condition instead of sleeping, and
read its metrics registry directly."""

from __future__ import annotations

import struct
import time
from contextlib import asynccontextmanager
from pathlib import Path

import msgpack
import trio

from triolog.broker.server.app import BrokerServer
from triolog.config.broker_config import BrokerConfig
from triolog.protocol import messages as m
from triolog.protocol.records import build_batch, iter_batches


def broker_config(data_dir: Path, **props: str) -> BrokerConfig:
    """A broker on a free port of 127.0.0.1, without the metrics endpoint; ``props`` by Kafka name
    with '_' for '.' (``max_connections="2"``)."""
    base = {"log.dirs": str(data_dir), "listeners": "PLAINTEXT://127.0.0.1:0", "metrics.listener": ""}
    base.update({key.replace("_", "."): value for key, value in props.items()})
    return BrokerConfig.from_properties(base)[0]


@asynccontextmanager
async def running_broker(data_dir: Path, **props: str):
    """(server, port) of a started broker; shut down cleanly on exit."""
    server = BrokerServer(broker_config(data_dir, **props))
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.run)
        try:
            yield server, address.port
        finally:
            server.shutdown()


async def wait_until(condition, timeout_s: float = 10.0, what: str = "the condition"):
    """Poll ``condition()`` from the trio loop until truthy (the server runs meanwhile). The
    timeout is in real seconds, also under a MockClock (whose virtual time may race ahead)."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await trio.sleep(0.005)
    return value


def metric(server: BrokerServer, name: str, **labels: str) -> float:
    value = server.metrics.registry.get_sample_value(name, labels)
    if value is None:
        raise AssertionError(f"no sample {name}{labels}")
    return value


class Client:
    """Frames in and out of a trio socket stream, nothing hidden."""

    def __init__(self, stream: trio.SocketStream):
        self.stream = stream
        self._next_id = 0
        self._buffer = bytearray()

    @classmethod
    async def connect(cls, port: int) -> "Client":
        return cls(await trio.open_tcp_stream("127.0.0.1", port))

    def next_id(self) -> int:
        self._next_id += 1
        return self._next_id

    async def send_frame(self, payload: bytes) -> None:
        await self.stream.send_all(struct.pack(">I", len(payload)) + payload)

    async def send_request(self, request: m.Request) -> None:
        await self.send_frame(m.encode_request(request))

    async def _receive_exact(self, n: int) -> bytes:
        while len(self._buffer) < n:
            data = await self.stream.receive_some(1 << 20)
            if not data:
                raise EOFError("connection closed by the broker")
            self._buffer += data
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        return out

    async def receive_doc(self) -> dict:
        (length,) = struct.unpack(">I", await self._receive_exact(4))
        return msgpack.unpackb(await self._receive_exact(length), raw=False, strict_map_key=False)

    async def call(self, request: m.Request) -> dict:
        await self.send_request(request)
        payload = await self.receive_doc()
        assert payload["id"] == request.id
        return payload

    async def closed_by_broker(self) -> bool:
        """Waits for the next bytes: True at EOF or reset, False if data came instead."""
        try:
            return not await self.stream.receive_some(1)
        except trio.BrokenResourceError:
            return True

    async def aclose(self) -> None:
        await self.stream.aclose()

    # -- requests --------------------------------------------------------------------------------

    async def api_versions(self) -> dict:
        return await self.call(m.ApiVersionsRequest(id=self.next_id()))

    async def create(self, topic: str, partitions: int = 1, configs: dict | None = None) -> dict:
        doc = await self.call(m.CreateTopicsRequest(id=self.next_id(), topics=(
            m.NewTopic(name=topic, num_partitions=partitions, replication_factor=1, configs=configs or {}),)))
        return doc["topics"][0]

    def produce_request(self, topic: str, values: list[bytes], *, acks: int = 1, timeout_ms: int = 30_000,
                        partition: int = 0) -> m.ProduceRequest:
        now = int(time.time() * 1000)  # the storage clock is real time, also under a MockClock
        batch = build_batch([(b"k", v, now, ()) for v in values])
        return m.ProduceRequest(id=self.next_id(), acks=acks, timeout_ms=timeout_ms, topics=(
            m.ProduceTopic(name=topic, partitions=(m.ProducePartition(partition=partition, records=batch),)),))

    async def produce(self, topic: str, values: list[bytes], **kwargs) -> dict:
        doc = await self.call(self.produce_request(topic, values, **kwargs))
        return doc["topics"][0]["partitions"][0]

    def fetch_request(self, topic: str, offset: int = 0, *, max_wait_ms: int = 0, min_bytes: int = 1,
                      max_bytes: int = 1 << 20, partition: int = 0) -> m.FetchRequest:
        return m.FetchRequest(id=self.next_id(), max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                              max_bytes=max_bytes, topics=(m.FetchTopic(name=topic, partitions=(
                                  m.FetchPartition(partition=partition, fetch_offset=offset,
                                                   partition_max_bytes=max_bytes),)),))

    async def fetch(self, topic: str, offset: int = 0, **kwargs) -> dict:
        doc = await self.call(self.fetch_request(topic, offset, **kwargs))
        return doc["topics"][0]["partitions"][0]


def values_of(records: bytes) -> list[bytes]:
    return [r.value for b in iter_batches(records) for r in b.records]
