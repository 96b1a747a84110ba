"""Mutated requests of real Kafka clients against the Kafka listener of a real broker process.

The corpus is recorded at test time: librdkafka producing (lz4, idempotent), consuming with a
group and committing, and administering, through a proxy that keeps every request frame. Each
frame is then mutated (bit flips, truncations, a wrong length prefix, bytes inserted or
overwritten) and sent on its own connection. Whatever the mutation, the broker answers or closes
as Kafka would, keeps serving, and a produce it refused appended nothing; the records the clients
wrote are intact at the end.
"""

from __future__ import annotations

import random
import socket
import struct

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient as KafkaAdminClient
from confluent_kafka.admin import ConfigResource, NewTopic

from triolog.client.admin import AdminClient

from tests.e2e.broker_process import BrokerProcess
from tests.e2e.fault_proxy import FaultProxy
from tests.e2e.reading import read_partition

from .kafka_wire import decode_response, encode_request

MUTANTS = 1500


def _record_corpus(proxy_port: int, topic: str) -> None:
    bootstrap = f"127.0.0.1:{proxy_port}"
    admin = KafkaAdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    resource = ConfigResource("TOPIC", topic)
    admin.describe_configs([resource])[resource].result(30)
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": "lz4",
                              "linger.ms": 2})
    for i in range(200):
        producer.produce(topic, key=b"k%d" % i, value=b"value-%d" % i, partition=i % 2, headers=[("h", b"x")])
    assert producer.flush(30) == 0
    consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-g", "auto.offset.reset": "earliest",
                              "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = 0
    for _ in range(60):
        got += len([m for m in consumer.consume(1000, 0.5) if m.error() is None])
        if got >= 200:
            break
    consumer.commit(asynchronous=False)
    consumer.close()


def _mutate(frame: bytes, rng: random.Random) -> bytes:
    body = bytearray(frame[4:])
    kind = rng.randrange(6)
    if kind == 0:  # flip bits
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(body))
            body[i] ^= 1 << rng.randrange(8)
    elif kind == 1:  # cut short
        body = body[:rng.randrange(len(body))]
    elif kind == 2:  # overwrite a run with random bytes
        i = rng.randrange(len(body))
        body[i:i + rng.randint(1, 16)] = rng.randbytes(rng.randint(1, 16))
    elif kind == 3:  # insert bytes
        i = rng.randrange(len(body) + 1)
        body[i:i] = rng.randbytes(rng.randint(1, 32))
    elif kind == 4:  # an array or string length turned huge (somewhere past the header)
        i = rng.randrange(8, max(9, len(body) - 4))
        body[i:i + 4] = struct.pack(">i", rng.choice([2**31 - 1, -2, 1 << 24, 65535]))
    else:  # keep the body, lie in the length prefix (shorter: the rest reads as the next frame)
        return struct.pack(">i", max(0, len(body) - rng.randint(1, 8))) + bytes(body)
    return struct.pack(">i", len(body)) + bytes(body)


def _send(port: int, data: bytes) -> bytes | None:
    """The first response frame's body, or None if the broker closed (or said nothing in time)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        try:
            head = sock.recv(4)
        except (socket.timeout, ConnectionResetError):
            return None
        return head or None


def _alive(port: int) -> bool:
    from kio.schema.api_versions.v0.request import ApiVersionsRequest

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(encode_request(18, 0, 1, ApiVersionsRequest()))
        head = sock.recv(4)
        length = struct.unpack(">i", head)[0]
        data = b""
        while len(data) < length:
            data += sock.recv(length - len(data))
        return decode_response(18, 0, data)[1].error_code == 0


def test_mutated_client_requests_never_hurt_the_broker_or_the_data(tmp_path):
    topic = "mutated"
    with FaultProxy(0, protocol="kafka") as proxy:
        broker = BrokerProcess(tmp_path / "data", (f"kafka.advertised.listeners=PLAINTEXT://127.0.0.1:{proxy.port}",),
                               kafka=True)
        broker.start()
        try:
            proxy.target_port = broker.kafka_port
            proxy.recorded = []
            _record_corpus(proxy.port, topic)
            corpus = list(proxy.recorded)
            assert {struct.unpack_from(">h", f, 4)[0] for f in corpus} >= {0, 1, 3, 10, 11, 14, 8, 19, 32}
            ours = f"127.0.0.1:{broker.port}"
            before = {p: [(r.offset, r.key, r.value) for r in read_partition(ours, topic, p)] for p in (0, 1)}
            assert sum(map(len, before.values())) == 200
            rng = random.Random(20261124)
            answered = closed = refused_produces = 0
            with AdminClient(ours) as admin:
                def ends() -> dict:
                    found = admin.list_offsets({(topic, p): -1 for p in (0, 1)})
                    return {tp: found[tp].offset for tp in found}

                for n in range(MUTANTS):
                    mutant = _mutate(rng.choice(corpus), rng)
                    produce = len(mutant) >= 6 and struct.unpack_from(">h", mutant, 4)[0] == 0
                    start = ends() if produce else None
                    if _send(broker.kafka_port, mutant) is None:
                        closed += 1
                        if produce:  # refused unanswered: nothing of it may be in the log
                            refused_produces += 1
                            assert ends() == start, f"a produce the broker refused appended (mutant {n})"
                    else:
                        answered += 1
                    if n % 250 == 249:
                        assert _alive(broker.kafka_port), f"the listener stopped answering after {n + 1} mutants"
            assert answered and closed and refused_produces  # every outcome happened
            assert broker.process.poll() is None
            # What the clients wrote is intact, in place (a mutant that still was a valid produce may
            # only have added after it).
            for p in (0, 1):
                after = [(r.offset, r.key, r.value) for r in read_partition(ours, topic, p)]
                assert after[:len(before[p])] == before[p]
            with AdminClient(f"127.0.0.1:{broker.port}") as admin:
                assert admin.list_consumer_group_offsets(f"{topic}-g")  # the group's commit survived
            # No mutant reached an unexpected exception (a handler's, or the connection's own).
            failed = [e for e in broker.events() if e.get("event") in ("request_failed", "connection_failed")]
            assert not failed, "\n".join(str(e)[:3000] for e in failed)  # (with the traceback)
        finally:
            broker.kill()
