"""The consumer-group APIs of the request handler (find_coordinator, join_group, ... delete_groups).

A mixin of :class:`triolog.broker.server.handlers.RequestHandler`, so that the group coordinator's
wiring lives beside, not inside, the log APIs. Until the coordinator is started every group API
is answered COORDINATOR_NOT_AVAILABLE, Kafka's answer while no coordinator serves the group.
"""

from __future__ import annotations

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode

_NOT_AVAILABLE = "the group coordinator is not available on this broker"


class GroupHandlers:
    async def _find_coordinator(self, request: m.FindCoordinatorRequest) -> m.Response:
        return m.FindCoordinatorResponse(id=request.id, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                         error_message=_NOT_AVAILABLE)

    async def _join_group(self, request: m.JoinGroupRequest) -> m.Response:
        return m.JoinGroupResponse(id=request.id, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                   error_message=_NOT_AVAILABLE)

    async def _sync_group(self, request: m.SyncGroupRequest) -> m.Response:
        return m.SyncGroupResponse(id=request.id, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                   error_message=_NOT_AVAILABLE)

    async def _heartbeat(self, request: m.HeartbeatRequest) -> m.Response:
        return m.HeartbeatResponse(id=request.id, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                   error_message=_NOT_AVAILABLE)

    async def _leave_group(self, request: m.LeaveGroupRequest) -> m.Response:
        return m.LeaveGroupResponse(id=request.id, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                    error_message=_NOT_AVAILABLE)

    async def _offset_commit(self, request: m.OffsetCommitRequest) -> m.Response:
        return m.OffsetCommitResponse(id=request.id, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                      error_message=_NOT_AVAILABLE)

    async def _offset_fetch(self, request: m.OffsetFetchRequest) -> m.Response:
        return m.OffsetFetchResponse(id=request.id, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                     error_message=_NOT_AVAILABLE)

    async def _list_groups(self, request: m.ListGroupsRequest) -> m.Response:
        return m.ListGroupsResponse(id=request.id, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                    error_message=_NOT_AVAILABLE)

    async def _describe_groups(self, request: m.DescribeGroupsRequest) -> m.Response:
        return m.DescribeGroupsResponse(id=request.id, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                        error_message=_NOT_AVAILABLE)

    async def _delete_groups(self, request: m.DeleteGroupsRequest) -> m.Response:
        return m.DeleteGroupsResponse(id=request.id, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                      error_message=_NOT_AVAILABLE)
