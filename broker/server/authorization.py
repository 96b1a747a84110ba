"""Kafka's authorization checks for the request being served, by the connection's principal.

The connection sets who the client is (``PRINCIPAL``: ``User:ANONYMOUS`` until TLS or SASL says
otherwise) and from where (``CLIENT_IP``) in its own task's context; the handlers, on the event
loop or in the worker threads they start (which inherit the context), ask ``RequestAuthorizer``
what Kafka's KafkaApis asks the authorizer, with Kafka's operations per API. With no authorizer
configured (``authorizer.class.name`` empty) every check passes without a lookup.
"""

from __future__ import annotations

from contextvars import ContextVar

import structlog

from triolog.broker.security.acl import AclOperation, ResourceType
from triolog.broker.security.acl_store import AclStore
from triolog.protocol.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
)

__all__ = ["ANONYMOUS", "CLIENT_IP", "CLUSTER", "PRINCIPAL", "REQUEST_PARKED_S", "RESPONSE_THROTTLE_MS",
           "RequestAuthorizer", "parked"]

ANONYMOUS = "User:ANONYMOUS"
#: Kafka's name of the one cluster resource.
CLUSTER = "kafka-cluster"
PRINCIPAL: ContextVar[str] = ContextVar("triolog_principal", default=ANONYMOUS)
CLIENT_IP: ContextVar[str] = ContextVar("triolog_client_ip", default="")
#: The throttle_ms the answer to the request being served carries (a client over its quota):
#: set by the connection, which knows the request's size, read where the answer is encoded.
RESPONSE_THROTTLE_MS: ContextVar[int] = ContextVar("triolog_response_throttle_ms", default=0)
#: Seconds the request being served spent parked, not handled: a fetch's long poll waiting for
#: data, a produce waiting for its fsync (acks=-1), a group request parked in the coordinator. Not counted against request_percentage, as
#: Kafka counts no time in purgatory. A one-element list set by the connection per request.
REQUEST_PARKED_S: ContextVar[list[float] | None] = ContextVar("triolog_request_parked_s", default=None)


def parked(seconds: float) -> None:
    """Add ``seconds`` to the parked time of the request being served."""
    total = REQUEST_PARKED_S.get()
    if total is not None:
        total[0] += seconds

logger = structlog.get_logger("triolog.authorizer")

Op = AclOperation


class RequestAuthorizer:
    def __init__(self, acls: AclStore | None):
        #: None: no authorizer, everything is allowed.
        self.acls = acls

    @property
    def enabled(self) -> bool:
        return self.acls is not None

    def allowed(self, operation: AclOperation, resource_type: ResourceType, name: str, *, log: bool = True) -> bool:
        """``log=False`` for a check that filters what a listing shows (as Kafka's)."""
        acls = self.acls
        if acls is None:
            return True
        principal = PRINCIPAL.get()
        if acls.authorize(principal, CLIENT_IP.get(), operation, resource_type, name):
            return True
        if log:  # Kafka's authorizer logs a denial (kafka.authorizer.logger, INFO)
            logger.info("authorization_denied", principal=principal, host=CLIENT_IP.get(), operation=operation.name,
                        resource=f"{resource_type.name}:{name}")
        return False

    def topic(self, operation: AclOperation, name: str, *, log: bool = True) -> bool:
        return self.allowed(operation, ResourceType.TOPIC, name, log=log)

    def group(self, operation: AclOperation, name: str, *, log: bool = True) -> bool:
        return self.allowed(operation, ResourceType.GROUP, name, log=log)

    def cluster(self, operation: AclOperation) -> bool:
        return self.allowed(operation, ResourceType.CLUSTER, CLUSTER)

    def may_create_topic(self, name: str) -> bool:
        """Kafka: CREATE on the cluster, or on the topic itself."""
        if self.acls is None:
            return True
        return self._quietly(Op.CREATE, ResourceType.CLUSTER, CLUSTER) or self.topic(Op.CREATE, name)

    def may_write_idempotently(self) -> bool:
        """Kafka 3+ (KIP-679): IDEMPOTENT_WRITE on the cluster, or WRITE on any topic."""
        acls = self.acls
        if acls is None:
            return True
        if self._quietly(Op.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER):
            return True
        if acls.authorize_by_resource_type(PRINCIPAL.get(), CLIENT_IP.get(), Op.WRITE, ResourceType.TOPIC):
            return True
        return self.cluster(Op.IDEMPOTENT_WRITE)  # logs the denial

    def _quietly(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """A check that is one of several alternatives: its denial is not logged on its own."""
        return self.acls.authorize(PRINCIPAL.get(), CLIENT_IP.get(), operation, resource_type, name)

    def require_topic(self, operation: AclOperation, name: str) -> None:
        if not self.topic(operation, name):
            raise TopicAuthorizationFailedError(
                f"{PRINCIPAL.get()} is not authorized to {_verb(operation)} topic {name!r}")

    def require_group(self, operation: AclOperation, name: str) -> None:
        if not self.group(operation, name):
            raise GroupAuthorizationFailedError(
                f"{PRINCIPAL.get()} is not authorized to {_verb(operation)} group {name!r}")

    def require_cluster(self, operation: AclOperation) -> None:
        if not self.cluster(operation):
            raise ClusterAuthorizationFailedError(
                f"{PRINCIPAL.get()} is not authorized to {_verb(operation)} the cluster")


def _verb(operation: AclOperation) -> str:
    return operation.name.lower().replace("_", " ")
