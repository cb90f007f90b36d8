"""Classic-protocol requests (JoinGroup, SyncGroup, Heartbeat, LeaveGroup)
that reach a consumer group.

Kafka answers them in a consumer group whose migration policy lets classic
members in (``classicGroupJoinToConsumerGroup`` and its siblings). Until
zkcoord takes classic members into consumer groups, it answers them as
Kafka does where it refuses one: a JoinGroup gets INCONSISTENT_GROUP_PROTOCOL
(the member cannot join with the classic protocol), a SyncGroup, Heartbeat
or LeaveGroup of a member the group does not have UNKNOWN_MEMBER_ID.
"""

from __future__ import annotations

from dataclasses import replace

from zkcoord.core.consumer.model import ConsumerGroup
from zkcoord.core.errors import ErrorCode
from zkcoord.core.messages import (
    HEARTBEAT, JOIN, LEAVE, SYNC, HeartbeatRequest, HeartbeatResult, JoinRequest, JoinResult, LeaveMemberResult,
    LeaveRequest, LeaveResult, Outcome, Reply, SyncRequest, SyncResult,
)

__all__ = ["HANDLERS", "unload"]

E = ErrorCode


def _join(group: ConsumerGroup, req: JoinRequest, now_ms: int, config) -> Outcome:
    return Outcome(group, False, (Reply(req.token, JOIN, JoinResult.failed(req.member_id,
                                                                            E.INCONSISTENT_GROUP_PROTOCOL)),))


def _sync(group: ConsumerGroup, req: SyncRequest, now_ms: int, config) -> Outcome:
    return Outcome(group, False, (Reply(req.token, SYNC, SyncResult(E.UNKNOWN_MEMBER_ID)),))


def _heartbeat(group: ConsumerGroup, req: HeartbeatRequest, now_ms: int, config) -> Outcome:
    return Outcome(group, False, (Reply(req.token, HEARTBEAT, HeartbeatResult(E.UNKNOWN_MEMBER_ID)),))


def _leave(group: ConsumerGroup, req: LeaveRequest, now_ms: int, config) -> Outcome:
    results = tuple(LeaveMemberResult(m, i, E.UNKNOWN_MEMBER_ID) for m, i in req.members)
    return Outcome(group, False, (Reply(req.token, LEAVE, LeaveResult(E.NONE, results)),))


HANDLERS = {JoinRequest: _join, SyncRequest: _sync, HeartbeatRequest: _heartbeat, LeaveRequest: _leave}


def unload(group: ConsumerGroup) -> Outcome:
    """This daemon stops serving the group: nothing is parked in a consumer
    group (every heartbeat is answered at once), so it only goes Dead."""
    return Outcome(replace(group, dead=True))
