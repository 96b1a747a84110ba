"""A broker's controlled shutdown: before it stops, its leaderships move to other in-sync replicas
and it leaves the ISRs it is in, so that no producer waits out a session timeout or a replica lag
time for it (Kafka's KafkaServer.controlledShutdown).

Kafka's broker asks the controller with a ControlledShutdown RPC and retries while the answer
names partitions it still leads. triolog's controller takes no RPCs (its LeaderAndIsr is the state
znodes every broker watches), so the request is an ephemeral znode, ``/admin/controlled_shutdown/
<broker id>``, which the controller watches and which goes with the broker's session: a broker
that comes back is never taken for one still leaving. The broker then waits in its own metadata
cache for the outcome: every partition it leads that another live in-sync replica could lead has
moved, and it is out of every ISR it shares with others.
"""

from __future__ import annotations

import structlog
import trio

from .metadata_cache import ClusterMetadataCache, PartitionView
from .metadata_store import StoreError
from .zk_client import KafkaZkClient

logger = structlog.get_logger("triolog.cluster")


def pending(cache: ClusterMetadataCache, broker_id: int) -> list[PartitionView]:
    """The partitions whose state the controller has still to change for ``broker_id`` to leave:
    those it leads where another live in-sync replica could lead instead, and those it follows in
    an ISR of several (it would hold up acks=all until the leader dropped it)."""
    out = []
    for topic in sorted(cache.topics):
        for view in cache.partitions(topic):
            if view.leader == broker_id:
                if any(
                    r != broker_id and r in view.isr and r in cache.brokers and r not in cache.shutting_down
                    for r in view.replicas
                ):
                    out.append(view)
            elif broker_id in view.isr and len(view.isr) > 1:
                out.append(view)
    return out


async def controlled_shutdown(
    zk: KafkaZkClient, cache: ClusterMetadataCache, broker_id: int, *, timeout_s: float
) -> list[PartitionView]:
    """Ask the controller to move this broker's leaderships and ISR places, and wait for it (up to
    ``timeout_s``). What is still pending at the end (empty on success)."""
    started = trio.current_time()
    try:
        await zk.announce_controlled_shutdown(broker_id)
    except StoreError as exc:
        logger.warning("controlled_shutdown_failed", broker_id=broker_id, error=str(exc))
        return pending(cache, broker_id)
    left = pending(cache, broker_id)
    with trio.move_on_after(timeout_s):
        generation = cache.generation
        while left:
            generation = await cache.wait_changed(generation)
            left = pending(cache, broker_id)
    elapsed_ms = round((trio.current_time() - started) * 1000)
    if left:
        logger.warning(
            "controlled_shutdown_incomplete",
            broker_id=broker_id,
            elapsed_ms=elapsed_ms,
            remaining=[f"{v.topic}-{v.partition}" for v in left],
        )
    else:
        logger.info("controlled_shutdown_succeeded", broker_id=broker_id, elapsed_ms=elapsed_ms)
    return left
