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
import re
from pathlib import Path
from typing import Iterator, Mapping, Sequence

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

_WHITESPACE = " \t\f"  # java.util.Properties' whitespace; not str.isspace()
_SEPARATORS = "=:"
_NEWLINE = re.compile(r"\r\n|\r|\n")  # not str.splitlines(), which also splits on \v, \x1c, \u2028...
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Yield (first line number, logical line): comments and blanks dropped, continuations joined."""
    lines = _NEWLINE.split(text)
    index = 0
    while index < len(lines):
        line_no = index + 1
        line = lines[index].lstrip(_WHITESPACE)
        index += 1
        if not line or line[0] in "#!":
            continue
        parts = []
        # An odd number of trailing backslashes escapes the line end; the next line's indent is dropped.
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            parts.append(line[:-1])
            if index >= len(lines):
                line = ""
                break
            line = lines[index].lstrip(_WHITESPACE)
            index += 1
        parts.append(line)
        yield line_no, "".join(parts)


def _unescape(line: str, line_no: int) -> list[tuple[str, bool]]:
    """The characters of a logical line, each flagged True if it was written escaped."""
    chars: list[tuple[str, bool]] = []
    i = 0
    while i < len(line):
        ch = line[i]
        if ch != "\\":
            chars.append((ch, False))
            i += 1
            continue
        nxt = line[i + 1] if i + 1 < len(line) else ""
        if nxt == "u":
            digits = line[i + 2:i + 6]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"line {line_no}: malformed \\uXXXX escape {line[i:i + 6]!r}")
            chars.append((chr(int(digits, 16)), True))
            i += 6
        else:
            chars.append((_ESCAPES.get(nxt, nxt), True))
            i += 2
    return chars


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text: what Kafka's ``server.properties`` files are written in.

    ``#``/``!`` comment lines; key and value separated by ``=``, ``:`` or whitespace; a line
    ending in an odd number of backslashes continues on the next (whose indent is dropped);
    escapes ``\\t \\n \\r \\f \\uXXXX`` and ``\\`` before any other character. Unlike Java, unescaped
    trailing whitespace of a value is trimmed too (a stray space after a number is never meant),
    and the text is Unicode rather than ISO-8859-1. The last of duplicate keys wins. Raises
    ValueError for a malformed ``\\u`` escape.
    """
    props: dict[str, str] = {}
    for line_no, line in _logical_lines(text):
        chars = _unescape(line, line_no)
        i = 0
        while i < len(chars) and not (not chars[i][1] and chars[i][0] in _WHITESPACE + _SEPARATORS):
            i += 1
        key = "".join(ch for ch, _ in chars[:i])
        while i < len(chars) and not chars[i][1] and chars[i][0] in _WHITESPACE:
            i += 1
        if i < len(chars) and not chars[i][1] and chars[i][0] in _SEPARATORS:
            i += 1
            while i < len(chars) and not chars[i][1] and chars[i][0] in _WHITESPACE:
                i += 1
        end = len(chars)
        while end > i and not chars[end - 1][1] and chars[end - 1][0] in _WHITESPACE:
            end -= 1
        props[key] = "".join(ch for ch, _ in chars[i:end])
    return props


def _escape(text: str, is_key: bool) -> str:
    out = []
    for pos, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[ch])
        elif ord(ch) < 0x20 or ch == "\x7f" or ch in "\x85\u2028\u2029":
            out.append(f"\\u{ord(ch):04x}")
        elif ch in "=:#!" or (ch == " " and (is_key or pos == 0 or pos == len(text) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def format_properties(props: Mapping[str, str]) -> str:
    """``key=value`` lines that ``parse_properties`` reads back as ``props``."""
    return "".join(f"{_escape(key, True)}={_escape(value, False)}\n" for key, value in props.items())


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
        return parse_properties(text)
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
        (f"embedded {EMBEDDED_CONFIG}", parse_properties(embedded_properties())),
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
