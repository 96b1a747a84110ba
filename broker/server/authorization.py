"""Kafka's authorization checks for the request being served, by its context's principal.

The handlers, on the event loop or in the worker threads they start, ask ``RequestAuthorizer``
what Kafka's KafkaApis asks the authorizer, with Kafka's operations per API, for the request's
:class:`RequestContext` (who the client is, from which host). With no authorizer configured
(``authorizer.class.name`` empty) every check passes without a lookup.
"""

from __future__ import annotations

import structlog

from triolog.broker.security.acl import AclOperation, ResourceType
from triolog.broker.security.acl_store import AclStore
from triolog.protocol.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
)

from .request_context import ANONYMOUS, RequestContext

__all__ = ["ANONYMOUS", "CLUSTER", "RequestAuthorizer"]

#: Kafka's name of the one cluster resource.
CLUSTER = "kafka-cluster"

logger = structlog.get_logger("triolog.authorizer")

Op = AclOperation


class RequestAuthorizer:
    def __init__(self, acls: AclStore | None):
        #: None: no authorizer, everything is allowed.
        self.acls = acls

    @property
    def enabled(self) -> bool:
        return self.acls is not None

    def allowed(
        self, ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str, *, log: bool = True
    ) -> bool:
        """``log=False`` for a check that filters what a listing shows (as Kafka's)."""
        acls = self.acls
        if acls is None:
            return True
        if acls.authorize(ctx.principal, ctx.client_address, operation, resource_type, name):
            return True
        if log:  # Kafka's authorizer logs a denial (kafka.authorizer.logger, INFO)
            logger.info(
                "authorization_denied",
                principal=ctx.principal,
                host=ctx.client_address,
                operation=operation.name,
                resource=f"{resource_type.name}:{name}",
            )
        return False

    def topic(self, ctx: RequestContext, operation: AclOperation, name: str, *, log: bool = True) -> bool:
        return self.allowed(ctx, operation, ResourceType.TOPIC, name, log=log)

    def group(self, ctx: RequestContext, operation: AclOperation, name: str, *, log: bool = True) -> bool:
        return self.allowed(ctx, operation, ResourceType.GROUP, name, log=log)

    def transactional_id(self, ctx: RequestContext, operation: AclOperation, name: str, *, log: bool = True) -> bool:
        return self.allowed(ctx, operation, ResourceType.TRANSACTIONAL_ID, name, log=log)

    def cluster(self, ctx: RequestContext, operation: AclOperation, *, log: bool = True) -> bool:
        return self.allowed(ctx, operation, ResourceType.CLUSTER, CLUSTER, log=log)

    def may_create_topic(self, ctx: RequestContext, name: str) -> bool:
        """Kafka: CREATE on the cluster, or on the topic itself."""
        acls = self.acls
        if acls is None:
            return True
        return _quietly(acls, ctx, Op.CREATE, ResourceType.CLUSTER, CLUSTER) or self.topic(ctx, Op.CREATE, name)

    def may_write_idempotently(self, ctx: RequestContext) -> bool:
        """Kafka 3+ (KIP-679): IDEMPOTENT_WRITE on the cluster, or WRITE on any topic."""
        acls = self.acls
        if acls is None:
            return True
        if _quietly(acls, ctx, Op.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER):
            return True
        if acls.authorize_by_resource_type(ctx.principal, ctx.client_address, Op.WRITE, ResourceType.TOPIC):
            return True
        return self.cluster(ctx, Op.IDEMPOTENT_WRITE)  # logs the denial

    def require_topic(self, ctx: RequestContext, operation: AclOperation, name: str) -> None:
        if not self.topic(ctx, operation, name):
            raise TopicAuthorizationFailedError(
                f"{ctx.principal} is not authorized to {_verb(operation)} topic {name!r}"
            )

    def require_group(self, ctx: RequestContext, operation: AclOperation, name: str) -> None:
        if not self.group(ctx, operation, name):
            raise GroupAuthorizationFailedError(
                f"{ctx.principal} is not authorized to {_verb(operation)} group {name!r}"
            )

    def require_cluster(self, ctx: RequestContext, operation: AclOperation) -> None:
        if not self.cluster(ctx, operation):
            raise ClusterAuthorizationFailedError(
                f"{ctx.principal} is not authorized to {_verb(operation)} the cluster"
            )


def _quietly(
    acls: AclStore, ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str
) -> bool:
    """A check that is one of several alternatives: its denial is not logged on its own."""
    return acls.authorize(ctx.principal, ctx.client_address, operation, resource_type, name)


def _verb(operation: AclOperation) -> str:
    return operation.name.lower().replace("_", " ")
