"""Every ``ApiKey.NAME`` and ``ErrorCode.NAME`` written in the sources names a member.

Both enums are built at import from kio's lists, so a type checker cannot list their members: it
takes any ``ApiKey.NAME`` for an ApiKey (a metaclass ``__getattr__`` seen only by the checker, in
protocol/kafka/apis.py and protocol/errors.py). A misspelt name would then fail only when its line
runs; this test reads every source file instead (docstrings and comments too: they should not name
a member that does not exist either).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from triolog.protocol.errors import ErrorCode
from triolog.protocol.kafka.apis import ApiKey

ROOT = Path(__file__).resolve().parent.parent.parent
#: The product's folders (triolog/ holds symlinks to them) and the tests.
SOURCES = ["broker", "client", "config", "pipeline", "protocol", "tests"]
NAMED = re.compile(r"\b(ApiKey|ErrorCode)\.([A-Z][A-Z0-9_]*)\b")
#: What docstrings write for "any member".
PLACEHOLDER = "NAME"


@functools.cache
def _named() -> frozenset[tuple[str, str]]:
    files = [path for folder in SOURCES for path in (ROOT / folder).rglob("*.py")]
    files.append(ROOT / "pyspark_triolog.py")
    return frozenset(
        (owner, name)
        for path in files
        for owner, name in NAMED.findall(path.read_text(encoding="utf-8"))
        if name != PLACEHOLDER
    )


@pytest.mark.parametrize("enum", [ApiKey, ErrorCode], ids=lambda e: e.__name__)
def test_every_member_the_sources_name_exists(enum):
    named = {name for owner, name in _named() if owner == enum.__name__}
    assert named, f"no {enum.__name__}.NAME found: the folders are wrong"
    assert sorted(named - set(enum.__members__)) == []
