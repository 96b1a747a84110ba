"""Topic config errors name the key, say what is allowed, and hint at the key meant."""

from __future__ import annotations

import pytest

from triolog.config.log_config import TOPIC_CONFIGS, ConfigError, LogConfig, unknown_topic_config


@pytest.mark.parametrize("props, message", [
    ({"retention.msx": "1"}, "unknown topic config 'retention.msx' (did you mean retention.ms?)"),
    ({"cleanup.polcy": "compact"}, "unknown topic config 'cleanup.polcy' (did you mean cleanup.policy?)"),
    ({"log.retention.ms": "1"},
     "unknown topic config 'log.retention.ms' (log.retention.ms is a broker config; the topic config is retention.ms)"),
    ({"retention.ms": "soon"}, "invalid value 'soon' for retention.ms: not an integer (allowed: long, >= -1)"),
    ({"min.cleanable.dirty.ratio": "half"},
     "invalid value 'half' for min.cleanable.dirty.ratio: not a number (allowed: double, >= 0, <= 1)"),
    # A reason that names the bounds or the choices says them once, with no "(allowed: ...)" after it.
    ({"cleanup.policy": "archive"}, "invalid value 'archive' for cleanup.policy: must be one of delete, compact"),
    ({"cleanup.policy": "delete,archive"},
     "invalid value 'delete,archive' for cleanup.policy: must be one of delete, compact"),
    ({"cleanup.policy": " , "}, "invalid value ' , ' for cleanup.policy: must list at least one of delete, compact"),
    ({"message.timestamp.type": "Now"},
     "invalid value 'Now' for message.timestamp.type: must be one of CreateTime, LogAppendTime"),
    ({"segment.bytes": "13"}, "invalid value '13' for segment.bytes: must be at least 14"),
    ({"min.cleanable.dirty.ratio": "1.5"}, "invalid value '1.5' for min.cleanable.dirty.ratio: must be at most 1"),
])
def test_each_problem_names_the_key_and_what_is_allowed(props, message):
    with pytest.raises(ConfigError) as raised:
        LogConfig().with_overrides(props)
    assert raised.value.problems == [message]


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as raised:
        LogConfig().with_overrides({"retention.ms": "x", "segment.bytes": "1", "nonsense.key.zzz": "1"})
    problems = raised.value.problems
    assert len(problems) == 3
    assert problems[2].startswith("unknown topic config 'nonsense.key.zzz' (topic configs are segment.bytes, ")
    assert all(name in problems[2] for name in TOPIC_CONFIGS)


def test_a_valid_override_still_parses():
    assert LogConfig().with_overrides({"retention.ms": " 60000 ", "min.cleanable.dirty.ratio": "0.1"}).retention_ms == 60000


def test_unknown_topic_config_of_a_broker_only_key_without_a_near_name():
    assert unknown_topic_config("zzzz").startswith("unknown topic config 'zzzz' (topic configs are ")
