"""librdkafka's idempotent producer through a network that loses produce responses: its retries
reach the broker's producer state through the Kafka listener, and the log holds every record
exactly once, in order."""

from __future__ import annotations

from confluent_kafka import Producer as KafkaProducer

from tests.e2e.broker_process import BrokerProcess
from tests.e2e.fault_proxy import FaultProxy
from tests.e2e.reading import read_partition


def test_lost_produce_responses_are_retried_without_duplicates(tmp_path):
    with FaultProxy(0, drop_every=5, protocol="kafka") as proxy:
        # Metadata must send the client back through the proxy, not to the broker's own port.
        broker = BrokerProcess(tmp_path / "data", (f"kafka.advertised.listeners=PLAINTEXT://127.0.0.1:{proxy.port}",),
                               kafka=True)
        broker.start()
        try:
            proxy.target_port = broker.kafka_port
            producer = KafkaProducer({"bootstrap.servers": f"127.0.0.1:{proxy.port}", "enable.idempotence": True,
                                      "acks": "all", "linger.ms": 2, "batch.num.messages": 500,
                                      "message.timeout.ms": 60000, "retry.backoff.ms": 10,
                                      "reconnect.backoff.ms": 10})
            failures: list = []
            count = 20_000
            for i in range(count):
                while True:
                    try:
                        producer.produce("lossy", value=b"%06d" % i, partition=0,
                                         on_delivery=lambda err, msg: err and failures.append(err))
                        break
                    except BufferError:
                        producer.poll(0.05)
                producer.poll(0)
            assert producer.flush(90) == 0
            assert failures == []
            assert proxy.produce_responses_dropped >= 3, "the proxy lost responses, so the producer retried"
            values = [r.value for r in read_partition(f"127.0.0.1:{broker.port}", "lossy")]
            assert values == [b"%06d" % i for i in range(count)]  # each record once, in order
        finally:
            broker.kill()
