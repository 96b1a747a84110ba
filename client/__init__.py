"""triolog's Python client: producer, consumer and admin, blocking (here) or trio (:mod:`triolog.client.aio`).

Quick start::

    from triolog.client import Producer, Consumer, AdminClient

    with AdminClient("127.0.0.1:9092") as admin:
        admin.create_topics([NewTopic("orders", num_partitions=3, configs={"retention.ms": "60000"})])
    with Producer("127.0.0.1:9092", linger_ms=5, compression="zstd") as producer:
        metadata = producer.send("orders", b"hello", key=b"user-1").get(timeout=10)
    with Consumer("127.0.0.1:9092", auto_offset_reset="earliest", consumer_timeout_ms=1000) as consumer:
        consumer.subscribe("orders")
        for record in consumer:  # or: for tp, records in consumer.poll(timeout_ms=1000).items()
            print(record.offset, record.key, record.value)

Layering: this package speaks the wire protocol through :mod:`protocol` only. All logic lives in
generator *operations* (:mod:`triolog.client.ops`) and pure state (accumulator, partitioner, consumer
positions); the sync and trio classes only drive them. The producer's retry rule is documented
in :mod:`triolog.client.producer_core`; the consumer's offset-reset rule in :mod:`triolog.client.consumer_core`.
"""

import importlib

from .errors import *  # noqa: F403 - the typed exceptions are part of the public API
from .errors import __all__ as _errors_all

#: Public name -> module, imported on first use so that ``import client`` (and the CLI's
#: ``--help``) stays cheap.
_LAZY = {
    "AdminClient": "admin",
    "Consumer": "consumer",
    "Producer": "producer",
    "RebalanceListener": "consumer_coordinator",
    "FutureRecordMetadata": "producer",
    "RecordFutures": "producer",
    "murmur2": "partitioner",
    "partition_for_key": "partitioner",
    "SecurityConfig": "security",
    **{
        name: "admin_core"
        for name in (
            "AclBinding",
            "AclBindingFilter",
            "ScramCredentialInfo",
            "UserScramCredentialDeletion",
            "UserScramCredentialUpsertion",
            "UserScramCredentialsDescription",
        )
    },
    **{
        name: "types"
        for name in (
            "ClientQuotaAlteration",
            "ClientQuotaEntity",
            "ClientQuotaFilter",
            "ClientQuotaFilterComponent",
            "ConfigEntry",
            "ConsumerRecord",
            "NewTopic",
            "OffsetAndTimestamp",
            "PartitionInfo",
            "RecordMetadata",
            "TopicDescription",
            "TopicPartition",
        )
    },
}

__all__ = [*sorted(_LAZY), *_errors_all]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
