"""ConsumerGroupHeartbeat: joining, heartbeating, leaving (Kafka 4.4's
``GroupMetadataManager.consumerGroupHeartbeat``, rule for rule).

One heartbeat, in Kafka's order:

1. The group: an existing consumer group; with member epoch 0 (a join) a
   group that does not exist, or an Empty classic group, becomes a new
   consumer group, and a classic group with members is upgraded online
   (:mod:`.convert`); anything else is GROUP_ID_NOT_FOUND.
2. The member: a dynamic member by its id (a join creates it); a static
   member by its instance id (a join replaces the member holding it, which
   must have left with epoch -2 first: UNRELEASED_INSTANCE_ID). Its epoch is
   checked: above the coordinator's, or below it other than its previous
   epoch with exactly its partitions, is FENCED_MEMBER_EPOCH.
3. Its metadata is updated from the request (a field sent as null is
   unchanged). A changed subscription (names, or a regular expression whose
   topics are resolved), or a changed preferred assignor, bumps the group
   epoch; so does a change in the subscribed topics' metadata.
4. The target assignment is computed again when the group epoch is ahead of
   it, at most every ``assignment_interval_ms``; a large group's off the
   event loop, after the heartbeat (:mod:`.target`).
5. The member takes its next step toward its target (:mod:`.reconcile`).
6. Its session time-out restarts; its rebalance time-out runs while it has
   partitions to revoke.

The answer carries the member's assignment when it changed, on a join, and
on a full request. Leaving (epoch -1), or a static member leaving for a
while (epoch -2, its partitions kept for its return), fences or parks the
member. Every change to what is stored sets ``persist``; a heartbeat that
changes nothing writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from zkcoord.core.consumer import regexes as regex_rules
from zkcoord.core.consumer.config import ConsumerGroupConfig
from zkcoord.core.consumer.messages import (
    CONSUMER_HEARTBEAT, ConsumerHeartbeatRequest, ConsumerHeartbeatResult, REGEX_KEY, join_key, rebalance_key,
    session_key, sync_key,
)
from zkcoord.core.consumer.model import (
    EMPTY_CURRENT, EMPTY_TARGET, LEAVE_EPOCH, STATIC_LEAVE_EPOCH, ConsumerGroup, ConsumerMember, MemberState,
    current_partitions, new_consumer_group,
)
from zkcoord.core.consumer.reconcile import reconcile
from zkcoord.core.consumer.target import assignment_for, metadata_hash, pending_timers, preferred_assignor
from zkcoord.core.errors import ErrorCode
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.messages import Cancel, Outcome, Reply, Schedule, TimerOp
from zkcoord.core.topics_image import TopicsImage
from zkcoord.errors import GroupRequestError

__all__ = ["handle_consumer_heartbeat", "fence_members", "persisted_changed", "INT32_MAX_MS", "throw_if_full",
           "update_subscription_metadata", "maybe_reconcile", "replace_member", "check_epoch"]

E = ErrorCode
INT32_MAX_MS = 2**31 - 1  # Kafka's metadata refresh deadline after a refresh: "never" (Integer.MAX_VALUE)


def handle_consumer_heartbeat(group: Any, req: ConsumerHeartbeatRequest, now_ms: int, config) -> Outcome:
    """The handler every group kind registers for ConsumerGroupHeartbeat
    (``config``: the coordinator's GroupConfig; ``config.consumer`` its
    consumer-group settings). Errors become the reply's error code, and the
    group is unchanged."""
    try:
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return _leave(group, req, now_ms, config)
        return _heartbeat(group, req, now_ms, config)
    except GroupRequestError as exc:
        reply = Reply(req.token, CONSUMER_HEARTBEAT, ConsumerHeartbeatResult.failed(exc.code, str(exc)))
        return Outcome(group, False, (reply,), ())


def _consumer_group(group: Any, create: bool, now_ms: int, config) -> Outcome:
    """Step 1 (Kafka's ``getOrMaybeCreateConsumerGroup``): an Outcome whose
    group is the consumer group (with the replies and timers of an online
    upgrade, if one happened)."""
    if isinstance(group, ConsumerGroup):
        return Outcome(group)
    from zkcoord.core.consumer import convert

    if create and convert.is_empty_classic(group):  # in a live handover it stays in one (no member: no share)
        return Outcome(replace(new_consumer_group(group.group_id, group.offset_storage),
                               handover_shares=None if group.handover_shares is None else FrozenMap(),
                               handover_ids=group.handover_ids))
    if create:
        return convert.to_consumer_group(group, now_ms, config)
    raise GroupRequestError(E.GROUP_ID_NOT_FOUND, f"Group {group.group_id} is not a consumer group.")


def _heartbeat(original: Any, req: ConsumerHeartbeatRequest, now_ms: int, config) -> Outcome:
    c: ConsumerGroupConfig = config.consumer
    create = req.member_epoch == 0
    converted = _consumer_group(original, create, now_ms, config)
    group = converted.group
    member_id = req.member_id or req.new_member_id
    throw_if_full(group, member_id, req.instance_id, c)
    timers: list[TimerOp] = list(converted.timers)
    if req.instance_id is None:
        member = _dynamic_member(group, member_id, req, create)
    else:
        group, member, replaced = _static_member(group, member_id, req, create)
        timers += replaced
    updated = _updated_member(member, req)
    names_changed = updated is not member and \
        frozenset(updated.subscribed_topic_names) != frozenset(member.subscribed_topic_names)
    regex = regex_rules.update_status(group, member, updated, now_ms, config.image, c)
    assignor_changed = preferred_assignor(group, c) != preferred_assignor(group, c, member, updated)
    bump = names_changed or regex.status is regex_rules.Status.UPDATED_AND_RESOLVED or assignor_changed
    group = regex.group
    if bump or group.has_metadata_expired(now_ms):
        group = update_subscription_metadata(group, bump, member, updated, now_ms, config.image)
    target_epoch, target, group = assignment_for(group, member, updated, now_ms, config.image, c)
    timers += pending_timers(original, group, now_ms)
    next_member = maybe_reconcile(group, updated, target_epoch, target, config.image,
                                  names_changed or regex.status is not regex_rules.Status.NO_CHANGE, req.owned,
                                  reported_epoch=req.member_epoch, full_report=req.is_full)
    if next_member is not member or member.member_id not in group.members:
        group = group.with_member(next_member)
    timers += _rebalance_timers(group, updated, next_member, now_ms)
    if next_member.state is MemberState.UNREVOKED_PARTITIONS and next_member is not updated:
        group = replace(group, rebalance_epochs=group.rebalance_epochs.set(next_member.member_id,
                                                                           next_member.member_epoch))
    timers.append(Schedule(session_key(next_member.member_id), now_ms + c.session_timeout_ms))
    if regex.resolve_later:
        timers.append(Schedule(REGEX_KEY, now_ms))
    changed_assignment = next_member.assigned != member.assigned
    assignment = current_partitions(next_member.assigned) \
        if (create or req.is_full or changed_assignment) else None
    result = ConsumerHeartbeatResult(E.NONE, None, next_member.member_id, next_member.member_epoch,
                                     c.heartbeat_interval_ms, assignment)
    persist = persisted_changed(original, group)
    return Outcome(group, persist, converted.replies + (Reply(req.token, CONSUMER_HEARTBEAT, result),),
                   tuple(timers))


def throw_if_full(group: ConsumerGroup, member_id: str, instance_id: str | None, c: ConsumerGroupConfig) -> None:
    if instance_id is not None and instance_id in group.static_members:
        return
    if group.size >= c.max_size and member_id not in group.members:
        raise GroupRequestError(E.GROUP_MAX_SIZE_REACHED,
                                f"The consumer group has reached its maximum capacity of {c.max_size} members.")


def _unknown_member(group: ConsumerGroup, member_id: str) -> GroupRequestError:
    return GroupRequestError(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}.")


def _dynamic_member(group: ConsumerGroup, member_id: str, req: ConsumerHeartbeatRequest,
                    create: bool) -> ConsumerMember:
    member = group.members.get(member_id)
    if member is None:
        if not create:
            raise _unknown_member(group, member_id)
        return ConsumerMember(member_id)
    _check_epoch(member, req)
    return member


def _static_member(group: ConsumerGroup, member_id: str, req: ConsumerHeartbeatRequest,
                   create: bool) -> tuple[ConsumerGroup, ConsumerMember, list[TimerOp]]:
    """Kafka's ``getOrMaybeSubscribeStaticConsumerGroupMember``. A join of
    an instance id held by a member that left with epoch -2 replaces it: the
    new member takes its target assignment and its partitions (their epochs
    reset), at epoch 0."""
    existing = group.static_member(req.instance_id)
    if create:
        if existing is None:
            return group, group.members.get(member_id) or ConsumerMember(member_id), []
        if not existing.uses_classic_protocol and existing.member_epoch != STATIC_LEAVE_EPOCH:
            raise GroupRequestError(
                E.UNRELEASED_INSTANCE_ID, f"Static member {member_id} with instance id {req.instance_id} cannot join "
                                          f"the group because the instance id is owned by {existing.member_id} member.")
        new = replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
        return replace_member(group, existing, new), new, _member_timers_cancelled(existing.member_id)
    if existing is None:
        raise GroupRequestError(E.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
    if existing.member_id != member_id:
        raise GroupRequestError(E.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id "
                                                      f"{req.instance_id} was fenced by member {existing.member_id}.")
    _check_epoch(existing, req)
    return group, existing, []


def replace_member(group: ConsumerGroup, old: ConsumerMember, new: ConsumerMember) -> ConsumerGroup:
    """Kafka's ``replaceMember``: the old member's records go, the new one's come, with its target.
    In a live handover a new member id starts from nothing instead (no target, no partitions): the
    owner znodes of its partitions name the old member, and the daemon releases them once the old
    member is gone (:mod:`zkcoord.core.handover.consumer_group`)."""
    target = group.target(old.member_id)
    if group.handover_shares is not None and new.member_id != old.member_id:
        new, target = replace(new, assigned=EMPTY_CURRENT, pending_revocation=EMPTY_CURRENT), EMPTY_TARGET
    return group.without_member(old.member_id).without_target(old.member_id).with_member(new) \
        .with_target(new.member_id, target)


def _member_timers_cancelled(member_id: str) -> list[TimerOp]:
    """Kafka's ``cancelTimers``: every timer of one member."""
    return [Cancel(session_key(member_id)), Cancel(rebalance_key(member_id)), Cancel(join_key(member_id)),
            Cancel(sync_key(member_id))]


def _check_epoch(member: ConsumerMember, req: ConsumerHeartbeatRequest) -> None:
    """Kafka's ``throwIfConsumerGroupMemberEpochIsInvalid``."""
    received = req.member_epoch
    if received == 0:
        return
    if received > member.member_epoch:
        raise GroupRequestError(
            E.FENCED_MEMBER_EPOCH, f"The consumer group member has a greater member epoch ({received}) than the one "
                                   f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                                   "all its partitions and rejoin.")
    if received < member.member_epoch and (received != member.previous_member_epoch
                                           or not _is_subset(req.owned, member.assigned)):
        raise GroupRequestError(
            E.FENCED_MEMBER_EPOCH, f"The consumer group member has a smaller member epoch ({received}) than the one "
                                   f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                                   "all its partitions and rejoin.")


def _is_subset(owned, assigned: Mapping) -> bool:
    """Kafka's ``isSubset``: the partitions reported are all assigned; not
    reported (null) is no proof, so False."""
    if owned is None:
        return False
    for topic_id, partitions in owned:
        held = assigned.get(topic_id, {})
        if any(p not in held for p in partitions):
            return False
    return True


def _updated_member(member: ConsumerMember, req: ConsumerHeartbeatRequest) -> ConsumerMember:
    """Step 3: the request's fields over the member's (``maybeUpdate*``), the
    same value when nothing changed."""
    names = member.subscribed_topic_names
    if req.subscribed_topic_names is not None:
        sent = tuple(dict.fromkeys(req.subscribed_topic_names))
        names = names if frozenset(sent) == frozenset(names) else sent
    updated = ConsumerMember(
        member_id=member.member_id, member_epoch=member.member_epoch,
        previous_member_epoch=member.previous_member_epoch, state=member.state,
        instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
        rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
        else member.rebalance_timeout_ms,
        client_id=req.client_id, client_host=req.client_host, subscribed_topic_names=names,
        subscribed_topic_regex=req.subscribed_topic_regex if req.subscribed_topic_regex is not None
        else member.subscribed_topic_regex,
        server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor,
        assigned=member.assigned, pending_revocation=member.pending_revocation, classic=None)
    return member if updated == member else updated


def update_subscription_metadata(group: ConsumerGroup, bump: bool, member: ConsumerMember,
                                  updated: ConsumerMember, now_ms: int, image: TopicsImage) -> ConsumerGroup:
    """Kafka's ``updateSubscriptionMetadata``: the subscribed topics' metadata
    hash; a new one, or ``bump``, moves the group epoch on."""
    new_hash = metadata_hash(group, image, member, updated)
    epoch = group.group_epoch
    if bump or new_hash != group.metadata_hash:
        epoch += 1
    return replace(group, group_epoch=epoch, metadata_hash=new_hash,
                   metadata_refresh_deadline_ms=now_ms + INT32_MAX_MS, metadata_refresh_epoch=epoch)


def maybe_reconcile(group: ConsumerGroup, member: ConsumerMember, target_epoch: int, target, image: TopicsImage,
                    subscription_changed: bool, owned, reported_epoch: int | None = None,
                    full_report: bool = False) -> ConsumerMember:
    """Kafka's ``maybeReconcile``: the member's next step, unless it is at its target already
    (``reported_epoch``, ``full_report``: the member epoch its heartbeat reports, and whether it is a
    full one: :func:`~zkcoord.core.consumer.reconcile.reconcile`)."""
    if not subscription_changed and member.is_reconciled_to(target_epoch):
        return member
    nxt = reconcile(member, target_epoch, target, image=image, partition_epoch=group.partition_epoch,
                    owned=owned, subscription_changed=subscription_changed, regexes=group.resolved_regexes,
                    reported_epoch=reported_epoch, full_report=full_report)
    return member if nxt == member else nxt


def _rebalance_timers(group: ConsumerGroup, before: ConsumerMember, after: ConsumerMember,
                      now_ms: int) -> list[TimerOp]:
    """The rebalance time-out runs while the member has partitions to revoke
    (armed when it enters that state; only a classic member's is left to its
    own time-outs)."""
    if after is before or after.uses_classic_protocol:
        return []
    if after.state is MemberState.UNREVOKED_PARTITIONS:
        return [Schedule(rebalance_key(after.member_id), now_ms + after.rebalance_timeout_ms)]
    return [Cancel(rebalance_key(after.member_id))]


# -- leaving ----------------------------------------------------------------------------------

def _leave(group: Any, req: ConsumerHeartbeatRequest, now_ms: int, config) -> Outcome:
    """Kafka's ``consumerGroupLeave``: epoch -1 fences the member (a static
    one by its instance id); epoch -2 parks a static member: it keeps its
    target and its partitions (their epochs reset to 0) for its return."""
    if not isinstance(group, ConsumerGroup):
        raise GroupRequestError(E.GROUP_ID_NOT_FOUND, f"Group {group.group_id} is not a consumer group.")
    answer = ConsumerHeartbeatResult(E.NONE, None, req.member_id, req.member_epoch)
    if req.instance_id is None:
        member = group.members.get(req.member_id)
        if member is None:
            raise _unknown_member(group, req.member_id)
        return fence_members(group, [member], req.token, answer, now_ms, config)
    member = group.static_member(req.instance_id)
    if member is None:
        raise GroupRequestError(E.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
    if member.member_id != req.member_id:
        raise GroupRequestError(E.FENCED_INSTANCE_ID, f"Static member {req.member_id} with instance id "
                                                      f"{req.instance_id} was fenced by member {member.member_id}.")
    if req.member_epoch == STATIC_LEAVE_EPOCH:
        parked = replace(member, member_epoch=STATIC_LEAVE_EPOCH, pending_revocation=EMPTY_CURRENT,
                         assigned=FrozenMap((t, FrozenMap((p, 0) for p in ps)) for t, ps in member.assigned.items()))
        result = ConsumerHeartbeatResult(E.NONE, None, member.member_id, STATIC_LEAVE_EPOCH)
        return Outcome(group.with_member(parked), True, (Reply(req.token, CONSUMER_HEARTBEAT, result),), ())
    return fence_members(group, [member], req.token, answer, now_ms, config)


def fence_members(group: ConsumerGroup, members: list[ConsumerMember], token, answer, now_ms: int,
                  config, kind: str = CONSUMER_HEARTBEAT) -> Outcome:
    """Kafka's ``consumerGroupFenceMembers``: the members, their targets and
    their timers go; the group epoch moves on (the others' next target is
    computed without them); the last member out resets the target epoch too.
    (A group whose remaining members all speak the classic protocol is
    downgraded instead, where the policy allows: :mod:`.convert`.)"""
    from zkcoord.core.consumer import convert

    replies = () if token is None else (Reply(token, kind, answer),)
    if not members:
        return Outcome(group, False, replies, ())
    downgraded = convert.maybe_downgrade_without(group, members, now_ms, config)
    if downgraded is not None:
        return replace(downgraded, replies=replies + downgraded.replies)
    timers: list[TimerOp] = []
    remaining = group
    for member in members:
        remaining = remaining.without_member(member.member_id).without_target(member.member_id)
        timers += _member_timers_cancelled(member.member_id)
    remaining = regex_rules.without_unused(remaining)
    epoch = group.group_epoch + 1
    remaining = replace(remaining, group_epoch=epoch, metadata_hash=metadata_hash(remaining, config.image))
    if len(members) == group.size:
        remaining = remaining.with_assignment_epoch(epoch, 0)
    return Outcome(remaining, True, replies, tuple(timers))


def persisted_changed(before: Any, after: ConsumerGroup) -> bool:
    """Did anything stored change? (O(1): changed parts are new objects.)"""
    if not isinstance(before, ConsumerGroup):
        return True
    return (before.group_epoch != after.group_epoch or before.assignment_epoch != after.assignment_epoch
            or before.assignment_timestamp_ms != after.assignment_timestamp_ms
            or before.metadata_hash != after.metadata_hash or before.offset_storage != after.offset_storage
            or before.members is not after.members or before.targets is not after.targets
            or before.resolved_regexes is not after.resolved_regexes)
