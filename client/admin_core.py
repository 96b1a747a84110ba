"""Admin operations (topics, configs, records, offsets), shared by both admin clients.

Each takes many topics at once, as the wire APIs do; a per-topic or per-partition error raises
the first failing entry's typed exception after the whole response is read (the other entries
were still applied by the broker, as in Kafka).

Admin requests are not retried: creating or deleting twice is not harmless, so a connection error
reaches the caller (RequestNotSentError: nothing happened; ResponseLostError: it may have).
"""

from __future__ import annotations

from triolog.protocol import messages as m

from .consumer_core import list_offsets_op
from .errors import TriologClientError, UnknownTopicOrPartitionError, error_for
from .metadata import MetadataCache, describe
from .ops import Call, Op, check_response
from .types import (
    ConfigEntry,
    LogDirDescription,
    LogDirPartitionInfo,
    NewTopic,
    OffsetAndTimestamp,
    TopicDescription,
    TopicPartition,
)

__all__ = ["AdminCore"]


def _raise_first(errors: list[TriologClientError]) -> None:
    if errors:
        raise errors[0]


class AdminCore:
    def __init__(self, request_timeout_ms: int = 30_000) -> None:
        self.timeout_s = request_timeout_ms / 1000
        # allow_auto_create=False: an admin's metadata requests never create a topic.
        self.metadata = MetadataCache(max_age_s=0, request_timeout_s=self.timeout_s, allow_auto_create=False)

    def create_topics_op(self, topics, validate_only: bool = False) -> Op[dict[str, dict[str, str]]]:
        """Create ``NewTopic``s (or names); returns name -> the topic's effective configs."""
        new = [NewTopic(t) if isinstance(t, str) else NewTopic(*t) for t in topics]
        request = m.CreateTopicsRequest(id=0, validate_only=validate_only, topics=tuple(
            m.NewTopic(name=t.name, num_partitions=t.num_partitions, replication_factor=t.replication_factor,
                       configs={str(k): str(v) for k, v in dict(t.configs or {}).items()}) for t in new))
        doc = check_response((yield Call(request, self.timeout_s)))
        errors, out = [], {}
        for topic in doc["topics"]:
            if topic["error_code"]:
                errors.append(error_for(topic["error_code"], topic.get("error_message"), topic=topic["name"]))
            else:
                out[topic["name"]] = topic["configs"]
        _raise_first(errors)
        return out

    def delete_topics_op(self, names) -> Op[None]:
        doc = check_response((yield Call(m.DeleteTopicsRequest(id=0, topics=tuple(names)), self.timeout_s)))
        _raise_first([error_for(t["error_code"], t.get("error_message"), topic=t["name"])
                      for t in doc["topics"] if t["error_code"]])

    def list_topics_op(self) -> Op[list[str]]:
        return sorted((yield from self.metadata.all_topics_op()))

    def describe_topics_op(self, names=None) -> Op[dict[str, TopicDescription]]:
        """Every topic, or the topics named: one metadata request for just those, sent with
        allow_auto_topic_creation false (this cache's setting, as Kafka's admin client does), so
        describing never creates a topic; an absent or invalid name raises its error."""
        if names is None:
            return (yield from self.metadata.all_topics_op())
        names = list(dict.fromkeys(names))
        raw = yield from self.metadata.fetch_op(names)
        out = {}
        for name in names:
            entry = raw.get(name)
            if entry is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} is not in the metadata response", topic=name)
            if entry["error_code"]:
                raise error_for(entry["error_code"], entry.get("error_message"), topic=name)
            out[name] = describe(entry)
        return out

    def describe_configs_op(self, names) -> Op[dict[str, dict[str, ConfigEntry]]]:
        doc = check_response((yield Call(m.DescribeConfigsRequest(id=0, topics=tuple(names)), self.timeout_s)))
        errors, out = [], {}
        for topic in doc["topics"]:
            if topic["error_code"]:
                errors.append(error_for(topic["error_code"], topic.get("error_message"), topic=topic["name"]))
            else:
                out[topic["name"]] = {k: ConfigEntry(v["value"], v["source"]) for k, v in topic["configs"].items()}
        _raise_first(errors)
        return out

    def alter_configs_op(self, configs: dict[str, dict[str, str]], delete: dict[str, list[str]] | None = None) -> Op[None]:
        """Set ``configs[topic]`` and remove the overrides named in ``delete[topic]``."""
        delete = delete or {}
        names = list(dict.fromkeys([*configs, *delete]))
        request = m.AlterConfigsRequest(id=0, topics=tuple(
            m.AlterConfigsTopic(name=name, configs={str(k): str(v) for k, v in configs.get(name, {}).items()},
                                delete=tuple(delete.get(name, ()))) for name in names))
        doc = check_response((yield Call(request, self.timeout_s)))
        _raise_first([error_for(t["error_code"], t.get("error_message"), topic=t["name"])
                      for t in doc["topics"] if t["error_code"]])

    def delete_records_op(self, offsets: dict,
                          raise_errors: bool = True) -> Op[dict[TopicPartition, int | TriologClientError]]:
        """Move each partition's log start to the offset (-1: the high watermark); returns the
        new low watermarks. The broker applies each partition on its own: with ``raise_errors``
        false, a failed partition maps to its error instead of raising the first one, so a caller
        can report every partition (as Kafka's per-partition results do)."""
        by_topic: dict[str, list[m.DeleteRecordsPartition]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(m.DeleteRecordsPartition(partition=partition, offset=offset))
        request = m.DeleteRecordsRequest(id=0, topics=tuple(
            m.DeleteRecordsTopic(name=name, partitions=tuple(parts)) for name, parts in by_topic.items()))
        doc = check_response((yield Call(request, self.timeout_s)))
        errors, out = [], {}
        for topic in doc["topics"]:
            for part in topic["partitions"]:
                tp = TopicPartition(topic["name"], part["partition"])
                if part["error_code"]:
                    out[tp] = error_for(part["error_code"], part.get("error_message"), topic=tp.topic,
                                        partition=tp.partition)
                    errors.append(out[tp])
                else:
                    out[tp] = part["low_watermark"]
        if raise_errors:
            _raise_first(errors)
        return out

    def describe_log_dirs_op(self, topics=None) -> Op[dict[str, LogDirDescription]]:
        """Path -> what that log dir holds. ``topics``: None (every partition), topic names, or a
        mapping name -> partitions (None: all of them). A requested topic or partition in no log
        dir raises its error (UnknownTopicOrPartitionError...) after the whole response is read."""
        if topics is None:
            wanted = None
        else:
            items = topics.items() if isinstance(topics, dict) else ((name, None) for name in topics)
            wanted = tuple(m.DescribeLogDirsTopic(name=name, partitions=None if parts is None else tuple(parts))
                           for name, parts in items)
        doc = check_response((yield Call(m.DescribeLogDirsRequest(id=0, topics=wanted), self.timeout_s)))
        out = {}
        for log_dir in doc["log_dirs"]:
            partitions = {
                TopicPartition(topic["name"], p["partition"]): LogDirPartitionInfo(
                    p["size_bytes"], p["segments"], p["log_start_offset"], p["log_end_offset"])
                for topic in log_dir["topics"] for p in topic["partitions"]
            }
            error = (log_dir.get("error_message") or "error") if log_dir["error_code"] else None
            out[log_dir["path"]] = LogDirDescription(log_dir["path"], error, log_dir["total_bytes"],
                                                     log_dir["usable_bytes"], partitions)
        errors = []
        for topic in doc["errors"]:
            if topic["error_code"]:
                errors.append(error_for(topic["error_code"], topic.get("error_message"), topic=topic["name"]))
            errors.extend(error_for(p["error_code"], p.get("error_message"), topic=topic["name"],
                                    partition=p["partition"]) for p in topic["partitions"])
        _raise_first(errors)
        return out

    def list_offsets_op(self, queries: dict) -> Op[dict[TopicPartition, OffsetAndTimestamp]]:
        """``{(topic, partition): -1 | -2 | -3 | time_ms}`` -> (offset, timestamp); -1/-1 = none."""
        return (yield from list_offsets_op({TopicPartition(*tp): ts for tp, ts in queries.items()}, self.timeout_s))

    def api_versions_op(self) -> Op[dict]:
        return check_response((yield Call(m.ApiVersionsRequest(id=0), self.timeout_s)))
