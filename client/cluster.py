"""What the client knows of the cluster, and where each request goes (sans-IO).

Kafka's clients keep, next to their topic metadata, the cluster's brokers (node id -> address)
and each partition's leader, learnt from every metadata response; a request about partitions
(produce, fetch, list_offsets, delete_records) goes to each partition's leader, anything else
(metadata, admin, the group coordinator lookup) to any live broker. :class:`ClusterView` is that
knowledge and those rules, without I/O: :class:`triolog.client.connection.ClusterConnection` and
its trio twin :class:`triolog.client.aio.AsyncClusterConnection` keep one connection per broker
(opened when first needed) and do what the view says.

* Every metadata response that passes through the connection updates the view (:meth:`learn`),
  whoever asked for it (the producer's topic lookup, the consumer's, admin's describe).
* A partition request whose partitions have different leaders is split, one request per leader,
  and the answers merged into one response (:meth:`route`, :func:`merge`): the operations never
  know. A partition whose leader is unknown goes to any broker, which answers it
  NOT_LEADER_OR_FOLLOWER: the operation's own retry rule applies.
* A partition answered NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, FENCED_LEADER_EPOCH,
  UNKNOWN_LEADER_EPOCH or UNKNOWN_TOPIC_OR_PARTITION, or whose leader's connection broke, makes
  its topic's leaders unknown (:meth:`note_response`, :meth:`note_broken`); the next request about
  it first asks a live broker for the topic's metadata, at most once per ``retry_backoff_s``
  (:meth:`refresh_due`), as Kafka's metadata updater does.
* A request about transactional ids (describe_transactions) or groups (describe_groups,
  delete_groups, offset_fetch and offset_commit from admin tools) goes to each key's
  coordinator, as learnt from the find_coordinator answers that pass through the connection,
  split per coordinator and merged; a key whose coordinator is not known (or answered
  NOT_COORDINATOR) goes to any broker. list_transactions and list_groups ask every broker and
  merge their lists, as Kafka's admin client does. (A consumer's own group requests use their
  own connection to the coordinator.)
* With one broker known (a standalone broker, or a cluster with one live member) every request
  goes to the bootstrap connection: a single broker works exactly as it did before clusters.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode

from .errors import BrokerConnectionError, TriologClientError
from .ops import Op, Sleep, now

T = TypeVar("T")

__all__ = ["ANY", "LEADER_MOVED", "RETRY_ON_LEADER", "ClusterView", "merge", "retry_on_leader_op"]

#: "Any live broker": the bootstrap connection, which fails over between the known addresses.
ANY: None = None

#: Requests answered by each partition's leader.
PARTITIONED = (m.ProduceRequest, m.FetchRequest, m.ListOffsetsRequest, m.DeleteRecordsRequest)

#: Requests a partition leader answers that are not data requests: kafka-transactions.sh's
#: (describe_producers; write_txn_markers, whose every partition must have one leader).
LEADER_ADMIN = (m.DescribeProducersRequest, m.WriteTxnMarkersRequest)


def _topic_partitions(request: m.Request) -> list[tuple[str, int]]:
    """The partitions a leader-answered request is about."""
    kind = type(request)
    if kind is m.DescribeProducersRequest:
        return [(t.name, p) for t in cast(Any, request).topics for p in t.partitions]
    if kind is m.WriteTxnMarkersRequest:
        return [(t.name, p) for marker in cast(Any, request).markers for t in marker.topics for p in t.partitions]
    return [(t.name, p.partition) for t in cast(Any, request).topics for p in t.partitions]


#: Requests about several coordinator keys, split per coordinator: (key type, field of keys).
_SPLIT_BY_KEY: dict[type, tuple[int, str]] = {
    m.DescribeTransactionsRequest: (1, "transactional_ids"),
    m.DescribeGroupsRequest: (0, "groups"),
    m.DeleteGroupsRequest: (0, "groups_names"),
}
#: Their answers' entries: (key type, list of entries, the entry's key field).
_KEYED: dict[type, tuple[int, str, str]] = {
    m.DescribeTransactionsRequest: (1, "transactions", "transactional_id"),
    m.DescribeGroupsRequest: (0, "groups", "group_id"),
    m.DeleteGroupsRequest: (0, "results", "group_id"),
}

#: Coordinator answers after which the client's idea of the coordinator is wrong.
STALE_COORDINATOR = frozenset((ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE))

#: Partition errors after which the client's idea of the leader is wrong (Kafka's clients
#: request a metadata update on each).
STALE_LEADER = frozenset(
    (
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    )
)


#: Partition errors of a fetch a consumer does not report: the leader moved or is being elected;
#: the connection looks it up again and the next fetch goes there (Kafka's Fetcher).
LEADER_MOVED = frozenset(
    (
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
    )
)

#: Partition errors after which a read or delete_records is asked again, after retry_backoff,
#: while its timeout allows: nothing was done, and asking the (new) leader again is safe.
RETRY_ON_LEADER = LEADER_MOVED | {ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT}


def retry_on_leader_op(make_op: Callable[[], Op[T]], timeout_s: float, backoff_s: float) -> Op[T]:
    """``make_op()`` run again after ``backoff_s`` while it raises a leader error
    (:data:`RETRY_ON_LEADER`) or a connection error, until ``timeout_s`` has passed; then the
    last error. For requests that change nothing, or that give the same result when repeated
    (list_offsets, delete_records to an offset)."""
    deadline = now() + timeout_s
    while True:
        try:
            return (yield from make_op())
        except TriologClientError as exc:
            if not (isinstance(exc, BrokerConnectionError) or exc.code in RETRY_ON_LEADER):
                raise
            if now() + backoff_s >= deadline:
                raise
        yield Sleep(backoff_s)


class ClusterView:
    """Brokers and partition leaders, learnt from metadata responses; thread-safe."""

    def __init__(self, retry_backoff_s: float = 0.1) -> None:
        self.retry_backoff_s = retry_backoff_s
        #: node id -> (host, port), every live broker the last metadata response listed.
        self.brokers: dict[int, tuple[str, int]] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        #: (key_type, key) -> the node coordinating it (find_coordinator's answers).
        self._coordinators: dict[tuple[int, str], int] = {}
        #: Topics whose leaders are to be asked again before their next request.
        self._stale: set[str] = set()
        self._last_refresh = float("-inf")
        self._lock = threading.Lock()

    # -- learning --------------------------------------------------------------------------------

    def learn(self, doc: dict) -> None:
        """Take in a metadata response (its brokers and every described topic's leaders)."""
        if doc.get("error_code"):
            return
        with self._lock:
            brokers = {b["node_id"]: (b["host"], b["port"]) for b in doc.get("brokers", ())}
            if brokers:  # the response lists every live broker
                self.brokers = brokers
            for topic in doc.get("topics", ()):
                if topic["error_code"]:
                    continue
                name = topic["name"]
                electing = False
                for part in topic["partitions"]:
                    if part["leader"] >= 0:
                        self._leaders[(name, part["partition"])] = part["leader"]
                    else:  # no leader now (being elected): asked again before its next request
                        self._leaders.pop((name, part["partition"]), None)
                        electing = True
                if electing:
                    self._stale.add(name)
                else:
                    self._stale.discard(name)

    def note_response(self, request: m.Request, doc: dict | None) -> None:
        """A partition request's answer: forget the leaders its partition errors prove wrong. A
        find_coordinator answer: remember the coordinator; a transactional id's NOT_COORDINATOR:
        forget it."""
        if doc is None:
            return
        if type(request) is m.FindCoordinatorRequest:
            with self._lock:
                key = (request.key_type, request.key)
                if doc.get("error_code") or doc.get("node_id", -1) < 0:
                    self._coordinators.pop(key, None)
                else:  # (its address comes from metadata, as every broker's)
                    self._coordinators[key] = doc["node_id"]
            return
        kind = type(request)
        if kind in _KEYED:
            key_type, entries, key_field = _KEYED[kind]
            with self._lock:
                for entry in doc.get(entries, ()):
                    if entry.get("error_code") in STALE_COORDINATOR:
                        self._coordinators.pop((key_type, entry[key_field]), None)
            return
        if kind is m.OffsetFetchRequest or kind is m.OffsetCommitRequest:
            codes = {doc.get("error_code")} | {p["error_code"] for t in doc.get("topics", ()) for p in t["partitions"]}
            if codes & STALE_COORDINATOR:
                with self._lock:
                    self._coordinators.pop((0, cast(Any, request).group_id), None)
            return
        if type(request) not in PARTITIONED and type(request) is not m.DescribeProducersRequest:
            return
        for topic in doc.get("topics", ()):
            for part in topic["partitions"]:
                if part["error_code"] in STALE_LEADER:
                    with self._lock:
                        self._leaders.pop((topic["name"], part["partition"]), None)
                        self._stale.add(topic["name"])

    def note_broken(self, node: int | None) -> None:
        """The connection to ``node`` failed: the partitions it led are to be looked up again."""
        if node is None:
            return
        with self._lock:
            for key in [key for key, leader in self._leaders.items() if leader == node]:
                del self._leaders[key]
                self._stale.add(key[0])

    def invalidate(self, topic: str) -> None:
        with self._lock:
            for key in [key for key in self._leaders if key[0] == topic]:
                del self._leaders[key]
            self._stale.add(topic)

    # -- deciding --------------------------------------------------------------------------------

    @property
    def clustered(self) -> bool:
        """More than one broker known: requests are routed by leader."""
        return len(self.brokers) > 1

    def leader(self, topic: str, partition: int) -> int | None:
        """The node to send a request about the partition to; None (any broker) if unknown."""
        if len(self.brokers) <= 1:
            return ANY
        node = self._leaders.get((topic, partition))
        return node if node is not None and node in self.brokers else ANY

    def address(self, node: int) -> tuple[str, int] | None:
        return self.brokers.get(node)

    def refresh_due(self, request: m.Request, now: float) -> list[str] | None:
        """The topics of ``request`` to ask the metadata of before routing it (stale or never
        seen), or None: nothing to ask, or asked less than ``retry_backoff_s`` ago."""
        if (type(request) not in PARTITIONED and type(request) not in LEADER_ADMIN) or len(self.brokers) == 1:
            return None  # (none known yet: the first lookup tells whether this is a cluster)
        with self._lock:
            by_topic: dict[str, list[tuple[str, int]]] = {}
            for tp in _topic_partitions(request):
                by_topic.setdefault(tp[0], []).append(tp)
            names = [
                name
                for name, tps in by_topic.items()
                if name in self._stale or not any(tp in self._leaders for tp in tps)
            ]
            if not names or now - self._last_refresh < self.retry_backoff_s:
                return None
            self._last_refresh = now
            return names

    def coordinator(self, key_type: int, key: str) -> int | None:
        """The node coordinating ``key`` (as find_coordinator answered); None (any) if unknown."""
        if len(self.brokers) <= 1:
            return ANY
        node = self._coordinators.get((key_type, key))
        return node if node is not None and node in self.brokers else ANY

    def route(self, request: m.Request) -> list[tuple[int | None, m.Request]]:
        """(node, request) pairs to send: the request whole when it has one destination, else one
        request per leader (or coordinator) with that node's part."""
        if len(self.brokers) > 1:
            kind = type(request)
            if kind in _SPLIT_BY_KEY:
                key_type, field_name = _SPLIT_BY_KEY[kind]
                by_node: dict[int | None, list[str]] = {}
                for key in getattr(request, field_name):
                    by_node.setdefault(self.coordinator(key_type, key), []).append(key)
                return [
                    (node, dataclasses.replace(cast(Any, request), **{field_name: tuple(keys)}))
                    for node, keys in by_node.items()
                ]
            if kind is m.OffsetFetchRequest or kind is m.OffsetCommitRequest:
                return [(self.coordinator(0, cast(Any, request).group_id), request)]
            if kind is m.ListTransactionsRequest or kind is m.ListGroupsRequest:  # every broker has some
                return [(node, request) for node in sorted(self.brokers)]
            if type(request) is m.WriteTxnMarkersRequest:
                leaders = {self.leader(*tp) for tp in _topic_partitions(request)}
                return [(leaders.pop() if len(leaders) == 1 else ANY, request)]
            if type(request) is m.DescribeProducersRequest:
                parts: dict[int | None, dict[str, list[int]]] = {}
                for topic, partition in _topic_partitions(request):
                    parts.setdefault(self.leader(topic, partition), {}).setdefault(topic, []).append(partition)
                return [
                    (
                        node,
                        dataclasses.replace(
                            request,
                            topics=tuple(m.TxnTopic(name=t, partitions=tuple(ps)) for t, ps in named.items()),
                        ),
                    )
                    for node, named in parts.items()
                ]
        if type(request) not in PARTITIONED or len(self.brokers) <= 1:
            return [(ANY, request)]
        groups: dict[int | None, dict[str, list]] = {}
        topics = cast(Any, request).topics
        for topic in topics:
            for part in topic.partitions:
                node = self.leader(topic.name, part.partition)
                groups.setdefault(node, {}).setdefault(topic.name, []).append(part)
        if len(groups) <= 1:
            return [(next(iter(groups), ANY), request)]
        by_name = {topic.name: topic for topic in topics}
        return [
            (
                node,
                dataclasses.replace(
                    cast(Any, request),
                    topics=tuple(
                        dataclasses.replace(by_name[name], partitions=tuple(parts)) for name, parts in named.items()
                    ),
                ),
            )
            for node, named in groups.items()
        ]


def merge(docs: list[dict]) -> dict:
    """One response from the answers to the parts of a split partition request."""
    if len(docs) == 1:
        return docs[0]
    out = dict(docs[0])
    topics: dict[str, dict] = {}
    for doc in docs:
        if doc.get("error_code") and not out.get("error_code"):
            out["error_code"], out["error_message"] = doc["error_code"], doc.get("error_message")
        if doc.get("throttle_ms"):
            out["throttle_ms"] = max(out.get("throttle_ms") or 0, doc["throttle_ms"])
        for topic in doc.get("topics", ()):
            entry = topics.get(topic["name"])
            if entry is None:
                topics[topic["name"]] = {**topic, "partitions": list(topic["partitions"])}
            else:
                entry["partitions"].extend(topic["partitions"])
    for entries in ("transactions", "groups", "results"):  # coordinator requests, split per node
        if entries in out:
            out[entries] = [entry for doc in docs for entry in doc.get(entries, ())]
            if "unknown_state_filters" in out:
                out["unknown_state_filters"] = sorted({f for doc in docs for f in doc.get("unknown_state_filters", ())})
            return out
    out["topics"] = list(topics.values())
    return out
