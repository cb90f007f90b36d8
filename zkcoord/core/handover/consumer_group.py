"""A KIP-848 consumer group in handover: its target assignment is what the daemon holds.

While a consumer group (the consumer protocol, :mod:`zkcoord.core.consumer`)
shares its partitions with legacy ZooKeeper consumers (``docs/handover.md``),
the owner daemon, not the group's assignor, decides what each member
consumes: exactly the partitions whose owner znode the daemon holds for that
member. In a consumer group that decision is the *target assignment*, and the
members reconcile toward it as toward any target. This module is the
consumer group's side, pure, with the classic group's functions
(:mod:`.classic_group`):

* :func:`handle_shares` sets the group's ``handover_shares`` (member id ->
  partitions). When a member's target is not its share, the shares become
  the target at a new group epoch (the target's epoch with it): each member
  then takes its steps toward its share (:mod:`zkcoord.core.consumer.reconcile`,
  Kafka's ``CurrentAssignmentBuilder``): it revokes what its share lacks
  first, staying at its epoch until it reports them gone, and is given a
  partition of its share only once no other member owns it (one still
  revoking it: UNRELEASED_PARTITIONS). Members absent from the shares get
  nothing. While shares are set, every later computation of the target (a
  member joins or leaves, a subscription or a topic changes:
  :func:`zkcoord.core.consumer.target.assignment_for`) takes the shares
  (:func:`share_targets`) instead of the assignor, at once (no assignment
  interval: nothing to batch). ``None`` ends the handover: the group epoch
  moves on, so the next heartbeat's target is the assignor's again (from
  the shares as the current target; within the assignment interval of the
  last one).
* :func:`consuming` is what a member may still be consuming: the partitions
  it owns or is still revoking, its current assignment and its partitions
  pending revocation. A partition leaves them only at the heartbeat (a
  classic member: the JoinGroup) that reports it no longer owned, or at once
  when a new target drops a partition the member's last report did not
  name (it never had it). A newly assigned partition counts from the moment
  the coordinator gives it (its answer may still be on its way).
* :func:`subscribed_topics`: its topic names, and the topics its regular
  expression resolved to.
* :func:`handle_ids` records, persisted, the legacy consumer id the daemon
  registers for each member (the group record's ``"ho"``, as the classic
  group's), and :func:`assigned` is a member's current assignment (what it
  keeps when a new owner carries a handover on).

What is stored: the legacy consumer ids (written before any znode is
written for a new one, so that the next owner recognises its znodes); the
shares never (in memory, like the classic group's). The targets and epochs
the shares make are written as any target is (the kind's member and group
records). A new owner loads a group in handover (``"ho"`` in its record)
with each member's current assignment as its share
(:func:`carried_shares`, by :meth:`zkcoord.core.consumer.kind.ConsumerKind.load`):
nobody is given anything new until the driver's first plan, and nobody
gives anything up for the fail-over.

Classic-protocol members inside the consumer group (an upgrade in
progress, :mod:`zkcoord.core.consumer.classic_members`) reconcile at their
JoinGroup: a new target makes their Heartbeat answer REBALANCE_IN_PROGRESS,
they rejoin reporting what they own, and their SyncGroup hands out their
current assignment. The shares go with the group when it changes type (an
Empty classic group taken by a consumer-protocol join, an online upgrade or
downgrade: :mod:`zkcoord.core.consumer.convert`), and a static member
replaced under a new member id (a restart) starts from nothing while
shares are set: its predecessor's znodes name the predecessor, which the
daemon releases once it is gone; the new member id gets what the daemon
claims for it (:func:`zkcoord.core.consumer.heartbeat.replace_member`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from zkcoord.core.consumer.model import EMPTY_TARGET, ConsumerGroup, ConsumerMember, Current, Target
from zkcoord.core.consumer.reconcile import subscribed_topic_names
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.handover.legacy_range import TopicPartition
from zkcoord.core.messages import Outcome
from zkcoord.core.topics_image import TopicsImage

__all__ = ["handle_shares", "handle_ids", "consuming", "subscribed_topics", "assigned", "carried_shares",
           "share_target", "share_targets"]

Shares = Mapping[str, Iterable[TopicPartition]]


def share_target(share: Iterable[TopicPartition], image: TopicsImage) -> Target:
    """A share as a target (topic id -> partitions, sorted); topics the image
    does not know yet are left out (a later change of the topics moves the
    group epoch on, and the target is taken from the shares again)."""
    by_id: dict[str, list[int]] = {}
    for topic, partition in sorted(share):
        topic_id = image.id_of(topic)
        if topic_id is not None:
            by_id.setdefault(topic_id, []).append(partition)
    return FrozenMap((t, tuple(p)) for t, p in by_id.items()) if by_id else EMPTY_TARGET


def _as_sets(target: Target) -> dict[str, frozenset[int]]:
    return {t: frozenset(p) for t, p in target.items() if p}


def share_targets(view: ConsumerGroup, group: ConsumerGroup, now_ms: int, image: TopicsImage) -> ConsumerGroup:
    """``group`` with the target of ``view``'s members taken from the shares,
    at ``view``'s group epoch (the contract of
    :func:`zkcoord.core.consumer.target.compute_target`, the shares for the
    assignor): a member's target is replaced only where it changed, so only
    those members' records are written."""
    shares = view.handover_shares or FrozenMap()
    targets = group.targets.thaw() if isinstance(group.targets, FrozenMap) else dict(group.targets)
    for member_id in view.members:
        new = share_target(shares.get(member_id, ()), image)
        old = targets.get(member_id)
        if old is None or _as_sets(old) != _as_sets(new):
            targets[member_id] = new
    grouped = replace(group, targets=FrozenMap(targets), group_epoch=view.group_epoch)
    return grouped.with_assignment_epoch(view.group_epoch, now_ms)


def handle_shares(group: ConsumerGroup, shares: Shares | None, now_ms: int, config, hold: bool = False) -> Outcome:
    """Set the group's handover shares (None: the handover is over) and make
    them the target where a member's target differs (the module's rules).
    ``hold`` (more partitions about to be held for the members) changes
    nothing here: a consumer group has no join phase to make wait, each
    member is given each partition of its share as soon as it is free.

    Persist: when the group epoch moves on (a new target, or the end of a
    handover of a group with members); the shares alone are never written."""
    if not isinstance(group, ConsumerGroup) or group.dead:
        return Outcome(group)
    if shares is None:
        if group.handover_shares is None:
            return Outcome(group)
        ended = replace(group, handover_shares=None)
        if not group.members:
            return Outcome(ended)
        return Outcome(replace(ended, group_epoch=group.group_epoch + 1), True)  # the assignor's turn
    frozen = FrozenMap({mid: frozenset(parts) for mid, parts in shares.items() if mid in group.members})
    held = group if frozen == group.handover_shares else replace(group, handover_shares=frozen)
    image = config.image
    if all(_as_sets(group.target(mid)) == _as_sets(share_target(frozen.get(mid, ()), image))
           for mid in group.members):
        return Outcome(held)
    bumped = replace(held, group_epoch=group.group_epoch + 1)
    return Outcome(share_targets(bumped, bumped, now_ms, image), True)


def handle_ids(group: ConsumerGroup, ids: Mapping[str, str] | None, now_ms: int, config) -> Outcome:
    """Record the legacy consumer ids the owner daemon registers for the
    members (None: the handover is over). Persist: when they changed (the
    group record), before any znode is written for a new id."""
    if not isinstance(group, ConsumerGroup) or group.dead:
        return Outcome(group)
    frozen = None if ids is None else FrozenMap(ids)
    if frozen == group.handover_ids:
        return Outcome(group)
    return Outcome(replace(group, handover_ids=frozen), True)


def _named(currents: Iterable[Current], image: TopicsImage) -> frozenset[TopicPartition] | None:
    held: list[TopicPartition] = []
    for current in currents:
        for topic_id, partitions in current.items():
            name = image.name_of(topic_id)
            if name is None:
                return None
            held.extend((name, p) for p in partitions)
    return frozenset(held)


def assigned(member: ConsumerMember, config) -> frozenset[TopicPartition] | None:
    """The member's current assignment (not what it is still revoking); None
    when one of its topic ids has no name in the daemon's topics image."""
    return _named((member.assigned,), config.image)


def carried_shares(group: ConsumerGroup, config) -> dict[str, frozenset[TopicPartition]]:
    """The shares of a group in handover taken over by a new owner: each
    member's current assignment (nothing where it cannot be named)."""
    return {mid: assigned(m, config) or frozenset() for mid, m in group.members.items()}


def consuming(group: ConsumerGroup, member_id: str, config) -> frozenset[TopicPartition] | None:
    """What ``member_id`` may be consuming now (module docstring): nothing for
    a member the group does not have; None (anything) when one of its topic
    ids has no name in the daemon's topics image."""
    member = group.members.get(member_id)
    if member is None:
        return frozenset()
    return _named((member.assigned, member.pending_revocation), config.image)


def subscribed_topics(group: ConsumerGroup, member_id: str, config) -> frozenset[str] | None:
    """The topics a member subscribes to (names, and its regular expression's
    topics as resolved); None for a member the group does not have."""
    member = group.members.get(member_id)
    if member is None:
        return None
    return subscribed_topic_names(member, group.resolved_regexes)
