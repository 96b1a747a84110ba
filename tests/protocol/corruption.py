"""Corrupted record bytes for the property tests that compare the compiled and pure-Python core on
bad input (tests/protocol/test_core.py, test_codec_core.py): one definition of "corrupt"."""

from __future__ import annotations

from hypothesis import strategies as st


#: (built once, not per edit)
EDITS = st.sampled_from(["flip", "delete", "insert"])
INSERTS = st.binary(min_size=1, max_size=11) | st.just(b"\xff" * 11)


@st.composite
def corrupted(draw, payload: bytes, max_edits: int = 4) -> bytes:
    """``payload`` after up to ``max_edits`` edits: a flipped byte, 1-3 bytes deleted, or 1-11 bytes
    inserted (among them eleven 0xff bytes, an overlong varint), each at any position."""
    corrupt = bytearray(payload)
    for _ in range(draw(st.integers(0, max_edits))):
        position = draw(st.integers(0, len(corrupt)))
        edit = draw(EDITS)
        if edit == "flip" and position < len(corrupt):
            corrupt[position] ^= draw(st.integers(1, 255))
        elif edit == "delete":
            del corrupt[position:position + draw(st.integers(1, 3))]
        else:
            corrupt[position:position] = draw(INSERTS)
    return bytes(corrupt)
