"""The classic group as a group type (:class:`~zkcoord.core.groups.GroupKind`).

This module owns how the classic group (JoinGroup / SyncGroup / Heartbeat,
Kafka's ``ClassicGroup``) answers what the runtime and the server ask of any
group: its requests' handlers, its timers, its record, its phase and what it
shows. It adds no rule of its own: each method hands over to the classic
modules (:mod:`.group` for the handlers, :mod:`.group_record` for the
record, :mod:`.group_timers` for expiries, :data:`~.group_states.BEHAVIOUR`
for what each state does).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import replace
from typing import Any

from zkcoord.core import group as classic
from zkcoord.core.errors import ErrorCode
from zkcoord.core.group_states import BEHAVIOUR, GroupState
from zkcoord.core.membership import Group, GroupConfig
from zkcoord.core.messages import HeartbeatRequest, JoinRequest, LeaveRequest, Outcome, SyncRequest, parse_member_key
from zkcoord.core.phases import GroupPhase

__all__ = ["ClassicKind", "CLASSIC"]

TYPE_NAME = "classic"  # Kafka's group type name (ListGroups v5, kafka-consumer-groups --type)


class ClassicKind:
    """The classic group type. Stateless: one instance, :data:`CLASSIC`."""

    name = TYPE_NAME
    value_type = Group
    state_names = tuple(s.value for s in GroupState)  # Kafka's printed names, every one a group can show
    assigns_from_image = False  # the leader member assigns, from its own metadata

    def __init__(self) -> None:
        from zkcoord.core.consumer.heartbeat import handle_consumer_heartbeat
        from zkcoord.core.consumer.messages import ConsumerHeartbeatRequest

        self.handlers: Mapping[type, Any] = {
            JoinRequest: classic.handle_join, SyncRequest: classic.handle_sync,
            HeartbeatRequest: classic.handle_heartbeat, LeaveRequest: classic.handle_leave,
            # A consumer-protocol member's join makes an Empty classic group a consumer group, and upgrades
            # one with members (zkcoord.core.consumer.convert); other heartbeats are refused there.
            ConsumerHeartbeatRequest: handle_consumer_heartbeat,
        }

    # -- values and records ------------------------------------------------------
    def new(self, group_id: str, offset_storage: str = "zookeeper") -> Group:
        return classic.new_group(group_id, offset_storage)

    def from_record(self, group_id: str, record: Mapping[str, Any]) -> Group:
        return classic.from_record(group_id, record)

    def to_record(self, group: Group) -> dict[str, Any] | None:
        """The record to store; None: the group is Dead, its record goes."""
        return None if group.state is GroupState.DEAD else classic.to_record(group)

    def writes(self, before: Any, after: Group) -> list[tuple[str, dict | None, bool]]:
        """The state znode (deleted for a Dead group); a consumer group's
        member records, their directory and its target record go when it
        becomes classic (an online downgrade)."""
        changes: list[tuple[str, dict | None, bool]] = []
        if type(before) is not Group:
            changes = [("members/" + m, None, True) for m in before.members] + [("members", None, True)]
            if not before.targets_in_members:  # a version 3 consumer group record (zkcoord.core.consumer.record)
                changes.append(("target", None, True))
        return changes + [("", self.to_record(after), True)]

    def delete_writes(self, group: Group) -> list[tuple[str, dict | None, bool]]:
        return [("", None, True)]

    def load(self, group: Group, now_ms: int, config: GroupConfig) -> Outcome:
        return classic.load_group(group, now_ms, config)

    # -- what changes it -----------------------------------------------------------
    def handle_timer(self, group: Group, key: str, now_ms: int, config: GroupConfig) -> Outcome:
        return classic.handle_timer(group, key, now_ms, config)

    def handle_unload(self, group: Group) -> Outcome:
        return classic.handle_unload(group)

    def handle_delete(self, group: Group, token: Hashable, exists: bool) -> Outcome:
        return classic.handle_delete(group, token, exists=exists)

    def handle_metadata_change(self, group: Group, now_ms: int, config: GroupConfig) -> Outcome:
        return classic.handle_metadata_change(group, now_ms, config)

    def expire_member_by(self, group: Group, member_id: str, deadline_ms: int) -> Outcome:
        return classic.expire_member_by(group, member_id, deadline_ms)

    def validate_offset_fetch(self, group: Group, member_id: str | None, member_epoch: int) -> ErrorCode:
        """Kafka's classic group checks nothing of an OffsetFetch's member."""
        return ErrorCode.NONE

    def validate_offset_commit(self, group: Group | None, request, config) -> ErrorCode:
        """``request``: a :class:`~zkcoord.core.offset_commit.CommitRequest`."""
        return classic.validate_offset_commit(group, request.member_id, request.generation_or_epoch,
                                              request.instance_id)

    def touch_member(self, group: Group, member_id: str, now_ms: int) -> Outcome:
        return classic.touch_member(group, member_id, now_ms)

    def with_offset_storage(self, group: Group, mode: str) -> Group:
        return replace(group, offset_storage=mode)

    # -- what it shows -------------------------------------------------------------
    def phase(self, group: Group) -> GroupPhase:
        return BEHAVIOUR[group.state].phase

    def changed(self, before: Group, after: Group) -> bool:
        """Did the state or the generation move (the metrics and held heartbeats follow it)?"""
        return before.state is not after.state or before.generation_id != after.generation_id

    def state_name(self, group: Group) -> str:
        return group.state.value

    def epoch(self, group: Group) -> int:
        """The number a member's requests carry: the generation."""
        return group.generation_id

    def answers_at_once(self, group: Group, request: object) -> bool:
        """Is ``request`` (a Heartbeat or SyncGroup) answered from memory, without parking or writing?"""
        if type(request) is SyncRequest:
            return BEHAVIOUR[group.state].sync_at_once
        return type(request) is HeartbeatRequest

    def holds_nothing(self, group: Group) -> bool:
        """Empty, no members or pending ids, offsets in ZooKeeper (a ``dual`` /
        ``kafka`` group's state records its mode, which must not be lost),
        not in a handover (its record lists the znodes it still holds)."""
        return (BEHAVIOUR[group.state].phase is GroupPhase.EMPTY and group.size == 0 and not group.pending_members
                and group.offset_storage == "zookeeper" and group.handover_ids is None)

    def describe(self, group: Group) -> classic.GroupDescription:
        return classic.describe(group)

    def listing(self, group: Group) -> tuple[str, str]:
        """(Kafka's state name, protocol type) as ListGroups shows them."""
        return group.state.value, group.protocol_type or ""

    def summary(self, group: Group) -> str:
        """One log line of what was written."""
        return (f"{group.state.value}, generation {group.generation_id}, leader {group.leader_id or '-'}, "
                f"members [{', '.join(group.members)}]")

    def expiry_note(self, key: str, before: Group, after: Group) -> str | None:
        """What to log when timer ``key`` changed the group (a member removed), else None."""
        parsed = parse_member_key(key)
        if parsed is None or parsed[0] != "session" or len(after.members) >= len(before.members):
            return None
        # Kafka logs this too ("Member ... has failed, removing it from the group").
        return f"member {parsed[1]} missed its session timeout and was removed; {after.state.value}"


CLASSIC = ClassicKind()
