"""Kafka's message classes, from the ``kio`` library (generated from Kafka's own JSON schemas).

kio gives one frozen dataclass per API, version and direction, and a reader and writer per
class; this module finds the class for an (api_key, version), builds instances from plain
values (so a translation names each field once, for every version: fields a version lacks are
dropped, required ones it does not give are zero), and writes a response whose record bytes stay
outside it (:class:`RecordsRegion`, sent by the caller with sendfile).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.protocol import RequestPayload, ResponsePayload

__all__ = [
    "RecordsRegion",
    "build",
    "field_names",
    "millis",
    "request_class",
    "response_class",
    "write_parts",
]


class UnknownSchema(LookupError):
    """kio has no class for this (api_key, version)."""


@functools.cache
def request_class(api_key: int, version: int) -> type[RequestPayload]:
    try:
        return load_request_schema(api_key, version)
    except Exception as exc:  # kio's UnknownAPIKey / UnknownEntity
        raise UnknownSchema(f"no request schema for api_key {api_key} version {version}") from exc


@functools.cache
def response_class(api_key: int, version: int) -> type[ResponsePayload]:
    try:
        return load_response_schema(api_key, version)
    except Exception as exc:
        raise UnknownSchema(f"no response schema for api_key {api_key} version {version}") from exc


@functools.cache
def reader(cls: type):
    return entity_reader(cls)


@functools.cache
def writer(cls: type):
    return entity_writer(cls)


#: How a plain value becomes a field's value (kio's field types are many: values are Any).
_Convert = Callable[[Any], Any]


class _FieldPlan(typing.NamedTuple):
    name: str
    #: How a plain value becomes the field's value (None: as it is).
    convert: _Convert | None
    #: The value a required field gets when none is given.
    zero: Any
    required: bool


@functools.cache
def _plan(cls: type) -> tuple[_FieldPlan, ...]:
    hints = typing.get_type_hints(cls)
    plans = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        convert, zero = _converter(hint, f.metadata.get("kafka_type"))
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        plans.append(_FieldPlan(f.name, convert, zero, required))
    return tuple(plans)


@functools.cache
def field_names(cls: type) -> frozenset[str]:
    return frozenset(p.name for p in _plan(cls))


def _is_entity(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp) and hasattr(tp, "__type__")


def _converter(hint: Any, kafka_type: str | None) -> tuple[_Convert | None, Any]:
    """(convert, zero) for a field of type ``hint``."""
    optional = False
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(args) < len(typing.get_args(hint))
        hint = args[0]
        origin = typing.get_origin(hint)
    if origin is tuple:
        element = typing.get_args(hint)[0]
        convert: _Convert
        if _is_entity(element):
            convert = functools.partial(_build_all, element)
        else:
            element_convert, _ = _converter(element, kafka_type)
            convert = functools.partial(_convert_all, element_convert) if element_convert is not None else tuple
        return _nullable(convert) if optional else convert, (None if optional else ())
    if _is_entity(hint):
        convert = functools.partial(_build_one, hint)
        return _nullable(convert) if optional else convert, (None if optional else _Lazy(hint))
    if kafka_type == "error_code":
        return _error_code, KioErrorCode.none
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return _timedelta, datetime.timedelta(0)
    if kafka_type == "datetime_i64":
        return (_nullable(_datetime) if optional else _datetime), (None if optional else _datetime(0))
    if kafka_type == "uuid":
        return (_nullable(_uuid) if optional else _uuid), (None if optional else uuid.UUID(int=0))
    if optional:
        return None, None
    if kafka_type in ("string",):
        return None, ""
    if kafka_type in ("bytes", "records"):
        return None, b""
    if kafka_type == "bool":
        return None, False
    if kafka_type == "float64":
        return None, 0.0
    return None, 0


class _Lazy:
    """A required nested entity's zero value, built when needed (entities refer to each other)."""

    def __init__(self, cls: type):
        self.cls = cls


def _nullable(convert):
    def convert_nullable(value):
        return None if value is None else convert(value)

    return convert_nullable


def _convert_all(convert, values) -> tuple:
    return tuple(convert(v) for v in values)


def _build_all(cls: type, values) -> tuple:
    return tuple(v if type(v) is cls else build(cls, v) for v in values)


def _build_one(cls: type, value):
    return value if type(value) is cls else build(cls, value)


def _error_code(value) -> KioErrorCode:
    return value if type(value) is KioErrorCode else KioErrorCode(int(value))


def _timedelta(value) -> datetime.timedelta:
    if isinstance(value, datetime.timedelta):
        return value
    return datetime.timedelta(milliseconds=int(value))


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _datetime(value) -> datetime.datetime:
    if isinstance(value, datetime.datetime):
        return value
    return _EPOCH + datetime.timedelta(milliseconds=int(value))


def _uuid(value) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(bytes=bytes(value))


def build(cls: type, values: Mapping[str, Any] | None = None, /, **more: Any):
    """An instance of the kio class ``cls`` from plain values (ints for error codes, times and
    durations in ms, dicts or instances for nested entities, sequences for arrays).

    Values for fields ``cls`` does not have (another version's) are ignored; required fields
    not given get their zero (0, "", empty, a nested entity of zeros), optional ones their
    schema default."""
    if values is None:
        values = more
    elif more:
        values = {**values, **more}
    kwargs = {}
    for plan in _plan(cls):
        if plan.name in values:
            value = values[plan.name]
            kwargs[plan.name] = value if plan.convert is None else plan.convert(value)
        elif plan.required:
            zero = plan.zero
            kwargs[plan.name] = build(zero.cls, {}) if type(zero) is _Lazy else zero
    return cls(**kwargs)


def millis(value: datetime.timedelta | datetime.datetime | int | None, default: int = -1) -> int:
    """A kio duration or time as Kafka's int milliseconds (``default`` for None)."""
    if value is None:
        return default
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    return int(value)


class RecordsRegion:
    """A response's record bytes that the caller sends itself (from a file, with sendfile): given
    to kio as a ``records`` value, it writes the length prefix and :func:`write_parts` leaves
    the bytes out, the region itself standing in the parts list."""

    __slots__ = ("length", "ref")

    def __init__(self, length: int, ref: object):
        self.length = length
        self.ref = ref

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"RecordsRegion({self.length})"


class _PartsBuffer:
    """The writable kio writes to: bytes accumulate, a RecordsRegion starts a new part."""

    __slots__ = ("parts", "current")

    def __init__(self):
        self.parts: list[bytes | RecordsRegion] = []
        self.current = bytearray()

    def write(self, data) -> int:
        if type(data) is RecordsRegion:
            if self.current:
                self.parts.append(bytes(self.current))
                self.current = bytearray()
            self.parts.append(data)
            return data.length
        self.current += data
        return len(data)

    def finish(self) -> list[bytes | RecordsRegion]:
        if self.current or not self.parts:
            self.parts.append(bytes(self.current))
        return self.parts


def write_parts(entities: list) -> list[bytes | RecordsRegion]:
    """``entities`` (a header, then a body) written in order, as bytes and the regions left out."""
    buffer = _PartsBuffer()
    for entity in entities:
        cls: type = type(entity)  # `type`: mypy refuses type[Any] to a functools.cache (python/mypy#11470)
        writer(cls)(buffer, entity)
    return buffer.finish()


def parts_length(parts: list[bytes | RecordsRegion]) -> int:
    return sum(len(p) for p in parts)
