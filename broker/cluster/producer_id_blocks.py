"""Producer ids across a cluster: blocks reserved in ``/latest_producer_id_block`` (Kafka's
ZkProducerIdManager), so that no two brokers ever hand out the same id.

Each broker reserves the next block by a write conditional on the znode's version (a lost race
reads again and takes the block after the winner's); every broker watches the znode, so a leader
knows which ids the cluster has handed out and refuses any beyond (UNKNOWN_PRODUCER_ID), as a
standalone broker refuses ids beyond its own block.
"""

from __future__ import annotations

import structlog

from . import zk_data
from .metadata_store import BadVersionError, NodeExistsError, SessionState, StoreUnavailableError
from .zk_client import KafkaZkClient
from .zk_data import ProducerIdBlock

logger = structlog.get_logger("triolog.cluster.producer_ids")


async def reserve_block(zk: KafkaZkClient, broker_id: int, block_size: int) -> ProducerIdBlock:
    """The next block of ``block_size`` ids, reserved for ``broker_id``."""
    store = zk.store
    while True:
        node = await store.get(zk_data.LATEST_PRODUCER_ID_BLOCK)
        if node is None or not node.data:
            # (Kafka's broker creates the znode empty at startup; the first block starts at 0.)
            block = ProducerIdBlock(broker_id, 0, block_size - 1)
            try:
                if node is None:
                    await store.create(zk_data.LATEST_PRODUCER_ID_BLOCK, block.encode(), makepath=True)
                else:
                    await store.set(zk_data.LATEST_PRODUCER_ID_BLOCK, block.encode(), node.version)
            except (NodeExistsError, BadVersionError):
                continue
        else:
            last = ProducerIdBlock.decode(node.data)
            block = ProducerIdBlock(broker_id, last.last + 1, last.last + block_size)
            try:
                await store.set(zk_data.LATEST_PRODUCER_ID_BLOCK, block.encode(), node.version)
            except BadVersionError:
                continue  # another broker reserved first: the block after its one
        logger.info("producer_id_block_reserved", broker_id=broker_id, first=block.first, last=block.last)
        return block


async def follow_issued_limit(zk: KafkaZkClient, on_limit) -> None:
    """Call ``on_limit(end)`` with one past the last id the cluster has reserved, at every change."""
    store = zk.store
    while True:
        try:
            node, changed = await store.watch(zk_data.LATEST_PRODUCER_ID_BLOCK)
        except StoreUnavailableError:
            while store.state is not SessionState.CONNECTED:
                await store.wait_state_change(store.state)
            continue
        if node is not None and node.data:
            on_limit(ProducerIdBlock.decode(node.data).last + 1)
        await changed.wait()


async def read_issued_limit(zk: KafkaZkClient) -> int | None:
    """One past the last id the cluster has reserved, read now (None: no block yet)."""
    node = await zk.store.get(zk_data.LATEST_PRODUCER_ID_BLOCK)
    if node is None or not node.data:
        return None
    return ProducerIdBlock.decode(node.data).last + 1
