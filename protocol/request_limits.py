"""What one request frame may decode to, checked before msgpack builds a single object.

msgpack amplifies: an empty map is one byte on the wire and ~70 bytes of Python objects, so a
frame at the size limit could decode to gigabytes and hold the GIL for seconds. Bytes are
bounded by the frame limit; objects are bounded here. :func:`scan_request` walks the msgpack
headers of a frame (skipping str, bin and ext payloads without copying them) and counts the
objects it holds, refusing as soon as the count passes the budget of the request's API. A
budget is what a legitimate request can need: a fixed envelope plus a few objects per topic or
partition it names, and no request needs to name more partitions than the broker may hold
(``max.broker.partitions``). The walk stops at the budget, so its own cost is bounded by it,
whatever the frame holds. Pure and sans-IO, like the rest of :mod:`protocol`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import msgpack

from .errors import ErrorCode
from .frames import RemoteProtocolError

#: Objects any request may hold besides its lists: the top-level map, its known keys and
#: values, and room for optional fields a later minor revision may add (ignored unknown keys).
ENVELOPE_OBJECTS: Final = 256
#: Objects allowed per topic or partition a request may name (max.broker.partitions of them).
#: A produce or fetch partition entry is 5 to 7 objects and its topic entry 5 more; the rest
#: is room for forward-compatible fields. Listing topic names takes one object per name.
OBJECTS_PER_ENTRY: Final[dict[str, int]] = {
    "api_versions": 0,
    "metadata": 2,
    "delete_topics": 2,
    "describe_configs": 2,
    "create_topics": 16,
    "alter_configs": 16,
    "create_partitions": 16,
    "produce": 16,
    "fetch": 16,
    "list_offsets": 16,
    "delete_records": 16,
    "describe_log_dirs": 16,
    "init_producer_id": 0,
    "find_coordinator": 0,
    # A join names a few protocols; a leader's sync one assignment (5 objects) per member and a
    # leave one member (up to 7) per member: room for a member per partition the broker holds.
    "join_group": 4,
    "sync_group": 8,
    "heartbeat": 0,
    "leave_group": 8,
    "offset_commit": 16,
    "offset_fetch": 16,
    "list_groups": 2,
    "describe_groups": 2,
    "delete_groups": 2,
    # A transaction names its partitions (one int each), a transactional offset commit one entry
    # per partition as offset_commit, the coordinator's markers a partition each.
    "add_partitions_to_txn": 8,
    "add_offsets_to_txn": 0,
    "end_txn": 0,
    "txn_offset_commit": 16,
    "write_txn_markers": 8,
    "describe_transactions": 2,
    "list_transactions": 2,
    "describe_producers": 8,
}
#: Kafka's STRING is int16-length-prefixed: no string of any request is longer than this.
MAX_STR_BYTES: Final = 32767
#: ``max.broker.partitions``'s default.
DEFAULT_MAX_PARTITIONS: Final = 10_000


class RequestBudgetError(RemoteProtocolError):
    """A frame that would decode to more than a request may hold; answered INVALID_REQUEST.

    ``request_id`` and ``api`` are set when the walk read them before giving up (the top-level
    ``id`` and ``api`` usually come first), so the refusal can echo them.
    """

    code = ErrorCode.INVALID_REQUEST

    def __init__(self, message: str, request_id: int | None = None, api: str | None = None):
        super().__init__(message)
        self.message = message
        self.request_id = request_id
        self.api = api


@dataclass(frozen=True)
class RequestLimits:
    """The decoding limits of one broker: its partition cap sets every API's object budget."""

    max_partitions: int = DEFAULT_MAX_PARTITIONS

    def max_objects(self, api: str | None) -> int:
        """The most msgpack objects a request of ``api`` may hold (None or unknown: any API's most)."""
        per_entry = OBJECTS_PER_ENTRY.get(api) if api is not None else None
        if per_entry is None:
            per_entry = max(OBJECTS_PER_ENTRY.values())
        return ENVELOPE_OBJECTS + per_entry * self.max_partitions

    def unpack_options(self, payload_length: int, api: str | None) -> dict[str, int]:
        """msgpack's own caps for the unpacker, a second line behind the walk: no container
        longer than the budget, no string longer than Kafka allows, nothing longer than the frame."""
        objects = self.max_objects(api)
        return {
            "max_str_len": min(MAX_STR_BYTES, payload_length),
            "max_bin_len": payload_length,
            "max_ext_len": min(MAX_STR_BYTES, payload_length),
            "max_array_len": min(objects, payload_length),
            "max_map_len": min(objects, payload_length // 2),
        }


@dataclass(frozen=True)
class RequestScan:
    """What the walk learned: the object count and, when readable, the top-level id and api."""

    objects: int
    request_id: int | None
    api: str | None


class _Malformed(Exception):
    """Bytes that are not one whole msgpack document: left for msgpack to describe."""


class _OverBudget(Exception):
    def __init__(self, objects: int):
        self.objects = objects


class _StrTooLong(Exception):
    def __init__(self, length: int):
        self.length = length


# Per first byte: extra bytes of a scalar whose size the byte alone gives, or None.
_SCALAR_EXTRA: list[int | None] = [None] * 256
for _b in range(0x00, 0x80):  # positive fixint
    _SCALAR_EXTRA[_b] = 0
for _b in range(0xE0, 0x100):  # negative fixint
    _SCALAR_EXTRA[_b] = 0
for _b in range(0xA0, 0xC0):  # fixstr: at most 31 bytes, never too long
    _SCALAR_EXTRA[_b] = _b - 0xA0
for _b, _extra in {
    0xC0: 0,
    0xC2: 0,
    0xC3: 0,  # nil, false, true
    0xCA: 4,
    0xCB: 8,  # float 32, 64
    0xCC: 1,
    0xCD: 2,
    0xCE: 4,
    0xCF: 8,  # uint 8..64
    0xD0: 1,
    0xD1: 2,
    0xD2: 4,
    0xD3: 8,  # int 8..64
    0xD4: 2,
    0xD5: 3,
    0xD6: 5,
    0xD7: 9,
    0xD8: 17,  # fixext 1..16, type byte included
}.items():
    _SCALAR_EXTRA[_b] = _extra

_STR, _BIN, _EXT, _ARRAY, _MAP = range(5)
# Per first byte of a length-prefixed type: (kind, width of the length).
_PREFIXED: dict[int, tuple[int, int]] = {
    0xD9: (_STR, 1),
    0xDA: (_STR, 2),
    0xDB: (_STR, 4),
    0xC4: (_BIN, 1),
    0xC5: (_BIN, 2),
    0xC6: (_BIN, 4),
    0xC7: (_EXT, 1),
    0xC8: (_EXT, 2),
    0xC9: (_EXT, 4),
    0xDC: (_ARRAY, 2),
    0xDD: (_ARRAY, 4),
    0xDE: (_MAP, 2),
    0xDF: (_MAP, 4),
}


def _walk(data, pos: int, end: int, budget: int) -> tuple[int, int]:
    """Walk one whole object from ``pos``: (its end, the objects it holds). Raises _OverBudget as
    soon as it is known to hold more than ``budget`` objects (a container's header announces its
    elements, each at least one object), _StrTooLong, or _Malformed."""
    count = 0
    remaining = 1
    scalar_extra = _SCALAR_EXTRA
    while remaining:
        if pos >= end:
            raise _Malformed
        b = data[pos]
        pos += 1
        remaining -= 1
        count += 1
        extra = scalar_extra[b]
        if extra is not None:
            pos += extra
            continue
        if b < 0x90:  # fixmap
            remaining += 2 * (b & 0x0F)
        elif b < 0xA0:  # fixarray
            remaining += b & 0x0F
        else:
            prefixed = _PREFIXED.get(b)
            if prefixed is None:  # 0xc1, never used
                raise _Malformed
            kind, width = prefixed
            if pos + width > end:
                raise _Malformed
            length = int.from_bytes(data[pos : pos + width], "big")
            pos += width
            if kind == _ARRAY:
                remaining += length
            elif kind == _MAP:
                remaining += 2 * length
            else:
                if kind == _STR and length > MAX_STR_BYTES:
                    raise _StrTooLong(length)
                pos += length + (kind == _EXT)  # an ext has a type byte before its data
                continue
        if count + remaining > budget:  # a container announced more than the budget allows
            raise _OverBudget(count + remaining)
    if pos > end:
        raise _Malformed
    return pos, count


def count_objects(data, limit: int) -> int:
    """The msgpack objects of ``data``, or ``limit + 1`` as soon as there are more than ``limit``.

    Cheap for small limits whatever ``data`` holds. Bytes that are not one whole document, or
    hold a string longer than Kafka allows, count as ``limit + 1`` too: not known to be small.
    """
    try:
        return _walk(data, 0, len(data), limit)[1]
    except (_OverBudget, _Malformed, _StrTooLong):
        return limit + 1


def _small_value(data, start: int, end: int, limit: int):
    """A short top-level value (the id or api) decoded on its own, or None."""
    if end - start > limit:
        return None
    try:
        return msgpack.unpackb(bytes(data[start:end]), raw=False)
    except Exception:  # anything msgpack refuses is reported by the full decode
        return None


_API_KEY = b"\xa3api"
_ID_KEY = b"\xa2id"


def scan_request(data, limits: RequestLimits) -> RequestScan:
    """Walk a request frame's payload; RequestBudgetError if it holds more objects than its API's
    budget, or a string longer than Kafka's string limit. Bytes that are not one whole msgpack
    document are not judged here: the decoder that follows says what is wrong with them."""
    end = len(data)
    request_id: int | None = None
    api: str | None = None
    budget = limits.max_objects(None)
    count = 0  # objects of the top-level items walked so far
    try:
        if not end:
            return RequestScan(0, None, None)
        first = data[0]
        if 0x80 <= first <= 0x8F:
            pairs, pos = first & 0x0F, 1
        elif first in (0xDE, 0xDF):
            width = 2 if first == 0xDE else 4
            if 1 + width > end:
                return RequestScan(1, None, None)
            pairs, pos = int.from_bytes(data[1 : 1 + width], "big"), 1 + width
        else:  # not a map: counted whole, refused by the decoder if it fits the budget
            return RequestScan(_walk(data, 0, end, budget)[1], None, None)
        if 1 + 2 * pairs > budget:
            raise _OverBudget(1 + 2 * pairs)
        count = 1
        for left in range(pairs - 1, -1, -1):
            key_start = pos
            pos, objects = _walk(data, pos, end, budget - count)
            count += objects
            key = data[key_start:pos]
            value_start = pos
            pos, objects = _walk(data, pos, end, budget - count)
            count += objects
            if key == _API_KEY and api is None:
                name = _small_value(data, value_start, pos, 64)
                if isinstance(name, str) and name in OBJECTS_PER_ENTRY:
                    api = name
                    budget = limits.max_objects(api)
            elif key == _ID_KEY and request_id is None:
                value = _small_value(data, value_start, pos, 9)
                if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31:
                    request_id = value
            if count + 2 * left > budget:  # the api's budget may be lower than the one walked with
                raise _OverBudget(2 * left)
        return RequestScan(count, request_id, api)
    except _Malformed:
        return RequestScan(0, request_id, api)
    except _StrTooLong as exc:
        raise RequestBudgetError(
            f"request holds a str of {exc.length} bytes; no string may be longer than {MAX_STR_BYTES} bytes",
            request_id,
            api,
        ) from None
    except _OverBudget as exc:
        per_entry = OBJECTS_PER_ENTRY[api] if api else max(OBJECTS_PER_ENTRY.values())
        what = f"{api} requests" if api else "requests"
        why = (
            (
                f"{ENVELOPE_OBJECTS} + {per_entry} per topic or partition named, "
                f"for max.broker.partitions={limits.max_partitions}"
            )
            if per_entry
            else "they name no topic"
        )
        raise RequestBudgetError(
            f"request holds at least {count + exc.objects} msgpack objects; {what} may hold at most {budget} ({why})",
            request_id,
            api,
        ) from None
