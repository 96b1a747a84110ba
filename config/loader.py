"""Where the broker configuration comes from, and in what order the sources win.

Layers, lowest first; a key set in a higher layer replaces the same key from a lower one:

1. the embedded ``config/server.properties`` (always loaded, so a ``--config`` file only needs
   the keys it changes, and a bare start keeps its data under ``./data``);
2. the ``--config FILE``;
3. environment variables ``TRIOLOG_<KEY>``: the key upper-cased with ``.`` → ``_``
   (``TRIOLOG_LOG_RETENTION_MS`` sets ``log.retention.ms``);
4. ``--override key=value`` options, in order.

Layers merge key by key *before* Kafka's synonym precedence applies, exactly as Kafka's own
``--override`` does: ``log.retention.ms`` from a file still beats ``TRIOLOG_LOG_RETENTION_HOURS``.
For that reason the embedded file only sets the lowest-precedence synonyms (``log.dir``,
``log.retention.hours``), so that any synonym a user sets wins over it.

Mapping an environment name back to a key cannot simply turn ``_`` into ``.``, since that is
ambiguous in general; instead each variable is matched against the env names of the known keys
(no Kafka key contains ``_``, so the match is unique). Variables with the prefix that match no
key are ignored with a warning.
"""

from __future__ import annotations

import difflib
import importlib.resources
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from triolog.protocol.properties import format_properties, parse_properties

from .broker_config import BROKER_CONFIGS, BrokerConfig
from .log_config import ConfigError

ENV_PREFIX = "TRIOLOG_"
#: ``TRIOLOG_*`` variables that belong to the client tools, not to the broker's configuration:
#: the environment layer skips them without a warning (an operator's shell exports them for both).
CLIENT_ENVIRONMENT_VARIABLES = frozenset({"TRIOLOG_BOOTSTRAP_SERVER"})
EMBEDDED_CONFIG = "server.properties"

__all__ = [
    "CLIENT_ENVIRONMENT_VARIABLES",
    "EMBEDDED_CONFIG",
    "ENV_KEYS",
    "ENV_PREFIX",
    "embedded_properties",
    "env_var_name",
    "format_properties",
    "load_config",
    "parse_properties",
]


def env_var_name(key: str) -> str:
    """The environment variable that sets ``key``: ``log.retention.ms`` → ``TRIOLOG_LOG_RETENTION_MS``."""
    return ENV_PREFIX + key.upper().replace(".", "_")


#: Environment variable name → broker key, for every known key.
ENV_KEYS: dict[str, str] = {env_var_name(key): key for key in BROKER_CONFIGS}


# -- Java .properties --------------------------------------------------------------------------

#: What Java's String.trim removes (every char up to U+0020): Kafka's ConfigDef trims each value it
#: parses, so a value's surrounding whitespace in a file, which .properties syntax keeps, is not
#: part of the setting.
_KAFKA_TRIM = "".join(map(chr, range(0x21)))


def _config_properties(text: str) -> dict[str, str]:
    """The settings of a server.properties text: Java's syntax, values trimmed as Kafka's are."""
    return {key: value.strip(_KAFKA_TRIM) for key, value in parse_properties(text).items()}


# -- the layers --------------------------------------------------------------------------------


def embedded_properties() -> str:
    """The text of the embedded server.properties, read as package data so it works from a wheel."""
    return importlib.resources.files("triolog.config").joinpath(EMBEDDED_CONFIG).read_text(encoding="utf-8")


def _read_config_file(path: str) -> dict[str, str]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"cannot read config file {path}: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([f"config file {path} is not UTF-8: {exc}"]) from None
    try:
        return _config_properties(text)
    except ValueError as exc:
        raise ConfigError([f"config file {path}: {exc}"]) from None


def _from_environ(environ: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(properties, key → variable name, warnings) from the ``TRIOLOG_*`` variables."""
    props: dict[str, str] = {}
    variables: dict[str, str] = {}
    warnings: list[str] = []
    for variable in sorted(environ):
        if not variable.startswith(ENV_PREFIX) or variable in CLIENT_ENVIRONMENT_VARIABLES:
            continue
        key = ENV_KEYS.get(variable)
        if key is None:
            close = difflib.get_close_matches(variable, list(ENV_KEYS), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            warnings.append(f"environment variable {variable} matches no config key, ignored{hint}")
            continue
        props[key] = environ[variable]
        variables[key] = variable
    return props, variables, warnings


def _parse_overrides(overrides: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    props: dict[str, str] = {}
    problems: list[str] = []
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            problems.append(f"malformed --override {item!r}: expected key=value")
            continue
        props[key] = value
    return props, problems


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> tuple[BrokerConfig, list[str]]:
    """The broker configuration from all layers (see the module doc), plus warnings to log.

    ``environ`` defaults to ``os.environ``. Raises ConfigError for an unreadable file, malformed
    overrides and invalid values, all problems at once where they can be collected together.
    """
    layers: list[tuple[str, Mapping[str, str]]] = [
        (f"embedded {EMBEDDED_CONFIG}", _config_properties(embedded_properties())),
    ]
    if path is not None:
        layers.append((str(path), _read_config_file(str(path))))
    env_props, env_variables, warnings = _from_environ(os.environ if environ is None else environ)
    override_props, problems = _parse_overrides(overrides)

    merged: dict[str, str] = {}
    sources: dict[str, str] = {}
    for origin, props in layers:
        for key, value in props.items():
            merged[key] = value
            sources[key] = origin
    for key, value in env_props.items():
        merged[key] = value
        sources[key] = f"environment variable {env_variables[key]}"
    for key, value in override_props.items():
        merged[key] = value
        sources[key] = "--override"

    try:
        config, more_warnings = BrokerConfig.from_properties(merged, sources=sources)
    except ConfigError as exc:
        raise ConfigError(problems + exc.problems) from None
    if problems:
        raise ConfigError(problems)
    return config, warnings + more_warnings
