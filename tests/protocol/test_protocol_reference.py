"""docs/protocol.md, the written protocol reference, against the schema it describes.

The expectation comes from the code by introspection: the message dataclasses of
``triolog.protocol.messages`` (field names, wire types, defaults, the ``IntRange``/``OneOf``/
``Unique`` annotations), ``ErrorCode``, ``SUPPORTED_APIS`` and the request limits. The document's
tables are parsed, not searched for words, so a field the doc forgets, a field it invents, a
wrong type, default, required-ness or range fails here. Each failure says which table and which
row to add, remove or fix, with the row spelled out: adding an API or a field to the schema
means adding rows to the document, nothing else.

How the document's tables are found: a table belongs to the heading just above it, and the
heading names it (backticks and case ignored): ``request envelope``, ``response envelope``,
``<api> request``, ``<api> response``, ``apis``, ``error codes``, ``limits``, ``object budgets``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import struct
import types
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin, get_type_hints

import pytest

from triolog.broker.storage.filenames import MAX_TOPIC_NAME_LENGTH
from triolog.broker.storage.topics import MAX_PARTITIONS
from triolog.client.errors import error_class
from triolog.config.broker_config import BROKER_CONFIGS
from triolog.config.log_config import TOPIC_CONFIGS
from triolog.protocol import messages as m
from triolog.protocol.compression import MAX_DECOMPRESSED_BYTES
from triolog.protocol.errors import BROKER_CODES, ErrorCode
from triolog.protocol.frames import DEFAULT_MAX_FRAME_BYTES
from triolog.protocol.request_limits import ENVELOPE_OBJECTS, MAX_STR_BYTES, OBJECTS_PER_ENTRY, RequestLimits

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "protocol.md"
DOC_NAME = "docs/protocol.md"

FIELD_COLUMNS = ("field", "type", "required", "default", "allowed", "meaning")
#: Cells compared with the schema; "meaning" is the document's own prose and only must not be empty.
CHECKED_COLUMNS = FIELD_COLUMNS[1:5]
NONE_TEXT = "—"

# --- what the schema says ----------------------------------------------------------------------

_WIDTHS = (("int16", 16), ("int32", 32), ("int64", 64))


@dataclasses.dataclass(frozen=True)
class Row:
    field: str
    type: str
    required: str
    default: str
    allowed: str

    def markdown(self) -> str:
        return (f"| `{self.field}` | {self.type} | {self.required} | {_code(self.default)} | {self.allowed} "
                f"| <what it means> |")


def _code(text: str) -> str:
    return text if text == NONE_TEXT else f"`{text}`"


def _width_bounds(name: str) -> tuple[int, int]:
    bits = dict(_WIDTHS)[name]
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def _unwrap(tp: Any) -> tuple[Any, list[Any]]:
    constraints: list[Any] = []
    while get_origin(tp) is Annotated:
        args = get_args(tp)
        tp, constraints = args[0], constraints + list(args[1:])
    return tp, constraints


def _scalar_text(tp: Any) -> str:
    names = {int: "int", bool: "bool", str: "str", bytes: "bin"}
    if tp not in names:
        raise TypeError(f"no wire type name for {tp!r}: teach {__name__} how to document it")
    return names[tp]


def _int_text(constraints: list[Any]) -> str:
    """The Kafka wire width of an int field: the narrowest one its IntRange fits, else plain int."""
    ranges = [c for c in constraints if isinstance(c, m.IntRange)]
    if not ranges:
        return "int"
    lo, hi = max(r.lo for r in ranges), min(r.hi for r in ranges)
    for name, _ in _WIDTHS:
        wlo, whi = _width_bounds(name)
        if wlo <= lo and hi <= whi:
            return name
    raise TypeError(f"IntRange [{lo}, {hi}] fits no Kafka int width")


def _value_text(value: Any) -> str:
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bytes):
        return "empty bin" if not value else "computed"
    if isinstance(value, (tuple, list)):
        return "[]" if not value else "computed"
    if isinstance(value, dict):
        return "{}" if not value else "computed"
    raise TypeError(f"no document spelling for the default {value!r}")


def _constraint_text(constraint: Any, type_text: str) -> str | None:
    if isinstance(constraint, m.IntRange):
        width = type_text.split(" ")[0]
        wlo, whi = _width_bounds(width) if width != "int" else (None, None)
        lo, hi = constraint.lo, constraint.hi
        if (lo, hi) == (wlo, whi):
            return None
        if hi == whi:
            return f"≥ {lo}"
        if lo == wlo:
            return f"≤ {hi}"
        return f"{lo} to {hi}"
    if isinstance(constraint, m.OneOf):
        return "one of " + ", ".join(_value_text(v) for v in constraint.values)
    if isinstance(constraint, m.Unique):
        return "no duplicates" if constraint.key is None else f"no two with the same {constraint.key}"
    raise TypeError(f"no document spelling for the constraint {constraint!r}: teach {__name__} how to say it")


def _describe(tp: Any) -> tuple[str, str, tuple[str, type] | None]:
    """(type, allowed, nested) of one field annotation; nested is ("[]" or "{}", its dataclass)."""
    nullable = False
    if get_origin(tp) in (Union, types.UnionType):
        args = get_args(tp)
        # ExternalBin is the broker's stand-in for bin bytes it sends from a file: bin on the wire.
        options = [a for a in args if a is not type(None) and a is not m.ExternalBin]
        nullable = type(None) in args
        if len(options) != 1:
            raise TypeError(f"no single wire type for {tp!r}")
        tp = options[0]
    tp, constraints = _unwrap(tp)
    origin, args = get_origin(tp), get_args(tp)
    nested = None
    item_allowed = NONE_TEXT
    if origin in (tuple, dict):
        item = args[0] if origin is tuple else args[1]
        if dataclasses.is_dataclass(_unwrap(item)[0]):
            text, nested = "map", ("[]" if origin is tuple else "{}", _unwrap(item)[0])
        else:
            text, item_allowed, _ = _describe(item)
        text = f"array of {text}" if origin is tuple else f"map of str to {text}"
    elif tp is int:
        text = _int_text(constraints)
    else:
        text = _scalar_text(tp)
    allowed_parts = [t for t in (_constraint_text(c, text) for c in constraints) if t]
    if item_allowed != NONE_TEXT:
        allowed_parts.append(f"each {item_allowed}")
    allowed = "; ".join(allowed_parts) or NONE_TEXT
    if nullable:
        text += " or nil"
    return text, allowed, nested


def _default_of(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return _value_text(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return _value_text(f.default_factory())
    return NONE_TEXT


def schema_rows(cls: type, side: str, prefix: str = "", skip: frozenset[str] = frozenset()) -> list[Row]:
    """The rows a message table must hold, nested structures flattened into dotted paths.

    Requests: a field with a default is optional ("no") and takes that default when absent or nil.
    Responses: the broker sends every field (clients decode them strictly); the default is the
    value a field holds when the broker has nothing to say in it, e.g. in an error entry.
    """
    hints = get_type_hints(cls, include_extras=True)
    rows = []
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        path = prefix + f.name
        type_text, allowed, nested = _describe(hints[f.name])
        default = _default_of(f)
        if side == "request":
            required = "yes" if default == NONE_TEXT else "no"
            if cls is m.Request and f.name == "v":  # read before the schema, required on the wire
                required, default = "yes", NONE_TEXT
        else:
            required = "yes"
        rows.append(Row(path, type_text, required, default, allowed))
        if nested is not None:
            rows.extend(schema_rows(nested[1], side, f"{path}{nested[0]}."))
    return rows


REQUEST_ENVELOPE = frozenset(f.name for f in dataclasses.fields(m.Request))
RESPONSE_ENVELOPE = frozenset(f.name for f in dataclasses.fields(m.Response))


def expected_field_tables() -> dict[str, list[Row]]:
    """Table name -> rows, for every message the schema declares."""
    tables = {
        "request envelope": [Row("api", "str", "yes", NONE_TEXT, NONE_TEXT), *schema_rows(m.Request, "request")],
        "response envelope": schema_rows(m.Response, "response"),
    }
    for api in m.SUPPORTED_APIS:
        tables[f"{api} request"] = schema_rows(m.REQUEST_TYPES[api], "request", skip=REQUEST_ENVELOPE)
        tables[f"{api} response"] = schema_rows(m.RESPONSE_TYPES[api], "response", skip=RESPONSE_ENVELOPE)
    return tables


# --- what the document says --------------------------------------------------------------------

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def _cells(line: str) -> list[str]:
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [cell.strip().replace("\\|", "|").replace("`", "").strip() for cell in _CELL_SPLIT.split(inner)]


def _table_name(heading: str) -> str:
    return " ".join(heading.replace("`", "").lower().split())


def parse_tables(text: str) -> dict[str, list[dict[str, str]]]:
    """Heading name -> the first table under it, each row a dict by lower-cased column name."""
    tables: dict[str, list[dict[str, str]]] = {}
    headings: list[str] = []
    current: str | None = None
    lines = text.splitlines()
    in_fence = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            i += 1
            continue
        heading = None if in_fence else _HEADING.match(line)
        if heading:
            current = _table_name(heading.group(2))
            headings.append(current)
            i += 1
            continue
        if not in_fence and line.lstrip().startswith("|") and current is not None:
            block = []
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                block.append(lines[i])
                i += 1
            if current not in tables and len(block) >= 2:
                header = [c.lower() for c in _cells(block[0])]
                tables[current] = [dict(zip(header, _cells(row))) for row in block[2:]]
            continue
        i += 1
    duplicates = sorted({h for h in headings if headings.count(h) > 1 and h in tables})
    if duplicates:
        raise AssertionError(f"{DOC_NAME}: these headings hold a table and appear twice: {duplicates}")
    return tables


def field_table_problems(name: str, expected: list[Row], table: list[dict[str, str]] | None) -> list[str]:
    """What is wrong with one message table, each problem saying which row to add, remove or fix."""
    if table is None:
        rows = "\n".join(row.markdown() for row in expected) or "(a table with no rows: the message has no fields)"
        header = "| " + " | ".join(FIELD_COLUMNS) + " |\n|" + "---|" * len(FIELD_COLUMNS)
        return [f"add a heading '#### {_heading_spelling(name)}' with this table under it:\n{header}\n{rows}"]
    problems = []
    if table and set(FIELD_COLUMNS) - set(table[0]):
        return [f"table '{name}': its columns must be {' | '.join(FIELD_COLUMNS)}, found {' | '.join(table[0])}"]
    documented: dict[str, dict[str, str]] = {}
    for row in table:
        if row["field"] in documented:
            problems.append(f"table '{name}': row `{row['field']}` appears twice; keep one")
        documented[row["field"]] = row
    wanted = {row.field: row for row in expected}
    for path, row in wanted.items():
        found = documented.get(path)
        if found is None:
            problems.append(f"table '{name}': add row\n{row.markdown()}")
            continue
        for column in CHECKED_COLUMNS:
            want = getattr(row, column)
            if found.get(column, "") != want:
                problems.append(f"table '{name}', row `{path}`: column '{column}' says {found.get(column, '')!r}, "
                                f"the schema says {want!r}")
        if not found.get("meaning"):
            problems.append(f"table '{name}', row `{path}`: say in 'meaning' what the field is for")
    for path in documented.keys() - wanted.keys():
        problems.append(f"table '{name}': remove row `{path}`: the schema has no such field")
    return problems


def _heading_spelling(name: str) -> str:
    api, _, side = name.partition(" ")
    return f"`{api}` {side}" if api in m.SUPPORTED_APIS else name[0].upper() + name[1:]


def _report(problems: list[str]) -> str:
    return f"{DOC_NAME} disagrees with the schema ({len(problems)} problems):\n\n" + "\n\n".join(problems)


@pytest.fixture(scope="module")
def doc_text() -> str:
    assert DOC.is_file(), f"{DOC_NAME} is missing: the protocol reference lives there"
    return DOC.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def tables(doc_text) -> dict[str, list[dict[str, str]]]:
    return parse_tables(doc_text)


# --- the checks ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(expected_field_tables()))
def test_message_table_matches_schema(tables, name):
    problems = field_table_problems(name, expected_field_tables()[name], tables.get(name))
    assert not problems, _report(problems)


def test_no_table_documents_an_api_the_schema_lacks(tables):
    message_tables = {n for n in tables if re.fullmatch(r"\S+ (request|response)", n)}
    extra = sorted(message_tables - set(expected_field_tables()))
    assert not extra, _report([f"table '{n}': remove it (or its heading): no such API in the schema" for n in extra])


def _versions_text(api: str) -> str:
    lo, hi = m.SUPPORTED_APIS[api]
    return str(lo) if lo == hi else f"{lo} to {hi}"


def test_api_table_lists_every_api_and_its_versions(tables):
    table = tables.get("apis")
    assert table is not None, _report(["add a heading '## APIs' with a table | api | versions | what it does |"])
    documented = {row["api"]: row for row in table}
    problems = []
    for api in m.SUPPORTED_APIS:
        row = documented.get(api)
        if row is None:
            problems.append(f"table 'apis': add row\n| `{api}` | {_versions_text(api)} | <what it does> |")
        elif row["versions"] != _versions_text(api):
            problems.append(f"table 'apis', row `{api}`: versions says {row['versions']!r}, "
                            f"SUPPORTED_APIS says {_versions_text(api)!r}")
    problems += [f"table 'apis': remove row `{api}`: no such API" for api in documented.keys() - m.SUPPORTED_APIS.keys()]
    assert not problems, _report(problems)


def test_error_code_table_matches_error_codes(tables):
    table = tables.get("error codes")
    assert table is not None, _report(["add a heading '## Error codes' with a table "
                                       "| code | name | retriable | when the broker sends it |"])
    problems = []
    documented = {}
    for row in table:
        try:
            documented[int(row["code"])] = row
        except ValueError:
            problems.append(f"table 'error codes': code {row['code']!r} is not a number")
    for code in sorted(BROKER_CODES):
        retriable = "—" if code == ErrorCode.NONE else ("yes" if error_class(code).retriable else "no")
        row = documented.get(int(code))
        if row is None:
            problems.append(f"table 'error codes': add row\n| {int(code)} | `{code.name}` | {retriable} | <when> |")
            continue
        if row["name"] != code.name:
            problems.append(f"table 'error codes', code {int(code)}: name says {row['name']!r}, "
                            f"ErrorCode says {code.name!r}")
        if row["retriable"] != retriable:
            problems.append(f"table 'error codes', code {int(code)}: retriable says {row['retriable']!r}, the "
                            f"client's {error_class(code).__name__}.retriable says {retriable!r}")
        if not row.get("when the broker sends it"):
            problems.append(f"table 'error codes', code {int(code)}: say when the broker sends it")
    known = {int(c) for c in BROKER_CODES}
    problems += [f"table 'error codes': remove code {c}: the broker does not send it (BROKER_CODES)"
                 for c in documented.keys() - known]
    assert not problems, _report(problems)


#: Limits fixed in code (not configurable), by the name of their row in the 'limits' table.
FIXED_LIMITS = {
    "string length": MAX_STR_BYTES,
    "envelope objects": ENVELOPE_OBJECTS,
    "topic name length": MAX_TOPIC_NAME_LENGTH,
    "partitions per topic": MAX_PARTITIONS,
    "decompressed batch": MAX_DECOMPRESSED_BYTES,
}
#: Configurable limits every client meets, by config key.
CONFIGURED_LIMITS = ("socket.request.max.bytes", "queued.max.request.bytes", "request.receive.timeout.ms",
                     "connections.max.idle.ms", "max.connections", "max.connections.per.ip",
                     "max.broker.partitions", "max.message.bytes")


def _config_default(key: str) -> int | None:
    if key in BROKER_CONFIGS:
        return BROKER_CONFIGS[key].default
    if key in TOPIC_CONFIGS:
        return TOPIC_CONFIGS[key].default
    return None


def test_limits_table_matches_code(tables):
    table = tables.get("limits")
    assert table is not None, _report(["add a heading '## Limits' with a table | limit | config key | default | beyond it |"])
    problems = []
    by_limit = {row["limit"]: row for row in table}
    by_key = {row["config key"]: row for row in table if row["config key"] != NONE_TEXT}
    for name, value in FIXED_LIMITS.items():
        row = by_limit.get(name)
        if row is None:
            problems.append(f"table 'limits': add row\n| {name} | {NONE_TEXT} | {value} | <what happens beyond it> |")
        elif row["default"] != str(value):
            problems.append(f"table 'limits', row {name!r}: default says {row['default']!r}, the code says {value}")
    for key in CONFIGURED_LIMITS:
        if key not in by_key:
            problems.append(f"table 'limits': add row\n| <limit> | `{key}` | {_config_default(key)} | <beyond it> |")
    for key, row in by_key.items():
        default = _config_default(key)
        if default is None:
            problems.append(f"table 'limits', row {row['limit']!r}: {key!r} is neither a broker nor a topic key")
        elif row["default"] != str(default):
            problems.append(f"table 'limits', row {row['limit']!r}: default says {row['default']!r}, "
                            f"{key} defaults to {default}")
    assert DEFAULT_MAX_FRAME_BYTES == BROKER_CONFIGS["socket.request.max.bytes"].default
    assert not problems, _report(problems)


def test_object_budget_table_matches_request_limits(tables):
    table = tables.get("object budgets")
    assert table is not None, _report(["add a heading '### Object budgets' with a table "
                                       "| api | objects per entry | most objects at the default max.broker.partitions |"])
    limits = RequestLimits()
    documented = {row["api"]: row for row in table}
    problems = []
    for api, per_entry in OBJECTS_PER_ENTRY.items():
        most = limits.max_objects(api)
        row = documented.get(api)
        if row is None:
            problems.append(f"table 'object budgets': add row\n| `{api}` | {per_entry} | {most} |")
            continue
        if row["objects per entry"] != str(per_entry):
            problems.append(f"table 'object budgets', row `{api}`: objects per entry says "
                            f"{row['objects per entry']!r}, OBJECTS_PER_ENTRY says {per_entry}")
        column = "most objects at the default max.broker.partitions"
        if row.get(column) != str(most):
            problems.append(f"table 'object budgets', row `{api}`: {column!r} says {row.get(column)!r}, "
                            f"RequestLimits().max_objects says {most}")
    problems += [f"table 'object budgets': remove row `{api}`" for api in documented.keys() - OBJECTS_PER_ENTRY.keys()]
    assert not problems, _report(problems)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_document_stands_alone(doc_text):
    """Relative links resolve inside the repository; nothing points at a path of some machine."""
    problems = []
    anchors = {_slug(h) for h in re.findall(r"^#{1,6}\s+(.*?)\s*$", doc_text, re.M)}
    for target in re.findall(r"\]\(([^)\s]+)\)", doc_text):
        if target.startswith("#"):
            if target[1:] not in anchors:
                problems.append(f"link {target!r} names no heading of the document")
            continue
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        path = (DOC.parent / target.split("#")[0]).resolve()
        if not path.is_relative_to(ROOT) or not path.exists():
            problems.append(f"link {target!r} does not name a file of the repository")
    for pattern in (r"/home/", r"/Users/"):  # someone's home; links above are checked to stay in the clone
        problems += [f"names a local path: {hit!r}" for hit in re.findall(rf"\S*{pattern}\S*", doc_text)]
    assert not problems, f"{DOC_NAME}: " + "; ".join(problems)


def test_byte_by_byte_example_is_a_valid_request(doc_text):
    """The session example's hex is a whole frame that the broker's decoder reads as it says."""
    section = doc_text.split("## A session, byte by byte", 1)
    assert len(section) == 2, f"{DOC_NAME}: the section '## A session, byte by byte' is missing"
    block = re.search(r"```\n(.*?)```", section[1], re.S)
    assert block, f"{DOC_NAME}: the session example has no code block"
    hex_bytes = []
    for line in block.group(1).splitlines():
        for token in line.split():
            if not re.fullmatch(r"[0-9a-f]{2}", token):
                break  # the rest of the line is its comment
            hex_bytes.append(token)
    frame = bytes.fromhex("".join(hex_bytes))
    (length,) = struct.unpack(">I", frame[:4])
    assert length == len(frame) - 4, f"{DOC_NAME}: the example's length prefix says {length}, {len(frame) - 4} follow"
    request = m.decode_request(frame[4:])
    assert isinstance(request, m.ApiVersionsRequest) and request.id == 7 and request.v == 1


def test_readme_links_the_protocol_reference():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"\]\((\./)?docs/protocol\.md(#[^)]*)?\)", readme), (
        "README.md must link the protocol reference: [...](docs/protocol.md)")


# --- the checker itself ----------------------------------------------------------------------


def test_checker_reports_drift_row_by_row(doc_text):
    """Mutations of a correct document are each reported with the row to fix, add or remove."""
    name = "produce request"
    expected = expected_field_tables()[name]
    table = parse_tables(doc_text)[name]
    assert field_table_problems(name, expected, table) == []
    acks = next(r for r in table if r["field"] == "acks")

    wrong_type = [dict(r, type="int64") if r is acks else r for r in table]
    assert any("row `acks`: column 'type'" in p for p in field_table_problems(name, expected, wrong_type))
    wrong_allowed = [dict(r, allowed="one of 0, 1") if r is acks else r for r in table]
    assert any("column 'allowed'" in p for p in field_table_problems(name, expected, wrong_allowed))
    wrong_default = [dict(r, required="no", default="1") if r is acks else r for r in table]
    assert len(field_table_problems(name, expected, wrong_default)) == 2
    missing = [r for r in table if r is not acks]
    assert [p for p in field_table_problems(name, expected, missing) if "add row\n| `acks` | int | yes |" in p]
    invented = table + [dict(acks, field="topics[].compression")]
    assert field_table_problems(name, expected, invented) == [
        "table 'produce request': remove row `topics[].compression`: the schema has no such field"]
    absent = field_table_problems("metadata request", expected_field_tables()["metadata request"], None)
    assert "add a heading '#### `metadata` request'" in absent[0] and "| `topics` |" in absent[0]


def test_schema_rows_follow_a_new_field():
    """A field added to a message (as the CLIENT helper's allow_auto_topic_creation) asks for its row."""

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Extended(m.MetadataRequest):
        allow_auto_topic_creation: bool = True
        level: Annotated[int, m.IntRange(0, 3)] = 0

    rows = {r.field: r for r in schema_rows(Extended, "request", skip=REQUEST_ENVELOPE)}
    assert rows["allow_auto_topic_creation"] == Row("allow_auto_topic_creation", "bool", "no", "true", NONE_TEXT)
    assert rows["level"] == Row("level", "int16", "no", "0", "0 to 3")
    assert rows["topics"] == Row("topics", "array of str or nil", "no", "nil", "no duplicates")

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Dirs:
        partitions: Annotated[tuple[m.NonNegativeInt32, ...], m.Unique()]
        sizes: dict[str, m.Int64] = dataclasses.field(default_factory=dict)

    rows = {r.field: r for r in schema_rows(Dirs, "request")}
    assert rows["partitions"] == Row("partitions", "array of int32", "yes", NONE_TEXT, "no duplicates; each ≥ 0")
    assert rows["sizes"] == Row("sizes", "map of str to int64", "no", "{}", NONE_TEXT)


# --- the worked examples of the byte formats ---------------------------------------------------


def _hex_examples(doc_text: str) -> dict[str, bytes]:
    """Label -> bytes of every worked example in a code block: label lines (the last one ending
    with ':') followed by indented lines of hex."""
    examples: dict[str, bytes] = {}
    for block in re.findall(r"```\n(.*?)```", doc_text, re.S):
        label: list[str] = []
        for line in block.splitlines():
            hex_line = line.startswith("  ") and re.fullmatch(r"[0-9a-f ]+", line.strip())
            if hex_line and label and label[-1].endswith(":"):
                name = " ".join(label)[:-1]
                examples[name] = examples.get(name, b"") + bytes.fromhex(line)
            elif not line.startswith("  "):
                label = label + [line.strip()] if label and not label[-1].endswith(":") else [line.strip()]
    return examples


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _subscription(version: int, topics: list[str]) -> bytes:
    out = struct.pack(">hi", version, len(topics)) + b"".join(_string(t) for t in topics) + struct.pack(">i", -1)
    if version >= 1:
        out += struct.pack(">i", 0)  # owned_partitions []
    if version >= 2:
        out += struct.pack(">i", -1)  # generation_id
    if version >= 3:
        out += struct.pack(">h", -1)  # rack_id nil
    return out


def _java_hash(text: str) -> int:
    h = 0
    for (unit,) in struct.iter_unpack(">H", text.encode("utf-16-be")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def test_worked_byte_examples_are_what_their_labels_describe(doc_text):
    """Each hex example is rebuilt here from its label's values, field by field."""
    from crc32c import crc32c

    def snapshot(entries: list[tuple[int, ...]]) -> bytes:
        body = struct.pack(">i", len(entries)) + b"".join(struct.pack(">qhiqiqiq", *e) for e in entries)
        return struct.pack(">hI", 1, crc32c(body)) + body

    assignment = struct.pack(">hi", 0, 1) + _string("orders") + struct.pack(">iiii", 2, 0, 1, -1)
    expected = {
        "Subscription v0, topics [\"orders\"], user_data nil": _subscription(0, ["orders"]),
        "Subscription v3, topics [\"orders\"], user_data nil, owned_partitions [], generation_id -1, rack_id nil":
            _subscription(3, ["orders"]),
        "Assignment v0, orders [0, 1], user_data nil (v3: the same bytes, starting 0003)": assignment,
        "OffsetCommitKey v1, group \"my-group\", topic \"orders\", partition 3":
            struct.pack(">h", 1) + _string("my-group") + _string("orders") + struct.pack(">i", 3),
        "OffsetCommitValue v3, offset 42, leader_epoch -1, metadata \"\", commit_timestamp 1700000000000":
            struct.pack(">hqi", 3, 42, -1) + _string("") + struct.pack(">q", 1_700_000_000_000),
        "GroupMetadataKey v2, group \"my-group\"": struct.pack(">h", 2) + _string("my-group"),
        "no producers (10 bytes)": snapshot([]),
        "one producer, id 1000, epoch 0, last_sequence 9, last_offset 41, offset_delta 9, timestamp 1700000000000, "
        "coordinator_epoch -1, current_txn_first_offset -1 (56 bytes)":
            snapshot([(1000, 0, 9, 41, 9, 1_700_000_000_000, -1, -1)]),
    }  # fmt: skip
    examples = _hex_examples(doc_text)
    assert examples.keys() >= expected.keys(), f"{DOC_NAME}: examples missing: {expected.keys() - examples.keys()}"
    for label, data in expected.items():
        assert examples[label] == data, f"{DOC_NAME}: the example '{label}' should be {data.hex()}"
    assert len(examples["no producers (10 bytes)"]) == 10
    try:  # kafka-python 2.3+ encodes the ConsumerProtocol: an independent writer of the same bytes
        from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
    except ImportError:
        return
    subscription = ConsumerProtocolSubscription(topics=["orders"], user_data=None, owned_partitions=[],
                                                generation_id=-1, rack_id=None)
    assert subscription.encode(version=3) == expected[next(k for k in expected if k.startswith("Subscription v3"))]
    assert subscription.encode(version=0) == expected[next(k for k in expected if k.startswith("Subscription v0"))]
    kafka_assignment = ConsumerProtocolAssignment(assigned_partitions=[("orders", [0, 1])], user_data=None)
    assert kafka_assignment.encode(version=0) == assignment


def test_consumer_offsets_partition_table_follows_java_hash_code(tables):
    table = tables.get("the __consumer_offsets topic")
    assert table, f"{DOC_NAME}: the section '## The `__consumer_offsets` topic' needs its table of group ids"
    partitions = BROKER_CONFIGS["offsets.topic.num.partitions"].default
    for row in table:
        group = "" if row["group id"] == '""' else row["group id"]
        h = _java_hash(group)
        assert row["h"] == str(h), f"{DOC_NAME}: String.hashCode of {group!r} is {h}"
        partition = (0 if h == -(2**31) else abs(h)) % partitions  # Kafka's Utils.abs
        assert row["partition"].split(" ")[0] == str(partition), f"{DOC_NAME}: {group!r} is in partition {partition}"
    assert any(row["h"] == str(-(2**31)) for row in table), "the table must show the abs(Int.MIN) case"
