"""Admin operations (topics, configs, records, offsets), shared by both admin clients.

Each takes many topics at once, as the wire APIs do; a per-topic or per-partition error raises
the first failing entry's typed exception after the whole response is read (the other entries
were still applied by the broker, as in Kafka).

Admin requests are not retried: creating or deleting twice is not harmless, so a connection error
reaches the caller (RequestNotSentError: nothing happened; ResponseLostError: it may have).
"""

from __future__ import annotations

from typing import NamedTuple

from triolog.protocol import messages as m
from triolog.protocol.consumer_protocol import PROTOCOL_TYPE, ConsumerProtocolError, decode_assignment
from triolog.protocol.errors import ErrorCode

from .consumer_core import list_offsets_op
from .errors import TriologClientError, UnknownTopicOrPartitionError, error_for
from .metadata import MetadataCache, describe
from .ops import Call, Op, Sleep, check_response, now
from .types import (
    ConfigEntry,
    LogDirDescription,
    LogDirPartitionInfo,
    NewTopic,
    OffsetAndTimestamp,
    TopicDescription,
    TopicPartition,
)

__all__ = ["AdminCore", "BrokerConfigEntry", "ConsumerGroupDescription", "ConsumerGroupListing", "MemberDescription"]


class BrokerConfigEntry(NamedTuple):
    """One broker config key as DescribeConfigs shows a BROKER resource."""

    #: None for a key left unset that falls back to another (log.retention.ms to .hours).
    value: str | None
    #: "broker" (set in the broker's configuration) or "default".
    source: str
    read_only: bool
    is_sensitive: bool


class ConsumerGroupListing(NamedTuple):
    """A group as list_groups shows it (Kafka's ConsumerGroupListing)."""

    group_id: str
    protocol_type: str
    state: str


class MemberDescription(NamedTuple):
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    #: The member's partitions (decoded from its ConsumerProtocol Assignment; empty unless the
    #: group is Stable, or for a group that is not a consumer group).
    assignment: frozenset


class ConsumerGroupDescription(NamedTuple):
    """Kafka's ConsumerGroupDescription. ``state``: Empty, PreparingRebalance,
    CompletingRebalance, Stable, or Dead (no such group)."""

    group_id: str
    state: str
    protocol_type: str
    #: The assignor the group chose ("range", "roundrobin"), when Stable.
    partition_assignor: str
    members: tuple[MemberDescription, ...]


#: Group-level errors that pass: the coordinator is loading or moving (retried within the timeout).
_COORDINATOR_BUSY = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               ErrorCode.NOT_COORDINATOR})


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

    def describe_broker_configs_op(self, broker: str | int = "") -> Op[dict[str, BrokerConfigEntry]]:
        """Every broker config key of ``broker`` (its node id; "" = the broker answering)."""
        name = str(broker)
        doc = check_response((yield Call(m.DescribeConfigsRequest(id=0, brokers=(name,)), self.timeout_s)))
        (entry,) = doc["brokers"]
        if entry["error_code"]:
            raise error_for(entry["error_code"], entry.get("error_message"))
        return {k: BrokerConfigEntry(v["value"], v["source"], v.get("read_only", False), v.get("is_sensitive", False))
                for k, v in entry["configs"].items()}

    def create_partitions_op(self, counts: dict[str, int], validate_only: bool = False) -> Op[None]:
        """Grow each topic to ``counts[topic]`` partitions in total (Kafka's createPartitions)."""
        request = m.CreatePartitionsRequest(id=0, validate_only=validate_only, topics=tuple(
            m.CreatePartitionsTopic(name=name, count=int(count)) for name, count in counts.items()))
        doc = check_response((yield Call(request, self.timeout_s)))
        _raise_first([error_for(t["error_code"], t.get("error_message"), topic=t["name"])
                      for t in doc["topics"] if t["error_code"]])

    def alter_configs_op(self, configs: dict[str, dict[str, str]], delete: dict[str, list[str]] | None = None, *,
                         replace: bool = False, append: dict[str, dict[str, str]] | None = None,
                         subtract: dict[str, dict[str, str]] | None = None,
                         validate_only: bool = False) -> Op[None]:
        """Set ``configs[topic]`` and remove the overrides named in ``delete[topic]``. ``replace``:
        ``configs[topic]`` becomes the topic's whole override set (Kafka's AlterConfigs).
        ``append``/``subtract``: items added to or removed from list configs (cleanup.policy)."""
        delete, append, subtract = delete or {}, append or {}, subtract or {}
        names = list(dict.fromkeys([*configs, *delete, *append, *subtract]))

        def texts(values) -> dict[str, str]:
            return {str(k): str(v) for k, v in values.items()}

        request = m.AlterConfigsRequest(id=0, validate_only=validate_only, topics=tuple(
            m.AlterConfigsTopic(name=name, configs=texts(configs.get(name, {})), delete=tuple(delete.get(name, ())),
                                replace=replace, append=texts(append.get(name, {})),
                                subtract=texts(subtract.get(name, {})))
            for name in names))
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

    # -- consumer groups ---------------------------------------------------------------------------
    # triolog is one node, so the coordinator of every group is the broker we talk to; while it
    # loads __consumer_offsets (COORDINATOR_LOAD_IN_PROGRESS) reads are asked again, within the
    # request timeout (they change nothing).

    def _group_call_op(self, request) -> Op[dict]:
        deadline = now() + self.timeout_s
        while True:
            doc = yield Call(request, self.timeout_s)
            if doc["error_code"] in _COORDINATOR_BUSY and now() + 0.1 < deadline:
                yield Sleep(0.1)
                continue
            return check_response(doc)

    def list_groups_op(self, states=()) -> Op[list[ConsumerGroupListing]]:
        """Every group (of the states named, if any), sorted by id."""
        doc = yield from self._group_call_op(m.ListGroupsRequest(id=0, states_filter=tuple(states)))
        return sorted(ConsumerGroupListing(g["group_id"], g["protocol_type"], g["group_state"]) for g in doc["groups"])

    def describe_groups_op(self, group_ids) -> Op[dict[str, ConsumerGroupDescription]]:
        """Per group: state, assignor and members with their partitions. An unknown group is
        described as Dead with no members (Kafka's answer)."""
        doc = yield from self._group_call_op(m.DescribeGroupsRequest(id=0, groups=tuple(dict.fromkeys(group_ids))))
        out, errors = {}, []
        for group in doc["groups"]:
            if group["error_code"]:
                errors.append(error_for(group["error_code"], group.get("error_message")))
                continue
            members = []
            for member in group["members"]:
                assigned = frozenset()
                if group["protocol_type"] == PROTOCOL_TYPE and member["member_assignment"]:
                    try:
                        assigned = frozenset(TopicPartition(t, p) for t, p in
                                             decode_assignment(member["member_assignment"]).partitions())
                    except ConsumerProtocolError:
                        pass  # not our bytes to judge: shown without an assignment
                members.append(MemberDescription(member["member_id"], member.get("group_instance_id"),
                                                 member["client_id"], member["client_host"], assigned))
            out[group["group_id"]] = ConsumerGroupDescription(
                group["group_id"], group["group_state"], group["protocol_type"], group["protocol_data"],
                tuple(sorted(members)))
        _raise_first(errors)
        return out

    def delete_groups_op(self, group_ids, raise_errors: bool = True) -> Op[dict[str, TriologClientError | None]]:
        """Delete empty groups with their committed offsets; per group None or its error
        (GroupIdNotFoundError, NonEmptyGroupError...), the first raised with ``raise_errors``."""
        doc = yield from self._group_call_op(m.DeleteGroupsRequest(id=0, groups_names=tuple(dict.fromkeys(group_ids))))
        out = {r["group_id"]: (error_for(r["error_code"], r.get("error_message")) if r["error_code"] else None)
               for r in doc["results"]}
        if raise_errors:
            _raise_first([error for error in out.values() if error is not None])
        return out

    def list_group_offsets_op(self, group_id: str, partitions=None) -> Op[dict[TopicPartition, int]]:
        """The group's committed offsets (of ``partitions``, or all it has); a partition
        without one is left out."""
        topics = None
        if partitions is not None:
            by_topic: dict[str, set[int]] = {}
            for topic, partition in partitions:
                by_topic.setdefault(topic, set()).add(partition)
            topics = tuple(m.OffsetFetchTopic(name=name, partitions=tuple(sorted(parts)))
                           for name, parts in by_topic.items())
        doc = yield from self._group_call_op(m.OffsetFetchRequest(id=0, group_id=group_id, topics=topics))
        out, errors = {}, []
        for topic in doc["topics"]:
            for part in topic["partitions"]:
                if part["error_code"]:
                    errors.append(error_for(part["error_code"], part.get("error_message"), topic=topic["name"],
                                            partition=part["partition"]))
                elif part["committed_offset"] >= 0:
                    out[TopicPartition(topic["name"], part["partition"])] = part["committed_offset"]
        _raise_first(errors)
        return out

    def alter_group_offsets_op(self, group_id: str, offsets: dict) -> Op[None]:
        """Commit ``offsets`` ({tp: offset}) for the group from outside it (generation -1, no
        member id): the broker accepts this only while the group has no members (Kafka's rule;
        UnknownMemberIdError otherwise)."""
        by_topic: dict[str, list[m.OffsetCommitPartition]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(m.OffsetCommitPartition(partition=partition, committed_offset=offset))
        request = m.OffsetCommitRequest(id=0, group_id=group_id, generation_id=-1, member_id="", topics=tuple(
            m.OffsetCommitTopic(name=name, partitions=tuple(parts)) for name, parts in by_topic.items()))
        deadline = now() + self.timeout_s
        while True:
            doc = yield from self._group_call_op(request)
            codes = {p["error_code"] for t in doc["topics"] for p in t["partitions"]}
            # The broker gives a group-level error to every partition (Kafka's OffsetCommit has no
            # top-level code): a busy or moving coordinator is retried like a top-level one.
            if codes and codes <= _COORDINATOR_BUSY and now() + 0.1 < deadline:
                yield Sleep(0.1)
                continue
            break
        _raise_first([error_for(p["error_code"], p.get("error_message"), topic=t["name"], partition=p["partition"])
                      for t in doc["topics"] for p in t["partitions"] if p["error_code"]])
