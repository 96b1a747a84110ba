"""The compiled core: compiled and pure-Python implementations decide identically, and the right one runs.

Both implementations of a core module come from one source (Cython's pure-Python mode), so they can
only differ where C integer types or the compiler's view of the buffer change a result; these
properties run both in one process on the same inputs and compare results, exceptions, messages
and the timestamp an InvalidTimestampError carries.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.checkout import c_compiler_works, tracked_copy
from tests.protocol.corruption import corrupted
from triolog import core
from triolog.protocol.compression import decompress
from triolog.protocol.record_batch import HEADER, CompressionType
from triolog.protocol.records import Record, encode_batch

INT64 = st.integers(-(2**63), 2**63 - 1)
PURE = core.implementation("protocol.record_codec", compiled=False)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _compiled():
    if not core.compiled_available("protocol.record_codec"):
        pytest.skip("the compiled core is not built here (no C compiler at install time): only the pure path runs")
    return core.implementation("protocol.record_codec", compiled=True)


def _outcome(function, *args, **kwargs):
    try:
        return ("ok", function(*args, **kwargs))
    except Exception as exc:  # the comparison is the point: any exception, same type and message
        return ("raised", type(exc), str(exc), getattr(exc, "timestamp", None))


#: Built once: a strategy made inside a draw (a new ``.map`` lambda, a new ``|``) is built and
#: validated again for every record of every example.
SIZES = st.sampled_from([0, 1, 63, 64, 100, 8191, 8192, 20_000])
KEYS = st.none() | SIZES.map(lambda n: b"k" * n)
VALUES = st.none() | SIZES.map(lambda n: b"v" * n)
HEADERS = st.lists(st.tuples(st.text(max_size=3), st.none() | st.binary(max_size=70)), max_size=2).map(tuple)
#: a record's timestamp: -1 (none), or within 10^7 ms of the batch's base timestamp
TIMESTAMP_DELTAS = st.none() | st.integers(-10_000_000, 10_000_000)
OFFSET_STEPS = st.sampled_from([1, 1, 1, 2, 100, 70_000])


@st.composite
def records(draw):
    """Records whose fields cross the one-, two- and multi-byte varint encodings."""
    count = draw(st.integers(0, 12))
    base_timestamp = draw(st.integers(-1, 2**45))
    offset = 0
    out = []
    for _ in range(count):
        key, value, headers, delta = draw(KEYS), draw(VALUES), draw(HEADERS), draw(TIMESTAMP_DELTAS)
        timestamp = -1 if delta is None else max(-1, base_timestamp + delta)
        out.append(Record(offset, timestamp, key, value, headers))
        offset += draw(OFFSET_STEPS)
    return out


def _walk_input(batch: bytes):
    header = HEADER.unpack_from(batch)
    codec = CompressionType(header[5] & 0x07)
    payload = batch[HEADER.size:] if codec == CompressionType.NONE else decompress(codec, batch[HEADER.size:])
    return bytes(payload), header[12], header[7]  # records, count, base_timestamp


MIN_TIMESTAMPS = st.sampled_from([-(2**63)]) | INT64 | st.integers(-(2**70), 2**70)
MAX_TIMESTAMPS = st.sampled_from([2**63 - 1]) | INT64 | st.integers(-(2**70), 2**70)


def _bounds(draw):
    return {
        "min_timestamp": draw(MIN_TIMESTAMPS),
        "max_timestamp": draw(MAX_TIMESTAMPS),
        "keys_required": draw(st.booleans()),
    }


@settings(max_examples=300, deadline=None)
@given(generated=records(), codec=st.sampled_from(CompressionType), data=st.data())
def test_compiled_walk_decides_like_the_pure_walk_on_valid_batches(generated, codec, data):
    compiled = _compiled()
    payload, count, base_timestamp = _walk_input(encode_batch(generated, compression=codec))
    kwargs = _bounds(data.draw) if data.draw(st.booleans(), label="bounded") else {}
    for buffer in (payload, bytearray(payload)):
        expected = _outcome(PURE.walk_records, buffer, 0, count, base_timestamp, **kwargs)
        assert _outcome(compiled.walk_records, buffer, 0, count, base_timestamp, **kwargs) == expected
    if _outcome(PURE.walk_records, payload, 0, count, base_timestamp)[0] == "ok":
        assert bytes(compiled.renumber_records(payload, 0, count)) == bytes(PURE.renumber_records(payload, 0, count))


@settings(max_examples=500, deadline=None)
@given(generated=records(), codec=st.sampled_from(CompressionType), data=st.data())
def test_compiled_walk_refuses_like_the_pure_walk_on_corrupt_records(generated, codec, data):
    """Flipped, deleted and inserted bytes, and wrong counts: the same error, the same message."""
    compiled = _compiled()
    payload, count, base_timestamp = _walk_input(encode_batch(generated, compression=codec))
    corrupt = data.draw(corrupted(payload), label="corrupt")
    count += data.draw(st.sampled_from([0, 0, 0, -1, 1, 1000]), label="count error")
    start = data.draw(st.integers(0, 2), label="start")
    kwargs = _bounds(data.draw) if data.draw(st.booleans(), label="bounded") else {}
    expected = _outcome(PURE.walk_records, corrupt, start, count, base_timestamp, **kwargs)
    assert _outcome(compiled.walk_records, corrupt, start, count, base_timestamp, **kwargs) == expected


def test_the_process_runs_the_compiled_walk_where_it_is_built():
    """Where a C compiler exists the install builds the extension, and the broker's validator uses it."""
    from triolog.broker.storage import validator

    if c_compiler_works() and not core._forced_pure():
        assert core.compiled_available("protocol.record_codec"), (
            "a C compiler exists but the compiled core is not built: `pip install -e .` (or "
            "`python setup.py build_ext --inplace`) builds it; TRIOLOG_PURE_PYTHON=1 runs without it")
    assert core.COMPILED == (core.compiled_available("protocol.record_codec") and not core._forced_pure())
    assert validator.walk_records is core.load("protocol.record_codec").walk_records
    assert ("compiled" in core.status()) == core.COMPILED


def _run(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})


def test_the_environment_variable_forces_the_pure_walk():
    result = _run(
        "from triolog import core; from triolog.broker.storage import validator;"
        "import triolog.protocol.record_codec as pure;"
        "print(core.COMPILED, core.status(), validator.walk_records is pure.walk_records)",
        TRIOLOG_PURE_PYTHON="1",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False pure Python (TRIOLOG_PURE_PYTHON is set) True"


def test_a_missing_extension_falls_back_to_pure_python_and_says_so_once(tmp_path):
    """A tree where the extensions were never built (as after an install without a compiler)."""
    tree = tracked_copy(tmp_path / "tree")
    result = subprocess.run(
        [sys.executable, "-c",
         "import logging, sys; logging.basicConfig(format='%(levelname)s %(name)s %(message)s');"
         "from triolog import core; from triolog.broker.storage import validator;"
         "import triolog.protocol.record_codec as pure; core.load('protocol.record_codec');"
         "print(core.COMPILED, core.status(), validator.walk_records is pure.walk_records, pure.__file__)"],
        cwd=tree, capture_output=True, text=True, timeout=60, env={**os.environ, "TRIOLOG_PURE_PYTHON": ""},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith("False pure Python (extension not built) True "), result.stdout
    assert result.stdout.strip().endswith(str(tree / "triolog" / "protocol" / "record_codec.py")), result.stdout
    warnings = [line for line in result.stderr.splitlines() if line.startswith("WARNING triolog.core")]
    assert len(warnings) == 1 and "pure Python" in warnings[0], result.stderr
    assert all(core.compiled_name(name) in warnings[0] for name in core.MODULES), warnings[0]


def test_the_pure_walk_runs_without_cython_installed():
    """Cython is a build requirement only: interpreted, the module's type declarations need a stand-in."""
    result = _run(
        "import sys; sys.modules['cython'] = None;"  # as in an environment without Cython
        "from triolog.protocol.record_codec import walk_records, cython;"
        "from triolog.protocol.records import Record, encode_batch;"
        "batch = encode_batch([Record(0, 7, b'k', b'v'), Record(1, 9, None, b'w')]);"
        "print(cython.__name__, walk_records(batch, 61, 2, 7))",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "triolog.protocol._cython_shim (9, 1, True)"
