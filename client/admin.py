"""The blocking admin client: each method is one :mod:`triolog.client.admin_core` operation on a socket."""

from __future__ import annotations

from .admin_core import AdminCore
from .connection import DEFAULT_BOOTSTRAP, SyncConnection
from .ops import run_sync
from .types import ConfigEntry, LogDirDescription, OffsetAndTimestamp, TopicDescription, TopicPartition

__all__ = ["AdminClient"]


class AdminClient:
    def __init__(self, bootstrap_servers: str = DEFAULT_BOOTSTRAP, *, request_timeout_ms: int = 30_000,
                 client_id: str = "triolog-admin") -> None:
        self._conn = SyncConnection(bootstrap_servers, client_id=client_id)
        self._core = AdminCore(request_timeout_ms)

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        self._conn.close()

    def _run(self, op):
        return run_sync(op, self._conn)

    def create_topics(self, topics, validate_only: bool = False) -> dict[str, dict[str, str]]:
        """``topics``: NewTopic tuples or names. Returns name -> effective configs."""
        return self._run(self._core.create_topics_op(topics, validate_only))

    def delete_topics(self, names) -> None:
        self._run(self._core.delete_topics_op(names))

    def list_topics(self) -> list[str]:
        return self._run(self._core.list_topics_op())

    def describe_topics(self, names=None) -> dict[str, TopicDescription]:
        return self._run(self._core.describe_topics_op(names))

    def describe_configs(self, names) -> dict[str, dict[str, ConfigEntry]]:
        return self._run(self._core.describe_configs_op(names))

    def alter_configs(self, configs: dict[str, dict[str, str]], delete: dict[str, list[str]] | None = None) -> None:
        self._run(self._core.alter_configs_op(configs, delete))

    def delete_records(self, offsets: dict, raise_errors: bool = True) -> dict[TopicPartition, int]:
        """New low watermarks; with ``raise_errors=False`` a failed partition maps to its error."""
        return self._run(self._core.delete_records_op(offsets, raise_errors))

    def describe_log_dirs(self, topics=None) -> dict[str, LogDirDescription]:
        """Per log dir (path), the size in bytes, segment count and offsets of each partition."""
        return self._run(self._core.describe_log_dirs_op(topics))

    def list_offsets(self, queries: dict) -> dict[TopicPartition, OffsetAndTimestamp]:
        return self._run(self._core.list_offsets_op(queries))

    def api_versions(self) -> dict:
        return self._run(self._core.api_versions_op())
