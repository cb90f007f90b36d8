"""Classic-protocol members inside a consumer group (KIP-848's protocol
interoperability; Kafka 4.4's ``classicGroupJoinToConsumerGroup`` and its
siblings for SyncGroup, Heartbeat and LeaveGroup).

During an online upgrade or downgrade a consumer group holds members that
still speak JoinGroup / SyncGroup / Heartbeat. The coordinator reconciles
them like the others, step by step, and speaks their protocol to them:

* **JoinGroup**: an empty consumer group becomes a classic group that
  takes the join (whatever the policy, as Kafka does); else refused when
  the migration policy is ``disabled`` (INCONSISTENT_GROUP_PROTOCOL). Otherwise the member (dynamic, or static by
  its instance id) is updated from its subscription (its topics, its rack,
  the partitions it owns), the group epoch moves on if its subscription
  changed, the target is computed, and the member takes its next step.
  The answer: its member epoch as the generation, protocol type
  ``consumer``, its first protocol's name, no member list (it never leads).
  A classic static member replacing the group's last consumer-protocol
  member downgrades the group.
* **SyncGroup**: the member's current partitions, encoded in its protocol's
  version; REBALANCE_IN_PROGRESS when its epoch is behind the group's target
  (it must rejoin), ILLEGAL_GENERATION for another generation.
* **Heartbeat**: NONE, or REBALANCE_IN_PROGRESS while it has a step to take
  (behind the target, partitions to revoke, or waiting on a partition that
  is free already), which makes it rejoin.
* **LeaveGroup**: fences the members named (a group left with classic
  members only is downgraded).

A classic member's session time-out is its own (from its JoinGroup); it
must rejoin within its rebalance time-out once told to, and send its
SyncGroup within it after joining: otherwise it is fenced.
"""

from __future__ import annotations

import base64
import re
from dataclasses import replace

from zkcoord.core.consumer import regexes as regex_rules
from zkcoord.core.consumer.convert import CLASSIC_PROTOCOL_TYPE, downgrade_for_replacing, to_classic_group
from zkcoord.core.consumer.heartbeat import (
    fence_members, maybe_reconcile, replace_member, throw_if_full, update_subscription_metadata,
)
from zkcoord.core.consumer.messages import join_key, session_key, sync_key
from zkcoord.core.consumer.model import ClassicMetadata, ConsumerGroup, ConsumerMember, MemberState
from zkcoord.core.consumer.protocol import MalformedProtocolError
from zkcoord.core.consumer.target import assignment_for, pending_timers
from zkcoord.core.errors import ErrorCode
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.messages import (
    HEARTBEAT, JOIN, LEAVE, SYNC, Cancel, HeartbeatRequest, HeartbeatResult, JoinRequest, JoinResult,
    LeaveMemberResult, LeaveRequest, LeaveResult, Outcome, Reply, Schedule, SyncRequest, SyncResult, TimerOp,
)
from zkcoord.errors import GroupRequestError

__all__ = ["HANDLERS", "unload"]

E = ErrorCode


def _answer_errors(kind: str, failed):
    """Wrap a handler: a GroupRequestError becomes its reply's error, the group unchanged."""
    def wrap(handler):
        def handle(group, req, now_ms, config):
            try:
                return handler(group, req, now_ms, config)
            except GroupRequestError as exc:
                return Outcome(group, False, (Reply(req.token, kind, failed(req, exc.code)),))
        return handle
    return wrap


def _member(group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember:
    """Kafka's ``validateConsumerGroupMember``."""
    if instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            raise GroupRequestError(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group "
                                                         f"{group.group_id}.")
        return member
    member = group.static_member(instance_id)
    if member is None:
        raise GroupRequestError(E.UNKNOWN_MEMBER_ID, f"Member with instance id {instance_id} is not a member of "
                                                     f"group {group.group_id}.")
    if member.member_id != member_id:
        raise GroupRequestError(E.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id {instance_id} "
                                                      f"was fenced by member {member.member_id}.")
    return member


def _classic(member: ConsumerMember) -> ClassicMetadata:
    if member.classic is None:
        raise GroupRequestError(E.UNKNOWN_MEMBER_ID, f"Member {member.member_id} does not use the classic protocol.")
    return member.classic


def _check_generation(member: ConsumerMember, generation: int) -> None:
    if member.member_epoch != generation:
        raise GroupRequestError(E.ILLEGAL_GENERATION, f"The request generation id {generation} is not equal to the "
                                                      f"member epoch {member.member_epoch} of member "
                                                      f"{member.member_id}.")


def _join_timer(group: ConsumerGroup, member: ConsumerMember, now_ms: int) -> tuple[ConsumerGroup, list[TimerOp]]:
    """Kafka's ``scheduleConsumerGroupJoinTimeoutIfAbsent``."""
    if member.member_id in group.join_timers:
        return group, []
    return (replace(group, join_timers=group.join_timers | {member.member_id}),
            [Schedule(join_key(member.member_id), now_ms + member.rebalance_timeout_ms)])


# -- JoinGroup --------------------------------------------------------------------------------

def _failed_join(req: JoinRequest, code: ErrorCode) -> JoinResult:
    """A refused join carries no member id (Kafka answers the exception
    with a bare JoinGroupResponseData: GroupCoordinatorService.joinGroup)."""
    return JoinResult.failed("", code)


_UUID_TAIL = re.compile(r"([0-9a-f]{8})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{12})$")


def kafka_member_id(generated: str) -> str:
    """A new classic member's id in a consumer group, in Kafka's form there
    (``Uuid.randomUuid().toString()``: 22 characters of URL-safe base64;
    the classic group's ``<client id>-<UUID>`` elsewhere): the UUID that
    ``generated`` ends with, so written. Kafka never hands out one starting
    with "-" (it draws again); here its first bit is flipped instead.

    >>> kafka_member_id("c-00000000-0000-0000-0000-000000000001")
    'AAAAAAAAAAAAAAAAAAAAAQ'
    """
    match = _UUID_TAIL.search(generated)
    if match is None:
        return generated
    raw = bytes.fromhex("".join(match.groups()))
    text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    if text.startswith("-"):
        text = base64.urlsafe_b64encode(bytes([raw[0] ^ 0x80]) + raw[1:]).decode().rstrip("=")
    return text


def _join(group: ConsumerGroup, req: JoinRequest, now_ms: int, config) -> Outcome:
    """Kafka's ``classicGroupJoin``: a consumer group with members takes the
    classic member (:func:`_join_consumer_group`); an empty one is replaced
    by a classic group that takes the join (``classicGroupJoinToClassicGroup``
    deletes it first: ``maybeDeleteEmptyConsumerGroup``), whatever the
    migration policy."""
    if group.members:
        return _join_consumer_group(group, req, now_ms, config)
    from zkcoord.core.classic import CLASSIC
    from zkcoord.core.consumer.messages import REGEX_KEY

    classic = replace(CLASSIC.new(group.group_id, group.offset_storage), handover_ids=group.handover_ids)
    if group.handover_shares is not None:  # in a live handover it stays in one (no member: no share)
        classic = replace(classic, handover_shares=FrozenMap())
    joined = CLASSIC.handlers[JoinRequest](classic, req, now_ms, config)
    return replace(joined, persist=True, timers=(Cancel(REGEX_KEY), *joined.timers))


@_answer_errors(JOIN, _failed_join)
def _join_consumer_group(group: ConsumerGroup, req: JoinRequest, now_ms: int, config) -> Outcome:
    c = config.consumer
    if c.migration_policy == "disabled":
        raise GroupRequestError(E.INCONSISTENT_GROUP_PROTOCOL, f"Cannot join the consumer group {group.group_id} "
                                                               "with the classic protocol because the group "
                                                               "migration is disabled.")
    unknown = req.member_id == ""
    member_id = (req.new_consumer_member_id or kafka_member_id(req.new_member_id)) if unknown else req.member_id
    throw_if_full(group, member_id, req.group_instance_id, c)
    names = {name for name, _ in req.protocols}
    if not _supports(group, req.protocol_type, names):
        raise GroupRequestError(E.INCONSISTENT_GROUP_PROTOCOL, f"Member {member_id}'s protocols are not supported.")
    if req.require_known_member_id and unknown and req.group_instance_id is None:
        return Outcome(group, False, (Reply(req.token, JOIN, JoinResult.failed(member_id, E.MEMBER_ID_REQUIRED)),))
    codec = config.consumer_protocol
    try:
        subscription = codec.subscription(req.protocols[0][1])
    except MalformedProtocolError:
        raise GroupRequestError(E.INCONSISTENT_GROUP_PROTOCOL, f"Member {member_id}'s subscription is not the "
                                                               "consumer protocol.") from None
    before = group
    timers: list[TimerOp] = []
    if req.group_instance_id is None:
        member = group.members.get(member_id) or ConsumerMember(member_id)
    else:
        group, member, timers = _static_classic_member(group, member_id, req.group_instance_id, unknown)
    replaced = before.static_member(req.group_instance_id) if req.group_instance_id is not None else None
    downgrade = replaced is not None and downgrade_for_replacing(before, replaced, config)
    updated = replace(
        member, instance_id=req.group_instance_id or member.instance_id,
        rack_id=subscription.rack_id if subscription.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
        else member.rebalance_timeout_ms,
        subscribed_topic_names=_names(member, subscription.topics), subscribed_topic_regex="",
        client_id=req.client_id, client_host=req.client_host,
        classic=ClassicMetadata(req.session_timeout_ms, tuple(req.protocols)))
    if updated == member:
        updated = member
    names_changed = updated is not member and \
        frozenset(updated.subscribed_topic_names) != frozenset(member.subscribed_topic_names)
    regex = regex_rules.update_status(group, member, updated, now_ms, config.image, c)
    bump = names_changed or regex.status is not regex_rules.Status.NO_CHANGE
    group = regex.group
    if bump or group.has_metadata_expired(now_ms):
        group = update_subscription_metadata(group, bump, member, updated, now_ms, config.image)
    owned = tuple((t, parts) for t, parts in ((config.image.id_of(n), p) for n, p in subscription.owned)
                  if t is not None)
    if downgrade:
        return _downgrade_at_join(group, updated, owned, bump, req, now_ms, config)
    target_epoch, target, group = assignment_for(group, member, updated, now_ms, config.image, c)
    timers += pending_timers(before, group, now_ms)
    nxt = maybe_reconcile(group, updated, target_epoch, target, config.image, bump, owned)
    if nxt is not member or member.member_id not in group.members:
        group = group.with_member(nxt)
    timers += [Cancel(join_key(member_id)), Schedule(session_key(member_id), now_ms + req.session_timeout_ms),
               Schedule(sync_key(member_id), now_ms + req.rebalance_timeout_ms)]
    group = replace(group, join_timers=group.join_timers - {member_id})
    if regex.resolve_later:
        from zkcoord.core.consumer.messages import REGEX_KEY

        timers.append(Schedule(REGEX_KEY, now_ms))
    result = JoinResult(E.NONE, nxt.member_epoch, CLASSIC_PROTOCOL_TYPE, req.protocols[0][0], "", member_id)
    from zkcoord.core.consumer.heartbeat import persisted_changed

    return Outcome(group, persisted_changed(before, group), (Reply(req.token, JOIN, result),), tuple(timers))


def _names(member: ConsumerMember, topics: tuple[str, ...]) -> tuple[str, ...]:
    sent = tuple(dict.fromkeys(topics))
    return member.subscribed_topic_names if frozenset(sent) == frozenset(member.subscribed_topic_names) else sent


def _supports(group: ConsumerGroup, protocol_type: str, names: set[str]) -> bool:
    """Kafka's ``supportsClassicProtocols``: the consumer protocol type, and
    (unless the group is Empty) a protocol every classic member supports."""
    if protocol_type != CLASSIC_PROTOCOL_TYPE:
        return False
    if not group.members:
        return bool(names)
    counts: dict[str, int] = {}
    for member in group.members.values():
        if member.classic is not None:
            for name in {n for n, _ in member.classic.protocols}:
                counts[name] = counts.get(name, 0) + 1
    return any(counts.get(name, 0) == group.classic_members for name in names)


def _static_classic_member(group: ConsumerGroup, member_id: str, instance_id: str, unknown: bool):
    """Kafka's ``getOrMaybeSubscribeStaticConsumerGroupMember`` for a classic
    member: a join without a member id takes over its instance id (the old
    member is replaced, no UNRELEASED_INSTANCE_ID for the classic protocol)."""
    existing = group.static_member(instance_id)
    if unknown:
        if existing is None:
            return group, group.members.get(member_id) or ConsumerMember(member_id), []
        new = replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
        cancels = [Cancel(k(existing.member_id)) for k in (session_key, join_key, sync_key)]
        return replace_member(group, existing, new), new, cancels
    if existing is None:
        raise GroupRequestError(E.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
    if existing.member_id != member_id:
        raise GroupRequestError(E.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id {instance_id} "
                                                      f"was fenced by member {existing.member_id}.")
    return group, existing, []


def _downgrade_at_join(group: ConsumerGroup, joining: ConsumerMember, owned, bump: bool, req: JoinRequest,
                       now_ms: int, config) -> Outcome:
    """The last consumer-protocol member replaced by a classic static member:
    the group becomes classic (a rebalance if its target is stale)."""
    rebalance = group.assignment_epoch < group.group_epoch
    if not rebalance:
        joining = maybe_reconcile(group, joining, group.assignment_epoch, group.target(joining.member_id),
                                  config.image, bump, owned)
    converted = to_classic_group(group, list(group.members.values()), joining, rebalance, now_ms, config)
    result = JoinResult(E.NONE, joining.member_epoch, CLASSIC_PROTOCOL_TYPE, req.protocols[0][0], "",
                        joining.member_id)
    return replace(converted, replies=converted.replies + (Reply(req.token, JOIN, result),))


# -- SyncGroup, Heartbeat, LeaveGroup ----------------------------------------------------------

@_answer_errors(SYNC, lambda req, code: SyncResult(code))
def _sync(group: ConsumerGroup, req: SyncRequest, now_ms: int, config) -> Outcome:
    member = _member(group, req.member_id, req.group_instance_id)
    classic = _classic(member)
    _check_generation(member, req.generation_id)
    protocol = classic.protocols[0][0]
    if req.protocol_type is not None and req.protocol_type != CLASSIC_PROTOCOL_TYPE:
        raise GroupRequestError(E.INCONSISTENT_GROUP_PROTOCOL, f"The protocol type {req.protocol_type} from member "
                                                               f"{member.member_id} request is not equal to the group "
                                                               f"protocol type {CLASSIC_PROTOCOL_TYPE}.")
    if req.protocol_name is not None and req.protocol_name != protocol:
        raise GroupRequestError(E.INCONSISTENT_GROUP_PROTOCOL, f"The protocol name {req.protocol_name} from member "
                                                               f"{member.member_id} request is not equal to the "
                                                               f"protocol name {protocol} returned in the join "
                                                               "response.")
    if group.assignment_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
        group, timers = _join_timer(group, member, now_ms)
        reply = Reply(req.token, SYNC, SyncResult(E.REBALANCE_IN_PROGRESS))
        return Outcome(group, False, (reply,), tuple(timers))
    codec = config.consumer_protocol
    partitions = {config.image.name_of(t) or t: sorted(p) for t, p in member.assigned.items()}
    version = codec.subscription(classic.protocols[0][1]).version
    assignment = codec.encode_assignment(partitions, version)
    timers = (Cancel(sync_key(member.member_id)),
              Schedule(session_key(member.member_id), now_ms + classic.session_timeout_ms))
    result = SyncResult(E.NONE, req.protocol_type, req.protocol_name, assignment)
    return Outcome(group, False, (Reply(req.token, SYNC, result),), timers)


@_answer_errors(HEARTBEAT, lambda req, code: HeartbeatResult(code))
def _heartbeat(group: ConsumerGroup, req: HeartbeatRequest, now_ms: int, config) -> Outcome:
    member = _member(group, req.member_id, req.group_instance_id)
    classic = _classic(member)
    _check_generation(member, req.generation_id)
    timers: list[TimerOp] = [Schedule(session_key(member.member_id), now_ms + classic.session_timeout_ms)]
    error = E.NONE
    if (member.member_epoch < group.assignment_epoch or member.state is MemberState.UNREVOKED_PARTITIONS
            or (member.state is MemberState.UNRELEASED_PARTITIONS and not _waiting_on_unreleased(group, member))):
        error = E.REBALANCE_IN_PROGRESS
        group, join = _join_timer(group, member, now_ms)
        timers += join
    return Outcome(group, False, (Reply(req.token, HEARTBEAT, HeartbeatResult(error)),), tuple(timers))


def _waiting_on_unreleased(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """Kafka's ``waitingOnUnreleasedPartition``: a target partition it lacks that another member still holds."""
    for topic_id, partitions in group.target(member.member_id).items():
        held = member.assigned.get(topic_id, {})
        for partition in partitions:
            if partition not in held and group.partition_epoch(topic_id, partition) != -1:
                return True
    return False


def _leave(group: ConsumerGroup, req: LeaveRequest, now_ms: int, config) -> Outcome:
    """Kafka's ``classicGroupLeaveToConsumerGroup``: each member named is
    checked; the valid ones are fenced together."""
    results, leaving = [], []
    for member_id, instance_id in req.members:
        try:
            if instance_id is None:
                member = _member(group, member_id, None)
            else:
                member = group.static_member(instance_id)
                if member is None:
                    raise GroupRequestError(E.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
                if member_id and member.member_id != member_id:
                    raise GroupRequestError(E.FENCED_INSTANCE_ID, "fenced")
            results.append(LeaveMemberResult(member_id, instance_id, E.NONE))
            if member not in leaving:
                leaving.append(member)
        except GroupRequestError as exc:
            results.append(LeaveMemberResult(member_id, instance_id, exc.code))
    return fence_members(group, leaving, req.token, LeaveResult(E.NONE, tuple(results)), now_ms, config, LEAVE)


HANDLERS = {JoinRequest: _join, SyncRequest: _sync, HeartbeatRequest: _heartbeat, LeaveRequest: _leave}


def unload(group: ConsumerGroup) -> Outcome:
    """This daemon stops serving the group: nothing is parked in a consumer
    group (every request is answered at once), so it only goes Dead."""
    return Outcome(replace(group, dead=True))
