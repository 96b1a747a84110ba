"""The trio admin client's create_partitions, describe_broker_configs and alter_configs options
against the real broker: the same behaviour as the sync client's (tests/e2e/test_admin_partitions_configs.py)."""

from __future__ import annotations

import pytest

from triolog.client import NewTopic
from triolog.client.aio import AsyncAdminClient
from triolog.client.errors import InvalidPartitionsError


async def test_aio_create_partitions_and_configs(bootstrap, topic):
    async with AsyncAdminClient(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 1)])
        await admin.create_partitions({topic: 3}, validate_only=True)
        assert len((await admin.describe_topics([topic]))[topic].partitions) == 1
        await admin.create_partitions({topic: 3})
        assert len((await admin.describe_topics([topic]))[topic].partitions) == 3
        with pytest.raises(InvalidPartitionsError, match="Topic already has 3 partition"):
            await admin.create_partitions({topic: 3})

        broker = await admin.describe_broker_configs()
        assert broker["broker.id"].read_only and broker["broker.id"].value == "0"
        assert broker["node.id"].value is None  # unset: its value comes from broker.id, as Kafka shows a synonym

        await admin.alter_configs({topic: {"retention.ms": "1000"}})
        await admin.alter_configs({topic: {"segment.bytes": "1048576"}}, replace=True)
        await admin.alter_configs({}, append={topic: {"cleanup.policy": "compact"}})
        configs = (await admin.describe_configs([topic]))[topic]
        assert {k: e.value for k, e in configs.items() if e.source == "topic"} == {
            "segment.bytes": "1048576", "cleanup.policy": "delete,compact"}
