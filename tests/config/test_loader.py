"""Loading the broker configuration: .properties syntax, the embedded default, the precedence of
file < environment < --override, and how errors and warnings name their source."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

import pytest

from triolog.config.broker_config import BROKER_CONFIGS, BrokerConfig, Endpoint
from triolog.config.loader import (
    CLIENT_ENVIRONMENT_VARIABLES,
    ENV_KEYS,
    embedded_properties,
    env_var_name,
    format_properties,
    load_config,
    parse_properties,
)
from triolog.config.log_config import ConfigError


@pytest.fixture
def write_config(tmp_path: Path):
    def write(text: str) -> str:
        path = tmp_path / "server.properties"
        path.write_text(text, encoding="utf-8")
        return str(path)

    return write


# -- .properties files ------------------------------------------------------------------------
# (the syntax itself: tests/protocol/test_properties.py, the one parser's tests)


def test_load_config_reads_java_syntax_and_trims_values_as_kafka_does(write_config):
    path = write_config("# c\nnum.partitions = 3  \t\nlog.dirs : /a,\\\n    /b\\ \n"
                        "listeners=\\u0020PLAINTEXT://127.0.0.1:9092\n")
    config, warnings = load_config(path, environ={})
    assert warnings == []
    assert (config.num_partitions, config.log_dirs) == (3, ("/a", "/b"))
    assert config.originals["num.partitions"] == "3" and config.originals["log.dirs"] == "/a,/b"
    assert config.originals["listeners"] == "PLAINTEXT://127.0.0.1:9092"


def test_the_loader_and_the_client_read_properties_with_one_parser():
    from triolog.client import security
    from triolog.protocol import properties

    assert parse_properties is properties.parse_properties is security.parse_properties
    assert format_properties is properties.format_properties


# -- environment names -------------------------------------------------------------------------


def test_env_var_name_upper_cases_and_replaces_dots():
    assert env_var_name("log.retention.ms") == "TRIOLOG_LOG_RETENTION_MS"


def test_env_keys_map_every_key_back_unambiguously():
    assert len(ENV_KEYS) == len(BROKER_CONFIGS)
    assert all(ENV_KEYS[env_var_name(key)] == key for key in BROKER_CONFIGS)
    assert not any("_" in key for key in BROKER_CONFIGS)


# -- the embedded default ----------------------------------------------------------------------


def test_embedded_config_is_package_data():
    resource = importlib.resources.files("triolog.config").joinpath("server.properties")
    assert resource.is_file()
    assert embedded_properties() == resource.read_text(encoding="utf-8")


def test_load_config_embedded_loads_without_warnings():
    config, warnings = load_config(None, environ={})
    assert warnings == []
    assert config.log_dirs == ("./data",)


def test_load_config_embedded_equals_kafka_defaults_but_data_dir_and_kafka_listener():
    config, _ = load_config(None, environ={})
    assert config == BrokerConfig(log_dirs=("./data",), kafka_listener=Endpoint("PLAINTEXT", "127.0.0.1", 19092))


def test_embedded_config_sets_only_known_lowest_precedence_keys():
    props = parse_properties(embedded_properties())
    assert set(props) <= set(BROKER_CONFIGS)
    heads = {key.name for key in BROKER_CONFIGS.values() if key.fallback is not None}
    assert not set(props) & heads, "a chain head in the embedded file would beat a user's synonym"


# -- layers ------------------------------------------------------------------------------------


def test_load_config_file_beats_embedded(write_config):
    path = write_config("num.partitions=3\nlog.retention.hours=1\n")
    config, warnings = load_config(path, environ={})
    assert warnings == []
    assert config.num_partitions == 3
    assert config.log_config.retention_ms == 3600000
    assert config.log_dirs == ("./data",)  # keys the file leaves out come from the embedded file


def test_load_config_accepts_a_path_object(write_config):
    config, _ = load_config(Path(write_config("node.id=7")), environ={})
    assert config.node_id == 7


@pytest.mark.parametrize("text, log_dirs", [("log.dir=/x", ("/x",)), ("log.dirs=/y,/z", ("/y", "/z"))])
def test_load_config_file_log_dir_synonyms_beat_embedded_log_dir(write_config, text, log_dirs):
    assert load_config(write_config(text), environ={})[0].log_dirs == log_dirs


def test_load_config_file_retention_synonyms_beat_embedded_hours(write_config):
    config, _ = load_config(write_config("log.retention.minutes=10"), environ={})
    assert config.log_config.retention_ms == 600000


def test_load_config_environment_beats_file(write_config):
    path = write_config("num.partitions=3\nnode.id=1")
    config, _ = load_config(path, environ={"TRIOLOG_NUM_PARTITIONS": "5"})
    assert (config.num_partitions, config.node_id) == (5, 1)


def test_load_config_override_beats_environment(write_config):
    config, _ = load_config(write_config("num.partitions=3"), ["num.partitions=9"],
                            environ={"TRIOLOG_NUM_PARTITIONS": "5"})
    assert config.num_partitions == 9


def test_load_config_later_override_wins():
    config, _ = load_config(None, ["node.id=1", "node.id=2"], environ={})
    assert config.node_id == 2


def test_load_config_synonym_precedence_applies_after_layers_merge(write_config):
    """Kafka's rule: a finer synonym from a lower layer still beats a coarser one from a higher layer."""
    config, _ = load_config(write_config("log.retention.ms=1000"), ["log.retention.hours=5"],
                            environ={"TRIOLOG_LOG_RETENTION_MINUTES": "7"})
    assert config.log_config.retention_ms == 1000


def test_load_config_environment_maps_every_key():
    config, warnings = load_config(None, environ={
        "TRIOLOG_LOG_RETENTION_MS": "1234",
        "TRIOLOG_LISTENERS": "PLAINTEXT://[::1]:0",
        "TRIOLOG_METRICS_LISTENER": "",
        "TRIOLOG_LOG_CLEANER_IO_BUFFER_LOAD_FACTOR": "0.5",
        "TRIOLOG_COMPRESSION_TYPE": "lz4",
        "PATH": "/usr/bin",
    })
    assert warnings == []
    assert config.log_config.retention_ms == 1234
    assert config.listener == Endpoint("PLAINTEXT", "::1", 0)
    assert config.metrics_listener is None
    assert config.log_cleaner_io_buffer_load_factor == 0.5
    assert config.log_config.compression_type == "lz4"


def test_load_config_defaults_to_the_process_environment(monkeypatch):
    monkeypatch.setenv("TRIOLOG_NODE_ID", "42")
    assert load_config(None)[0].node_id == 42


def test_load_config_unknown_environment_variable_is_warned():
    config, warnings = load_config(None, environ={"TRIOLOG_NUM_PARTITION": "4", "triolog_node_id": "3"})
    assert config.num_partitions == 1 and config.node_id == 0
    assert warnings == ["environment variable TRIOLOG_NUM_PARTITION matches no config key, ignored; "
                        "did you mean TRIOLOG_NUM_PARTITIONS?"]


def test_load_config_skips_the_client_tools_variables_without_a_warning():
    config, warnings = load_config(None, environ={"TRIOLOG_BOOTSTRAP_SERVER": "127.0.0.1:9092",
                                                  "TRIOLOG_NUM_PARTITIONS": "3"})
    assert (config.num_partitions, warnings) == (3, [])


def test_the_client_tools_bootstrap_variable_is_one_the_broker_config_skips():
    from triolog.client.cli.common import BOOTSTRAP_ENV

    assert BOOTSTRAP_ENV in CLIENT_ENVIRONMENT_VARIABLES


@pytest.mark.parametrize("override, key, value", [
    ("metrics.listener=", "metrics_listener", None),
    (" node.id = 3", "node_id", 3),
    ("listeners=PLAINTEXT://h:1", "listener", Endpoint("PLAINTEXT", "h", 1)),
])
def test_load_config_override_splits_at_the_first_equals(override, key, value):
    assert getattr(load_config(None, [override], environ={})[0], key) == value


def test_load_config_malformed_overrides_are_all_reported_with_bad_values():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["node.id", "=3", "num.partitions=x"], environ={"TRIOLOG_NODE_ID": "y"})
    assert info.value.problems == [
        "malformed --override 'node.id': expected key=value",
        "malformed --override '=3': expected key=value",
        # in the order of the embedded file's keys (num.partitions), then the others
        "invalid value 'x' for num.partitions (from --override): not an integer (allowed: int, >= 1)",
        "invalid value 'y' for node.id (from environment variable TRIOLOG_NODE_ID): not an integer "
        "(allowed: int, >= 0)",
    ]


def test_load_config_malformed_override_alone_is_an_error():
    with pytest.raises(ConfigError, match="malformed --override 'nope'"):
        load_config(None, ["nope"], environ={})


def test_load_config_unknown_keys_are_warned_with_their_source(write_config):
    path = write_config("controller.quorum.voters=1@localhost:9093\nnum.partitions=2")
    config, warnings = load_config(path, ["nonsense.key=1"], environ={})
    assert config.num_partitions == 2
    assert warnings == [
        f"unknown config 'controller.quorum.voters' (from {path}) ignored",
        "unknown config 'nonsense.key' (from --override) ignored",
    ]


def test_load_config_invalid_file_value_names_the_file(write_config):
    path = write_config("log.segment.bytes=tiny\nlisteners=PLAINTEXT://a:1,PLAINTEXT://b:2")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert sorted(p.split("): ")[0] for p in info.value.problems) == [
        f"invalid value 'PLAINTEXT://a:1,PLAINTEXT://b:2' for listeners (from {path}",
        f"invalid value 'tiny' for log.segment.bytes (from {path}",
    ]


def test_load_config_missing_file_is_a_config_error(tmp_path):
    missing = tmp_path / "absent.properties"
    with pytest.raises(ConfigError, match=f"cannot read config file {missing}: No such file"):
        load_config(str(missing), environ={})


def test_load_config_bad_escape_in_file_names_file_and_line(write_config):
    path = write_config("a=1\nb=\\u00")
    with pytest.raises(ConfigError, match=f"config file {path}: line 2: malformed"):
        load_config(path, environ={})


def test_load_config_non_utf8_file_is_a_config_error(tmp_path):
    path = tmp_path / "latin1.properties"
    path.write_bytes(b"a=\xe9\n")
    with pytest.raises(ConfigError, match="is not UTF-8"):
        load_config(str(path), environ={})
