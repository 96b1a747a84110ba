"""Topics: which exist, how many partitions each has, and their topic-level config overrides.

Kafka keeps this in its metadata log; a single-node triolog keeps it in ``triolog-topics.json``
at the root of the first log directory, replaced atomically on every change, so topics and
their overrides survive restarts. Partition directories are the truth for data: a partition
directory with no entry (left by an older version or copied in) is adopted with no overrides.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from triolog.config.log_config import TOPIC_CONFIGS, ConfigError, LogConfig, unknown_topic_config
from triolog.protocol.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    StorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

from . import filenames
from .checkpoints import atomic_write, read_partition_topic_id, write_partition_topic_id
from .fs import read_file
from .log import Log
from .log_manager import LogManager

logger = logging.getLogger(__name__)

TOPICS_FILE = "triolog-topics.json"
#: The internal topics of the group and transaction coordinators (Kafka's names): clients may
#: read them, not write to them or delete them; their partition counts are fixed.
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
#: The config key each one's partition count comes from (the coordinators hash keys by it).
_PARTITION_COUNT_KEYS = {
    OFFSETS_TOPIC: "offsets.topic.num.partitions",
    TRANSACTION_STATE_TOPIC: "transaction.state.log.num.partitions",
}


def is_internal(topic: str) -> bool:
    return topic in INTERNAL_TOPICS


#: Kafka's cap on partitions per create request is far higher; this bounds the directories one
#: request can create on a single node.
MAX_PARTITIONS = 10_000


@dataclass(frozen=True)
class Topic:
    name: str
    num_partitions: int
    #: Topic-level overrides as given (strings), e.g. {"cleanup.policy": "compact"}.
    overrides: Mapping[str, str] = field(default_factory=dict)


def check_new_partition_count(name: str, current: int, count: int) -> None:
    """Kafka's rules and messages for CreatePartitions' new total (on a broker or a cluster)."""
    if is_internal(name):
        raise InvalidRequestError(
            f"the partition count of internal topic {name} is fixed ({_PARTITION_COUNT_KEYS[name]}): "
            "its coordinator maps keys to its partitions by that count"
        )
    if count < current:
        raise InvalidPartitionsError(
            f"Topic currently has {current} partitions, which is higher than the requested {count}."
        )
    if count == current:
        raise InvalidPartitionsError(f"Topic already has {current} partition(s).")
    if count > MAX_PARTITIONS:
        raise InvalidPartitionsError(f"number of partitions must be at most {MAX_PARTITIONS}, got {count}")


class TopicManager:
    """Creates, alters and deletes topics over a LogManager; safe to call from several threads."""

    def __init__(self, log_manager: LogManager, default_config: LogConfig):
        self.log_manager = log_manager
        self.default_config = default_config
        self._path = log_manager.log_dirs[0].path / TOPICS_FILE
        self._topics: dict[str, Topic] = {}
        self._lock = threading.RLock()
        #: Called with a topic's name once it is deleted (the group coordinator drops its
        #: committed offsets); from the deleting thread, after the lock is released.
        self.on_deleted: list[Callable[[str], None]] = []

    # -- startup -----------------------------------------------------------------------------

    def load(self) -> None:
        """Read the topics file; adopt partition directories it does not list. Call before LogManager.startup()."""
        stored: dict[str, Topic] = {}
        fs = self.log_manager.fs
        if fs.exists(self._path):
            doc = json.loads(read_file(fs, self._path).decode())
            for name, entry in doc.get("topics", {}).items():
                stored[name] = Topic(name, int(entry["num_partitions"]), dict(entry.get("configs", {})))
        self._topics = stored

    def config_for(self, topic: str) -> LogConfig:
        """The effective LogConfig of ``topic`` (broker defaults plus its overrides)."""
        entry = self._topics.get(topic)
        if entry is None or not entry.overrides:
            return self.default_config
        return self.default_config.with_overrides(entry.overrides)

    def adopt_loaded_partitions(self) -> None:
        """After LogManager.startup(): make sure every partition on disk belongs to a known topic."""
        with self._lock:
            changed = False
            for topic, partition in self.log_manager.all_logs():
                entry = self._topics.get(topic)
                if entry is None or partition >= entry.num_partitions:
                    count = max(partition + 1, entry.num_partitions if entry else 0)
                    self._topics[topic] = Topic(topic, count, dict(entry.overrides) if entry else {})
                    changed = True
            if changed:
                self._save()

    # -- queries -----------------------------------------------------------------------------

    def get(self, name: str) -> Topic | None:
        return self._topics.get(name)

    def all(self) -> dict[str, Topic]:
        with self._lock:
            return dict(self._topics)

    def log(self, topic: str, partition: int) -> Log:
        """The log of an existing partition, or UnknownTopicOrPartitionError."""
        entry = self._topics.get(topic)
        if entry is None:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        if not 0 <= partition < entry.num_partitions:
            raise UnknownTopicOrPartitionError(
                f"partition {partition} does not exist: topic {topic!r} has partitions 0..{entry.num_partitions - 1}"
            )
        log = self.log_manager.get_log(topic, partition)
        if log is None:
            # Either the topic is being deleted right now (its entry was checked above, just before
            # delete() removed it and its logs) or the directory went missing. Decide under the
            # lock delete() holds: recreating a partition of a deleted topic would leave a
            # directory that the next startup adopts, bringing the topic back.
            with self._lock:
                entry = self._topics.get(topic)
                if entry is None or not 0 <= partition < entry.num_partitions:
                    raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
                log = self.log_manager.get_or_create_log(topic, partition, self.config_for(topic))
        return log

    # -- a cluster's topics --------------------------------------------------------------------

    def register_cluster_topic(self, name: str, num_partitions: int, overrides: Mapping[str, str]) -> Topic:
        """A topic of a cluster (its assignment and configs in ZooKeeper) with replicas on this
        broker: known here with its partition count and overrides, its logs made only for the
        partitions this broker hosts (``hosted_log``). The entry is rewritten when either changed."""
        with self._lock:
            topic = Topic(name, num_partitions, dict(overrides))
            if self._topics.get(name) != topic:
                self._topics[name] = topic
                self._save()
                for log in self.log_manager.all_logs().values():
                    if log.topic == name:
                        log.update_config(self.config_for(name))
            return topic

    def hosted_log(self, topic: str, partition: int, topic_id: str | None = None) -> Log:
        """The local log of a cluster topic's partition this broker hosts, created if new.

        With the topic's id: a local log made for another topic of this name (deleted and made
        again while this broker was away) is deleted and started anew, as Kafka does by its
        ``partition.metadata``; a log without the file is taken as this topic's and marked."""
        with self._lock:
            if topic not in self._topics:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} is not known to this broker")
            log = self.log_manager.get_or_create_log(topic, partition, self.config_for(topic))
            if topic_id is None:
                return log
            found = read_partition_topic_id(log.directory)
            if found is not None and found != topic_id:
                logger.warning(
                    "stray partition %s-%d (topic id %s, the cluster's is %s): deleting it",
                    topic,
                    partition,
                    found,
                    topic_id,
                )
                self.log_manager.delete_log(topic, partition)
                log = self.log_manager.get_or_create_log(topic, partition, self.config_for(topic))
                found = None
            if found is None:
                write_partition_topic_id(log.directory, topic_id, self.log_manager.fs)
            return log

    def forget_cluster_topic(self, name: str) -> None:
        """A cluster topic deleted from the cluster's metadata: its local logs go (renamed away
        and removed later, as retention's), and its entry here."""
        with self._lock:
            entry = self._topics.pop(name, None)
            if entry is None:
                return
            self._save()
            for topic, partition in [k for k, log in self.log_manager.all_logs().items() if log.topic == name]:
                self.log_manager.delete_log(topic, partition)
        self._deleted(name)

    # -- changes -----------------------------------------------------------------------------

    def validate_new_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        default_partitions: int,
        *,
        internal: bool = False,
        existing: Collection[str] | None = None,
    ) -> tuple[int, LogConfig]:
        """Every check create_topics makes, without touching any file. Internal topics are made
        by the broker itself (``internal``), never on a client's request (Kafka's rule).

        ``existing``: the names taken, when they are a cluster's (its replication factor is then
        the caller's to check, against the live brokers); default: this broker's topics."""
        filenames.validate_topic_name(name)
        if is_internal(name) and not internal:
            raise InvalidRequestError(f"creation of internal topic {name} is prohibited: the broker creates it")
        if existing is None and replication_factor not in (1, -1):
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor} is not possible on a single broker: use 1 or -1"
            )
        count = default_partitions if num_partitions == -1 else num_partitions
        if not 1 <= count <= MAX_PARTITIONS:
            raise InvalidPartitionsError(
                f"number of partitions must be between 1 and {MAX_PARTITIONS} (or -1 for the broker default), "
                f"got {num_partitions}"
            )
        config = self._config_with(configs)
        with self._lock:
            taken = self._topics if existing is None else existing
            if name in taken:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            collision = next((t for t in taken if t.replace(".", "_") == name.replace(".", "_")), None)
            if collision is not None:
                raise InvalidTopicCollision(
                    f"topic {name!r} collides with existing topic {collision!r}: '.' and '_' name the same metrics"
                )
        return count, config

    def create(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int = 1,
        configs: Mapping[str, str] | None = None,
        *,
        default_partitions: int = 1,
        internal: bool = False,
    ) -> Topic:
        configs = dict(configs or {})
        with self._lock:
            count, config = self.validate_new_topic(
                name, num_partitions, replication_factor, configs, default_partitions, internal=internal
            )
            topic = Topic(name, count, configs)
            self._topics[name] = topic
            self._save()
            try:
                self.log_manager.create_logs(name, range(count), config)
            except BaseException:
                # create_logs removed what it made: the topic does not half-exist, now or after a
                # restart (a partition directory left behind would be adopted).
                del self._topics[name]
                try:
                    self._save()
                except OSError:
                    logger.exception("could not remove the failed topic %s from %s", name, self._path)
                raise
            return topic

    def validate_new_partitions(self, name: str, count: int) -> Topic:
        """Every check create_partitions makes, without touching any file; the topic as it is.

        Kafka's rules and messages: the topic must exist and the new total be higher than the
        current count (partitions are only ever added). The internal offsets topic is refused:
        the group coordinator maps each group to one of its partitions by the count it has, so a
        new count would move every group's committed offsets out of its coordinator's sight."""
        with self._lock:
            entry = self._topics.get(name)
            if entry is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            check_new_partition_count(name, entry.num_partitions, count)
            return entry

    def create_partitions(self, name: str, count: int) -> Topic:
        """Grow ``name`` to ``count`` partitions; the existing ones are untouched.

        The topics file is replaced (written aside, fsynced, renamed) with the new count before
        any new partition directory is made. A crash before the rename leaves the old count and
        no new directory; after it, the new count, and a partition whose directory a crash kept
        from being made is created empty on first use (``log``), as it would have been. The
        other order could leave some of the new directories, which a restart adopts as a count
        between the two."""
        with self._lock:
            entry = self.validate_new_partitions(name, count)
            topic = Topic(name, count, dict(entry.overrides))
            self._topics[name] = topic
            try:
                self._save()
            except BaseException:
                self._topics[name] = entry
                raise
            try:
                self.log_manager.create_logs(name, range(entry.num_partitions, count), self.config_for(name))
            except BaseException:
                # create_logs removed what it made: back to the old count, on disk too.
                self._topics[name] = entry
                try:
                    self._save()
                except OSError:
                    logger.exception("could not restore topic %s's partition count in %s", name, self._path)
                raise
            return topic

    def create_offsets_topic(self, num_partitions: int, segment_bytes: int) -> Topic:
        """__consumer_offsets as Kafka configures it: compacted, compression as produced,
        segment.bytes = offsets.topic.segment.bytes; its partition count is fixed from now on."""
        return self.create_internal_topic(OFFSETS_TOPIC, num_partitions, segment_bytes)

    def create_internal_topic(self, name: str, num_partitions: int, segment_bytes: int) -> Topic:
        """A coordinator's topic as Kafka configures it: compacted, compression as produced,
        its coordinator's segment.bytes; its partition count is fixed from now on."""
        return self.create(
            name,
            num_partitions,
            1,
            {"cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": str(segment_bytes)},
            internal=True,
        )

    def delete(self, name: str) -> None:
        with self._lock:
            entry = self._topics.get(name)
            if entry is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            if is_internal(name):
                raise InvalidTopicError(f"topic {name!r} is internal (a coordinator's) and cannot be deleted")
            del self._topics[name]
            self._save()
            # Every partition, even after one fails: a partition skipped here would stay open in
            # the LogManager and be handed, old data and all, to a topic re-created under this name.
            failures = []
            for partition in range(entry.num_partitions):
                try:
                    self.log_manager.delete_log(name, partition)
                except OSError as exc:
                    logger.error("could not delete partition %s-%d: %s", name, partition, exc)
                    failures.append(f"{name}-{partition}: {exc}")
        self._deleted(name)
        if failures:
            raise StorageError(
                f"topic {name!r} was deleted but some partition directories could not be removed: {'; '.join(failures)}"
            )

    def _deleted(self, name: str) -> None:
        for hook in list(self.on_deleted):
            try:
                hook(name)
            except Exception:
                logger.exception("a hook on the deletion of topic %s failed", name)

    def alter_configs(
        self,
        name: str,
        set_configs: Mapping[str, str],
        delete_keys: list[str] | tuple[str, ...],
        *,
        validate_only: bool = False,
        replace: bool = False,
        append: Mapping[str, str] | None = None,
        subtract: Mapping[str, str] | None = None,
    ) -> Topic:
        """Set and remove topic-level overrides; they apply to the topic's logs at once.

        ``replace`` is Kafka's AlterConfigs: ``set_configs`` becomes the whole override set.
        ``append``/``subtract`` are IncrementalAlterConfigs' APPEND and SUBTRACT on list keys:
        comma-separated items added to (if absent) or removed from the value the topic uses now."""
        with self._lock:
            entry = self._topics.get(name)
            if entry is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            overrides = self.changed_overrides(
                entry.overrides, set_configs, delete_keys, replace=replace, append=append, subtract=subtract
            )
            config = self._config_with(overrides)
            if validate_only:
                return entry
            topic = Topic(name, entry.num_partitions, overrides)
            self._topics[name] = topic
            self._save()
            for partition in range(entry.num_partitions):
                log = self.log_manager.get_log(name, partition)
                if log is not None:
                    log.update_config(config)
            return topic

    def changed_overrides(
        self,
        current: Mapping[str, str],
        set_configs: Mapping[str, str],
        delete_keys: list[str] | tuple[str, ...],
        *,
        replace: bool = False,
        append: Mapping[str, str] | None = None,
        subtract: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """A topic's overrides after an alteration (see alter_configs), checked whole: what a
        cluster writes to ZooKeeper and a standalone broker to its topics file."""
        append, subtract = dict(append or {}), dict(subtract or {})
        if replace and (delete_keys or append or subtract):
            raise InvalidRequestError("replace sets the whole override set: it takes no delete, append or subtract")
        given = [*set_configs, *delete_keys]
        twice = sorted({k for k in (*append, *subtract) if k in given} | (append.keys() & subtract.keys()))
        if twice:
            raise InvalidRequestError(f"config keys named by more than one operation: {', '.join(twice)}")
        unknown = [key for key in (*delete_keys, *append, *subtract) if key not in TOPIC_CONFIGS]
        if unknown:
            raise InvalidConfigError("; ".join(unknown_topic_config(k) for k in unknown))
        not_lists = [key for key in (*append, *subtract) if TOPIC_CONFIGS[key].type != "list"]
        if not_lists:
            raise InvalidConfigError(
                "; ".join(f"{key} is not a list: append and subtract apply to list configs only" for key in not_lists)
            )
        if replace:
            overrides = dict(set_configs)
        else:
            overrides = {k: v for k, v in current.items() if k not in delete_keys}
            overrides.update(set_configs)
        if append or subtract:
            in_use = self._config_with(current)
            for key, items in (*append.items(), *subtract.items()):
                if not isinstance(items, str):
                    raise InvalidConfigError(f"config values must be strings: {key}")
                now = list(in_use.value_of(key))
                change = [i.strip() for i in items.split(",") if i.strip()]
                if key in append:
                    now += [i for i in change if i not in now]
                else:
                    now = [i for i in now if i not in change]
                overrides[key] = ",".join(now)
        self._config_with(overrides)  # (every value checked)
        return overrides

    def _config_with(self, overrides: Mapping[str, str]) -> LogConfig:
        bad_types = [k for k, v in overrides.items() if not isinstance(v, str)]
        if bad_types:
            raise InvalidConfigError(f"config values must be strings: {', '.join(bad_types)}")
        try:
            return self.default_config.with_overrides(overrides)
        except ConfigError as exc:
            raise InvalidConfigError(str(exc)) from None

    def _save(self) -> None:
        doc = {
            "version": 1,
            "topics": {
                t.name: {"num_partitions": t.num_partitions, "configs": dict(t.overrides)}
                for t in sorted(self._topics.values(), key=lambda t: t.name)
            },
        }
        atomic_write(self._path, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode(), self.log_manager.fs)


class InvalidTopicCollision(InvalidTopicError):
    """Kafka refuses topics whose names differ only by '.' vs '_' (they share metric names)."""
