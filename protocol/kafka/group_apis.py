"""The consumer-group APIs on the Kafka listener, answered by the same group coordinator as the
msgpack protocol's: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, ListGroups, DescribeGroups and DeleteGroups.

Where a Kafka version says something the internal API says differently, the adapter bridges it:
a batched FindCoordinator (v4) or OffsetFetch (v8+) is one internal request per key or group,
a DescribeGroups one per DESCRIBE_GROUPS_PER_CALL groups;
a JoinGroup older than v4, whose client does not know MEMBER_ID_REQUIRED, is joined again at
once with the id the coordinator gave (what Kafka's coordinator does itself for those versions).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode

from .apis import Adapter, ApiKey, KafkaContext, by_key
from .requests import KafkaRequest
from .schema import build, millis, response_class

__all__ = ["ADAPTERS"]


def _body(req: KafkaRequest, values: dict[str, Any]):
    return build(response_class(req.api_key, req.version), values)


def _envelope(req: KafkaRequest) -> dict[str, Any]:
    return {"id": req.correlation_id, "client_id": req.client_id}


def _top_level_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(req, {"error_code": code, "error_message": message})


# -- FindCoordinator ----------------------------------------------------------------------------


def find_coordinator_to_internal(req: KafkaRequest, ctx: KafkaContext):
    body = req.body
    key_type = getattr(body, "key_type", 0)
    keys = body.coordinator_keys if req.version >= 4 else (body.key,)
    return [m.FindCoordinatorRequest(**_envelope(req), key=key, key_type=key_type) for key in keys]


def _coordinator(response: m.FindCoordinatorResponse, ctx: KafkaContext) -> dict[str, Any]:
    if response.error_code:
        return {
            "error_code": response.error_code,
            "error_message": response.error_message,
            "node_id": -1,
            "host": "",
            "port": -1,
        }
    if response.node_id != ctx.node_id:  # another broker of the cluster, at its Kafka listener
        return {
            "error_code": 0,
            "error_message": None,
            "node_id": response.node_id,
            "host": response.host,
            "port": response.port,
        }
    # This broker, at the address Kafka clients reach it (not the msgpack listener's).
    return {"error_code": 0, "error_message": None, "node_id": ctx.node_id, "host": ctx.host, "port": ctx.port}


def find_coordinator_to_kafka(responses: list, req: KafkaRequest, ctx: KafkaContext):
    if req.version >= 4:
        return _body(
            req,
            {
                "coordinators": [
                    {"key": key, **_coordinator(r, ctx)} for key, r in zip(req.body.coordinator_keys, responses)
                ]
            },
        )
    return _body(req, _coordinator(responses[0], ctx))


def find_coordinator_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    failed = {"error_code": code, "error_message": message, "node_id": -1, "host": "", "port": -1}
    if req.version >= 4:
        return _body(req, {"coordinators": [{"key": k, **failed} for k in req.body.coordinator_keys]})
    return _body(req, failed)


# -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup -------------------------------------------------


def join_group_to_internal(req: KafkaRequest, ctx: KafkaContext):
    body = req.body
    rebalance = millis(body.rebalance_timeout, -1) if req.version >= 1 else -1
    return m.JoinGroupRequest(
        **_envelope(req),
        group_id=body.group_id,
        session_timeout_ms=millis(body.session_timeout, 0),
        rebalance_timeout_ms=rebalance,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        protocol_type=body.protocol_type,
        protocols=tuple(m.JoinGroupProtocol(name=p.name, metadata=p.metadata) for p in body.protocols),
        reason=getattr(body, "reason", None),
    )


def join_group_follow_up(response: m.JoinGroupResponse, internal: m.JoinGroupRequest, req: KafkaRequest):
    """Before v4 a client has no MEMBER_ID_REQUIRED: join again with the id the coordinator gave."""
    if req.version < 4 and response.error_code == ErrorCode.MEMBER_ID_REQUIRED and not internal.member_id:
        return dataclasses.replace(internal, member_id=response.member_id)
    return None


def join_group_to_kafka(response: m.JoinGroupResponse, req: KafkaRequest, ctx: KafkaContext):
    return _body(
        req,
        {
            "error_code": response.error_code,
            "generation_id": response.generation_id,
            "protocol_type": response.protocol_type,
            "protocol_name": response.protocol_name or "",
            "leader": response.leader,
            "skip_assignment": response.skip_assignment,
            "member_id": response.member_id,
            "members": [
                {"member_id": p.member_id, "group_instance_id": p.group_instance_id, "metadata": p.metadata}
                for p in response.members
            ],
        },
    )


def join_group_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(
        req,
        {
            "error_code": code,
            "generation_id": -1,
            "protocol_name": "",
            "leader": "",
            "member_id": req.body.member_id,
            "members": [],
        },
    )


def sync_group_to_internal(req: KafkaRequest, ctx: KafkaContext):
    body = req.body
    return m.SyncGroupRequest(
        **_envelope(req),
        group_id=body.group_id,
        generation_id=body.generation_id,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        protocol_type=getattr(body, "protocol_type", None),
        protocol_name=getattr(body, "protocol_name", None),
        assignments=tuple(
            m.SyncGroupAssignment(member_id=a.member_id, assignment=a.assignment) for a in body.assignments
        ),
    )


def sync_group_to_kafka(response: m.SyncGroupResponse, req: KafkaRequest, ctx: KafkaContext):
    return _body(
        req,
        {
            "error_code": response.error_code,
            "protocol_type": response.protocol_type,
            "protocol_name": response.protocol_name,
            "assignment": response.assignment,
        },
    )


def sync_group_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(req, {"error_code": code, "assignment": b""})


def heartbeat_to_internal(req: KafkaRequest, ctx: KafkaContext):
    body = req.body
    return m.HeartbeatRequest(
        **_envelope(req),
        group_id=body.group_id,
        generation_id=body.generation_id,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
    )


def heartbeat_to_kafka(response: m.HeartbeatResponse, req: KafkaRequest, ctx: KafkaContext):
    return _body(req, {"error_code": response.error_code})


def leave_group_to_internal(req: KafkaRequest, ctx: KafkaContext):
    body = req.body
    members: tuple[m.MemberIdentity, ...]
    if req.version < 3:
        members = (m.MemberIdentity(member_id=body.member_id),)
    else:
        members = tuple(
            m.MemberIdentity(
                member_id=p.member_id, group_instance_id=p.group_instance_id, reason=getattr(p, "reason", None)
            )
            for p in body.members
        )
    return m.LeaveGroupRequest(**_envelope(req), group_id=body.group_id, members=members)


def leave_group_to_kafka(response: m.LeaveGroupResponse, req: KafkaRequest, ctx: KafkaContext):
    code = response.error_code
    if req.version < 3 and not code and response.members:
        code = response.members[0].error_code  # one member, one code: Kafka answers it at the top
    return _body(
        req,
        {
            "error_code": code,
            "members": [
                {"member_id": p.member_id, "group_instance_id": p.group_instance_id, "error_code": p.error_code}
                for p in response.members
            ],
        },
    )


# -- OffsetCommit, OffsetFetch ------------------------------------------------------------------


def offset_commit_to_internal(req: KafkaRequest, ctx: KafkaContext):
    body = req.body
    return m.OffsetCommitRequest(
        **_envelope(req),
        group_id=body.group_id,
        generation_id=body.generation_id_or_member_epoch,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        topics=tuple(
            m.OffsetCommitTopic(
                name=t.name,
                partitions=tuple(
                    m.OffsetCommitPartition(
                        partition=p.partition_index,
                        committed_offset=p.committed_offset,
                        committed_leader_epoch=getattr(p, "committed_leader_epoch", -1),
                        committed_metadata=p.committed_metadata,
                    )
                    for p in t.partitions
                ),
            )
            for t in body.topics
        ),
    )


def offset_commit_to_kafka(response: m.OffsetCommitResponse, req: KafkaRequest, ctx: KafkaContext):
    if response.error_code:  # a whole-request refusal: Kafka gives it in every partition
        return offset_commit_error(req, ctx, response.error_code, response.error_message or "")
    return _body(
        req,
        {
            "topics": [
                {
                    "name": t.name,
                    "partitions": [{"partition_index": p.partition, "error_code": p.error_code} for p in t.partitions],
                }
                for t in response.topics
            ]
        },
    )


def offset_commit_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(
        req,
        {
            "topics": [
                {
                    "name": t.name,
                    "partitions": [{"partition_index": p.partition_index, "error_code": code} for p in t.partitions],
                }
                for t in req.body.topics
            ]
        },
    )


def _fetch_topics(topics) -> tuple[m.OffsetFetchTopic, ...] | None:
    if topics is None:
        return None
    return tuple(m.OffsetFetchTopic(name=t.name, partitions=tuple(t.partition_indexes)) for t in topics)


def offset_fetch_to_internal(req: KafkaRequest, ctx: KafkaContext):
    body = req.body
    stable = getattr(body, "require_stable", False)
    if req.version >= 8:
        return [
            m.OffsetFetchRequest(
                **_envelope(req), group_id=g.group_id, topics=_fetch_topics(g.topics), require_stable=stable
            )
            for g in body.groups
        ]
    return [
        m.OffsetFetchRequest(
            **_envelope(req), group_id=body.group_id, topics=_fetch_topics(body.topics), require_stable=stable
        )
    ]


def _fetched_topics(response: m.OffsetFetchResponse) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "partitions": [
                {
                    "partition_index": p.partition,
                    "committed_offset": p.committed_offset,
                    "committed_leader_epoch": p.committed_leader_epoch,
                    "metadata": p.metadata,
                    "error_code": p.error_code,
                }
                for p in t.partitions
            ],
        }
        for t in response.topics
    ]


def offset_fetch_to_kafka(responses: list, req: KafkaRequest, ctx: KafkaContext):
    if req.version >= 8:
        return _body(
            req,
            {
                "groups": [
                    {"group_id": g.group_id, "topics": _fetched_topics(r), "error_code": r.error_code}
                    for g, r in zip(req.body.groups, responses)
                ]
            },
        )
    (response,) = responses
    if response.error_code and req.version < 2:  # no top-level code before v2: in every partition
        return offset_fetch_error(req, ctx, response.error_code, response.error_message or "")
    return _body(req, {"topics": _fetched_topics(response), "error_code": response.error_code})


def offset_fetch_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    def failed(topics):
        return [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p, "committed_offset": -1, "metadata": None, "error_code": code}
                    for p in t.partition_indexes
                ],
            }
            for t in topics or ()
        ]

    if req.version >= 8:
        return _body(
            req,
            {
                "groups": [
                    {"group_id": g.group_id, "topics": failed(g.topics), "error_code": code} for g in req.body.groups
                ]
            },
        )
    return _body(req, {"topics": failed(req.body.topics), "error_code": code})


# -- ListGroups, DescribeGroups, DeleteGroups ---------------------------------------------------

#: The only group type served: Kafka's classic group protocol.
CLASSIC = "classic"


def list_groups_to_internal(req: KafkaRequest, ctx: KafkaContext):
    return m.ListGroupsRequest(**_envelope(req), states_filter=tuple(getattr(req.body, "states_filter", ())))


def list_groups_to_kafka(response: m.ListGroupsResponse, req: KafkaRequest, ctx: KafkaContext):
    types = {t.lower() for t in getattr(req.body, "types_filter", ())}
    groups = [] if types and CLASSIC not in types else response.groups
    return _body(
        req,
        {
            "error_code": response.error_code,
            "groups": [
                {
                    "group_id": g.group_id,
                    "protocol_type": g.protocol_type,
                    "group_state": g.group_state,
                    "group_type": CLASSIC,
                }
                for g in groups
            ],
        },
    )


#: A DescribeGroups request is asked of the coordinator this many groups at a time (the listener
#: yields between its calls): describing 10,000 groups in one call held the event loop ~100 ms.
DESCRIBE_GROUPS_PER_CALL = 256


def describe_groups_to_internal(req: KafkaRequest, ctx: KafkaContext):
    groups = tuple(dict.fromkeys(req.body.groups))
    return [
        m.DescribeGroupsRequest(**_envelope(req), groups=groups[at : at + DESCRIBE_GROUPS_PER_CALL])
        for at in range(0, max(len(groups), 1), DESCRIBE_GROUPS_PER_CALL)
    ]


def describe_groups_to_kafka(responses: list, req: KafkaRequest, ctx: KafkaContext):
    described = {g.group_id: g for response in responses for g in response.groups}
    return _body(req, {"groups": [_described(described[name]) for name in req.body.groups if name in described]})


def _described(g: m.DescribedGroup) -> dict[str, Any]:
    return {
        "error_code": g.error_code,
        "group_id": g.group_id,
        "group_state": g.group_state,
        "protocol_type": g.protocol_type,
        "protocol_data": g.protocol_data,
        "authorized_operations": -2147483648,
        "members": [
            {
                "member_id": p.member_id,
                "group_instance_id": p.group_instance_id,
                "client_id": p.client_id,
                "client_host": p.client_host,
                "member_metadata": p.member_metadata,
                "member_assignment": p.member_assignment,
            }
            for p in g.members
        ],
    }


def describe_groups_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(
        req,
        {
            "groups": [
                {
                    "error_code": code,
                    "group_id": name,
                    "group_state": "",
                    "protocol_type": "",
                    "protocol_data": "",
                    "members": [],
                }
                for name in req.body.groups
            ]
        },
    )


def delete_groups_to_internal(req: KafkaRequest, ctx: KafkaContext):
    return m.DeleteGroupsRequest(**_envelope(req), groups_names=tuple(dict.fromkeys(req.body.groups_names)))


def delete_groups_to_kafka(response: m.DeleteGroupsResponse, req: KafkaRequest, ctx: KafkaContext):
    return _body(req, {"results": [{"group_id": r.group_id, "error_code": r.error_code} for r in response.results]})


def delete_groups_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(req, {"results": [{"group_id": g, "error_code": code} for g in req.body.groups_names]})


ADAPTERS = by_key(
    Adapter(
        ApiKey.FIND_COORDINATOR,
        0,
        4,
        find_coordinator_to_internal,
        find_coordinator_to_kafka,
        "find_coordinator",
        find_coordinator_error,
    ),
    Adapter(
        ApiKey.JOIN_GROUP,
        0,
        9,
        join_group_to_internal,
        join_group_to_kafka,
        "join_group",
        join_group_error,
        follow_up=join_group_follow_up,
    ),
    Adapter(ApiKey.HEARTBEAT, 0, 4, heartbeat_to_internal, heartbeat_to_kafka, "heartbeat", _top_level_error),
    Adapter(ApiKey.LEAVE_GROUP, 0, 5, leave_group_to_internal, leave_group_to_kafka, "leave_group", _top_level_error),
    Adapter(ApiKey.SYNC_GROUP, 0, 5, sync_group_to_internal, sync_group_to_kafka, "sync_group", sync_group_error),
    Adapter(
        ApiKey.OFFSET_COMMIT,
        2,
        9,
        offset_commit_to_internal,
        offset_commit_to_kafka,
        "offset_commit",
        offset_commit_error,
    ),
    Adapter(
        ApiKey.OFFSET_FETCH, 1, 9, offset_fetch_to_internal, offset_fetch_to_kafka, "offset_fetch", offset_fetch_error
    ),
    Adapter(ApiKey.LIST_GROUPS, 0, 5, list_groups_to_internal, list_groups_to_kafka, "list_groups", _top_level_error),
    Adapter(
        ApiKey.DESCRIBE_GROUPS,
        0,
        5,
        describe_groups_to_internal,
        describe_groups_to_kafka,
        "describe_groups",
        describe_groups_error,
    ),
    Adapter(
        ApiKey.DELETE_GROUPS,
        0,
        2,
        delete_groups_to_internal,
        delete_groups_to_kafka,
        "delete_groups",
        delete_groups_error,
    ),
)
