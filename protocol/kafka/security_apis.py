"""Kafka's security admin APIs on the Kafka listener: CreateAcls, DescribeAcls, DeleteAcls,
DescribeUserScramCredentials, AlterUserScramCredentials, DescribeClientQuotas, AlterClientQuotas,
translated to the msgpack protocol's create_acls ... alter_client_quotas.

Kafka's wire carries the ACL enums as int8 codes; the internal messages carry Kafka's names.
A code Kafka does not define becomes UNKNOWN, which the broker refuses as Kafka does. The ACL
APIs are served from v1 (v0, without pattern types, predates Kafka 2.0; kio has no v0 classes).
"""

from __future__ import annotations

from typing import Any

from triolog.protocol import messages as m

from .apis import Adapter, ApiKey, KafkaContext, by_key
from .requests import KafkaRequest
from .schema import build, response_class

RESOURCE_TYPES = {
    0: "UNKNOWN",
    1: "ANY",
    2: "TOPIC",
    3: "GROUP",
    4: "CLUSTER",
    5: "TRANSACTIONAL_ID",
    6: "DELEGATION_TOKEN",
    7: "USER",
}
PATTERN_TYPES = {0: "UNKNOWN", 1: "ANY", 2: "MATCH", 3: "LITERAL", 4: "PREFIXED"}
OPERATIONS = {
    0: "UNKNOWN",
    1: "ANY",
    2: "ALL",
    3: "READ",
    4: "WRITE",
    5: "CREATE",
    6: "DELETE",
    7: "ALTER",
    8: "DESCRIBE",
    9: "CLUSTER_ACTION",
    10: "DESCRIBE_CONFIGS",
    11: "ALTER_CONFIGS",
    12: "IDEMPOTENT_WRITE",
    13: "CREATE_TOKENS",
    14: "DESCRIBE_TOKENS",
}
PERMISSIONS = {0: "UNKNOWN", 1: "ANY", 2: "DENY", 3: "ALLOW"}
MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}


def _name(table: dict[int, str], code: int) -> str:
    return table.get(int(code), "UNKNOWN")


def _code(table: dict[int, str], name: str) -> int:
    return next(code for code, known in table.items() if known == name)


def _envelope(req: KafkaRequest) -> dict[str, Any]:
    return {"id": req.correlation_id, "client_id": req.client_id}


def _body(req: KafkaRequest, values: dict[str, Any]):
    return build(response_class(req.api_key, req.version), values)


def _entry_values(entry: m.AclEntry) -> dict[str, Any]:
    return {
        "resource_type": _code(RESOURCE_TYPES, entry.resource_type),
        "resource_name": entry.resource_name,
        "pattern_type": _code(PATTERN_TYPES, entry.pattern_type),
        "principal": entry.principal,
        "host": entry.host,
        "operation": _code(OPERATIONS, entry.operation),
        "permission_type": _code(PERMISSIONS, entry.permission_type),
    }


# -- CreateAcls (30) ------------------------------------------------------------------------------


def create_acls_to_internal(req: KafkaRequest, ctx: KafkaContext):
    return m.CreateAclsRequest(
        **_envelope(req),
        creations=tuple(
            m.AclEntry(
                resource_type=_name(RESOURCE_TYPES, c.resource_type),
                resource_name=c.resource_name,
                pattern_type=_name(PATTERN_TYPES, c.resource_pattern_type),
                principal=c.principal,
                host=c.host,
                operation=_name(OPERATIONS, c.operation),
                permission_type=_name(PERMISSIONS, c.permission_type),
            )
            for c in req.body.creations
        ),
    )


def create_acls_to_kafka(response: m.CreateAclsResponse, req: KafkaRequest, ctx: KafkaContext):
    return _body(
        req, {"results": [{"error_code": r.error_code, "error_message": r.error_message} for r in response.results]}
    )


def create_acls_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(req, {"results": [{"error_code": code, "error_message": message} for _ in req.body.creations]})


# -- DescribeAcls (29) ----------------------------------------------------------------------------


def _filter(f) -> m.AclFilter:
    return m.AclFilter(
        resource_type=_name(RESOURCE_TYPES, f.resource_type_filter),
        resource_name=f.resource_name_filter,
        pattern_type=_name(PATTERN_TYPES, f.pattern_type_filter),
        principal=f.principal_filter,
        host=f.host_filter,
        operation=_name(OPERATIONS, f.operation),
        permission_type=_name(PERMISSIONS, f.permission_type),
    )


def describe_acls_to_internal(req: KafkaRequest, ctx: KafkaContext):
    f = _filter(req.body)
    return m.DescribeAclsRequest(
        **_envelope(req),
        resource_type=f.resource_type,
        resource_name=f.resource_name,
        pattern_type=f.pattern_type,
        principal=f.principal,
        host=f.host,
        operation=f.operation,
        permission_type=f.permission_type,
    )


def describe_acls_to_kafka(response: m.DescribeAclsResponse, req: KafkaRequest, ctx: KafkaContext):
    resources: dict[tuple[str, str, str], list[m.AclEntry]] = {}
    for entry in response.acls:  # Kafka groups the ACLs by resource pattern
        resources.setdefault((entry.resource_type, entry.resource_name, entry.pattern_type), []).append(entry)
    return _body(
        req,
        {
            "error_code": response.error_code,
            "error_message": response.error_message,
            "resources": [
                {
                    "resource_type": _code(RESOURCE_TYPES, kind),
                    "resource_name": name,
                    "pattern_type": _code(PATTERN_TYPES, pattern),
                    "acls": [
                        {
                            "principal": e.principal,
                            "host": e.host,
                            "operation": _code(OPERATIONS, e.operation),
                            "permission_type": _code(PERMISSIONS, e.permission_type),
                        }
                        for e in entries
                    ],
                }
                for (kind, name, pattern), entries in resources.items()
            ],
        },
    )


def _top_level_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(req, {"error_code": code, "error_message": message})


# -- DeleteAcls (31) ------------------------------------------------------------------------------


def delete_acls_to_internal(req: KafkaRequest, ctx: KafkaContext):
    return m.DeleteAclsRequest(**_envelope(req), filters=tuple(_filter(f) for f in req.body.filters))


def delete_acls_to_kafka(response: m.DeleteAclsResponse, req: KafkaRequest, ctx: KafkaContext):
    return _body(
        req,
        {
            "filter_results": [
                {
                    "error_code": r.error_code,
                    "error_message": r.error_message,
                    "matching_acls": [
                        {"error_code": 0, "error_message": None, **_entry_values(e)} for e in r.matching_acls
                    ],
                }
                for r in response.filter_results
            ]
        },
    )


def delete_acls_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(req, {"filter_results": [{"error_code": code, "error_message": message} for _ in req.body.filters]})


# -- DescribeUserScramCredentials (50), AlterUserScramCredentials (51) ---------------------------


def describe_users_to_internal(req: KafkaRequest, ctx: KafkaContext):
    users = req.body.users
    return m.DescribeUserScramCredentialsRequest(
        **_envelope(req), users=None if users is None else tuple(u.name for u in users)
    )


def describe_users_to_kafka(response: m.DescribeUserScramCredentialsResponse, req: KafkaRequest, ctx: KafkaContext):
    if response.error_code:
        return describe_users_error(req, ctx, response.error_code, response.error_message)
    return _body(
        req,
        {
            "error_code": response.error_code,
            "error_message": response.error_message,
            "results": [
                {
                    "user": r.user,
                    "error_code": r.error_code,
                    "error_message": r.error_message,
                    "credential_infos": [
                        {"mechanism": _code(MECHANISMS, c.mechanism), "iterations": c.iterations}
                        for c in r.credential_infos
                    ],
                }
                for r in response.results
            ],
        },
    )


def describe_users_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str | None):
    """Kafka's getErrorResponse: the code at the top and in a result per user asked for (whose
    user name Kafka leaves empty). ``message`` may be None: the handler's answer passed on as it came."""
    return _body(
        req,
        {
            "error_code": code,
            "error_message": message,
            "results": [
                {"user": "", "error_code": code, "error_message": message, "credential_infos": []}
                for _ in req.body.users or ()
            ],
        },
    )


def alter_users_to_internal(req: KafkaRequest, ctx: KafkaContext):
    body = req.body
    unknown = [x.mechanism for x in (*body.deletions, *body.upsertions) if int(x.mechanism) not in MECHANISMS]
    if unknown:  # Kafka: UNSUPPORTED_SASL_MECHANISM for that user; here the request is refused whole
        raise ValueError(f"unknown SCRAM mechanism code {unknown[0]} (1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512)")
    return m.AlterUserScramCredentialsRequest(
        **_envelope(req),
        deletions=tuple(
            m.ScramCredentialDeletion(name=d.name, mechanism=MECHANISMS[int(d.mechanism)]) for d in body.deletions
        ),
        upsertions=tuple(
            m.ScramCredentialUpsertion(
                name=u.name,
                mechanism=MECHANISMS[int(u.mechanism)],
                iterations=u.iterations,
                salt=u.salt,
                salted_password=u.salted_password,
            )
            for u in body.upsertions
        ),
    )


def alter_users_to_kafka(response: m.AlterUserScramCredentialsResponse, req: KafkaRequest, ctx: KafkaContext):
    return _body(
        req,
        {
            "results": [
                {"user": r.user, "error_code": r.error_code, "error_message": r.error_message} for r in response.results
            ]
        },
    )


def alter_users_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    names = sorted({x.name for x in (*req.body.deletions, *req.body.upsertions)})  # as Kafka: once each, sorted
    return _body(req, {"results": [{"user": n, "error_code": code, "error_message": message} for n in names]})


ADAPTERS = by_key(
    Adapter(
        ApiKey.DESCRIBE_ACLS, 1, 3, describe_acls_to_internal, describe_acls_to_kafka, "describe_acls", _top_level_error
    ),
    Adapter(ApiKey.CREATE_ACLS, 1, 3, create_acls_to_internal, create_acls_to_kafka, "create_acls", create_acls_error),
    Adapter(ApiKey.DELETE_ACLS, 1, 3, delete_acls_to_internal, delete_acls_to_kafka, "delete_acls", delete_acls_error),
    Adapter(
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
        0,
        0,
        describe_users_to_internal,
        describe_users_to_kafka,
        "describe_user_scram_credentials",
        describe_users_error,
    ),
    Adapter(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        0,
        0,
        alter_users_to_internal,
        alter_users_to_kafka,
        "alter_user_scram_credentials",
        alter_users_error,
    ),
)


# -- DescribeClientQuotas (48), AlterClientQuotas (49) -------------------------------------------

_MATCH_TYPES = {0: "exact", 1: "default", 2: "any"}


def _parts(entity) -> tuple[m.QuotaEntityPart, ...]:
    return tuple(m.QuotaEntityPart(entity_type=p.entity_type, entity_name=p.entity_name) for p in entity)


def describe_quotas_to_internal(req: KafkaRequest, ctx: KafkaContext):
    body = req.body
    return m.DescribeClientQuotasRequest(
        **_envelope(req),
        strict=body.strict,
        components=tuple(
            m.QuotaFilterComponent(
                entity_type=c.entity_type, match_type=_MATCH_TYPES.get(int(c.match_type), "unknown"), match=c.match
            )
            for c in body.components
        ),
    )


def describe_quotas_to_kafka(response: m.DescribeClientQuotasResponse, req: KafkaRequest, ctx: KafkaContext):
    entries = (
        None
        if response.error_code
        else [
            {
                "entity": [{"entity_type": p.entity_type, "entity_name": p.entity_name} for p in e.entity],
                "values": [{"key": k, "value": float(v)} for k, v in e.values.items()],
            }
            for e in response.entries
        ]
    )
    return _body(req, {"error_code": response.error_code, "error_message": response.error_message, "entries": entries})


def alter_quotas_to_internal(req: KafkaRequest, ctx: KafkaContext):
    """Kafka's values are doubles; triolog keeps whole units per second (a fraction is rounded,
    and a value under 1 becomes 1)."""
    return m.AlterClientQuotasRequest(
        **_envelope(req),
        validate_only=req.body.validate_only,
        entries=tuple(
            m.QuotaAlteration(
                entity=_parts(e.entity),
                ops=tuple(
                    m.QuotaOp(
                        key=op.key, value=max(1, round(float(op.value))) if float(op.value) > 0 else 0, remove=op.remove
                    )
                    for op in e.ops
                ),
            )
            for e in req.body.entries
        ),
    )


def alter_quotas_to_kafka(response: m.AlterClientQuotasResponse, req: KafkaRequest, ctx: KafkaContext):
    return _body(
        req,
        {
            "entries": [
                {
                    "error_code": r.error_code,
                    "error_message": r.error_message,
                    "entity": [{"entity_type": p.entity_type, "entity_name": p.entity_name} for p in r.entity],
                }
                for r in response.entries
            ]
        },
    )


def alter_quotas_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(
        req,
        {
            "entries": [
                {
                    "error_code": code,
                    "error_message": message,
                    "entity": [{"entity_type": p.entity_type, "entity_name": p.entity_name} for p in e.entity],
                }
                for e in req.body.entries
            ]
        },
    )


ADAPTERS.update(
    by_key(
        Adapter(
            ApiKey.DESCRIBE_CLIENT_QUOTAS,
            0,
            1,
            describe_quotas_to_internal,
            describe_quotas_to_kafka,
            "describe_client_quotas",
            _top_level_error,
        ),
        Adapter(
            ApiKey.ALTER_CLIENT_QUOTAS,
            0,
            1,
            alter_quotas_to_internal,
            alter_quotas_to_kafka,
            "alter_client_quotas",
            alter_quotas_error,
        ),
    )
)
