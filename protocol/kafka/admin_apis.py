"""The admin APIs on the Kafka listener: CreateTopics, CreatePartitions, DeleteTopics,
DeleteRecords, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs and DescribeCluster.

Each maps onto the handler's own admin API of the same idea: Kafka's AlterConfigs (the given
set replaces a topic's overrides) is alter_configs with ``replace``, IncrementalAlterConfigs'
SET, DELETE, APPEND and SUBTRACT are its ``configs``, ``delete``, ``append`` and ``subtract``;
a broker resource is described by describe_configs' ``brokers`` (triolog's broker configs are
static, so altering one is refused per resource, saying where to set it).
"""

from __future__ import annotations

import uuid
from typing import Any

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode

from .apis import Adapter, ApiKey, Direct, KafkaContext, by_key
from .requests import KafkaRequest
from .schema import build, millis, response_class

__all__ = ["ADAPTERS"]

TOPIC = 2
BROKER = 4
#: Kafka's ConfigSource values.
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
_SOURCES = {"topic": DYNAMIC_TOPIC_CONFIG, "broker": STATIC_BROKER_CONFIG, "default": DEFAULT_CONFIG}
#: IncrementalAlterConfigs' operations.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
#: DescribeCluster's endpoint_type of brokers (2 is controllers).
BROKERS = 1
_ZERO_UUID = uuid.UUID(int=0)


def _body(req: KafkaRequest, values: dict[str, Any]):
    return build(response_class(req.api_key, req.version), values)


def _envelope(req: KafkaRequest) -> dict[str, Any]:
    return {"id": req.correlation_id, "client_id": req.client_id}


# -- CreateTopics -------------------------------------------------------------------------------


def _duplicate_names(req: KafkaRequest) -> set[str]:
    """The topic names a CreateTopics request gives more than once."""
    seen: set[str] = set()
    duplicates: set[str] = set()
    for t in req.body.topics:
        (duplicates if t.name in seen else seen).add(t.name)
    return duplicates


def _duplicate_entry(req: KafkaRequest, name: str) -> dict[str, Any]:
    # Kafka's answer to every entry of a duplicated name; none of them is created.
    return {
        "name": name,
        "error_code": ErrorCode.INVALID_REQUEST,
        "error_message": f"Create topics request from client `{req.client_id}` contains duplicate topic "
        f"name {name!r}: no entry of that name is created",
    }


def create_topics_to_internal(req: KafkaRequest, ctx: KafkaContext):
    body = req.body
    duplicates = _duplicate_names(req)
    topics = []
    refused: dict[str, tuple[int, str]] = {}
    for t in body.topics:
        if t.name in duplicates:
            continue
        assignment = None
        if t.assignments:
            # Kafka's CreatableReplicaAssignment names each partition: they must be 0, 1, ... once each.
            by_index = {a.partition_index: tuple(a.broker_ids) for a in t.assignments}
            if sorted(by_index) != list(range(len(t.assignments))):
                refused[t.name] = (
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    "partitions should be a consecutive 0-based integer sequence, each once",
                )
            assignment = tuple(by_index[p] for p in sorted(by_index))
        configs = {c.name: c.value for c in t.configs if c.value is not None}
        topics.append(
            m.NewTopic(
                name=t.name,
                num_partitions=t.num_partitions,
                replication_factor=t.replication_factor,
                configs=configs,
                replica_assignment=assignment,
            )
        )
    if refused:
        return Direct(
            _create_topics_body(
                req,
                [
                    _duplicate_entry(req, t.name)
                    if t.name in duplicates
                    else {"name": t.name, "error_code": refused[t.name][0], "error_message": refused[t.name][1]}
                    if t.name in refused
                    else {
                        "name": t.name,
                        "error_code": ErrorCode.INVALID_REQUEST,
                        "error_message": "another topic of this request was refused",
                    }
                    for t in body.topics
                ],
            )
        )
    if not topics and duplicates:
        return Direct(_create_topics_body(req, [_duplicate_entry(req, t.name) for t in body.topics]))
    return m.CreateTopicsRequest(**_envelope(req), topics=tuple(topics), validate_only=body.validate_only)


def _create_topics_body(req: KafkaRequest, topics: list[dict[str, Any]]):
    return _body(req, {"topics": [{"topic_id": _ZERO_UUID, "configs": None, **t} for t in topics]})


def create_topics_to_kafka(response: m.CreateTopicsResponse, req: KafkaRequest, ctx: KafkaContext):
    given = {t.name: {c.name for c in t.configs} for t in req.body.topics}
    duplicates = _duplicate_names(req)
    out = [_duplicate_entry(req, t.name) for t in req.body.topics if t.name in duplicates]
    for t in response.topics:
        entry: dict[str, Any] = {"name": t.name, "error_code": t.error_code, "error_message": t.error_message}
        if not t.error_code:
            entry.update(
                num_partitions=t.num_partitions,
                replication_factor=1,
                configs=[
                    {
                        "name": k,
                        "value": v,
                        "read_only": False,
                        "is_sensitive": False,
                        "config_source": DYNAMIC_TOPIC_CONFIG if k in given.get(t.name, ()) else DEFAULT_CONFIG,
                    }
                    for k, v in sorted(t.configs.items())
                ],
            )
        out.append(entry)
    return _create_topics_body(req, out)


def create_topics_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _create_topics_body(
        req, [{"name": t.name, "error_code": code, "error_message": message} for t in req.body.topics]
    )


# -- DeleteTopics -------------------------------------------------------------------------------


def _delete_names(req: KafkaRequest) -> list[tuple[str | None, Any]]:
    if req.version >= 6:
        return [(t.name, t.topic_id) for t in req.body.topics]
    return [(name, None) for name in req.body.topic_names]


def delete_topics_to_internal(req: KafkaRequest, ctx: KafkaContext):
    names = _delete_names(req)
    named = [name for name, _ in names if name is not None]
    if len(named) < len(names):  # some by topic id: triolog's topics have none
        return Direct(
            _body(
                req,
                {
                    "responses": [
                        {
                            "name": name,
                            "topic_id": topic_id,
                            "error_code": ErrorCode.UNKNOWN_TOPIC_ID if name is None else ErrorCode.INVALID_REQUEST,
                            "error_message": "triolog's topics have no topic id: name them"
                            if name is None
                            else "another topic of this request was named by id",
                        }
                        for name, topic_id in names
                    ]
                },
            )
        )
    return m.DeleteTopicsRequest(**_envelope(req), topics=tuple(dict.fromkeys(named)))


def delete_topics_to_kafka(response: m.DeleteTopicsResponse, req: KafkaRequest, ctx: KafkaContext):
    return _body(
        req,
        {
            "responses": [
                {"name": t.name, "topic_id": _ZERO_UUID, "error_code": t.error_code, "error_message": t.error_message}
                for t in response.topics
            ]
        },
    )


def delete_topics_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(
        req,
        {
            "responses": [
                {"name": name, "topic_id": topic_id or _ZERO_UUID, "error_code": code, "error_message": message}
                for name, topic_id in _delete_names(req)
            ]
        },
    )


# -- DeleteRecords ------------------------------------------------------------------------------


def delete_records_to_internal(req: KafkaRequest, ctx: KafkaContext):
    return m.DeleteRecordsRequest(
        **_envelope(req),
        topics=tuple(
            m.DeleteRecordsTopic(
                name=t.name,
                partitions=tuple(
                    m.DeleteRecordsPartition(partition=p.partition_index, offset=p.offset) for p in t.partitions
                ),
            )
            for t in req.body.topics
        ),
    )


def delete_records_to_kafka(response: m.DeleteRecordsResponse, req: KafkaRequest, ctx: KafkaContext):
    return _body(
        req,
        {
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {"partition_index": p.partition, "low_watermark": p.low_watermark, "error_code": p.error_code}
                        for p in t.partitions
                    ],
                }
                for t in response.topics
            ]
        },
    )


def delete_records_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(
        req,
        {
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {"partition_index": p.partition_index, "low_watermark": -1, "error_code": code}
                        for p in t.partitions
                    ],
                }
                for t in req.body.topics
            ]
        },
    )


# -- DescribeConfigs ----------------------------------------------------------------------------


def describe_configs_to_internal(req: KafkaRequest, ctx: KafkaContext):
    resources = req.body.resources
    topics = tuple(dict.fromkeys(r.resource_name for r in resources if r.resource_type == TOPIC))
    brokers = tuple(dict.fromkeys(r.resource_name for r in resources if r.resource_type == BROKER))
    if not topics and not brokers:
        return Direct(describe_configs_to_kafka(m.DescribeConfigsResponse(id=req.correlation_id), req, ctx))
    return m.DescribeConfigsRequest(**_envelope(req), topics=topics, brokers=brokers)


def _entry(name: str, entry: m.ConfigEntry, synonyms: bool) -> dict[str, Any]:
    source = _SOURCES[entry.source]
    return {
        "name": name,
        "value": entry.value,
        "read_only": entry.read_only,
        "config_source": source,
        "is_sensitive": entry.is_sensitive,
        "documentation": None,
        "synonyms": [{"name": name, "value": entry.value, "source": source}] if synonyms else [],
    }


def describe_configs_to_kafka(response: m.DescribeConfigsResponse, req: KafkaRequest, ctx: KafkaContext):
    found = {(TOPIC, t.name): t for t in response.topics}
    found.update({(BROKER, b.name): b for b in response.brokers})
    synonyms = getattr(req.body, "include_synonyms", False)
    results = []
    for resource in req.body.resources:
        keys = resource.configuration_keys
        wanted = None if keys is None else set(keys)
        result: dict[str, Any] = {
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
            "error_code": 0,
            "error_message": None,
            "configs": [],
        }
        described = found.get((resource.resource_type, resource.resource_name))
        if described is None:
            result.update(
                error_code=ErrorCode.INVALID_REQUEST,
                error_message=f"resource type {resource.resource_type} is not served: topics (2) and "
                f"the broker (4) are",
            )
        else:
            result.update(
                error_code=described.error_code,
                error_message=described.error_message,
                configs=[_entry(k, e, synonyms) for k, e in described.configs.items() if wanted is None or k in wanted],
            )
        results.append(result)
    return _body(req, {"results": results})


def describe_configs_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(
        req,
        {
            "results": [
                {
                    "resource_type": r.resource_type,
                    "resource_name": r.resource_name,
                    "error_code": code,
                    "error_message": message,
                    "configs": [],
                }
                for r in req.body.resources
            ]
        },
    )


# -- AlterConfigs and IncrementalAlterConfigs ---------------------------------------------------


def _refused(req: KafkaRequest) -> dict[tuple[int, str], tuple[int, str]]:
    refused: dict[tuple[int, str], tuple[int, str]] = {}
    for resource in req.body.resources:
        if resource.resource_type == BROKER:
            refused[(BROKER, resource.resource_name)] = (
                ErrorCode.INVALID_REQUEST,
                "triolog's broker configs are static: set them in server.properties, "
                "TRIOLOG_* variables or --override, and restart",
            )
        elif resource.resource_type != TOPIC:
            refused[(resource.resource_type, resource.resource_name)] = (
                ErrorCode.INVALID_REQUEST,
                f"resource type {resource.resource_type} cannot be altered",
            )
    return refused


def alter_configs_to_internal(req: KafkaRequest, ctx: KafkaContext):
    refused = _refused(req)
    targets = [r for r in req.body.resources if (r.resource_type, r.resource_name) not in refused]
    if not targets:
        return Direct(_alter_body(req, refused, {}))
    entries = []
    for resource in targets:
        if req.api_key == ApiKey.ALTER_CONFIGS:  # the given set replaces every override
            given = {c.name: c.value for c in resource.configs}
            entries.append(
                m.AlterConfigsTopic(
                    name=resource.resource_name,
                    configs={k: v for k, v in given.items() if v is not None},
                    delete=tuple(k for k, v in given.items() if v is None),
                    replace=True,
                )
            )
            continue
        ops: dict[int, dict[str, str]] = {SET: {}, DELETE: {}, APPEND: {}, SUBTRACT: {}}
        for c in resource.configs:
            if c.config_operation not in ops:
                return Direct(
                    alter_configs_error(
                        req,
                        ctx,
                        ErrorCode.INVALID_REQUEST,
                        f"config_operation {c.config_operation} is not one of 0 (SET), "
                        f"1 (DELETE), 2 (APPEND) and 3 (SUBTRACT)",
                    )
                )
            ops[c.config_operation][c.name] = c.value or ""
        entries.append(
            m.AlterConfigsTopic(
                name=resource.resource_name,
                configs=ops[SET],
                delete=tuple(ops[DELETE]),
                append=ops[APPEND],
                subtract=ops[SUBTRACT],
            )
        )
    return m.AlterConfigsRequest(**_envelope(req), topics=tuple(entries), validate_only=req.body.validate_only)


def _alter_body(req: KafkaRequest, refused, results: dict[str, tuple[int, str | None]]):
    out = []
    for resource in req.body.resources:
        code, message = refused.get((resource.resource_type, resource.resource_name)) or results.get(
            resource.resource_name, (0, None)
        )
        out.append(
            {
                "error_code": code,
                "error_message": message,
                "resource_type": resource.resource_type,
                "resource_name": resource.resource_name,
            }
        )
    return _body(req, {"responses": out})


def alter_configs_to_kafka(response: m.AlterConfigsResponse, req: KafkaRequest, ctx: KafkaContext):
    return _alter_body(req, _refused(req), {t.name: (t.error_code, t.error_message) for t in response.topics})


def alter_configs_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(
        req,
        {
            "responses": [
                {
                    "error_code": code,
                    "error_message": message,
                    "resource_type": r.resource_type,
                    "resource_name": r.resource_name,
                }
                for r in req.body.resources
            ]
        },
    )


# -- CreatePartitions ---------------------------------------------------------------------------


def create_partitions_to_internal(req: KafkaRequest, ctx: KafkaContext):
    body = req.body
    for t in body.topics:
        if t.assignments and any(tuple(a.broker_ids) != (ctx.node_id,) for a in t.assignments):
            return Direct(
                create_partitions_error(
                    req,
                    ctx,
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"on this single broker every new partition's replicas are [{ctx.node_id}]",
                )
            )
    return m.CreatePartitionsRequest(
        **_envelope(req),
        topics=tuple(m.CreatePartitionsTopic(name=t.name, count=t.count) for t in body.topics),
        timeout_ms=max(0, millis(body.timeout, 60000)),
        validate_only=body.validate_only,
    )


def create_partitions_to_kafka(response: m.CreatePartitionsResponse, req: KafkaRequest, ctx: KafkaContext):
    return _body(
        req,
        {
            "results": [
                {"name": t.name, "error_code": t.error_code, "error_message": t.error_message} for t in response.topics
            ]
        },
    )


def create_partitions_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(
        req, {"results": [{"name": t.name, "error_code": code, "error_message": message} for t in req.body.topics]}
    )


# -- DescribeCluster ----------------------------------------------------------------------------


def describe_cluster_to_internal(req: KafkaRequest, ctx: KafkaContext):
    endpoint_type = getattr(req.body, "endpoint_type", BROKERS)
    if endpoint_type != BROKERS:
        # v1 may ask for the controllers (2): a broker endpoint serves only its brokers, as Kafka's.
        return Direct(
            _body(
                req,
                {
                    "error_code": ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                    "cluster_id": ctx.cluster_id or "",
                    "controller_id": -1,
                    "error_message": f"endpoint_type {endpoint_type} is not served: this is a broker endpoint, it answers "
                    f"endpoint_type {BROKERS} (brokers) only",
                    "brokers": [],
                    "cluster_authorized_operations": -2147483648,
                    "endpoint_type": BROKERS,
                },
            )
        )
    return Direct(
        _body(
            req,
            {
                "error_code": 0,
                "cluster_id": ctx.cluster_id or "",
                "controller_id": ctx.node_id,
                "brokers": [{"broker_id": ctx.node_id, "host": ctx.host, "port": ctx.port, "rack": None}],
                "cluster_authorized_operations": -2147483648,
                "endpoint_type": 1,
            },
        )
    )


def _never(response, req, ctx):  # pragma: no cover - always answered directly
    raise AssertionError("DescribeCluster has no internal request")


ADAPTERS = by_key(
    Adapter(
        ApiKey.CREATE_TOPICS,
        2,
        7,
        create_topics_to_internal,
        create_topics_to_kafka,
        "create_topics",
        create_topics_error,
    ),
    Adapter(
        ApiKey.DELETE_TOPICS,
        1,
        6,
        delete_topics_to_internal,
        delete_topics_to_kafka,
        "delete_topics",
        delete_topics_error,
    ),
    Adapter(
        ApiKey.DELETE_RECORDS,
        0,
        2,
        delete_records_to_internal,
        delete_records_to_kafka,
        "delete_records",
        delete_records_error,
    ),
    Adapter(
        ApiKey.DESCRIBE_CONFIGS,
        1,
        4,
        describe_configs_to_internal,
        describe_configs_to_kafka,
        "describe_configs",
        describe_configs_error,
    ),
    Adapter(
        ApiKey.ALTER_CONFIGS,
        0,
        2,
        alter_configs_to_internal,
        alter_configs_to_kafka,
        "alter_configs",
        alter_configs_error,
    ),
    Adapter(
        ApiKey.CREATE_PARTITIONS,
        0,
        3,
        create_partitions_to_internal,
        create_partitions_to_kafka,
        "create_partitions",
        create_partitions_error,
    ),
    Adapter(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        0,
        1,
        alter_configs_to_internal,
        alter_configs_to_kafka,
        "alter_configs",
        alter_configs_error,
    ),
    Adapter(ApiKey.DESCRIBE_CLUSTER, 0, 1, describe_cluster_to_internal, _never, "describe_cluster"),
)
