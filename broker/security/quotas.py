"""Client quotas, Kafka's model: byte rates and request time per user and/or client id,
connection creation rates per IP address, kept durably in ``triolog-quotas.json`` in the first log directory (Kafka keeps
them in its metadata) and managed with Kafka's AlterClientQuotas / DescribeClientQuotas.

An entity names a user, a client id, both, or an IP; each part either a name or the default
(None here, ``<default>`` in Kafka's tools). Which quota applies to a (user, client id) follows
Kafka's precedence: the most specific entity that sets the key wins
(user+client, user+default client, user, default user+client, default user+default client,
default user, client, default client).
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triolog.broker.storage.fs import OS_FS, FileSystem

from .files import CorruptSecurityFileError, load_json, save_json

__all__ = [
    "QUOTAS_FILE",
    "QuotaEntity",
    "QuotaStore",
    "InvalidQuotaError",
    "altered_values",
    "check_quota",
    "BYTE_RATE_KEYS",
    "CLIENT_KEYS",
    "IP_KEYS",
]

QUOTAS_FILE = "triolog-quotas.json"
USER, CLIENT_ID, IP = "user", "client-id", "ip"
#: The byte-rate keys of user/client-id entities (bytes per second), and what each meters.
BYTE_RATE_KEYS = {"producer_byte_rate": "produce", "consumer_byte_rate": "fetch"}
#: Every key of user/client-id entities: the byte rates, and Kafka's request quota (KIP-124): the
#: percent of one thread's time the client's requests may take to handle (a double > 0; 200 = two
#: threads' worth).
CLIENT_KEYS = frozenset(BYTE_RATE_KEYS) | {"request_percentage"}
#: The key of IP entities: new connections per second.
IP_KEYS = frozenset({"connection_creation_rate"})


class InvalidQuotaError(ValueError):
    """An entity or a key AlterClientQuotas refuses (INVALID_REQUEST); the message says why."""


@dataclass(frozen=True)
class QuotaEntity:
    """``parts``: sorted (type, name) pairs; a name None is that type's default."""

    parts: tuple[tuple[str, str | None], ...]

    def __lt__(self, other: QuotaEntity) -> bool:
        """Listed in a stable order, each type's default before its names (None and a name
        do not compare)."""
        return self._sort_key() < other._sort_key()

    def _sort_key(self) -> tuple:
        return tuple((kind, name is not None, name or "") for kind, name in self.parts)

    @classmethod
    def of(cls, **parts: str | None) -> QuotaEntity:
        """QuotaEntity.of(user="alice", client_id=None): keyword names with _ for -."""
        return cls.from_parts({k.replace("_", "-"): v for k, v in parts.items()})

    @classmethod
    def from_parts(cls, parts: dict[str, str | None]) -> QuotaEntity:
        types = set(parts)
        if not types or not (types <= {USER, CLIENT_ID} or types == {IP}):
            raise InvalidQuotaError(f"invalid quota entity {sorted(types)}: user, client-id, both, or ip")
        for kind, name in parts.items():
            if name is not None and not isinstance(name, str):
                raise InvalidQuotaError(f"the {kind} of a quota entity is a string or the default")
            if name == "":
                raise InvalidQuotaError(f"an empty {kind} name: use the default entity instead")
        return cls(tuple(sorted(parts.items())))

    def get(self, kind: str, missing: Any = ...) -> str | None:
        for k, v in self.parts:
            if k == kind:
                return v
        if missing is ...:
            raise KeyError(kind)
        return missing

    @property
    def types(self) -> frozenset[str]:
        return frozenset(k for k, _ in self.parts)

    def label(self, kind: str) -> str:
        """For metrics and logs: the name, ``<default>``, or "" where the entity has no such part."""
        value = self.get(kind, None) if kind in self.types else ""
        return "<default>" if value is None else value

    def __str__(self) -> str:
        return ",".join(f"{k}={'<default>' if v is None else v}" for k, v in self.parts)


def _check_value(key: str, entity: QuotaEntity, value: float) -> float:
    allowed = IP_KEYS if entity.types == {IP} else CLIENT_KEYS
    if key not in allowed:
        raise InvalidQuotaError(
            f"{key} is not a quota of a {'/'.join(sorted(entity.types))} entity (allowed: {', '.join(sorted(allowed))})"
        )
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidQuotaError(f"{key} must be a positive number, got {value!r}")
    return float(value)


def altered_values(entity: QuotaEntity, values: dict[str, float], ops: dict[str, float | None]) -> dict[str, float]:
    """An entity's quotas after AlterClientQuotas' operations (a number sets, None removes); every
    key and value checked (InvalidQuotaError). Whatever keeps them (a file, ZooKeeper) applies it."""
    values = dict(values)
    for key, value in ops.items():
        if value is None:
            _check_value(key, entity, 1.0)  # a key that could be set
            values.pop(key, None)
        else:
            values[key] = _check_value(key, entity, value)
    return values


def check_quota(key: str, entity: QuotaEntity, value: float) -> float:
    """The value as a float, if ``key`` is a quota of the entity and ``value`` a valid one."""
    return _check_value(key, entity, value)


class QuotaStore:
    """The quotas, durable; safe to call from several threads. Loaded by the constructor (a file
    that does not parse raises CorruptSecurityFileError naming it)."""

    def __init__(self, directory: str | os.PathLike, fs: FileSystem = OS_FS):
        self.fs = fs
        self.path = Path(directory) / QUOTAS_FILE
        self._lock = threading.Lock()
        self._quotas: dict[QuotaEntity, dict[str, float]] = self._load()
        #: The keys some entity sets: a key none sets is answered without a look-up (every
        #: request asks for request_percentage).
        self._keys = frozenset(k for values in self._quotas.values() for k in values)
        #: Bumped on every change: the quota managers re-resolve their sensors' quotas.
        self.version = 0

    def _load(self) -> dict[QuotaEntity, dict[str, float]]:
        doc = load_json(self.fs, self.path, "client quotas")
        if doc is None:
            return {}
        out = {}
        try:
            for entry in doc["quotas"]:
                entity = QuotaEntity.from_parts(dict(entry["entity"]))
                out[entity] = {k: _check_value(k, entity, v) for k, v in entry["values"].items()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptSecurityFileError(self.path, f"not a list of quota entries: {exc!r}") from None
        return out

    def alter(self, changes: list[tuple[QuotaEntity, dict[str, float | None]]], validate_only: bool = False) -> None:
        """Set (a number) or remove (None) keys of entities; all or nothing (InvalidQuotaError)."""
        with self._lock:
            quotas = {e: dict(v) for e, v in self._quotas.items()}
            for entity, ops in changes:
                values = altered_values(entity, quotas.get(entity, {}), ops)
                if values:
                    quotas[entity] = values
                else:
                    quotas.pop(entity, None)
            if validate_only:
                return
            save_json(
                self.fs,
                self.path,
                {
                    "version": 1,
                    "quotas": [
                        {"entity": dict(e.parts), "values": dict(sorted(v.items()))} for e, v in sorted(quotas.items())
                    ],
                },
            )
            self._quotas = quotas
            self._keys = frozenset(k for values in quotas.values() for k in values)
            self.version += 1

    def describe(self, match=None) -> dict[QuotaEntity, dict[str, float]]:
        """Every entity with its quotas for which ``match(entity)`` is true (all if None)."""
        with self._lock:
            return {e: dict(v) for e, v in self._quotas.items() if match is None or match(e)}

    def has_key(self, key: str) -> bool:
        """Whether any entity sets ``key``."""
        return key in self._keys

    def quota_for(self, key: str, user: str | None, client_id: str) -> tuple[float, QuotaEntity] | None:
        """The quota ``key`` that applies to a (user, client id), and the entity it comes from:
        Kafka's precedence, the most specific entity that sets the key. ``user`` None: a client
        with no user entity (never the case on a broker: an anonymous client is ANONYMOUS);
        ``client_id`` "" for a client that sent none."""
        quotas = self._quotas
        if key not in self._keys:
            return None
        candidates = []
        if user is not None:
            candidates += [((USER, user), (CLIENT_ID, client_id)), ((USER, user), (CLIENT_ID, None)), ((USER, user),)]
        candidates += [((USER, None), (CLIENT_ID, client_id)), ((USER, None), (CLIENT_ID, None)), ((USER, None),)]
        candidates += [((CLIENT_ID, client_id),), ((CLIENT_ID, None),)]
        for parts in candidates:
            entity = QuotaEntity(tuple(sorted(parts)))
            value = quotas.get(entity, {}).get(key)
            if value is not None:
                return value, entity
        return None

    def ip_quota(self, ip: str) -> float | None:
        """connection_creation_rate of the IP, else of the default IP."""
        for name in (ip, None):
            value = self._quotas.get(QuotaEntity(((IP, name),)), {}).get("connection_creation_rate")
            if value is not None:
                return value
        return None
