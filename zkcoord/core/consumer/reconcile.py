"""One member's next step toward its target assignment (Kafka's
``CurrentAssignmentBuilder``, as in Kafka 4.4).

The member moves through three states (:class:`~.model.MemberState`):

=====================  ===============================================================
state                  next step
=====================  ===============================================================
STABLE                 at the target epoch: nothing, unless its subscription changed
                       (partitions of topics it no longer subscribes to are revoked);
                       behind it: compute the next assignment
UNREVOKED_PARTITIONS   it still reports a partition it must revoke: wait (a changed
                       subscription may revoke more); once revoked: next assignment
UNRELEASED_PARTITIONS  compute the next assignment: partitions released meanwhile
                       by their old owners are given now
UNKNOWN                (a newer version's state) fenced, unless it reports no
                       partition: then the next assignment from nothing
=====================  ===============================================================

The next assignment keeps what the member holds of its target, revokes the
rest first (it stays at its epoch until it reports them gone), and only then
assigns the target's other partitions, and of those only the ones no other
member still holds (a partition an old owner has not released yet waits:
UNRELEASED_PARTITIONS). So a partition never has two owners. A partition
newly assigned carries the target epoch as its assignment epoch.

One rule is stricter than Kafka's. Kafka skips a revocation when the
heartbeat that reveals it does not report the partitions as owned
(``ownsRevokedPartitions``). That heartbeat was sent before the member knew
of the revocation, and a consumer-protocol member may still be taking those
partitions: Kafka's Java consumer acknowledges an assignment whose topics it
cannot name yet with the partitions it owns (none), then takes them once its
metadata names the topics, from the assignment it was answered before. Freed
at once, the partitions could go to another member while it takes them. So a
consumer-protocol member is always asked to revoke, and freed only by a later
heartbeat, sent after it learnt of the revocation, that does not report
them. (Kafka's rule stays for a join, epoch 0: a static member's
replacement is a new process that holds nothing; for a classic member
inside the group, whose JoinGroup lists what it owns after its own
revocation; for a subscription change, whose revoked topics the member
gave up before it sent it; and for a full heartbeat, or a partition given
at an epoch later than the one the heartbeat reports: after a lost answer
the member may be asked to give back partitions it never heard of, and an
answer that takes back only those changes nothing it has, so it would
never report again.)

Pure: :func:`reconcile` takes the member, the target and the group's view of
who holds what, and returns the member's next value (the same value when
nothing changes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from zkcoord.core.consumer.model import (
    EMPTY_CURRENT, NO_EPOCH, ConsumerMember, Current, MemberState, ResolvedRegex, Target,
)
from zkcoord.core.errors import ErrorCode
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.topics_image import TopicsImage
from zkcoord.errors import GroupRequestError

__all__ = ["Owned", "reconcile", "subscribed_topic_ids", "subscribed_topic_names"]

Owned = Iterable[tuple[str, Iterable[int]]] | None
"""What the member reports it owns (ConsumerGroupHeartbeat's TopicPartitions), None: not reported."""


def subscribed_topic_names(member: ConsumerMember, regexes: Mapping[str, ResolvedRegex]) -> frozenset[str]:
    """The member's topic names: its names, and its regular expression's topics as resolved."""
    names = frozenset(member.subscribed_topic_names)
    if member.regex:
        resolved = regexes.get(member.regex)
        if resolved is not None and resolved.topics:
            names = resolved.topics if not names else names | resolved.topics
    return names


def subscribed_topic_ids(member: ConsumerMember, regexes: Mapping[str, ResolvedRegex],
                         image: TopicsImage) -> frozenset[str]:
    return image.ids_of(subscribed_topic_names(member, regexes))


def reconcile(member: ConsumerMember, target_epoch: int, target: Target, *, image: TopicsImage,
              partition_epoch: Callable[[str, int], int], owned: Owned,
              subscription_changed: bool = False,
              regexes: Mapping[str, ResolvedRegex] = FrozenMap(), reported_epoch: int | None = None,
              full_report: bool = False) -> ConsumerMember:
    """The member's next value (the module's table). ``reported_epoch``: the
    member epoch its heartbeat reports (None: unknown); ``full_report``: the
    heartbeat is a full one (every field set: after an error, a lost answer
    or a reconnection). GroupRequestError
    FENCED_MEMBER_EPOCH for a member in an unknown state that still reports
    partitions."""
    step = _Step(member, target_epoch, target, image, partition_epoch, owned, regexes, reported_epoch, full_report)
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return step.next_assignment(member.member_epoch, member.assigned)
        if subscription_changed:
            return step.drop_unsubscribed(member.member_epoch, member.assigned)
        return member
    if state is MemberState.UNREVOKED_PARTITIONS:
        if step.owns_any(member.pending_revocation):
            if subscription_changed:
                return step.drop_unsubscribed(member.member_epoch, member.assigned)
            return member
        return step.next_assignment(member.member_epoch, member.assigned)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return step.next_assignment(member.member_epoch, member.assigned)
    if owned is not None and not _owned_list(owned):
        return step.next_assignment(target_epoch, member.assigned)
    raise GroupRequestError(ErrorCode.FENCED_MEMBER_EPOCH, "The consumer group member is in a unknown state. "
                                                           "The member must abandon all its partitions and rejoin.")


def _owned_list(owned: Owned) -> list[tuple[str, list[int]]]:
    return [(topic_id, list(partitions)) for topic_id, partitions in owned or ()]


class _Step:
    """The inputs of one reconciliation step."""

    def __init__(self, member: ConsumerMember, target_epoch: int, target: Target, image: TopicsImage,
                 partition_epoch: Callable[[str, int], int], owned: Owned, regexes: Mapping[str, ResolvedRegex],
                 reported_epoch: int | None = None, full_report: bool = False):
        self.member = member
        self.reported_epoch = reported_epoch
        self.full_report = full_report
        self.target_epoch = target_epoch
        self.target = target
        self.image = image
        self.partition_epoch = partition_epoch
        self.owned = None if owned is None else _owned_list(owned)
        self.regexes = regexes

    def owns_any(self, revoking: Current) -> bool:
        """Does the member still report a partition of ``revoking``? (Not
        reported at all: assume it does.)"""
        if self.owned is None:
            return True
        for topic_id, partitions in self.owned:
            pending = revoking.get(topic_id)
            if pending and any(p in pending for p in partitions):
                return True
        return False

    def may_be_taking(self, revoking: Current) -> bool:
        """May the member still be taking a partition of ``revoking``,
        whatever this heartbeat reports? (The module's stricter rule: a
        consumer-protocol member past its join, told of that partition. A
        join, epoch 0, is a new process, a static member's replacement, that
        holds nothing. A full heartbeat, sent after an error or a lost
        answer, reports all the member holds, as Kafka trusts it: the answer
        it lost may have named partitions it never heard of, and an answer
        that takes only those back changes nothing it has, so it would never
        report again. For the same reason a partition given at an epoch
        later than the one the heartbeat reports, in an answer the member
        never received, is not waited for.)"""
        member = self.member
        if member.uses_classic_protocol or member.member_epoch <= 0 or self.full_report:
            return False
        reported = self.reported_epoch
        if reported is None:
            return True
        return any(epoch <= reported for partitions in revoking.values() for epoch in partitions.values())

    def subscribed_ids(self) -> frozenset[str]:
        return subscribed_topic_ids(self.member, self.regexes, self.image)

    def drop_unsubscribed(self, epoch: int, assigned: Current) -> ConsumerMember:
        """Kafka's ``updateCurrentAssignment``: partitions of topics the member
        no longer subscribes to go pending revocation, at once."""
        member = self.member
        subscribed = self.subscribed_ids()
        if not subscribed and not member.pending_revocation:
            kept: Current = EMPTY_CURRENT
            revoking: Current = assigned
        else:
            kept_map = {t: p for t, p in assigned.items() if t in subscribed}
            if len(kept_map) == len(assigned):
                return member
            revoking_map = {t: dict(p) for t, p in member.pending_revocation.items()}
            for topic_id, partitions in assigned.items():
                if topic_id not in subscribed:
                    revoking_map.setdefault(topic_id, {}).update(partitions)
            kept, revoking = _freeze(kept_map), _freeze(revoking_map)
        if kept == assigned:
            return member
        if revoking and self.owns_any(revoking):
            return member.with_epoch(epoch, state=MemberState.UNREVOKED_PARTITIONS, assigned=kept,
                                     pending_revocation=revoking)
        return member.with_epoch(epoch, assigned=kept)

    def next_assignment(self, epoch: int, assigned: Current) -> ConsumerMember:
        """Kafka's ``computeNextAssignment``."""
        member = self.member
        subscribed = self.subscribed_ids()
        unreleased = False
        new_assigned: dict[str, dict[int, int]] = {}
        new_revoking: dict[str, dict[int, int]] = {}
        to_assign: dict[str, set[int]] = {}
        for topic_id in set(self.target) | set(assigned):
            wanted = self.target.get(topic_id, frozenset()) if topic_id in subscribed else frozenset()
            held = assigned.get(topic_id, {})
            kept = {p: e for p, e in held.items() if p in wanted}
            revoking = {p: e for p, e in held.items() if p not in kept}
            pending_here = member.pending_revocation.get(topic_id, {})
            assign = set()
            for partition in wanted:
                if partition in kept:
                    continue
                if self.partition_epoch(topic_id, partition) != NO_EPOCH and partition not in pending_here:
                    unreleased = True  # an old owner still holds it
                else:
                    assign.add(partition)
            if kept:
                new_assigned[topic_id] = kept
            if revoking:
                new_revoking[topic_id] = revoking
            if assign:
                to_assign[topic_id] = assign
        if new_revoking and (self.may_be_taking(new_revoking) or self.owns_any(new_revoking)):
            return member.with_epoch(epoch, state=MemberState.UNREVOKED_PARTITIONS, assigned=_freeze(new_assigned),
                                     pending_revocation=_freeze(new_revoking))
        for topic_id, partitions in to_assign.items():
            held = new_assigned.setdefault(topic_id, {})
            for partition in partitions:
                held[partition] = self.target_epoch
        state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
        return member.with_epoch(self.target_epoch, state=state, assigned=_freeze(new_assigned),
                                 pending_revocation=EMPTY_CURRENT)


def _freeze(current: Mapping[str, Mapping[int, int]]) -> Current:
    return FrozenMap((t, FrozenMap(p)) for t, p in current.items() if p)
