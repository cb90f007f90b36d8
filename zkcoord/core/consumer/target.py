"""The group's target assignment: which partitions each member is to own
(Kafka's ``maybeUpdateTargetAssignment`` and ``TargetAssignmentBuilder``).

The target is computed again when the group epoch is ahead of the target's
epoch (a member joined or left, a subscription or the preferred assignor
changed, the subscribed topics' metadata changed), but at most every
``group.consumer.assignment.interval.ms`` after the last computation (Kafka
4.4's batching: the heartbeats in between are answered from the last
target). The assignor is the one most members name
(``group.remote.assignor``), else the daemon's default; it is given every
member's subscription and current target, in the orders Kafka's
coordinator gives them (:mod:`zkcoord.core.assignors`), so the target is
Kafka's for the same group. Only the members whose target changed get a
new record, and the target's epoch becomes the group epoch.

A large group's target (subscribed partitions plus 8 per member at least
``offload_min_size``, with ``assignor_offload``: Kafka's
``group.consumer.assignor.offload.enable``) is not computed in the
heartbeat that needs it: that heartbeat marks the group ``target_pending``
and is answered from the last target, as every heartbeat is until the new
one lands. The ``ASSIGN_KEY`` timer's expiry (:func:`assign_later`) hands
the runtime the computation on a snapshot of the group, which it runs off
the event loop; :func:`finish_target` then writes the result into the group
as it is by then. A member of the snapshot gone since gets nothing (a static
member's target goes to the member that took its instance id, as
``replaceMember`` hands it on); a member that came since keeps its target.
Whatever changed since the snapshot moved the group epoch past the target's
epoch, so the next heartbeat after the interval computes it again.

While the group is in a live handover from legacy ZooKeeper consumers
(``handover_shares`` set), the target is the owner daemon's shares instead
of the assignor's, computed at once
(:func:`zkcoord.core.handover.consumer_group.share_targets`).

Also here: the subscribed topics' metadata hash (a change of their ids or
partition counts moves the group epoch on) and the preferred assignor.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import replace

from zkcoord.core.assignors import GroupSpec, MemberSpec, PartitionAssignorError, SubscriptionType, TopicSpec, assign
from zkcoord.core.assignors.java_hash import STRING_KEYS, inserted_order
from zkcoord.core.consumer.config import ConsumerGroupConfig
from zkcoord.core.consumer.messages import ASSIGN_KEY
from zkcoord.core.consumer.model import EMPTY_TARGET, ConsumerGroup, ConsumerMember, Target
from zkcoord.core.errors import ErrorCode
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.handover.consumer_group import share_targets
from zkcoord.core.messages import Offloaded, Outcome, Schedule, TimerOp
from zkcoord.core.topics_image import TopicsImage
from zkcoord.errors import GroupRequestError

__all__ = ["assignment_for", "compute_target", "group_topic_names", "metadata_hash", "preferred_assignor",
           "subscription_type", "assign_later", "finish_target", "pending_timers"]


def _assignor_counts(group: ConsumerGroup, old: ConsumerMember | None, new: ConsumerMember | None) -> dict:
    counts = dict(group.assignor_counts)
    if old is not None and old.server_assignor:
        counts[old.server_assignor] -= 1
        if counts[old.server_assignor] <= 0:
            del counts[old.server_assignor]
    if new is not None and new.server_assignor:
        counts[new.server_assignor] = counts.get(new.server_assignor, 0) + 1
    return counts


def preferred_assignor(group: ConsumerGroup, c: ConsumerGroupConfig, old: ConsumerMember | None = None,
                       new: ConsumerMember | None = None) -> str:
    """The assignor most members name, with ``old`` replaced by ``new``
    (Kafka's ``computePreferredServerAssignor``: the maximum over a
    ``HashMap``, the first of equal counts in Java's iteration order), else
    the default."""
    counts = _assignor_counts(group, old, new) if (old is not None or new is not None) else dict(group.assignor_counts)
    best, best_count = None, 0
    for name in inserted_order(STRING_KEYS, list(counts)):
        if counts[name] > best_count:
            best, best_count = name, counts[name]
    return best or c.default_assignor


def _subscribed_names(group: ConsumerGroup, old: ConsumerMember | None = None,
                      new: ConsumerMember | None = None) -> set[str]:
    """The topic names some member subscribes to, by name or through a resolved expression."""
    counts = dict(group.subscribed_names)
    if old is not None:
        for name in old.subscribed_topic_names:
            counts[name] -= 1
    if new is not None:
        for name in new.subscribed_topic_names:
            counts[name] = counts.get(name, 0) + 1
    names = {n for n, k in counts.items() if k > 0}
    regex_members = dict(group.regex_subscribers)
    if old is not None and old.regex:
        regex_members[old.regex] -= 1
    if new is not None and new.regex:
        regex_members[new.regex] = regex_members.get(new.regex, 0) + 1
    for regex, resolved in group.resolved_regexes.items():
        if regex_members.get(regex, 0) > 0:
            names |= resolved.topics
    return names


def group_topic_names(group: ConsumerGroup) -> frozenset[str]:
    """Every topic name a member subscribes to, by name (existing or not) or
    through a resolved expression: the topics whose changes concern the group."""
    return frozenset(_subscribed_names(group))


def metadata_hash(group: ConsumerGroup, image: TopicsImage, old: ConsumerMember | None = None,
                  new: ConsumerMember | None = None) -> int:
    """A digest of the subscribed topics' ids, names and partition counts
    (Kafka's ``computeMetadataHash``; ours is a different function of the
    same facts: only its changes are ever compared). 0 when none is known."""
    topics = sorted((name, image.by_name[name]) for name in _subscribed_names(group, old, new)
                    if name in image.by_name)
    if not topics:
        return 0
    digest = hashlib.blake2b(digest_size=8)
    for name, info in topics:
        digest.update(f"{info.topic_id}\0{name}\0{info.partitions}\n".encode())
    return int.from_bytes(digest.digest(), "big", signed=True)


def subscription_type(group: ConsumerGroup) -> SubscriptionType:
    """Kafka's ``ConsumerGroup.subscriptionType``: homogeneous when every
    member subscribes to the same names (or the same one expression)."""
    members = group.size
    if not group.regex_subscribers:
        ok = all(count == members for count in group.subscribed_names.values())
        return SubscriptionType.HOMOGENEOUS if ok else SubscriptionType.HETEROGENEOUS
    first = next(iter(inserted_order(STRING_KEYS, list(group.regex_subscribers))))
    if group.regex_subscribers[first] != members or group.subscribed_names:
        return SubscriptionType.HETEROGENEOUS
    by_regex: dict[str, int] = {}
    for regex, resolved in group.resolved_regexes.items():
        if regex in group.regex_subscribers:
            for name in resolved.topics:
                by_regex[name] = by_regex.get(name, 0) + 1
    ok = all(count == 1 for count in by_regex.values())
    return SubscriptionType.HOMOGENEOUS if ok else SubscriptionType.HETEROGENEOUS


def _member_target(group: ConsumerGroup, member: ConsumerMember) -> Target:
    """Kafka's ``targetAssignment(memberId, instanceId)``: a static member
    takes the target of the member its instance id names."""
    if member.instance_id is None:
        return group.target(member.member_id)
    previous = group.static_members.get(member.instance_id)
    return group.target(previous) if previous is not None else EMPTY_TARGET


def assignment_for(group: ConsumerGroup, member: ConsumerMember, updated: ConsumerMember, now_ms: int,
                   image: TopicsImage, c: ConsumerGroupConfig) -> tuple[int, Target, ConsumerGroup]:
    """(target epoch, the updated member's target, the group with the new
    target written) at this heartbeat (the module's rules)."""
    if group.assignment_epoch >= group.group_epoch:
        return group.assignment_epoch, _member_target(group, updated), group
    if group.handover_shares is not None:  # in a live handover: the daemon's shares, not the assignor's
        group = share_targets(group.with_member(updated), group, now_ms, image)
        return group.assignment_epoch, group.target(updated.member_id), group
    last = group.assignment_timestamp_ms
    if group.target_pending or (last != 0 and c.assignment_interval_ms != 0
                                and now_ms < last + c.assignment_interval_ms):
        return group.assignment_epoch, _member_target(group, updated), group
    view = group.with_member(updated)
    if c.assignor_offload and _size(view, image) >= c.offload_min_size:
        return group.assignment_epoch, _member_target(group, updated), replace(group, target_pending=True)
    assignor = preferred_assignor(group, c, member, updated)
    group = compute_target(view, group, assignor, now_ms, image)
    return group.assignment_epoch, group.target(updated.member_id), group


def compute_target(view: ConsumerGroup, group: ConsumerGroup, assignor: str, now_ms: int,
                   image: TopicsImage) -> ConsumerGroup:
    """``group`` with the target of ``view``'s members (``view``: the group
    as the heartbeat leaves it) computed by ``assignor`` at the group epoch.
    GroupRequestError UNKNOWN_SERVER_ERROR when the assignor cannot assign
    (as Kafka answers a PartitionAssignorException)."""
    spec = GroupSpec(members={m: _member_spec(view, member) for m, member in view.members.items()},
                     topics=_topics(image), subscription_type=subscription_type(view))
    try:
        result = assign(assignor, spec)
    except PartitionAssignorError as exc:
        raise GroupRequestError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Failed to compute a new target assignment for "
                                                                f"epoch {view.group_epoch}: {exc}") from None
    targets = dict(group.targets)
    for member_id in view.members:
        new = result.get(member_id, {})
        old = targets.get(member_id)
        if old is None or _as_sets(old) != {t: frozenset(p) for t, p in new.items() if p}:
            targets[member_id] = FrozenMap(result.record_order(member_id)) if new else EMPTY_TARGET
    grouped = replace(group, targets=FrozenMap(targets), group_epoch=view.group_epoch)
    return grouped.with_assignment_epoch(view.group_epoch, now_ms)


MEMBER_WEIGHT = 8  # a member costs the assignor about as much as 8 partitions (measured: ~1 us a partition)


def _size(group: ConsumerGroup, image: TopicsImage) -> int:
    """The partitions of the subscribed topics plus MEMBER_WEIGHT per member:
    what the computation of the group's target grows with, in about
    microseconds of work."""
    return MEMBER_WEIGHT * group.size + sum(image.by_name[name].partitions for name in _subscribed_names(group)
                            if name in image.by_name)


def pending_timers(before: object, after: ConsumerGroup, now_ms: int) -> list[TimerOp]:
    """The ASSIGN_KEY timer, due now, when ``after`` is the first group of
    the change to wait for a target computed off the event loop."""
    if after.target_pending and not (isinstance(before, ConsumerGroup) and before.target_pending):
        return [Schedule(ASSIGN_KEY, now_ms)]
    return []


def assign_later(group: ConsumerGroup, now_ms: int, config) -> Outcome | Offloaded:
    """The ASSIGN_KEY expiry: the computation of the group's target, on the
    group as it is now, for the runtime to run off the event loop (nothing,
    when no target is pending or one is no longer needed)."""
    if not group.target_pending:
        return Outcome(group)
    if group.assignment_epoch >= group.group_epoch or group.handover_shares is not None or not group.members:
        return Outcome(replace(group, target_pending=False))
    assignor = preferred_assignor(group, config.consumer)
    image = config.image
    return Offloaded(compute=lambda: compute_target(group, group, assignor, now_ms, image),
                     finish=lambda current, result, finish_ms: finish_target(current, group, result, finish_ms))


def finish_target(group: object, view: ConsumerGroup, computed: ConsumerGroup | BaseException,
                  now_ms: int) -> Outcome:
    """The target ``computed`` from the snapshot ``view`` written into
    ``group`` (the module's rules). A computation that failed (the assignor
    could not assign) leaves the target as it was and is tried again after
    the assignment interval; so is one made stale by a newer target."""
    if not isinstance(group, ConsumerGroup) or not group.target_pending:
        return Outcome(group)  # converted to a classic group, or deleted, meanwhile
    idle = replace(group, target_pending=False)
    if isinstance(computed, BaseException):  # tried again after the interval: its timestamp is now
        return Outcome(replace(idle, assignment_timestamp_ms=now_ms), True)
    if group.assignment_epoch >= view.group_epoch or group.handover_shares is not None:
        return Outcome(idle)
    targets = {}
    for member_id, member in view.members.items():
        new = computed.targets.get(member_id)
        if new is view.targets.get(member_id):
            continue  # unchanged by the computation
        holder = member_id if member_id in group.members else group.static_members.get(member.instance_id) \
            if member.instance_id is not None else None
        if holder is not None:
            targets[holder] = new if new is not None else EMPTY_TARGET
    return Outcome(idle.with_targets(targets).with_assignment_epoch(view.group_epoch, now_ms), True)


def _as_sets(target: Target) -> dict[str, frozenset[int]]:
    return {t: frozenset(p) for t, p in target.items() if p}


def _member_spec(group: ConsumerGroup, member: ConsumerMember) -> MemberSpec:
    names = tuple(member.subscribed_topic_names)
    if member.regex:
        resolved = group.resolved_regexes.get(member.regex)
        if resolved is not None:
            names += tuple(sorted(resolved.topics - set(names)))
    return MemberSpec(names, group.target(member.member_id), member.instance_id, member.rack_id)


def _topics(image: TopicsImage) -> Mapping[str, TopicSpec]:
    return {name: TopicSpec(info.topic_id, info.partitions) for name, info in image.by_name.items()}
