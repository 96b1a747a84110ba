"""A broker's membership of the cluster: its ZooKeeper session, its registration, its controller.

What Kafka's KafkaServer did at startup in ZooKeeper mode, in its order: connect (within
``zookeeper.connection.timeout.ms``), create the top-level paths, read or create the cluster id
(which the log dirs' meta.properties must match), then, once the listeners are bound, register
``/brokers/ids/<broker.id>`` with their advertised endpoints and start the controller. A session
that expires (a long pause, a partition from ZooKeeper) loses the registration with it: the broker
registers again as soon as it has a new session, as Kafka's broker does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import structlog
import trio

from triolog.broker.storage.checkpoints import random_kafka_uuid
from triolog.config.broker_config import BrokerConfig

from .controller import KafkaController, RebalanceSettings
from .metadata_store import MetadataStore, NodeExistsError, SessionState, StoreError, StoreUnavailableError
from .zk_client import KafkaZkClient
from .zk_data import BrokerRegistration, RegisteredEndpoint
from .zookeeper_store import ZooKeeperStore

logger = structlog.get_logger("triolog.cluster")

#: The listener name the msgpack listener is registered under (the Kafka listener is registered
#: under its security protocol, Kafka's default listener name, so Kafka's tools read it as theirs).
TRIOLOG_LISTENER = "TRIOLOG"
#: Slack over the session timeout for a dead predecessor's registration to go.
STALE_REGISTRATION_SLACK_S = 2.0


class ClusterJoinError(Exception):
    """The broker cannot join the cluster: one sentence naming why (the server prints it as its
    startup failure)."""


class ClusterMembership:
    def __init__(self, config: BrokerConfig, store: MetadataStore | None = None):
        self.config = config
        self.broker_id = config.node_id
        self.store = store or ZooKeeperStore(
            config.zookeeper_connect,
            session_timeout_ms=config.zookeeper_session_timeout_ms,
            connection_timeout_ms=config.zookeeper_connection_timeout_ms,
        )
        self.zk = KafkaZkClient(self.store)
        rebalance = None
        if config.auto_leader_rebalance_enable:
            rebalance = RebalanceSettings(
                config.leader_imbalance_check_interval_seconds, config.leader_imbalance_per_broker_percentage
            )
        self.controller = KafkaController(
            self.zk, self.broker_id, unclean_election=self._unclean_election, rebalance=rebalance
        )
        self.cluster_id: str | None = None
        self.registration: BrokerRegistration | None = None
        #: Set once the broker is registered (again after each new session).
        self.registered = trio.Event()
        #: The session the registration belongs to (an ephemeral lives as long as its session).
        self._registered_session = 0

    async def connect(self) -> str:
        """Start the session, make Kafka's paths, and return the cluster id."""
        try:
            await self.store.start()
            await self.zk.create_top_level_paths()
            self.cluster_id = await self.zk.get_or_create_cluster_id(random_kafka_uuid())
        except StoreError as exc:
            await self.store.close()
            raise ClusterJoinError(
                f"cannot join the cluster at zookeeper.connect={self.config.zookeeper_connect}: {exc}"
            ) from None
        logger.info("cluster_joined", cluster_id=self.cluster_id, broker_id=self.broker_id)
        return self.cluster_id

    def endpoints(self, triolog: tuple[str, str, int], kafka: tuple[str, str, int]) -> tuple[RegisteredEndpoint, ...]:
        """The registered endpoints: the Kafka listener (named by its protocol) and the msgpack one,
        each as (security protocol, advertised host, port)."""
        kafka_protocol, kafka_host, kafka_port = kafka
        protocol, host, port = triolog
        return (
            RegisteredEndpoint(kafka_protocol, kafka_protocol, kafka_host, kafka_port),
            RegisteredEndpoint(TRIOLOG_LISTENER, protocol, host, port),
        )

    async def register(self, endpoints: Sequence[RegisteredEndpoint]) -> None:
        """Register ``/brokers/ids/<broker.id>``. A registration by a live broker elsewhere is a
        conflict (ClusterJoinError); one with this broker's own endpoints is its previous process's,
        dead since this one holds its ports: it is waited out (its session timeout at most)."""
        self.registration = BrokerRegistration(
            self.broker_id, tuple(endpoints), self.config.broker_rack, int(time.time() * 1000)
        )
        deadline = trio.current_time() + self.config.zookeeper_session_timeout_ms / 1000 + STALE_REGISTRATION_SLACK_S
        while True:
            try:
                await self.zk.register_broker(self.registration)
                break
            except NodeExistsError:
                found = await self.zk.broker(self.broker_id)
                if found is None:
                    continue  # gone meanwhile
                existing, _owner = found
                if existing.endpoints != self.registration.endpoints or trio.current_time() > deadline:
                    where = ", ".join(e.connection_string for e in existing.endpoints)
                    raise ClusterJoinError(
                        f"broker.id {self.broker_id} is already registered in ZooKeeper by a live broker "
                        f"at {where}: give this broker another broker.id, or stop the other one"
                    ) from None
                logger.info("waiting_for_stale_registration", broker_id=self.broker_id)
                _, gone = await self.store.watch(f"/brokers/ids/{self.broker_id}")
                with trio.move_on_at(deadline):
                    await gone.wait()
            except StoreError as exc:
                raise ClusterJoinError(f"cannot register broker.id {self.broker_id} in ZooKeeper: {exc}") from None
        self.registered.set()
        self._registered_session = self.store.session_id
        logger.info(
            "broker_registered",
            broker_id=self.broker_id,
            endpoints=[e.connection_string for e in self.registration.endpoints],
            rack=self.config.broker_rack,
        )

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """The controller, and registering again after each session loss."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.controller.run)
            task_status.started()
            seen = self.store.state_changes
            while True:
                # By the session, not by the states seen: kazoo may pass from connected through
                # suspended and lost to connected in a new session before this task looks.
                seen = await self.store.wait_state_changes(seen)
                if self.store.state is SessionState.CONNECTED and self.store.session_id != self._registered_session:
                    logger.warning("zookeeper_session_expired", broker_id=self.broker_id)
                    self.registered = trio.Event()
                    await self._register_again()

    async def _register_again(self) -> None:
        assert self.registration is not None
        while not self.registered.is_set():
            try:
                await self.zk.register_broker(self.registration)
                self.registered.set()
                self._registered_session = self.store.session_id
                logger.info("broker_registered_again", broker_id=self.broker_id)
            except NodeExistsError:
                # The expired session's node may outlive it by a moment on a lagging ZooKeeper node.
                await trio.sleep(0.2)
            except StoreUnavailableError:
                if self.store.state is not SessionState.CONNECTED:
                    return  # disconnected again: the next change retries
                await trio.sleep(0.2)

    async def _unclean_election(self, topic: str) -> bool:
        overrides = await self.zk.topic_config(topic)
        raw = overrides.get("unclean.leader.election.enable")
        if raw is None:
            return self.config.log_config.unclean_leader_election_enable
        return raw.strip().lower() == "true"

    async def close(self) -> None:
        """End the session: the registration (and /controller, if held) go at once."""
        await self.store.close()
