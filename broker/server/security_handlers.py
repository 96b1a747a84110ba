"""Kafka's security admin APIs: ACLs (CreateAcls, DescribeAcls, DeleteAcls) and SCRAM users
(DescribeUserScramCredentials, AlterUserScramCredentials), over the broker's AclStore and
CredentialStore. The stores rewrite a file with an fsync, or (a cluster's, zk_security.py) write
ZooKeeper and wait for its answer: the work runs in a worker thread.

As Kafka: the ACL APIs need ALTER (create, delete) or DESCRIBE (describe) on the cluster and
answer SECURITY_DISABLED while no authorizer is configured; the user APIs need ALTER or DESCRIBE
on the cluster once one is.
"""

from __future__ import annotations

from collections import Counter

import structlog

from triolog.broker.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from triolog.broker.security.acl_store import AclStore
from triolog.broker.security.quotas import InvalidQuotaError, QuotaEntity, QuotaStore
from triolog.broker.security.scram import (
    CredentialNotFoundError,
    CredentialStore,
    ScramMechanism,
    UnacceptableCredentialError,
    credential_from_salted_password,
)
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode

from .authorization import Op, RequestAuthorizer
from .error_mapping import error_of
from .request_context import RequestContext

logger = structlog.get_logger("triolog.server")

_NO_AUTHORIZER = (
    "no authorizer is configured on the broker (authorizer.class.name is empty): ACLs can be "
    "managed offline with `triolog acls`, and are enforced once the authorizer is on"
)


class SecurityApis:
    """The security admin APIs of the request handler, over the broker's stores."""

    def __init__(
        self,
        *,
        authz: RequestAuthorizer,
        acl_store: AclStore,
        credentials: CredentialStore,
        quota_store: QuotaStore,
        workers,
        limiter,
    ):
        self.authz = authz
        self.acl_store = acl_store
        self.credentials = credentials
        self.quota_store = quota_store
        self.workers = workers
        self.limiter = limiter

    async def _in_thread(self, fn, *args):
        """The stores rewrite their file with an fsync: never on the event loop."""
        return await self.workers.run_sync(fn, *args, limiter=self.limiter)

    def _cluster_denied(self, ctx: RequestContext, operation: Op) -> dict | None:
        if self.authz.cluster(ctx, operation):
            return None
        return {
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": f"{ctx.principal} is not authorized to {operation.name.lower()} the cluster",
        }

    # -- ACLs ------------------------------------------------------------------------------------

    async def create_acls(self, request: m.CreateAclsRequest, ctx: RequestContext) -> m.Response:
        refusal = self._acl_refusal(ctx, Op.ALTER)
        if refusal is not None:
            return m.CreateAclsResponse(id=request.id, results=tuple(m.AclResult(**refusal) for _ in request.creations))

        def work() -> list[m.AclResult]:
            results: dict[int, m.AclResult] = {}  # by the creation's index, each refused or created
            valid: list[tuple[int, AclBinding]] = []
            for i, entry in enumerate(request.creations):
                try:
                    valid.append((i, self.acl_store.validate(_binding(entry))))
                except InvalidAclError as exc:
                    results[i] = m.AclResult(**error_of(exc).fields())
            if valid:
                self.acl_store.create(binding for _, binding in valid)
                for i, _ in valid:
                    results[i] = m.AclResult()
                self._log_acls(ctx, "acls_created", [b for _, b in valid])
            return [results[i] for i in range(len(request.creations))]

        return m.CreateAclsResponse(id=request.id, results=tuple(await self._in_thread(work)))

    async def describe_acls(self, request: m.DescribeAclsRequest, ctx: RequestContext) -> m.Response:
        refusal = self._acl_refusal(ctx, Op.DESCRIBE)
        if refusal is not None:
            return m.DescribeAclsResponse(id=request.id, **refusal)
        try:
            found = self.acl_store.describe(_filter(request).validate())
        except InvalidAclError as exc:
            return m.DescribeAclsResponse(id=request.id, **error_of(exc).fields())
        return m.DescribeAclsResponse(id=request.id, acls=tuple(_entry(b) for b in found))

    async def delete_acls(self, request: m.DeleteAclsRequest, ctx: RequestContext) -> m.Response:
        refusal = self._acl_refusal(ctx, Op.ALTER)
        if refusal is not None:
            return m.DeleteAclsResponse(
                id=request.id, filter_results=tuple(m.DeleteAclsFilterResult(**refusal) for _ in request.filters)
            )

        def work() -> list[m.DeleteAclsFilterResult]:
            results: dict[int, m.DeleteAclsFilterResult] = {}  # by the filter's index, each refused or run
            valid: list[tuple[int, AclBindingFilter]] = []
            for i, wire in enumerate(request.filters):
                try:
                    valid.append((i, _filter(wire).validate()))
                except InvalidAclError as exc:
                    results[i] = m.DeleteAclsFilterResult(**error_of(exc).fields())
            if valid:
                deleted = self.acl_store.delete(f for _, f in valid)
                for (i, _), gone in zip(valid, deleted):
                    results[i] = m.DeleteAclsFilterResult(matching_acls=tuple(_entry(b) for b in gone))
                self._log_acls(ctx, "acls_deleted", [b for gone in deleted for b in gone])
            return [results[i] for i in range(len(request.filters))]

        return m.DeleteAclsResponse(id=request.id, filter_results=tuple(await self._in_thread(work)))

    def _acl_refusal(self, ctx: RequestContext, operation: Op) -> dict | None:
        if not self.authz.enabled:
            return {"error_code": ErrorCode.SECURITY_DISABLED, "error_message": _NO_AUTHORIZER}
        return self._cluster_denied(ctx, operation)

    @staticmethod
    def _log_acls(ctx: RequestContext, event: str, bindings: list[AclBinding]) -> None:
        if bindings:
            logger.info(event, by=ctx.principal, acls=[_text(b) for b in bindings])

    # -- client quotas ---------------------------------------------------------------------------

    async def describe_client_quotas(self, request: m.DescribeClientQuotasRequest, ctx: RequestContext) -> m.Response:
        denied = self._cluster_denied(ctx, Op.DESCRIBE_CONFIGS)
        if denied is not None:
            return m.DescribeClientQuotasResponse(id=request.id, **denied)
        try:
            found = self.quota_store.describe(_matcher(request))
        except InvalidQuotaError as exc:
            return m.DescribeClientQuotasResponse(id=request.id, **error_of(exc).fields())
        return m.DescribeClientQuotasResponse(
            id=request.id,
            entries=tuple(
                m.QuotaEntry(entity=_parts(entity), values={k: round(v) for k, v in values.items()})
                for entity, values in sorted(found.items())
            ),
        )

    async def alter_client_quotas(self, request: m.AlterClientQuotasRequest, ctx: RequestContext) -> m.Response:
        denied = self._cluster_denied(ctx, Op.ALTER_CONFIGS)
        if denied is not None:
            return m.AlterClientQuotasResponse(
                id=request.id,
                entries=tuple(m.QuotaAlterationResult(entity=e.entity, **denied) for e in request.entries),
            )

        def work() -> list[m.QuotaAlterationResult]:
            out = []
            for entry in request.entries:  # each entry on its own, as Kafka answers them
                try:
                    entity = _entity(entry.entity)
                    ops: dict[str, float | None] = {}
                    for op in entry.ops:
                        if op.key in ops:
                            raise InvalidQuotaError(f"the entry sets {op.key} twice")
                        ops[op.key] = None if op.remove else op.value
                    self.quota_store.alter([(entity, ops)], validate_only=request.validate_only)
                    if not request.validate_only:
                        logger.info(
                            "client_quotas_altered",
                            entity=str(entity),
                            by=ctx.principal,
                            set={k: v for k, v in ops.items() if v is not None},
                            removed=[k for k, v in ops.items() if v is None],
                        )
                    out.append(m.QuotaAlterationResult(entity=entry.entity))
                except InvalidQuotaError as exc:
                    out.append(m.QuotaAlterationResult(entity=entry.entity, **error_of(exc).fields()))
            return out

        return m.AlterClientQuotasResponse(id=request.id, entries=tuple(await self._in_thread(work)))

    # -- SCRAM users -----------------------------------------------------------------------------

    async def describe_user_scram_credentials(
        self, request: m.DescribeUserScramCredentialsRequest, ctx: RequestContext
    ) -> m.Response:
        denied = self._cluster_denied(ctx, Op.DESCRIBE)
        if denied is not None:  # as Kafka: the error at the top, no results
            return m.DescribeUserScramCredentialsResponse(id=request.id, **denied)
        store = self.credentials
        if not request.users:  # nil or empty: every user, as Kafka
            described = store.describe()
            return m.DescribeUserScramCredentialsResponse(
                id=request.id, results=tuple(_described(user, infos) for user, infos in described.items())
            )
        counts = Counter(request.users)
        described = store.describe(list(counts))
        results = []
        for user in dict.fromkeys(request.users):
            if counts[user] > 1:
                results.append(
                    m.UserScramCredentials(
                        user=user,
                        error_code=ErrorCode.DUPLICATE_RESOURCE,
                        error_message=f"Cannot describe SCRAM credentials for the same "
                        f"user twice in a single request: {user}",
                    )
                )
            elif user not in described:
                results.append(
                    m.UserScramCredentials(
                        user=user,
                        error_code=ErrorCode.RESOURCE_NOT_FOUND,
                        error_message=f"Attempt to describe a user credential that does not exist: {user}",
                    )
                )
            else:
                results.append(_described(user, described[user]))
        return m.DescribeUserScramCredentialsResponse(id=request.id, results=tuple(results))

    async def alter_user_scram_credentials(
        self, request: m.AlterUserScramCredentialsRequest, ctx: RequestContext
    ) -> m.Response:
        users = list(dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions]))
        denied = self._cluster_denied(ctx, Op.ALTER)
        if denied is not None:  # as Kafka: each user once, sorted
            return m.AlterUserScramCredentialsResponse(
                id=request.id, results=tuple(m.AlterUserScramCredentialsResult(user=u, **denied) for u in sorted(users))
            )

        def work() -> list[m.AlterUserScramCredentialsResult]:
            store = self.credentials
            pairs = Counter(
                [(d.name, d.mechanism) for d in request.deletions] + [(u.name, u.mechanism) for u in request.upsertions]
            )
            errors: dict[str, tuple[ErrorCode, str]] = {}
            credentials = {}
            for (user, mechanism), count in pairs.items():
                if count > 1 and user not in errors:
                    errors[user] = (
                        ErrorCode.DUPLICATE_RESOURCE,
                        f"A user credential cannot be altered twice in the same request: {user} {mechanism}",
                    )
            for user in users:
                if not user and user not in errors:
                    errors[user] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
            for upsertion in request.upsertions:
                if upsertion.name in errors:
                    continue
                try:
                    credentials[(upsertion.name, upsertion.mechanism)] = credential_from_salted_password(
                        upsertion.mechanism, upsertion.salt, upsertion.salted_password, upsertion.iterations
                    )
                except UnacceptableCredentialError as exc:
                    errors[upsertion.name] = error_of(exc)
            for deletion in request.deletions:
                if deletion.name not in errors and store.get(deletion.name, deletion.mechanism) is None:
                    errors[deletion.name] = (
                        ErrorCode.RESOURCE_NOT_FOUND,
                        f"Attempt to delete a user credential that does not exist: "
                        f"{deletion.name} {deletion.mechanism}",
                    )
            for deletion in request.deletions:  # a user's alterations apply together, or none of them
                if deletion.name not in errors:
                    try:
                        store.delete(deletion.name, deletion.mechanism)
                    except CredentialNotFoundError as exc:  # deleted meanwhile by another request
                        errors[deletion.name] = error_of(exc)
            for (user, _), credential in credentials.items():
                if user not in errors:
                    store.upsert(user, credential)
            for user in users:
                if user not in errors:
                    logger.info(
                        "user_credentials_altered",
                        user=user,
                        by=ctx.principal,
                        deleted=[d.mechanism for d in request.deletions if d.name == user],
                        upserted=[u.mechanism for u in request.upsertions if u.name == user],
                    )
            return [
                m.AlterUserScramCredentialsResult(user=user)
                if user not in errors
                else m.AlterUserScramCredentialsResult(
                    user=user, error_code=errors[user][0], error_message=errors[user][1]
                )
                for user in users
            ]

        return m.AlterUserScramCredentialsResponse(id=request.id, results=tuple(await self._in_thread(work)))


def _entity(parts: tuple[m.QuotaEntityPart, ...]) -> QuotaEntity:
    names: dict[str, str | None] = {}
    for part in parts:
        if part.entity_type in names:
            raise InvalidQuotaError(f"the entity names {part.entity_type} twice")
        names[part.entity_type] = part.entity_name
    return QuotaEntity.from_parts(names)


def _parts(entity: QuotaEntity) -> tuple[m.QuotaEntityPart, ...]:
    return tuple(m.QuotaEntityPart(entity_type=kind, entity_name=name) for kind, name in entity.parts)


def _matcher(request: m.DescribeClientQuotasRequest):
    """Kafka's DescribeClientQuotas filter: every component must match a part of the entity (exact
    name, the default, or any); ``strict``: the entity has no other parts."""
    components = request.components
    kinds = [c.entity_type for c in components]
    if len(set(kinds)) != len(kinds):
        raise InvalidQuotaError("a filter names an entity type twice")
    for c in components:
        if c.match_type not in ("exact", "default", "any"):
            raise InvalidQuotaError(f"unknown match type {c.match_type!r} (exact 0, default 1, any 2)")
        if c.match_type == "exact" and not c.match:
            raise InvalidQuotaError(f"an exact filter of {c.entity_type} needs a name to match")

    def match(entity: QuotaEntity) -> bool:
        for c in components:
            if c.entity_type not in entity.types:
                return False
            name = entity.get(c.entity_type)
            if c.match_type == "exact" and name != c.match:
                return False
            if c.match_type == "default" and name is not None:
                return False
        return not request.strict or entity.types == set(kinds)

    return match


def _described(user: str, infos) -> m.UserScramCredentials:
    return m.UserScramCredentials(
        user=user,
        credential_infos=tuple(
            m.CredentialInfo(mechanism=str(ScramMechanism.parse(mechanism)), iterations=iterations)
            for mechanism, iterations in infos
        ),
    )


def _binding(entry: m.AclEntry) -> AclBinding:
    """The wire's names parsed into the model's enums (InvalidAclError names the first that is none),
    in the order the model's own checks run."""
    return AclBinding(
        ResourcePattern(
            ResourceType.parse(entry.resource_type), entry.resource_name, PatternType.parse(entry.pattern_type)
        ),
        AccessControlEntry(
            entry.principal,
            entry.host,
            AclOperation.parse(entry.operation),
            AclPermissionType.parse(entry.permission_type),
        ),
    )


def _filter(wire: m.AclFilter | m.DescribeAclsRequest) -> AclBindingFilter:
    return AclBindingFilter(
        ResourceType.parse(wire.resource_type),
        wire.resource_name,
        PatternType.parse(wire.pattern_type),
        wire.principal,
        wire.host,
        AclOperation.parse(wire.operation),
        AclPermissionType.parse(wire.permission_type),
    )


def _entry(binding: AclBinding) -> m.AclEntry:
    p, e = binding.pattern, binding.entry
    return m.AclEntry(
        resource_type=p.resource_type.name,
        resource_name=p.name,
        pattern_type=p.pattern_type.name,
        principal=e.principal,
        host=e.host,
        operation=e.operation.name,
        permission_type=e.permission_type.name,
    )


def _text(binding: AclBinding) -> str:
    p, e = binding.pattern, binding.entry
    return (
        f"{e.principal} from {e.host} {e.permission_type.name} {e.operation.name} on "
        f"{p.resource_type.name}:{p.pattern_type.name}:{p.name}"
    )
