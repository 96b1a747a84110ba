"""The generated references of docs/ (configuration, metrics, Kafka APIs), so that they cannot drift.

``python -m triolog.config.reference`` prints them as markdown; ``--write`` replaces the text between
each pair of markers in the documents of ``DOCUMENTS`` (docs/configuration.md, docs/metrics.md,
docs/kafka-clients.md), ``--check`` exits 1 when that text is stale or its markers are missing,
which is what tests/ops/test_reference.py runs. ``--write FILE`` / ``--check FILE`` act on one file:
a document of ``DOCUMENTS`` holds its own markers, any other file all of them.

* The configuration reference renders ``BROKER_CONFIGS`` (every broker key with its type, what it
  allows, its default, the topic-level key it supplies the default for, its ``TRIOLOG_*``
  variable) plus the layers of ``triolog.config.loader`` and the environment-variable rule.
* The metrics reference renders the tables of broker/metrics.py's module docstring. That file is
  read as *text*, never imported: the config package must not import the broker (see
  tests/test_architecture.py), and reading the docstring needs nothing prometheus_client brings.
  The tables are reStructuredText simple tables with three columns (name, type, meaning); a name
  too long for its column stands alone on its line, its type and meaning on the lines below.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from .broker_config import BROKER_CONFIGS, BrokerConfigKey
from .loader import ENV_PREFIX, embedded_properties, env_var_name, parse_properties

__all__ = ["DOCUMENTS", "MARKERS", "check", "metrics_reference", "config_reference", "parse_metric_tables", "update"]

#: The metrics module, found beside this package (in the source tree and in an installed wheel).
METRICS_SOURCE = Path(__file__).resolve().parent.parent / "broker" / "metrics.py"
#: The repository root in a checkout (docs/ is not installed with the package).
ROOT = Path(__file__).resolve().parent.parent

_GROUP_TITLES = {
    "server": "Server",
    "log manager": "Log manager",
    "log cleaner": "Log cleaner",
    "topic defaults": "Topic defaults (broker-level synonyms of topic keys)",
}


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


def _default(key: BrokerConfigKey, embedded: dict[str, str]) -> str:
    """The key's own default, and the embedded server.properties' value where that differs."""
    text = _code(key.default_text) if key.default is not None else key.default_text
    if key.name in embedded and key.parse(embedded[key.name]) != key.default:
        text += f"; the embedded server.properties sets {_code(embedded[key.name])}"
    return text


def config_reference() -> str:
    """Markdown for every broker key, grouped as in broker_config.py, and the env-var mapping."""
    embedded = parse_properties(embedded_properties())
    out = [
        "Configuration layers, lowest first; a key set in a higher layer replaces it from a lower one:",
        "",
        "1. the embedded `config/server.properties` (always loaded);",
        "2. `triolog serve --config FILE`;",
        f"3. environment variables `{ENV_PREFIX}<KEY>`: the key upper-cased with every `.` turned into `_`"
        f" (`log.retention.ms` → `{env_var_name('log.retention.ms')}`). Each variable is matched against"
        " the keys below (no key contains `_`, so the match is unique); one that matches no key is"
        " ignored with a warning naming the closest;",
        "4. `--override key=value`, in order.",
        "",
        "Layers merge key by key before Kafka's synonym precedence applies, so `log.retention.ms` from a"
        " file still beats `TRIOLOG_LOG_RETENTION_HOURS`. Topic-level keys (the *Topic key* column) are"
        " set per topic with `triolog topics --create/--alter --config KEY=VALUE`; the broker key"
        " supplies their default.",
    ]
    groups: dict[str, list[BrokerConfigKey]] = {}
    for key in BROKER_CONFIGS.values():
        groups.setdefault(key.group, []).append(key)
    for group, keys in groups.items():
        out += [
            "",
            f"## {_GROUP_TITLES.get(group, group.capitalize())}",
            "",
            "| Key | Type, allowed values | Default | Topic key | Environment variable | Meaning |",
            "|---|---|---|---|---|---|",
        ]
        for key in keys:
            out.append(
                "| "
                + " | ".join(
                    _cell(c)
                    for c in (
                        _code(key.name),
                        key.describe_allowed(),
                        _default(key, embedded),
                        _code(key.topic_name or ""),
                        _code(env_var_name(key.name)),
                        key.doc,
                    )
                )
                + " |"
            )
    return "\n".join(out) + "\n"


# -- metrics -----------------------------------------------------------------------------------

_BORDER = re.compile(r"^\s*=+(\s+=+)+\s*$")
_SECTION = re.compile(r"^\s*\*\s+\*\*(?P<title>[^*]+)\*\*")


def parse_metric_tables(docstring: str) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """(section title, [(name, type, meaning)]) for each simple table of the docstring, in order."""
    tables: list[tuple[str, list[tuple[str, str, str]]]] = []
    title = ""
    lines = docstring.splitlines()
    i = 0
    while i < len(lines):
        section = _SECTION.match(lines[i])
        if section:
            title = section["title"].strip()
        if not _BORDER.match(lines[i]):
            i += 1
            continue
        indent = len(lines[i]) - len(lines[i].lstrip())
        rows: list[list[str]] = []
        i += 1
        while i < len(lines) and not _BORDER.match(lines[i]):
            line = lines[i]
            i += 1
            if not line.strip():
                continue
            if len(line) - len(line.lstrip()) <= indent:  # a name in the first column: a new row
                rows.append(line.split(None, 2) + [""] * (3 - len(line.split(None, 2))))
            elif rows and not rows[-1][1]:  # the name stood alone: this line has type and meaning
                type_, _, meaning = line.strip().partition(" ")
                rows[-1][1], rows[-1][2] = type_, meaning.strip()
            elif rows:
                rows[-1][2] = f"{rows[-1][2]} {line.strip()}".strip()
        i += 1  # the closing border
        tables.append((title, [(name, type_, meaning) for name, type_, meaning in rows]))
    return tables


def _rst_to_md(text: str) -> str:
    return re.sub(r"``([^`]+)``", r"`\1`", " ".join(text.split()))


def metrics_reference(source: Path = METRICS_SOURCE) -> str:
    """Markdown tables of the metrics documented in broker/metrics.py's module docstring."""
    docstring = ast.get_docstring(ast.parse(source.read_text(encoding="utf-8"))) or ""
    tables = parse_metric_tables(docstring)
    if not tables:
        raise ValueError(f"no metric table in the docstring of {source}")
    out = [
        "Served at `metrics.listener` (`http://host:port/metrics`). Per-partition series carry the"
        " labels `topic` and `partition`; prometheus_client adds `process_*` and `python_*`."
    ]
    for title, rows in tables:
        out += ["", f"## {title or 'Metrics'}", "", "| Metric | Type | Meaning, labels |", "|---|---|---|"]
        out += [f"| `{name}` | {_cell(type_)} | {_cell(_rst_to_md(meaning))} |" for name, type_, meaning in rows]
    return "\n".join(out) + "\n"


def kafka_apis_reference() -> str:
    """The Kafka listener's APIs and versions, as ApiVersions advertises them."""
    from triolog.protocol.kafka.served import ADAPTERS

    out = ["| Kafka API | Key | Versions | Served by |", "|---|---|---|---|"]
    for key, adapter in sorted(ADAPTERS.items()):
        served_by = "the Kafka listener itself" if adapter.label in _LISTENER_ONLY else f"`{adapter.label}`"
        out.append(f"| {adapter.name} | {key} | {adapter.min_version}–{adapter.max_version} | {served_by} |")
    return "\n".join(out) + "\n"


#: Kafka APIs answered without a handler request of the msgpack protocol's.
_LISTENER_ONLY = frozenset({"api_versions", "describe_cluster"})


# -- markers in docs/ -------------------------------------------------------------------------

#: Marker name → renderer; a document holds ``<!-- NAME:begin -->`` ... ``<!-- NAME:end -->``.
MARKERS: dict[str, Callable[[], str]] = {
    "config-reference": config_reference,
    "metrics-reference": metrics_reference,
    "kafka-apis": kafka_apis_reference,
}

#: Where each generated reference lives, relative to the repository root.
DOCUMENTS: dict[str, tuple[str, ...]] = {
    "docs/configuration.md": ("config-reference",),
    "docs/metrics.md": ("metrics-reference",),
    "docs/kafka-clients.md": ("kafka-apis",),
}


def _block(name: str, body: str) -> str:
    return (
        f"<!-- {name}:begin -->\n<!-- generated by `python -m triolog.config.reference --write`;"
        f" edit the sources, not this text -->\n\n{body}\n<!-- {name}:end -->"
    )


def _constant(text: str) -> Callable[[re.Match[str]], str]:
    """A re.sub replacement that is ``text`` as it is (no backslash or group processing)."""
    return lambda _: text


def markers_of(path: Path) -> tuple[str, ...]:
    """The markers ``path`` must hold: its own if it is one of ``DOCUMENTS``, else all of them."""
    for document, names in DOCUMENTS.items():
        if path.resolve() == (ROOT / document).resolve():
            return names
    return tuple(MARKERS)


def update(text: str, names: Sequence[str] = tuple(MARKERS)) -> tuple[str, list[str]]:
    """``text`` with the marked blocks ``names`` regenerated, and those of them that are missing."""
    missing = []
    for name in names:
        pattern = re.compile(rf"<!-- {re.escape(name)}:begin -->.*?<!-- {re.escape(name)}:end -->", re.S)
        if not pattern.search(text):
            missing.append(name)
            continue
        block = _block(name, MARKERS[name]())
        text = pattern.sub(_constant(block), text, count=1)
    return text, missing


def check(path: Path) -> list[str]:
    """What is stale or missing in ``path`` (empty when it is up to date)."""
    text = path.read_text(encoding="utf-8")
    updated, missing = update(text, markers_of(path))
    problems = [f"{path}: markers <!-- {name}:begin --> / <!-- {name}:end --> not found" for name in missing]
    if updated != text:
        problems.append(f"{path}: generated reference is out of date; run python -m triolog.config.reference --write")
    return problems


def write(path: Path) -> list[str]:
    """Regenerate the marked blocks of ``path``; the markers it lacks."""
    text = path.read_text(encoding="utf-8")
    updated, missing = update(text, markers_of(path))
    if updated != text:
        path.write_text(updated, encoding="utf-8")
    return [f"{path}: markers <!-- {name}:begin --> / <!-- {name}:end --> not found" for name in missing]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m triolog.config.reference", description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument(
        "--write",
        metavar="FILE",
        type=Path,
        nargs="?",
        const=(),
        help="regenerate the marked blocks of FILE (default: the documents in docs/)",
    )
    action.add_argument(
        "--check",
        metavar="FILE",
        type=Path,
        nargs="?",
        const=(),
        help="exit 1 if the marked blocks of FILE (default: the documents in docs/) are stale",
    )
    args = parser.parse_args(argv)
    for option, act in ((args.check, check), (args.write, write)):
        if option is None:
            continue
        paths = [option] if isinstance(option, Path) else [ROOT / document for document in DOCUMENTS]
        problems = [problem for path in paths for problem in act(path)]
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    for name, render in MARKERS.items():
        print(_block(name, render()))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
