"""Kafka's ZooKeeper layout (its ZkData.scala): the znode paths and the JSON each holds.

Pure values and codecs, no I/O: the metadata store reads and writes the bytes, the controller
and the brokers decide with the values. The JSON is Kafka's own (Kafka 3.x in ZooKeeper mode), so
`zookeeper-shell.sh` and Kafka's tools read a triolog cluster's metadata as they read Kafka's.
Every path is relative to the chroot of ``zookeeper.connect``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CLUSTER_ID = "/cluster/id"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CONFIG = "/config"
#: A child per topic to delete (Kafka's DeleteTopicsTopicZNode): the controller deletes it.
DELETE_TOPICS = "/admin/delete_topics"
#: triolog's own path (Kafka's brokers asked the controller with a ControlledShutdown RPC instead):
#: an ephemeral ``<broker id>`` child while that broker is shutting down; see controller.py.
CONTROLLED_SHUTDOWN = "/admin/controlled_shutdown"

#: The persistent parents Kafka creates at startup (KafkaZkClient.createTopLevelPaths).
PERSISTENT_PATHS = (
    DELETE_TOPICS,
    CONTROLLED_SHUTDOWN,
    "/brokers/ids",
    "/brokers/topics",
    "/brokers/seqid",
    "/config/changes",
    "/config/topics",
    "/config/clients",
    "/config/users",
    "/config/brokers",
    "/config/ips",
    "/cluster",
    "/isr_change_notification",
    "/latest_producer_id_block",
)

#: The initial controller epoch (KafkaController.InitialControllerEpoch): the first controller
#: writes 1 (Kafka's ZkVersion for "no node" is handled by the store).
INITIAL_CONTROLLER_EPOCH = 0


class ZkDataError(ValueError):
    """A znode's bytes are not the JSON Kafka writes there."""


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def controlled_shutdown_path(broker_id: int) -> str:
    return f"{CONTROLLED_SHUTDOWN}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG}/topics/{topic}"


def _json(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=False).encode()


def json_object(raw: bytes | None, what: str) -> dict[str, Any]:
    """A znode's data as a JSON object, or ZkDataError naming the znode."""
    if raw is None:
        raise ZkDataError(f"{what}: the znode holds no data")
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ZkDataError(f"{what}: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ZkDataError(f"{what}: not a JSON object")
    return value


def _int(obj: Mapping[str, Any], key: str, what: str) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ZkDataError(f"{what}: {key!r} is not an integer")
    return value


def _int_list(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
        raise ZkDataError(f"{what}: not a list of broker ids")
    return tuple(value)


# -- the controller ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ControllerRegistration:
    """``/controller``: which broker is the controller (ephemeral, its session's)."""

    broker_id: int
    timestamp_ms: int = 0

    def encode(self) -> bytes:
        return _json(
            {"version": 2, "brokerid": self.broker_id, "timestamp": str(self.timestamp_ms), "kraftControllerEpoch": -1}
        )

    @classmethod
    def decode(cls, raw: bytes | None) -> ControllerRegistration:
        obj = json_object(raw, CONTROLLER)
        timestamp = obj.get("timestamp", "0")
        try:
            timestamp_ms = int(timestamp)
        except (TypeError, ValueError):
            timestamp_ms = 0
        return cls(_int(obj, "brokerid", CONTROLLER), timestamp_ms)


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(raw: bytes | None) -> int:
    try:
        return int((raw or b"").decode())
    except (UnicodeDecodeError, ValueError):
        raise ZkDataError(f"{CONTROLLER_EPOCH}: {raw!r} is not an integer") from None


# -- brokers -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RegisteredEndpoint:
    """One advertised listener: its name (Kafka's listener name), security protocol and address."""

    listener: str
    security_protocol: str
    host: str
    port: int

    @property
    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


@dataclass(frozen=True)
class BrokerRegistration:
    """``/brokers/ids/<id>``: a live broker (ephemeral), Kafka's version 5 JSON."""

    broker_id: int
    endpoints: tuple[RegisteredEndpoint, ...]
    rack: str | None = None
    timestamp_ms: int = 0
    #: Kafka's broker epoch: the registration znode's creation stamp (its czxid), not in its JSON.
    #: A broker registered again (restarted, or its session lost) has a higher one.
    epoch: int = 0

    def endpoint(self, listener: str) -> RegisteredEndpoint | None:
        return next((e for e in self.endpoints if e.listener == listener), None)

    def encode(self) -> bytes:
        # Kafka's top-level host and port: the first PLAINTEXT endpoint's, for pre-0.10 clients.
        plaintext = next((e for e in self.endpoints if e.security_protocol == "PLAINTEXT"), None)
        obj: dict[str, Any] = {
            "features": {},
            "listener_security_protocol_map": {e.listener: e.security_protocol for e in self.endpoints},
            "endpoints": [e.connection_string for e in self.endpoints],
            "jmx_port": -1,
            "port": plaintext.port if plaintext else -1,
            "host": plaintext.host if plaintext else None,
            "version": 5,
            "timestamp": str(self.timestamp_ms),
        }
        if self.rack is not None:
            obj["rack"] = self.rack
        return _json(obj)

    @classmethod
    def decode(cls, broker_id: int, raw: bytes | None) -> BrokerRegistration:
        what = broker_path(broker_id)
        obj = json_object(raw, what)
        protocols = obj.get("listener_security_protocol_map") or {}
        endpoints = obj.get("endpoints")
        if not isinstance(protocols, dict) or not isinstance(endpoints, list):
            raise ZkDataError(f"{what}: no endpoints")
        parsed = []
        for text in endpoints:
            listener, sep, address = str(text).partition("://")
            host, colon, port = address.rpartition(":")
            if not sep or not colon or not port.isdigit():
                raise ZkDataError(f"{what}: endpoint {text!r} is not LISTENER://host:port")
            host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
            parsed.append(RegisteredEndpoint(listener, str(protocols.get(listener, listener)), host, int(port)))
        rack = obj.get("rack")
        try:
            timestamp_ms = int(obj.get("timestamp", "0"))
        except (TypeError, ValueError):
            timestamp_ms = 0
        return cls(broker_id, tuple(parsed), rack if isinstance(rack, str) else None, timestamp_ms)


# -- topics and partitions -----------------------------------------------------------------------


@dataclass(frozen=True)
class TopicAssignment:
    """``/brokers/topics/<topic>``: the replicas of each partition, preferred leader first."""

    partitions: Mapping[int, tuple[int, ...]]
    topic_id: str | None = None
    adding_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "version": 3,
            "partitions": {str(p): list(r) for p, r in sorted(self.partitions.items())},
            "adding_replicas": {str(p): list(r) for p, r in sorted(self.adding_replicas.items())},
            "removing_replicas": {str(p): list(r) for p, r in sorted(self.removing_replicas.items())},
        }
        if self.topic_id is not None:
            obj["topic_id"] = self.topic_id
        return _json(obj)

    @classmethod
    def decode(cls, topic: str, raw: bytes | None) -> TopicAssignment:
        what = topic_path(topic)
        obj = json_object(raw, what)

        def replicas(key: str) -> dict[int, tuple[int, ...]]:
            value = obj.get(key) or {}
            if not isinstance(value, dict):
                raise ZkDataError(f"{what}: {key!r} is not an object")
            out = {}
            for partition, brokers in value.items():
                if not str(partition).isdigit():
                    raise ZkDataError(f"{what}: partition {partition!r} is not a number")
                out[int(partition)] = _int_list(brokers, f"{what} partition {partition}")
            return out

        topic_id = obj.get("topic_id")
        return cls(
            replicas("partitions"),
            topic_id if isinstance(topic_id, str) else None,
            replicas("adding_replicas"),
            replicas("removing_replicas"),
        )


#: leader_recovery_state: RECOVERED (absent from the JSON) or RECOVERING (after an unclean election).
RECOVERED = 0
RECOVERING = 1
#: ``leader`` when no replica may lead (an offline partition).
NO_LEADER = -1


@dataclass(frozen=True)
class PartitionState:
    """``.../partitions/<p>/state``: Kafka's LeaderIsrAndControllerEpoch.

    The znode's version is the partition epoch: every ISR change is a write conditional on it.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    leader_recovery_state: int = RECOVERED

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "version": 1,
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "controller_epoch": self.controller_epoch,
            "isr": list(self.isr),
        }
        if self.leader_recovery_state != RECOVERED:
            obj["leader_recovery_state"] = self.leader_recovery_state
        return _json(obj)

    @classmethod
    def decode(cls, raw: bytes | None, what: str = "partition state") -> PartitionState:
        obj = json_object(raw, what)
        recovery = obj.get("leader_recovery_state", RECOVERED)
        if recovery not in (RECOVERED, RECOVERING):
            raise ZkDataError(f"{what}: leader_recovery_state {recovery!r} is not 0 or 1")
        return cls(
            _int(obj, "leader", what),
            _int(obj, "leader_epoch", what),
            _int_list(obj.get("isr"), what),
            _int(obj, "controller_epoch", what),
            recovery,
        )


def encode_topic_config(config: Mapping[str, str]) -> bytes:
    """``/config/topics/<topic>``: the topic's overrides (strings, as Kafka keeps them)."""
    return _json({"version": 1, "config": dict(config)})


def decode_topic_config(raw: bytes | None, topic: str) -> dict[str, str]:
    what = topic_config_path(topic)
    config = json_object(raw, what).get("config", {})
    if not isinstance(config, dict) or not all(isinstance(v, str) for v in config.values()):
        raise ZkDataError(f"{what}: 'config' is not an object of strings")
    return {str(k): v for k, v in config.items()}


# -- cluster-wide values -------------------------------------------------------------------------


def encode_cluster_id(cluster_id: str) -> bytes:
    return _json({"version": "1", "id": cluster_id})


def decode_cluster_id(raw: bytes | None) -> str:
    obj = json_object(raw, CLUSTER_ID)
    value = obj.get("id")
    if not isinstance(value, str) or not value:
        raise ZkDataError(f"{CLUSTER_ID}: no id")
    return value


@dataclass(frozen=True)
class ProducerIdBlock:
    """``/latest_producer_id_block``: the last block of producer ids handed to a broker."""

    broker_id: int
    first: int
    last: int

    def encode(self) -> bytes:
        return _json(
            {"version": 1, "broker": self.broker_id, "block_start": str(self.first), "block_end": str(self.last)}
        )

    @classmethod
    def decode(cls, raw: bytes | None) -> ProducerIdBlock:
        obj = json_object(raw, LATEST_PRODUCER_ID_BLOCK)
        try:
            return cls(_int(obj, "broker", LATEST_PRODUCER_ID_BLOCK), int(obj["block_start"]), int(obj["block_end"]))
        except (KeyError, TypeError, ValueError):
            raise ZkDataError(f"{LATEST_PRODUCER_ID_BLOCK}: no block_start/block_end") from None


def ids_from_children(children: Sequence[str]) -> list[int]:
    """The broker ids under ``/brokers/ids`` (ignoring anything that is not one), ascending."""
    return sorted(int(c) for c in children if c.isdigit())
