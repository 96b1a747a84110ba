"""The blocking admin client: each method is one :mod:`triolog.client.admin_core` operation on a socket."""

from __future__ import annotations

from .admin_core import (
    AclBinding,
    AclBindingFilter,
    AdminCore,
    BrokerConfigEntry,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    UserScramCredentialsDescription,
)
from .connection import DEFAULT_BOOTSTRAP, ClusterConnection
from .errors import TriologClientError
from .ops import run_sync
from .security import split_security
from .types import (
    ClientQuotaEntity,
    ClientQuotaFilter,
    ConfigEntry,
    LogDirDescription,
    OffsetAndTimestamp,
    TopicDescription,
    TopicPartition,
)

__all__ = ["AdminClient"]


class AdminClient:
    """``AdminClient("host:port")``; keyword arguments: ``request_timeout_ms``, ``client_id``, and
    the TLS/SASL settings of :mod:`triolog.client.security` (``security_protocol``,
    ``sasl_mechanism``, ``sasl_username``, ``sasl_password``, ``ssl_cafile``...)."""

    def __init__(
        self,
        bootstrap_servers: str = DEFAULT_BOOTSTRAP,
        *,
        request_timeout_ms: int = 30_000,
        client_id: str = "triolog-admin",
        **security,
    ) -> None:
        self.security, unknown = split_security(security)
        if unknown:
            raise TypeError(f"unexpected keyword arguments: {', '.join(sorted(unknown))}")
        self._conn = ClusterConnection(
            bootstrap_servers,
            client_id=client_id,
            security=self.security,
            metadata_timeout_s=request_timeout_ms / 1000,
        )
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

    def describe_broker_configs(self, broker: str | int = "") -> dict[str, BrokerConfigEntry]:
        """Every broker config key: value, source ("broker" or "default"), read_only, is_sensitive."""
        return self._run(self._core.describe_broker_configs_op(broker))

    def alter_configs(
        self,
        configs: dict[str, dict[str, str]],
        delete: dict[str, list[str]] | None = None,
        *,
        replace: bool = False,
        append: dict[str, dict[str, str]] | None = None,
        subtract: dict[str, dict[str, str]] | None = None,
        validate_only: bool = False,
    ) -> None:
        """Set ``configs`` and remove ``delete`` overrides per topic; ``replace`` makes ``configs``
        the whole override set; ``append``/``subtract`` change list configs item by item."""
        self._run(
            self._core.alter_configs_op(
                configs, delete, replace=replace, append=append, subtract=subtract, validate_only=validate_only
            )
        )

    def create_partitions(self, counts: dict[str, int], validate_only: bool = False) -> None:
        """Grow topics to the given total partition counts, e.g. ``{"t": 6}``."""
        self._run(self._core.create_partitions_op(counts, validate_only))

    def delete_records(
        self, offsets: dict, raise_errors: bool = True
    ) -> dict[TopicPartition, int | TriologClientError]:
        """New low watermarks; with ``raise_errors=False`` a failed partition maps to its error."""
        return self._run(self._core.delete_records_op(offsets, raise_errors))

    def describe_log_dirs(self, topics=None) -> dict[str, LogDirDescription]:
        """Per log dir (path), the size in bytes, segment count and offsets of each partition."""
        return self._run(self._core.describe_log_dirs_op(topics))

    def list_offsets(self, queries: dict) -> dict[TopicPartition, OffsetAndTimestamp]:
        return self._run(self._core.list_offsets_op(queries))

    def api_versions(self) -> dict:
        return self._run(self._core.api_versions_op())

    def list_transactions(self, states=(), producer_ids=(), min_duration_ms: int = -1) -> list:
        """TransactionListings (kafka-transactions.sh list): the transactional ids this broker
        coordinates, of the states (Kafka's names) and producer ids given, open longer than
        ``min_duration_ms``."""
        return self._run(self._core.list_transactions_op(states, producer_ids, min_duration_ms))

    def describe_transactions(self, transactional_ids) -> dict:
        """Per transactional id its TransactionDescription (kafka-transactions.sh describe)."""
        return self._run(self._core.describe_transactions_op(transactional_ids))

    def describe_producers(self, partitions) -> dict:
        """Per (topic, partition) the ProducerStateDescriptions of its leader
        (kafka-transactions.sh describe-producers)."""
        return self._run(self._core.describe_producers_op(partitions))

    def abort_transaction(
        self, topic: str, partition: int, producer_id: int, producer_epoch: int, coordinator_epoch: int
    ) -> None:
        """Abort a hanging transaction on one partition (kafka-transactions.sh abort)."""
        self._run(self._core.abort_transaction_op(topic, partition, producer_id, producer_epoch, coordinator_epoch))

    def list_consumer_groups(self, states=()) -> list[ConsumerGroupListing]:
        """Every group (only those in ``states``, e.g. ("Stable",), if given)."""
        return self._run(self._core.list_groups_op(states))

    def describe_consumer_groups(self, group_ids) -> dict[str, ConsumerGroupDescription]:
        return self._run(self._core.describe_groups_op(group_ids))

    def delete_consumer_groups(self, group_ids, raise_errors: bool = True) -> dict:
        """Delete groups that have no members, with their offsets; per group None or its error."""
        return self._run(self._core.delete_groups_op(group_ids, raise_errors))

    def list_consumer_group_offsets(self, group_id: str, partitions=None) -> dict[TopicPartition, int]:
        return self._run(self._core.list_group_offsets_op(group_id, partitions))

    def alter_consumer_group_offsets(self, group_id: str, offsets: dict) -> None:
        """Set a group's committed offsets ({tp: offset}); only while the group has no members."""
        self._run(self._core.alter_group_offsets_op(group_id, offsets))

    # -- ACLs and SCRAM users (Kafka's Admin API names) ------------------------------------------

    def create_acls(self, acls) -> None:
        """Add :class:`AclBinding`s; the first failing one's error (SecurityDisabledError without an
        authorizer, ClusterAuthorizationFailedError, InvalidRequestError...) is raised."""
        self._run(self._core.create_acls_op(acls))

    def describe_acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """The ACLs an :class:`AclBindingFilter` selects (all without one)."""
        return self._run(self._core.describe_acls_op(acl_filter))

    def delete_acls(self, filters) -> list[list[AclBinding]]:
        """Delete the ACLs each filter selects; per filter, the ACLs it deleted."""
        return self._run(self._core.delete_acls_op(filters))

    def describe_user_scram_credentials(self, users=None) -> dict[str, UserScramCredentialsDescription]:
        """User -> its SCRAM mechanisms and iterations (every user, or ``users``)."""
        return self._run(self._core.describe_user_scram_credentials_op(users))

    def alter_user_scram_credentials(self, alterations) -> None:
        """:class:`UserScramCredentialUpsertion` (a password, salted and hashed here) and
        :class:`UserScramCredentialDeletion` items."""
        self._run(self._core.alter_user_scram_credentials_op(alterations))

    # -- client quotas (Kafka's describeClientQuotas / alterClientQuotas) ---------------------------

    def describe_client_quotas(
        self, quota_filter: ClientQuotaFilter | None = None
    ) -> dict[ClientQuotaEntity, dict[str, float]]:
        """Entity -> its quotas, for the entities a :class:`ClientQuotaFilter` selects (all without one)."""
        return self._run(self._core.describe_client_quotas_op(quota_filter))

    def alter_client_quotas(self, alterations, validate_only: bool = False, raise_errors: bool = True) -> dict:
        """Apply :class:`ClientQuotaAlteration`s, each on its own; per entity None or its error
        (InvalidRequestError for an unknown key or a value under 1, ClusterAuthorizationFailedError
        without ALTER_CONFIGS on the cluster), the first raised with ``raise_errors``."""
        return self._run(self._core.alter_client_quotas_op(alterations, validate_only, raise_errors))
