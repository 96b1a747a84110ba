"""BrokerConfig: Kafka's defaults, synonym precedence, listener syntax and all-at-once validation."""

from __future__ import annotations

import dataclasses
import math

import pytest

from triolog.config.broker_config import (
    BROKER_CONFIGS,
    DOUBLE_MAX,
    BrokerConfig,
    Endpoint,
    parse_endpoint,
    parse_listeners,
    parse_metrics_listener,
)
from triolog.config.log_config import INT_MAX, LONG_MAX, TOPIC_CONFIGS, ConfigError, LogConfig
from triolog.config.principal_rules import PrincipalMappingRules

# Kafka 3.9's KafkaConfig defaults, except where triolog sets its own:
# node.id and broker.id (Kafka -1), listeners (Kafka PLAINTEXT://:9092), queued.max.request.bytes (Kafka -1:
# unbounded; triolog bounds the request bytes one broker buffers) and the triolog-only keys.
KAFKA_DEFAULTS = {
    "listeners": Endpoint("PLAINTEXT", "127.0.0.1", 9092),
    # triolog's keys for the Kafka-protocol listener: off unless configured (the embedded
    # server.properties turns it on at 127.0.0.1:19092).
    "kafka.listeners": None,
    "kafka.advertised.listeners": None,
    "node.id": None,
    "log.dirs": None,
    "log.dir": ("/tmp/kafka-logs",),
    "num.partitions": 1,
    "auto.create.topics.enable": True,
    "socket.request.max.bytes": 104857600,
    "max.connections": INT_MAX,
    "max.connections.per.ip": INT_MAX,
    "max.connection.creation.rate": INT_MAX,
    "connections.max.idle.ms": 600000,
    "queued.max.request.bytes": 268435456,
    "request.receive.timeout.ms": 30000,
    "max.broker.partitions": 10000,
    "metrics.listener": Endpoint("http", "127.0.0.1", 9404),
    "logger.format": "console",
    "logger.level": "INFO",
    # Kafka's security keys; Kafka defaults ssl.*.type to JKS (triolog reads PEM) and
    # sasl.enabled.mechanisms to GSSAPI (triolog serves SCRAM and PLAIN).
    "ssl.keystore.type": "PEM",
    "ssl.keystore.location": None,
    "ssl.key.password": None,
    "ssl.truststore.type": "PEM",
    "ssl.truststore.location": None,
    "ssl.client.auth": "none",
    "ssl.enabled.protocols": ("TLSv1.2", "TLSv1.3"),
    "ssl.cipher.suites": (),
    "ssl.principal.mapping.rules": PrincipalMappingRules("DEFAULT"),
    "sasl.enabled.mechanisms": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
    "sasl.server.max.receive.size": 524288,
    "connection.failed.authentication.delay.ms": 100,
    "connections.max.reauth.ms": 0,
    "authorizer.class.name": "",
    "super.users": (),
    "allow.everyone.if.no.acl.found": False,
    "quota.window.size.seconds": 1,
    "quota.window.num": 11,
    "log.retention.check.interval.ms": 300000,
    "log.flush.offset.checkpoint.interval.ms": 60000,
    "log.flush.start.offset.checkpoint.interval.ms": 60000,
    "replica.high.watermark.checkpoint.interval.ms": 5000,
    "log.flush.scheduler.interval.ms": LONG_MAX,
    "log.initial.task.delay.ms": 30000,
    "num.recovery.threads.per.data.dir": 1,
    "log.cleaner.enable": True,
    "log.cleaner.threads": 1,
    "log.cleaner.dedupe.buffer.size": 134217728,
    "log.cleaner.io.buffer.size": 524288,
    "log.cleaner.io.buffer.load.factor": 0.9,
    "log.cleaner.io.max.bytes.per.second": 1.7976931348623157e308,  # Java's Double.MAX_VALUE
    "log.cleaner.backoff.ms": 15000,
    "producer.id.expiration.ms": 86400000,
    "producer.id.expiration.check.interval.ms": 600000,
    "offsets.topic.num.partitions": 50,
    "offsets.topic.segment.bytes": 104857600,
    "offsets.topic.replication.factor": 3,
    "offsets.retention.minutes": 10080,
    "offsets.retention.check.interval.ms": 600000,
    "offsets.load.buffer.size": 5242880,
    "offsets.commit.timeout.ms": 5000,
    "offset.metadata.max.bytes": 4096,
    "group.initial.rebalance.delay.ms": 3000,
    "group.min.session.timeout.ms": 6000,
    "group.max.session.timeout.ms": 1800000,
    "group.max.size": INT_MAX,
    # Kafka's TransactionStateManagerConfig and TransactionLogConfig defaults.
    "request.timeout.ms": 30000,
    "transaction.state.log.num.partitions": 50,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "transaction.state.log.segment.bytes": 104857600,
    "transaction.state.log.load.buffer.size": 5242880,
    "transaction.max.timeout.ms": 900000,
    "transaction.partition.verification.enable": True,
    "transactional.id.expiration.ms": 604800000,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 10000,
    "transaction.remove.expired.transaction.cleanup.interval.ms": 3600000,
    "log.segment.bytes": 1073741824,
    "log.roll.ms": None,
    "log.roll.hours": 168,
    "log.roll.jitter.ms": None,
    "log.roll.jitter.hours": 0,
    "log.index.size.max.bytes": 10485760,
    "log.index.interval.bytes": 4096,
    "log.retention.ms": None,
    "log.retention.minutes": None,
    "log.retention.hours": 168,
    "log.retention.bytes": -1,
    "log.cleanup.policy": ("delete",),
    "log.cleaner.min.cleanable.ratio": 0.5,
    "log.cleaner.min.compaction.lag.ms": 0,
    "log.cleaner.max.compaction.lag.ms": LONG_MAX,
    "log.cleaner.delete.retention.ms": 86400000,
    "log.segment.delete.delay.ms": 60000,
    "log.flush.interval.messages": LONG_MAX,
    "log.flush.interval.ms": None,
    "log.message.timestamp.type": "CreateTime",
    "log.message.timestamp.before.max.ms": LONG_MAX,
    "log.message.timestamp.after.max.ms": 3600000,  # Kafka 4.0 (KIP-1030)
    "compression.type": "producer",
    "compression.gzip.level": -1,
    "compression.lz4.level": 9,
    "compression.zstd.level": 3,
    "message.max.bytes": 1048588,
    "log.preallocate": False,
    "min.insync.replicas": 1,
    "unclean.leader.election.enable": False,
    # ZooKeeper mode (Kafka 3.x): broker.id is node.id's synonym, 0 here (Kafka -1, see node.id).
    "broker.id": 0,
    "zookeeper.connect": "",
    "zookeeper.session.timeout.ms": 18000,
    "zookeeper.connection.timeout.ms": None,
    "broker.rack": None,
    "default.replication.factor": 1,
    "replica.lag.time.max.ms": 30000,
    "replica.fetch.wait.max.ms": 500,
    "replica.fetch.min.bytes": 1,
    "replica.fetch.max.bytes": 1048576,
    "replica.fetch.response.max.bytes": 10485760,
    "num.replica.fetchers": 1,
    "replica.fetch.backoff.ms": 1000,
    "auto.leader.rebalance.enable": True,
    "leader.imbalance.check.interval.seconds": 300,
    "leader.imbalance.per.broker.percentage": 10,
    "controlled.shutdown.enable": True,
    "controlled.shutdown.max.retries": 3,
    "controlled.shutdown.retry.backoff.ms": 5000,
    "inter.broker.listener.name": None,
    # Kafka's default is GSSAPI, which triolog does not serve; the credentials are triolog's keys
    # (Kafka read them from listener.name.<listener>.<mechanism>.sasl.jaas.config).
    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
    "sasl.inter.broker.username": None,
    "sasl.inter.broker.password": None,
}


def parse(**props: str) -> BrokerConfig:
    """from_properties with Python names (``log_retention_ms`` for ``log.retention.ms``), no warnings."""
    config, warnings = BrokerConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})
    assert warnings == []
    return config


def problems_of(props: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_properties(props)
    return info.value.problems


# -- the table ---------------------------------------------------------------------------------


def test_broker_configs_defaults_equal_kafka():
    assert {name: key.default for name, key in BROKER_CONFIGS.items()} == KAFKA_DEFAULTS


def test_broker_config_field_defaults_equal_parsing_nothing():
    config, warnings = BrokerConfig.from_properties({})
    assert warnings == []
    assert config == BrokerConfig()
    assert config.originals == {}


def test_broker_config_default_log_config_equals_topic_defaults():
    config = BrokerConfig.from_properties({})[0]
    assert config.log_config == LogConfig()
    assert config.log_config.overrides == {}


def test_broker_configs_declare_every_topic_synonym_with_the_topic_limits():
    for topic in TOPIC_CONFIGS.values():
        key = BROKER_CONFIGS[topic.broker_name]
        assert key.topic_name == topic.name
        assert key.type == topic.type
        assert key.choices == topic.choices
        if key.fallback is None:
            assert (key.default, key.minimum, key.maximum) == (topic.default, topic.minimum, topic.maximum)


def test_broker_configs_every_key_fills_a_field_a_topic_key_or_a_fallback():
    fallbacks = {key.fallback for key in BROKER_CONFIGS.values()}
    fields = {f.name for f in dataclasses.fields(BrokerConfig)}
    for key in BROKER_CONFIGS.values():
        assert key.attr or key.topic_name or key.name in fallbacks, key.name
        assert key.attr is None or key.attr in fields, key.name
        assert key.fallback is None or key.fallback in BROKER_CONFIGS, key.name
    attrs = {key.attr for key in BROKER_CONFIGS.values()}
    assert fields - attrs == {"log_config", "originals"}


def test_broker_configs_document_every_key():
    for key in BROKER_CONFIGS.values():
        assert key.doc.strip().endswith("."), key.name
        assert key.group in ("server", "security", "log manager", "log cleaner", "idempotent producers",
                             "group coordinator", "transaction coordinator", "cluster", "topic defaults")
        assert key.describe_allowed()
        assert key.default_text


def test_broker_config_key_default_text_names_java_constants():
    assert BROKER_CONFIGS["log.flush.scheduler.interval.ms"].default_text == f"{LONG_MAX} (Long.MAX)"
    assert BROKER_CONFIGS["max.connections"].default_text == f"{INT_MAX} (Int.MAX)"
    assert BROKER_CONFIGS["log.cleaner.io.max.bytes.per.second"].default_text.endswith("(Double.MAX)")
    assert BROKER_CONFIGS["log.retention.ms"].default_text == "unset (falls back to log.retention.minutes)"
    assert BROKER_CONFIGS["listeners"].default_text == "PLAINTEXT://127.0.0.1:9092"
    assert BROKER_CONFIGS["log.cleaner.enable"].default_text == "true"


# -- synonym precedence ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "props, retention_ms",
    [
        ({}, 168 * 3600000),
        ({"log.retention.hours": "1"}, 3600000),
        ({"log.retention.minutes": "5", "log.retention.hours": "1"}, 300000),
        ({"log.retention.ms": "1234", "log.retention.minutes": "5", "log.retention.hours": "1"}, 1234),
        ({"log.retention.ms": "1234", "log.retention.hours": "1"}, 1234),
        ({"log.retention.minutes": "2"}, 120000),
    ],
)
def test_broker_config_retention_ms_beats_minutes_beats_hours(props, retention_ms):
    assert BrokerConfig.from_properties(props)[0].log_config.retention_ms == retention_ms


@pytest.mark.parametrize(
    "props",
    [{"log.retention.ms": "-1"}, {"log.retention.ms": "-5"}, {"log.retention.minutes": "-1"},
     {"log.retention.hours": "-3"}, {"log.retention.minutes": "-1", "log.retention.hours": "5"}],
)
def test_broker_config_retention_any_negative_means_unlimited(props):
    assert BrokerConfig.from_properties(props)[0].log_config.retention_ms == -1


def test_broker_config_retention_negative_is_not_rescued_by_a_lower_key():
    config = parse(log_retention_ms="-7", log_retention_hours="1")
    assert config.log_config.retention_ms == -1


@pytest.mark.parametrize(
    "props, segment_ms",
    [({}, 604800000), ({"log.roll.hours": "2"}, 7200000),
     ({"log.roll.ms": "60000", "log.roll.hours": "2"}, 60000)],
)
def test_broker_config_roll_ms_beats_roll_hours(props, segment_ms):
    assert BrokerConfig.from_properties(props)[0].log_config.segment_ms == segment_ms


@pytest.mark.parametrize(
    "props, jitter_ms",
    [({}, 0), ({"log.roll.jitter.hours": "1"}, 3600000),
     ({"log.roll.jitter.ms": "10", "log.roll.jitter.hours": "1"}, 10)],
)
def test_broker_config_roll_jitter_ms_beats_jitter_hours(props, jitter_ms):
    assert BrokerConfig.from_properties(props)[0].log_config.segment_jitter_ms == jitter_ms


def test_broker_config_flush_interval_falls_back_to_scheduler_interval():
    config = parse(log_flush_scheduler_interval_ms="1000")
    assert config.log_flush_scheduler_interval_ms == 1000
    assert config.log_config.flush_ms == 1000


def test_broker_config_flush_interval_ms_beats_scheduler_interval():
    config = parse(log_flush_interval_ms="50", log_flush_scheduler_interval_ms="1000")
    assert config.log_config.flush_ms == 50
    assert config.log_flush_scheduler_interval_ms == 1000


def test_broker_config_log_dirs_beats_log_dir():
    assert parse(log_dir="/a").log_dirs == ("/a",)
    assert parse(log_dirs="/b, /c", log_dir="/a").log_dirs == ("/b", "/c")


def test_broker_config_log_dir_accepts_a_list_like_kafka():
    assert parse(log_dir="/a,/b").log_dirs == ("/a", "/b")


@pytest.mark.parametrize(
    "key, raw, attr, value",
    [
        ("log.segment.bytes", "1024", "segment_bytes", 1024),
        ("log.index.size.max.bytes", "4096", "segment_index_bytes", 4096),
        ("log.retention.bytes", "1000000", "retention_bytes", 1000000),
        ("log.cleanup.policy", "compact, Delete", "cleanup_policy", ("compact", "delete")),
        ("log.cleaner.min.cleanable.ratio", "0.1", "min_cleanable_dirty_ratio", 0.1),
        ("log.cleaner.delete.retention.ms", "5", "delete_retention_ms", 5),
        ("log.segment.delete.delay.ms", "0", "file_delete_delay_ms", 0),
        ("log.flush.interval.messages", "1", "flush_messages", 1),
        ("log.message.timestamp.type", "LogAppendTime", "message_timestamp_type", "LogAppendTime"),
        ("compression.type", "zstd", "compression_type", "zstd"),
        ("compression.zstd.level", "-5", "compression_zstd_level", -5),
        ("message.max.bytes", "2000000", "max_message_bytes", 2000000),
        ("log.preallocate", "TRUE", "preallocate", True),
    ],
)
def test_broker_config_topic_synonyms_set_the_default_log_config(key, raw, attr, value):
    config, _ = BrokerConfig.from_properties({key: raw})
    assert getattr(config.log_config, attr) == value
    assert config.log_config.overrides == {}


def test_broker_config_log_config_is_the_base_for_topic_overrides():
    config = parse(log_segment_bytes="1024", compression_type="gzip")
    topic = config.log_config.with_overrides({"compression.type": "lz4"})
    assert (topic.segment_bytes, topic.compression_type) == (1024, "lz4")
    assert config.log_config.compression_type == "gzip"


# -- broker-only values ------------------------------------------------------------------------


def test_broker_config_parses_broker_keys():
    config = parse(
        node_id=" 3 ", num_partitions="4", auto_create_topics_enable="False",
        socket_request_max_bytes="1000", max_connections="10", connections_max_idle_ms="-1",
        log_cleaner_enable="false", log_cleaner_threads="0", log_cleaner_io_buffer_load_factor="0.5",
        log_initial_task_delay_ms="0", num_recovery_threads_per_data_dir="2",
    )
    assert (config.node_id, config.num_partitions, config.auto_create_topics_enable) == (3, 4, False)
    assert (config.socket_request_max_bytes, config.max_connections) == (1000, 10)
    assert config.connections_max_idle_ms == -1
    assert (config.log_cleaner_enable, config.log_cleaner_threads) == (False, 0)
    assert config.log_cleaner_io_buffer_load_factor == 0.5
    assert (config.log_initial_task_delay_ms, config.num_recovery_threads_per_data_dir) == (0, 2)


@pytest.mark.parametrize("raw, value", [("1048576", 1048576.0), ("inf", math.inf),
                                        ("1.7976931348623157E308", DOUBLE_MAX)])
def test_broker_config_cleaner_io_rate_accepts_unlimited_spellings(raw, value):
    assert parse(log_cleaner_io_max_bytes_per_second=raw).log_cleaner_io_max_bytes_per_second == value


@pytest.mark.parametrize("raw, level", [("debug", "DEBUG"), ("WARN", "WARNING"), (" error ", "ERROR")])
def test_broker_config_logger_level_is_case_insensitive(raw, level):
    assert parse(logger_level=raw).logger_level == level


def test_broker_config_logger_format_is_case_insensitive():
    assert parse(logger_format="JSON").logger_format == "json"


def test_broker_config_accepts_typed_values():
    config, _ = BrokerConfig.from_properties({"num.partitions": 3, "log.cleaner.enable": False})
    assert (config.num_partitions, config.log_cleaner_enable) == (3, False)


def test_broker_config_originals_reparse_to_the_same_config():
    props = {"log.retention.minutes": "5", "listeners": "PLAINTEXT://:0", "node.id": "2"}
    config, _ = BrokerConfig.from_properties({**props, "unknown.key": "x"})
    assert config.originals == props
    assert BrokerConfig.from_properties(config.originals)[0] == config


def test_broker_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        BrokerConfig().node_id = 1  # type: ignore[misc]


# -- listeners ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, host, port",
    [
        ("PLAINTEXT://127.0.0.1:9092", "127.0.0.1", 9092),
        ("PLAINTEXT://:9092", "", 9092),
        ("plaintext://localhost:0", "localhost", 0),
        ("PLAINTEXT://[::1]:9092", "::1", 9092),
        ("PLAINTEXT://[::]:19092", "::", 19092),
        ("PLAINTEXT://[fe80::1%eth0]:9092", "fe80::1%eth0", 9092),
        ("  PLAINTEXT://broker-1.example.com:65535 ", "broker-1.example.com", 65535),
        ("PLAINTEXT://my_host:1,", "my_host", 1),
    ],
)
def test_listeners_parse_kafka_syntax(text, host, port):
    listener = parse_listeners(text)
    assert listener == Endpoint("PLAINTEXT", host, port)
    assert parse_listeners(str(listener)) == listener


def test_listeners_empty_host_binds_every_interface():
    assert parse_listeners("PLAINTEXT://:9092").bind_host is None
    assert parse_listeners("PLAINTEXT://[::1]:9092").bind_host == "::1"


def test_listeners_format_ipv6_in_brackets():
    assert str(parse_listeners("PLAINTEXT://[::1]:9092")) == "PLAINTEXT://[::1]:9092"


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "names no listener"),
        (" , ", "names no listener"),
        ("127.0.0.1:9092", "not of the form PLAINTEXT://host:port"),
        ("SASL_GSSAPI://host:9093", "scheme 'SASL_GSSAPI' is not supported, only PLAINTEXT or SSL or SASL_PLAINTEXT or SASL_SSL"),
        ("CONTROLLER://host:9093", "not supported"),
        ("PLAINTEXT://host", "not of the form"),
        ("PLAINTEXT://host:", "not of the form"),
        ("PLAINTEXT://host:port", "not of the form"),
        ("PLAINTEXT://host:-1", "not of the form"),
        ("PLAINTEXT://host:65536", "port 65536 is not in 0..65535"),
        ("PLAINTEXT://::1:9092", "not of the form"),
        ("PLAINTEXT://[::1:9092", "not of the form"),
        ("PLAINTEXT://[not-ipv6]:9092", "is not an IPv6 address"),
        ("PLAINTEXT://[127.0.0.1]:9092", "is not an IPv6 address"),
        ("PLAINTEXT://ho st:9092", "not of the form"),
        ("PLAINTEXT://-host-:9092", "is not a host name"),
        ("PLAINTEXT://host:9092/path", "not of the form"),
        ("PLAINTEXT://a:1,PLAINTEXT://b:2", "names 2 listeners; triolog serves exactly one"),
    ],
)
def test_listeners_reject_bad_syntax(text, reason):
    with pytest.raises(ValueError, match=reason.replace("(", r"\(")):
        parse_listeners(text)


def test_broker_config_bad_listener_names_key_value_and_allowed():
    (problem,) = problems_of({"listeners": "PLAINTEXT://a:1,CONTROLLER://b:2"})
    assert problem.startswith("invalid value 'PLAINTEXT://a:1,CONTROLLER://b:2' for listeners: names 2 listeners")
    assert "allowed: one PROTOCOL://host:port, PROTOCOL one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL" in problem


@pytest.mark.parametrize(
    "text, expected",
    [
        ("http://127.0.0.1:9404", Endpoint("http", "127.0.0.1", 9404)),
        ("HTTP://:9404", Endpoint("http", "", 9404)),
        ("http://[::]:9404", Endpoint("http", "::", 9404)),
        ("", None),
        ("   ", None),
    ],
)
def test_metrics_listener_parses_http_endpoints_or_nothing(text, expected):
    assert parse_metrics_listener(text) == expected


@pytest.mark.parametrize("text", ["https://host:9404", "http://host:9404/metrics", "host:9404",
                                  "PLAINTEXT://host:9404", "http://host"])
def test_metrics_listener_rejects_other_forms(text):
    with pytest.raises(ValueError):
        parse_metrics_listener(text)


def test_broker_config_empty_metrics_listener_disables_metrics():
    assert parse(metrics_listener="").metrics_listener is None


def test_parse_endpoint_names_the_expected_scheme():
    with pytest.raises(ValueError, match="only http"):
        parse_endpoint("ftp://h:1", "http")


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, raw, reason, allowed",
    [
        ("node.id", "abc", "not an integer", "int, >= 0"),
        ("node.id", "1.5", "not an integer", "int, >= 0"),
        ("node.id", "-1", "must be at least 0", "int, >= 0"),
        ("num.partitions", "2147483648", "out of range for an int", "int, >= 1"),
        ("log.retention.ms", "9223372036854775808", "out of range for a long", "long"),
        ("log.retention.hours", "", "not an integer", "int"),
        ("log.segment.bytes", "13", "must be at least 14", "int, >= 14"),
        ("log.roll.ms", "0", "must be at least 1", "long, >= 1"),
        ("log.roll.hours", "0", "must be at least 1", "int, >= 1"),
        ("compression.gzip.level", "10", "must be at most 9", "int, >= -1, <= 9"),
        ("log.cleaner.min.cleanable.ratio", "1.5", "must be at most 1", "double, >= 0, <= 1"),
        ("log.cleaner.min.cleanable.ratio", "nan", "not a number", "double, >= 0, <= 1"),
        ("auto.create.topics.enable", "yes", "not true or false", "boolean"),
        ("compression.type", "brotli", "'brotli' is not one of producer", "string, one of producer, uncompressed"),
        ("log.cleanup.policy", "delete,archive", "'archive' is not one of delete, compact",
         "comma-separated list of delete, compact"),
        ("log.cleanup.policy", " , ", "must list at least one of delete, compact", "comma-separated list"),
        ("log.message.timestamp.type", "createtime", "not one of CreateTime, LogAppendTime",
         "string, one of CreateTime"),
        ("log.cleaner.io.buffer.load.factor", "0", "must be in (0, 1]", "double, > 0 and <= 1"),
        ("log.cleaner.io.max.bytes.per.second", "0", "must be greater than 0", "double, > 0"),
        ("log.cleaner.io.max.bytes.per.second", "fast", "not a number", "double, > 0"),
        ("log.dirs", " , ", "names no directory", "comma-separated directories"),
        ("log.dirs", "/a,/b/../a", "names '/b/../a' twice", "comma-separated directories, none twice"),
        ("logger.level", "verbose", "not one of DEBUG, INFO", "one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
        ("logger.format", "xml", "not one of console, json", "one of console, json"),
        ("metrics.listener", "https://h:1", "scheme 'https' is not supported, only http", "http://host:port"),
        ("kafka.listeners", "TLS://h:1", "scheme 'TLS' is not supported, only PLAINTEXT or SSL", "empty, or one PROTOCOL://host:port"),
        ("kafka.listeners", "PLAINTEXT://a:1,PLAINTEXT://b:2", "at most one Kafka listener", "empty, or one PROTOCOL://host:port"),
    ],
)
def test_broker_config_error_names_key_value_reason_and_allowed(key, raw, reason, allowed):
    (problem,) = problems_of({key: raw})
    assert problem.startswith(f"invalid value {raw!r} for {key}: ")
    assert reason in problem
    assert f"(allowed: {allowed}" in problem


def test_broker_config_reports_every_bad_key_at_once():
    bad = {"node.id": "x", "listeners": "nope", "log.segment.bytes": "1", "logger.level": "loud",
           "log.retention.minutes": "soon"}
    problems = problems_of({**bad, "num.partitions": "3", "unknown.key": "whatever"})
    assert len(problems) == len(bad)
    for key, raw in bad.items():
        assert any(p.startswith(f"invalid value {raw!r} for {key}:") for p in problems), key
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_properties(bad)
    assert all(key in str(info.value) for key in bad)


def test_broker_config_rejects_min_compaction_lag_above_max():
    problems = problems_of({"log.cleaner.min.compaction.lag.ms": "10", "log.cleaner.max.compaction.lag.ms": "5"})
    assert problems == ["log.cleaner.min.compaction.lag.ms (10) must not exceed log.cleaner.max.compaction.lag.ms (5)"]


def test_broker_config_cross_key_check_joins_value_errors():
    problems = problems_of({"node.id": "x", "log.cleaner.min.compaction.lag.ms": str(LONG_MAX),
                            "log.cleaner.max.compaction.lag.ms": "5"})
    assert len(problems) == 2


def test_broker_config_messages_quote_the_source():
    with pytest.raises(ConfigError, match=r"invalid value 'x' for node.id \(from --override\): not an integer"):
        BrokerConfig.from_properties({"node.id": "x"}, sources={"node.id": "--override"})
    _, warnings = BrokerConfig.from_properties({"nope": "1"}, sources={"nope": "my.properties"})
    assert warnings == ["unknown config 'nope' (from my.properties) ignored"]


# -- unknown keys ------------------------------------------------------------------------------


def test_broker_config_unknown_keys_are_warnings_not_errors():
    config, warnings = BrokerConfig.from_properties(
        {"controller.quorum.voters": "1", "num.partitions": "2"})
    assert config.num_partitions == 2
    assert warnings == ["unknown config 'controller.quorum.voters' ignored"]


def test_broker_config_unknown_key_warning_suggests_a_close_key():
    _, warnings = BrokerConfig.from_properties({"log.retention.hour": "1"})
    assert warnings == ["unknown config 'log.retention.hour' ignored; did you mean log.retention.hours?"]


def test_broker_config_topic_key_warning_names_the_broker_synonym():
    config, warnings = BrokerConfig.from_properties({"segment.bytes": "1024"})
    assert config.log_config.segment_bytes == LogConfig().segment_bytes
    assert warnings == ["unknown config 'segment.bytes' ignored; segment.bytes is a topic-level key, "
                        "the broker sets its default with log.segment.bytes"]


# -- the cluster keys --------------------------------------------------------------------------


def test_broker_id_and_node_id_name_one_id():
    assert parse(broker_id="3").node_id == 3
    assert parse(node_id="4").node_id == 4
    assert parse(broker_id="5", node_id="5").node_id == 5
    assert problems_of({"broker.id": "1", "node.id": "2"}) == [
        "broker.id (1) and node.id (2) name one id: set one of them, or both to the same value"
    ]


@pytest.mark.parametrize(
    "raw", ["127.0.0.1:2181", "a:1,b:2,c:3", "a:1,b:2/triolog", "zk-1.example:2181/kafka/prod", " a:1 "]
)
def test_zookeeper_connect_takes_kafkas_syntax(raw):
    config = parse(zookeeper_connect=raw, kafka_listeners="PLAINTEXT://127.0.0.1:0")
    assert config.zookeeper_connect == raw.strip()
    # the connection timeout defaults to the session timeout, as in Kafka
    assert config.zookeeper_connection_timeout_ms == config.zookeeper_session_timeout_ms == 18000


@pytest.mark.parametrize("raw", ["localhost", "a:1,", ":2181", "a:99999", "a:1/x/", "a:1/x/../y", "a:1//x"])
def test_a_malformed_zookeeper_connect_is_refused(raw):
    (problem,) = problems_of({"zookeeper.connect": raw, "kafka.listeners": "PLAINTEXT://127.0.0.1:0"})
    assert problem.startswith(f"invalid value {raw!r} for zookeeper.connect")


def test_a_cluster_member_needs_the_kafka_listener_it_replicates_over():
    assert problems_of({"zookeeper.connect": "a:1"}) == [
        "zookeeper.connect needs kafka.listeners: brokers replicate with Kafka's Fetch over the Kafka "
        "listener (inter.broker.listener.name)"
    ]
    assert problems_of(
        {"zookeeper.connect": "a:1", "kafka.listeners": "PLAINTEXT://127.0.0.1:0", "inter.broker.listener.name": "SSL"}
    ) == [
        "inter.broker.listener.name=SSL names no Kafka listener: kafka.listeners is PLAINTEXT://127.0.0.1:0 "
        "(its name is PLAINTEXT)"
    ]
    config = parse(
        zookeeper_connect="a:1", kafka_listeners="PLAINTEXT://127.0.0.1:0", inter_broker_listener_name="PLAINTEXT"
    )
    assert config.inter_broker_listener_name == "PLAINTEXT"


def test_a_sasl_inter_broker_listener_needs_a_login_brokers_can_make():
    cluster = {"zookeeper.connect": "a:1", "kafka.listeners": "SASL_PLAINTEXT://127.0.0.1:0"}
    assert problems_of(cluster) == [
        "the inter-broker listener SASL_PLAINTEXT://127.0.0.1:0 needs a login: set sasl.inter.broker.username and "
        "sasl.inter.broker.password (a user of the cluster, see `triolog users`)"
    ]
    login = {**cluster, "sasl.inter.broker.username": "broker", "sasl.inter.broker.password": "s"}
    assert problems_of({**login, "sasl.mechanism.inter.broker.protocol": "PLAIN"}) == [
        "sasl.mechanism.inter.broker.protocol=PLAIN sends the password itself: over SASL_SSL only (the "
        "inter-broker listener is SASL_PLAINTEXT); use SCRAM-SHA-256 or SCRAM-SHA-512"
    ]
    assert problems_of({**login, "sasl.enabled.mechanisms": "SCRAM-SHA-256"}) == [
        "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512 is not in sasl.enabled.mechanisms (SCRAM-SHA-256): "
        "the leaders would not offer it"
    ]
    (problem,) = problems_of({**login, "sasl.mechanism.inter.broker.protocol": "GSSAPI"})
    assert "sasl.mechanism.inter.broker.protocol" in problem and "GSSAPI" in problem
    config = parse(
        zookeeper_connect="a:1", kafka_listeners="SASL_PLAINTEXT://127.0.0.1:0", sasl_inter_broker_username="broker",
        sasl_inter_broker_password="pa55word", sasl_mechanism_inter_broker_protocol="scram-sha-256",
    )
    assert config.sasl_mechanism_inter_broker_protocol == "SCRAM-SHA-256"
    assert config.sasl_inter_broker_password == "pa55word" and "pa55word" not in repr(config)


def test_min_insync_replicas_and_unclean_election_are_topic_keys_with_broker_defaults():
    config = parse(min_insync_replicas="2", unclean_leader_election_enable="true")
    assert config.log_config.min_insync_replicas == 2 and config.log_config.unclean_leader_election_enable
    topic = config.log_config.with_overrides({"min.insync.replicas": "3"})
    assert topic.min_insync_replicas == 3 and topic.unclean_leader_election_enable
