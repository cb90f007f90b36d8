"""A group changing type while it runs: classic to consumer (online upgrade)
and back (online downgrade), as KIP-848 and Kafka 4.4 do it.

* An Empty classic group (offsets, no members) becomes a consumer group at
  the first ConsumerGroupHeartbeat that joins it.
* A classic group with members is upgraded when the first member using the
  consumer protocol joins, where ``group.consumer.migration.policy`` allows
  it (``bidirectional`` or ``upgrade``), the group uses the ``consumer``
  protocol type and is not larger than ``group.consumer.max.size`` (else
  GROUP_ID_NOT_FOUND, naming the reason, as Kafka answers). Parked
  JoinGroups and SyncGroups are answered REBALANCE_IN_PROGRESS. Each classic
  member becomes a member of the consumer group that keeps its partitions
  (its last assignment is its target, at the generation as its epoch) and
  keeps speaking the classic protocol (:mod:`.classic_members`) until it
  restarts with the consumer protocol. A group assigned by a client-side
  assignor that put user data in its assignments is not converted (the
  data would be lost).
* A consumer group whose remaining members all speak the classic protocol
  is downgraded where the policy allows it (``bidirectional`` or
  ``downgrade``) and the group fits ``group.max.size``: when the last
  consumer-protocol member leaves or is fenced, or is replaced by a classic
  static member. The classic group starts Stable at the group epoch as its
  generation, each member's target as its assignment, and then rebalances.

Both directions replace the group's records with the new type's and its
timers with the new type's (the runtime writes and arms them). A live
handover's shares (in memory, :mod:`zkcoord.core.handover`) and legacy
consumer ids (stored) go with the group either way: after an upgrade the
shares are the target where a member's assignment differs from its share.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from zkcoord.core.consumer.messages import session_key as consumer_session_key
from zkcoord.core.consumer.model import (
    ClassicMetadata, ConsumerGroup, ConsumerMember, MemberState, new_consumer_group,
)
from zkcoord.core.consumer.protocol import MalformedProtocolError
from zkcoord.core.errors import ErrorCode
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.messages import Cancel, Outcome, Schedule, TimerOp
from zkcoord.core.phases import GroupPhase
from zkcoord.errors import GroupRequestError

__all__ = ["is_empty_classic", "to_consumer_group", "maybe_downgrade_without", "to_classic_group",
           "CLASSIC_PROTOCOL_TYPE"]

E = ErrorCode
CLASSIC_PROTOCOL_TYPE = "consumer"  # the embedded protocol type of a consumer


def is_empty_classic(group: Any) -> bool:
    """A classic group with no member (Kafka deletes it and creates the
    consumer group in its place: ``maybeDeleteEmptyClassicGroup``)."""
    from zkcoord.core.groups import kind_of

    kind = kind_of(group)
    return kind.name == "classic" and kind.phase(group) in (GroupPhase.EMPTY, GroupPhase.DEAD) and group.size == 0


def _not_found(group_id: str, why: str) -> GroupRequestError:
    return GroupRequestError(E.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {group_id} to consumer group {why}.")


def to_consumer_group(classic: Any, now_ms: int, config) -> Outcome:
    """The online upgrade of a classic group with members (Kafka's
    ``validateOnlineUpgrade`` then ``convertToConsumerGroup``): an Outcome
    whose group is the consumer group, with the answers to the classic
    group's parked requests and the timers to change (not yet persisted:
    the heartbeat that triggered it goes on from this group)."""
    c = config.consumer
    if not c.upgrade_enabled:
        raise _not_found(classic.group_id, "because online upgrade is disabled")
    if classic.protocol_type != CLASSIC_PROTOCOL_TYPE:
        raise _not_found(classic.group_id, "because the group does not use the consumer embedded protocol")
    if classic.size > c.max_size:
        raise _not_found(classic.group_id, "because the group size exceeds the consumer group maximum size")
    codec = config.consumer_protocol
    if codec is None:
        raise _not_found(classic.group_id, "because this daemon cannot read the embedded consumer protocol")
    from zkcoord.core import group as classic_rules

    unloaded = classic_rules.handle_unload(classic)  # answers parked requests, cancels the classic timers
    replies = tuple(replace(r, payload=_rebalance_in_progress(r.payload)) for r in unloaded.replies)
    generation = classic.generation_id
    group = replace(new_consumer_group(classic.group_id, classic.offset_storage), group_epoch=generation,
                    handover_ids=classic.handover_ids)
    group = group.with_assignment_epoch(generation, 0)
    timers: list[TimerOp] = list(unloaded.timers)
    try:
        for member in classic.members.values():
            consumer, target = _from_classic_member(member, classic, codec, config.image, generation)
            group = group.with_member(consumer).with_target(consumer.member_id, target)
            timers.append(Schedule(consumer_session_key(consumer.member_id), now_ms + member.session_timeout_ms))
    except MalformedProtocolError:
        raise _not_found(classic.group_id, "because the embedded consumer protocol is malformed") from None
    from zkcoord.core.consumer.target import metadata_hash

    group = replace(group, metadata_hash=metadata_hash(group, config.image))
    if classic.handover_shares is not None:  # a live handover: its shares, as the target where they differ
        from zkcoord.core.handover.consumer_group import handle_shares

        group = handle_shares(group, classic.handover_shares, now_ms, config).group
    return Outcome(group, True, replies, tuple(timers))


def _rebalance_in_progress(payload: Any) -> Any:
    """A parked JoinGroup's or SyncGroup's answer at an upgrade: REBALANCE_IN_PROGRESS."""
    return replace(payload, error=E.REBALANCE_IN_PROGRESS)


def _from_classic_member(member, classic, codec, image, generation: int):
    """Kafka's ``ConsumerGroup.fromClassicGroup`` for one member."""
    partitions: dict[str, tuple[int, ...]] = {}
    if member.assignment:
        decoded = codec.assignment(member.assignment)
        if decoded.user_data:
            raise _not_found(classic.group_id, "because an unsupported custom assignor is in use. Please refer to "
                                               "the documentation or switch to a default assignor before "
                                               "re-attempting the upgrade")
        for name, parts in decoded.partitions.items():
            topic_id = image.id_of(name)
            if topic_id is not None and parts:
                partitions[topic_id] = tuple(parts)
    subscription = codec.subscription(member.metadata(classic.protocol_name))
    consumer = ConsumerMember(
        member_id=member.member_id, member_epoch=generation, previous_member_epoch=generation,
        state=MemberState.STABLE, instance_id=member.group_instance_id, rack_id=subscription.rack_id,
        rebalance_timeout_ms=member.rebalance_timeout_ms, client_id=member.client_id,
        client_host=member.client_host, subscribed_topic_names=tuple(dict.fromkeys(subscription.topics)),
        assigned=FrozenMap((t, FrozenMap((p, generation) for p in parts)) for t, parts in partitions.items()),
        classic=ClassicMetadata(member.session_timeout_ms, member.protocols))
    return consumer, FrozenMap(partitions)


# -- downgrade --------------------------------------------------------------------------------

def _downgrade_allowed(group: ConsumerGroup, remaining: int, remaining_classic: int, config) -> bool:
    """Kafka's ``validateOnlineDowngradeWith...``: only classic members would
    remain, some remain, the policy allows it, and the classic group fits."""
    return (remaining_classic == remaining and remaining > 0 and config.consumer.downgrade_enabled
            and remaining <= config.max_group_size and config.consumer_protocol is not None)


def maybe_downgrade_without(group: ConsumerGroup, leaving: list[ConsumerMember], now_ms: int,
                            config) -> Outcome | None:
    """The downgrade when ``leaving`` go and only classic-protocol members
    remain (None: the group stays a consumer group). The classic group then
    rebalances."""
    remaining_classic = group.classic_members - sum(1 for m in leaving if m.uses_classic_protocol)
    if not _downgrade_allowed(group, group.size - len(leaving), remaining_classic, config):
        return None
    gone = {m.member_id for m in leaving}
    return to_classic_group(group, [m for m in group.members.values() if m.member_id not in gone], None, True,
                            now_ms, config)


def downgrade_for_replacing(group: ConsumerGroup, replaced: ConsumerMember, config) -> bool:
    """Does a classic static member replacing ``replaced`` leave only classic members?"""
    remaining_classic = group.classic_members - replaced.uses_classic_protocol + 1
    return _downgrade_allowed(group, group.size, remaining_classic, config)


def to_classic_group(group: ConsumerGroup, members: Iterable[ConsumerMember], joining: ConsumerMember | None,
                     rebalance: bool, now_ms: int, config) -> Outcome:
    """Kafka's ``convertToClassicGroup`` / ``ClassicGroup.fromConsumerGroup``:
    the classic group of ``members`` (and ``joining``, which replaces the
    static member holding its instance id), Stable at the group epoch with
    each member's target as its assignment; then a rebalance if asked.
    Every consumer-group timer of the members is cancelled."""
    from zkcoord.core import group as classic_rules
    from zkcoord.core.membership import Group, Member, select_protocol
    from zkcoord.core.rebalance import Draft, prepare_rebalance, schedule_session

    codec = config.consumer_protocol
    kept = [m for m in members if joining is None or m.instance_id is None or m.instance_id != joining.instance_id]
    if joining is not None:
        kept.append(joining)
    classic_members = {m.member_id: Member(m.member_id, m.instance_id, m.client_id, m.client_host,
                                           m.classic.session_timeout_ms, m.rebalance_timeout_ms,
                                           CLASSIC_PROTOCOL_TYPE, m.classic.protocols)
                       for m in kept}
    protocol = select_protocol(classic_members)
    members_with_assignment = {}
    for m in kept:
        target_of = m.member_id
        if joining is not None and m.member_id == joining.member_id:
            target_of = group.static_member(joining.instance_id).member_id
        partitions = {config.image.name_of(t) or t: p for t, p in group.target(target_of).items()}
        version = codec.subscription(classic_members[m.member_id].metadata(protocol)).version
        members_with_assignment[m.member_id] = replace(
            classic_members[m.member_id], assignment=codec.encode_assignment(partitions, version))
    classic = Group(group.group_id, state=classic_rules.GroupState.STABLE, protocol_type=CLASSIC_PROTOCOL_TYPE,
                    protocol_name=protocol, generation_id=group.group_epoch,
                    generation_reserved=group.group_epoch, leader_id=next(iter(members_with_assignment)),
                    members=members_with_assignment,
                    static_members={m.group_instance_id: m.member_id for m in members_with_assignment.values()
                                    if m.group_instance_id is not None},
                    offset_storage=group.offset_storage,
                    handover_shares=None if group.handover_shares is None else FrozenMap(
                        (m, p) for m, p in group.handover_shares.items() if m in members_with_assignment),
                    handover_ids=group.handover_ids)
    cancels: list[TimerOp] = []
    for member_id in group.members:
        cancels += [Cancel(k) for k in _consumer_keys(member_id)]
    w = Draft.of(classic, now_ms, config)
    for member_id in w.members:
        schedule_session(w, member_id)
    if rebalance:
        prepare_rebalance(w)
    outcome = w.outcome()
    return replace(outcome, persist=True, timers=tuple(cancels) + outcome.timers)


def _consumer_keys(member_id: str) -> tuple[str, ...]:
    from zkcoord.core.consumer.messages import join_key, rebalance_key, session_key, sync_key

    return session_key(member_id), rebalance_key(member_id), join_key(member_id), sync_key(member_id)
