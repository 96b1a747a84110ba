"""Cached topic metadata, refreshed when it is older than ``max_age_s`` or after an error.

The operations need partition counts (and offsets, for describe) from it. Where each request
goes (a partition's leader, or any broker) is not decided here: every metadata response these
operations get also passes through the client's connection, whose
:class:`triolog.client.cluster.ClusterView` learns the brokers and leaders from it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode

from .errors import BrokerConnectionError, error_for
from .ops import Call, Op, Sleep, check_response, now
from .types import PartitionInfo, TopicDescription

__all__ = ["MetadataCache"]


@dataclass(frozen=True, slots=True)
class _Entry:
    description: TopicDescription
    fetched_at: float


def describe(topic: dict) -> TopicDescription:
    return TopicDescription(
        name=topic["name"],
        internal=topic["internal"],
        partitions=tuple(
            PartitionInfo(
                p["partition"],
                p["leader"],
                p["log_start_offset"],
                p["high_watermark"],
                # (fields a broker older than the cluster's does not send)
                tuple(p.get("replicas", ())),
                tuple(p.get("isr", ())),
                tuple(p.get("offline_replicas", ())),
                p.get("leader_epoch", -1),
            )
            for p in sorted(topic["partitions"], key=lambda p: p["partition"])
        ),
    )


class MetadataCache:
    """Partition counts per topic; the ops here are shared by producer, consumer and admin."""

    def __init__(
        self,
        *,
        max_age_s: float = 300.0,
        request_timeout_s: float = 30.0,
        retry_backoff_s: float = 0.1,
        allow_auto_create: bool = False,
    ) -> None:
        #: Sent as the request's allow_auto_topic_creation: the producer's cache sets it, a
        #: consumer's only when asked (Kafka's rule); the broker must allow it too.
        self.allow_auto_create = allow_auto_create
        self.max_age_s = max_age_s
        self.request_timeout_s = request_timeout_s
        self.retry_backoff_s = retry_backoff_s
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()  # the sync producer's user and sender threads share it

    def get(self, topic: str) -> TopicDescription | None:
        with self._lock:
            entry = self._entries.get(topic)
        if entry is None or now() - entry.fetched_at > self.max_age_s:
            return None
        return entry.description

    def invalidate(self, topic: str) -> None:
        with self._lock:
            self._entries.pop(topic, None)

    def fetch_op(self, topics: list[str] | None) -> Op[dict[str, dict]]:
        """One metadata request; caches every good topic and returns topic name -> raw entry.

        Missing names are created by this request only if ``allow_auto_create`` and the broker's
        ``auto.create.topics.enable`` are both on; ``topics=None`` (all topics) never creates anything.
        """
        doc = yield Call(
            m.MetadataRequest(
                id=0, topics=None if topics is None else tuple(topics), allow_auto_topic_creation=self.allow_auto_create
            ),
            self.request_timeout_s,
        )
        check_response(doc)
        fetched = now()
        out = {}
        with self._lock:
            for topic in doc["topics"]:
                out[topic["name"]] = topic
                if topic["error_code"] == ErrorCode.NONE:
                    self._entries[topic["name"]] = _Entry(describe(topic), fetched)
                else:
                    self._entries.pop(topic["name"], None)
        return out

    def topic_op(self, topic: str, max_block_s: float) -> Op[TopicDescription]:
        """The topic's description, from the cache or the broker.

        A topic the broker does not know (auto-creation disabled or not asked for, or not done
        yet) is asked for again every ``retry_backoff_s`` until ``max_block_s`` has passed, as
        Kafka's producer waits for metadata; then UnknownTopicOrPartitionError. So is a broker that cannot be
        reached (a metadata request changes nothing, so repeating it is always safe); then the
        connection error. Other errors raise at once.
        """
        cached = self.get(topic)
        if cached is not None:
            return cached
        deadline = now() + max_block_s
        while True:
            try:
                entry = (yield from self.fetch_op([topic])).get(topic)
            except BrokerConnectionError:
                if now() + self.retry_backoff_s > deadline:
                    raise
                yield Sleep(self.retry_backoff_s)
                continue
            message: str | None
            if entry is None:
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} is not in the metadata response"
            elif entry["error_code"] == ErrorCode.NONE:
                return describe(entry)
            else:
                code, message = entry["error_code"], entry.get("error_message")
            if code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise error_for(code, message, topic=topic)
            if now() + self.retry_backoff_s > deadline:
                raise error_for(code, f"{message} (still unknown after {max_block_s:.3g} s)", topic=topic)
            yield Sleep(self.retry_backoff_s)

    def all_topics_op(self) -> Op[dict[str, TopicDescription]]:
        """Every topic (this request never auto-creates one)."""
        raw = yield from self.fetch_op(None)
        out = {}
        for name, entry in raw.items():
            if entry["error_code"]:
                raise error_for(entry["error_code"], entry.get("error_message"), topic=name)
            out[name] = describe(entry)
        return out
