"""The consumer group as a group type (:class:`~zkcoord.core.groups.GroupKind`).

Hands over to the consumer modules (:mod:`.heartbeat`, :mod:`.timers`,
:mod:`.record`, :mod:`.offsets`) what the runtime and the server ask of any
group. Its records are the group record (the state znode) and one record per
member (:mod:`.record`); :meth:`ConsumerKind.writes` says which of them an
outcome changed.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import replace
from typing import Any

from zkcoord.core.consumer import classic_members, offsets, record
from zkcoord.core.consumer.heartbeat import handle_consumer_heartbeat
from zkcoord.core.consumer.messages import ConsumerHeartbeatRequest, rebalance_key, session_key
from zkcoord.core.consumer.model import ConsumerGroup, GroupState, MemberState, new_consumer_group
from zkcoord.core.consumer.timers import expiry_note, handle_consumer_timer
from zkcoord.core.errors import ErrorCode
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.group import GroupDescription, describe_missing
from zkcoord.core.handover.consumer_group import carried_shares
from zkcoord.core.messages import DELETE, DeleteResult, Outcome, Reply, Schedule, TimerOp
from zkcoord.core.phases import GroupPhase

__all__ = ["ConsumerKind", "CONSUMER"]

_WRITES_MEMBER = "members/"
_WRITES_TARGET = record.TARGET_KEY


class ConsumerKind:
    """KIP-848's consumer group. Stateless: one instance, :data:`CONSUMER`."""

    name = record.KIND_NAME
    value_type = ConsumerGroup
    state_names = tuple(s.value for s in GroupState)
    assigns_from_image = True

    def __init__(self) -> None:
        self.handlers: Mapping[type, Any] = {ConsumerHeartbeatRequest: handle_consumer_heartbeat,
                                             **classic_members.HANDLERS}

    # -- values and records ------------------------------------------------------
    def new(self, group_id: str, offset_storage: str = "zookeeper") -> ConsumerGroup:
        return new_consumer_group(group_id, offset_storage)

    def from_record(self, group_id: str, rec: Mapping[str, Any]) -> ConsumerGroup:
        group, cut = record.from_records(group_id, rec)
        return replace(group, target_cut=True) if cut else group

    def to_record(self, group: ConsumerGroup) -> dict[str, Any] | None:
        return None if group.dead else record.to_group_record(group)

    def writes(self, before: Any, after: ConsumerGroup) -> list[tuple[str, dict | None, bool]]:
        """What ``after`` changes in ZooKeeper, from ``before`` (any kind):
        ``(key, record or None to delete, existed)``; members first, then the
        target record (``"target"``) when the target changed, the group record
        last (``""``; the target's epoch against the group record's makes a
        cut write detectable). A group loaded from version 1 records (each
        member's target in its record) has every member record written again
        without it, and its target record created."""
        was_consumer = isinstance(before, ConsumerGroup)
        previous = before.members if was_consumer else {}
        if after.dead:
            return self.delete_writes(before if was_consumer else after)
        moving = not was_consumer or before.targets_in_members  # the target record does not exist yet
        changes: list[tuple[str, dict | None, bool]] = [] if was_consumer else [("members", {}, False)]
        for member_id, member in after.members.items():
            if moving or previous.get(member_id) is not member:
                changes.append((_WRITES_MEMBER + member_id, record.to_member_record(member), member_id in previous))
        changes += [(_WRITES_MEMBER + m, None, True) for m in previous if m not in after.members]
        if moving or before.targets is not after.targets:
            changes.append((_WRITES_TARGET, record.to_target_record(after), not moving))
        return changes + [("", record.to_group_record(after), was_consumer)]

    def delete_writes(self, group: ConsumerGroup) -> list[tuple[str, dict | None, bool]]:
        """Every record of the group goes (DeleteGroups, the cleanup of an empty group)."""
        target = [] if group.targets_in_members else [(_WRITES_TARGET, None, True)]
        return ([(_WRITES_MEMBER + m, None, True) for m in group.members]
                + [("members", None, True)] + target + [("", None, True)])

    def load(self, group: ConsumerGroup, now_ms: int, config) -> Outcome:
        """Taken over after a fail-over (Kafka's ``onLoaded``): every member's
        session starts again; a member with partitions to revoke gets its
        rebalance time-out again. A target whose write was cut moves the
        group epoch on (:mod:`.record`): written at once, as is a group read
        from version 1 records (written as version 3). A group in a live
        handover (its record lists legacy consumer ids) takes each member's
        current assignment as its share until the daemon's driver runs
        (:func:`~zkcoord.core.handover.consumer_group.carried_shares`)."""
        timers: list[TimerOp] = []
        epochs = {}
        for member_id, member in group.members.items():
            timers.append(Schedule(session_key(member_id), now_ms + config.consumer.session_timeout_ms))
            if member.state is MemberState.UNREVOKED_PARTITIONS and not member.uses_classic_protocol:
                timers.append(Schedule(rebalance_key(member_id), now_ms + member.rebalance_timeout_ms))
                epochs[member_id] = member.member_epoch
        if group.handover_ids is not None:
            group = replace(group, handover_shares=FrozenMap(carried_shares(group, config)))
        persist = group.target_cut or group.targets_in_members  # a version 1 record is written as version 3
        if group.target_cut:
            group = replace(group, group_epoch=group.group_epoch + 1, target_cut=False)
        return Outcome(replace(group, rebalance_epochs=FrozenMap(epochs), targets_in_members=False), persist, (),
                       tuple(timers))

    # -- what changes it -----------------------------------------------------------
    def handle_timer(self, group: ConsumerGroup, key: str, now_ms: int, config) -> Outcome:
        return handle_consumer_timer(group, key, now_ms, config)

    def handle_unload(self, group: ConsumerGroup) -> Outcome:
        return classic_members.unload(group)

    def handle_delete(self, group: ConsumerGroup, token: Hashable, exists: bool) -> Outcome:
        """DeleteGroups: only an Empty group goes (Kafka's ``validateDeleteGroup``)."""
        if not exists or group.dead:
            error = ErrorCode.GROUP_ID_NOT_FOUND
        elif group.state is not GroupState.EMPTY:
            error = ErrorCode.NON_EMPTY_GROUP
        else:
            return Outcome(replace(group, dead=True), True, (Reply(token, DELETE, DeleteResult(ErrorCode.NONE)),))
        return Outcome(group, False, (Reply(token, DELETE, DeleteResult(error)),))

    def handle_metadata_change(self, group: ConsumerGroup, now_ms: int, config) -> Outcome:
        """A subscribed topic changed: the next heartbeat refreshes the
        metadata hash (Kafka's ``requestMetadataRefresh``)."""
        return Outcome(replace(group, metadata_refresh_deadline_ms=0))

    def expire_member_by(self, group: ConsumerGroup, member_id: str, deadline_ms: int) -> Outcome:
        member = group.members.get(member_id)
        if member is None or member.instance_id is not None:
            return Outcome(group)
        return Outcome(group, timers=(Schedule(session_key(member_id), deadline_ms),))

    def validate_offset_commit(self, group: ConsumerGroup | None, request, config):
        return offsets.validate_commit(group, request, config)

    def validate_offset_fetch(self, group: ConsumerGroup, member_id: str | None, member_epoch: int) -> ErrorCode:
        return offsets.validate_fetch(group, member_id, member_epoch)

    def touch_member(self, group: ConsumerGroup, member_id: str, now_ms: int) -> Outcome:
        return Outcome(group)  # a commit is no heartbeat in the consumer protocol

    def with_offset_storage(self, group: ConsumerGroup, mode: str) -> ConsumerGroup:
        return replace(group, offset_storage=mode)

    # -- what it shows -------------------------------------------------------------
    def phase(self, group: ConsumerGroup) -> GroupPhase:
        return group.phase

    def changed(self, before: ConsumerGroup, after: ConsumerGroup) -> bool:
        return (before.group_epoch != after.group_epoch or before.assignment_epoch != after.assignment_epoch
                or before.state is not after.state)

    def state_name(self, group: ConsumerGroup) -> str:
        return group.state.value

    def epoch(self, group: ConsumerGroup) -> int:
        return group.group_epoch

    def answers_at_once(self, group: ConsumerGroup, request: object) -> bool:
        return type(request) is ConsumerHeartbeatRequest

    def holds_nothing(self, group: ConsumerGroup) -> bool:
        """Empty, offsets in ZooKeeper, not in a handover (its record lists the znodes it still holds)."""
        return (group.state is GroupState.EMPTY and group.offset_storage == "zookeeper"
                and group.handover_ids is None)

    def describe(self, group: ConsumerGroup) -> GroupDescription:
        """DescribeGroups of a consumer group: Kafka answers as for a group it
        does not have (Dead; GROUP_ID_NOT_FOUND from v6)."""
        missing = describe_missing(group.group_id)
        return replace(missing, error=ErrorCode.GROUP_ID_NOT_FOUND)

    def listing(self, group: ConsumerGroup) -> tuple[str, str]:
        return group.state.value, "consumer"

    def summary(self, group: ConsumerGroup) -> str:
        return (f"{group.state.value}, group epoch {group.group_epoch}, assignment epoch {group.assignment_epoch}, "
                f"members [{', '.join(group.members)}]")

    def expiry_note(self, key: str, before: Any, after: Any) -> str | None:
        return expiry_note(key, before, after)


CONSUMER = ConsumerKind()
