"""The consumer group as values: its members, its target assignment, its state.

This module owns :class:`ConsumerMember` (Kafka's ``ConsumerGroupMember``:
an immutable value; build a changed one with :meth:`ConsumerMember.with_`)
and :class:`ConsumerGroup` (Kafka's ``ConsumerGroup``), and the pure queries
on them. A ConsumerGroup is immutable: :meth:`ConsumerGroup.with_member`,
:meth:`ConsumerGroup.without_member` and the other ``with_*`` methods return
a new group with its derived indexes (static members, subscribed topic
counts, partition epochs, preferred assignor, classic members) updated for
the one member that changed, as Kafka's ``updateMember`` / ``removeMember``
do, so a heartbeat costs the same whatever the group's size.

Persisted part (written as records, :mod:`.record`): the group epoch, the
target assignment's epoch, each member's metadata, current assignment and
target assignment, the resolved regular expressions, the offset storage mode,
in a live handover the legacy consumer id the owner daemon registered for
each member (:mod:`zkcoord.core.handover.consumer_group`).
In-memory part (rebuilt after fail-over, never written): the epoch each
member's rebalance time-out was armed for, the metadata refresh deadline,
the shares of a live handover from legacy ZooKeeper consumers
(:mod:`zkcoord.core.handover.consumer_group`; the owner daemon sets them).

Assignments: a *target* assignment is ``{topic id: (partitions, ...)}``, in
the order Kafka's record of it has (the server-side assignors read the
current target in that order, and their results depend on it); a member's
*current* assignment keeps, per partition, the epoch it was assigned at
(``{topic id: {partition: epoch}}``), which OffsetCommit checks. Topic ids
are in Kafka's own text form (:mod:`zkcoord.core.topics_image`).
A member's subscribed topic names are kept in the order it sent them (the
assignors iterate them in Java's order of ``new HashSet<>(list)``) and
compared as a set, as Kafka compares them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

import immutables

from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.phases import GroupPhase

__all__ = [
    "MemberState", "GroupState", "ClassicMetadata", "ConsumerMember", "ConsumerGroup", "ResolvedRegex",
    "Target", "Current", "EMPTY_TARGET", "EMPTY_CURRENT", "NO_EPOCH", "LEAVE_EPOCH", "STATIC_LEAVE_EPOCH",
    "new_consumer_group", "target_of", "current_partitions",
]

Target = Mapping[str, tuple[int, ...]]
Current = Mapping[str, Mapping[int, int]]
EMPTY_TARGET: Target = FrozenMap()
EMPTY_CURRENT: Current = FrozenMap()
NO_EPOCH = -1  # Kafka's "no partition epoch" (a partition nobody owns)
LEAVE_EPOCH = -1  # ConsumerGroupHeartbeat: the member leaves
STATIC_LEAVE_EPOCH = -2  # ... a static member leaves for a while (its instance id kept)


class MemberState(Enum):
    """Where one member stands in its reconciliation (Kafka's ``MemberState``)."""

    STABLE = 0  # it holds its target assignment
    UNREVOKED_PARTITIONS = 1  # it must revoke partitions before its next epoch
    UNRELEASED_PARTITIONS = 2  # at its epoch, waiting for partitions others still own
    UNKNOWN = 127  # a newer version's state: fenced unless it owns nothing

    @classmethod
    def of(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class GroupState(Enum):
    """Kafka's ``ConsumerGroupState``; the value is Kafka's printed name."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"  # the group epoch is ahead of the target assignment's
    RECONCILING = "Reconciling"  # some member is not at its target yet
    STABLE = "Stable"
    DEAD = "Dead"


_PHASES = {GroupState.EMPTY: GroupPhase.EMPTY, GroupState.ASSIGNING: GroupPhase.REBALANCING,
           GroupState.RECONCILING: GroupPhase.REBALANCING, GroupState.STABLE: GroupPhase.STABLE,
           GroupState.DEAD: GroupPhase.DEAD}


@dataclass(frozen=True)
class ClassicMetadata:
    """A member that speaks the classic protocol inside a consumer group
    (an online upgrade or downgrade in progress): its session time-out and
    its JoinGroup protocols ``((name, metadata), ...)``."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class ResolvedRegex:
    """A regular expression's topics as last resolved (Kafka's
    ``ResolvedRegularExpression``): at ``timestamp_ms``, on the topics image
    of ``version``."""

    topics: frozenset[str]
    version: int
    timestamp_ms: int


@dataclass(frozen=True)
class ConsumerMember:
    """One member (Kafka's ``ConsumerGroupMember``). ``subscribed_topic_regex``
    is ``""`` when the member subscribes by names only."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str = ""
    server_assignor: str | None = None
    assigned: Current = EMPTY_CURRENT
    pending_revocation: Current = EMPTY_CURRENT
    classic: ClassicMetadata | None = None

    def with_(self, **changes: Any) -> ConsumerMember:
        return replace(self, **changes)

    def with_epoch(self, epoch: int, **changes: Any) -> ConsumerMember:
        """Kafka's ``updateMemberEpoch``: the old epoch becomes the previous one."""
        return replace(self, member_epoch=epoch, previous_member_epoch=self.member_epoch, **changes)

    def is_reconciled_to(self, assignment_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == assignment_epoch

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    @property
    def regex(self) -> str | None:
        """The subscribed regular expression, None without one."""
        return self.subscribed_topic_regex or None

    def assignment_epoch(self, topic_id: str, partition: int) -> int | None:
        """The epoch ``partition`` was assigned to this member at (assigned or
        pending revocation), None if it does not hold it."""
        held = self.assigned.get(topic_id)
        if held is not None and partition in held:
            return held[partition]
        pending = self.pending_revocation.get(topic_id)
        return None if pending is None else pending.get(partition)


def current_partitions(current: Current) -> Target:
    """The partitions of a current assignment, without their epochs."""
    return FrozenMap((t, tuple(p)) for t, p in current.items() if p)


def _count(counts: Mapping[Any, int], keys: Iterable[Any], delta: int) -> FrozenMap:
    updated = dict(counts)
    for key in keys:
        n = updated.get(key, 0) + delta
        if n > 0:
            updated[key] = n
        else:
            updated.pop(key, None)
    return FrozenMap(updated)


@dataclass(frozen=True)
class ConsumerGroup:
    """An immutable snapshot of one consumer group (Kafka's ``ConsumerGroup``).

    Derived (kept by the ``with_*`` methods, never set by hand):
    ``static_members`` (instance id -> member id), ``subscribed_names``
    (topic name -> members naming it), ``regex_subscribers`` (regex ->
    members subscribing with it), ``assignor_counts`` (server assignor ->
    members naming it), ``partition_epochs`` ((topic id, partition) -> the
    epoch of the member holding it), ``classic_members``.
    """

    group_id: str
    offset_storage: str = "zookeeper"
    group_epoch: int = 1
    assignment_epoch: int = 1
    assignment_timestamp_ms: int = 0
    metadata_hash: int = 0
    # in a live handover: member id -> the legacy consumer id the owner daemon registered for it (a member
    # gone stays while its znodes do); None: no handover
    handover_ids: Mapping[str, str] | None = None
    members: Mapping[str, ConsumerMember] = field(default_factory=FrozenMap)
    targets: Mapping[str, Target] = field(default_factory=FrozenMap)
    resolved_regexes: Mapping[str, ResolvedRegex] = field(default_factory=FrozenMap)
    static_members: Mapping[str, str] = field(default_factory=FrozenMap)
    subscribed_names: Mapping[str, int] = field(default_factory=FrozenMap)
    regex_subscribers: Mapping[str, int] = field(default_factory=FrozenMap)
    assignor_counts: Mapping[str, int] = field(default_factory=FrozenMap)
    # a persistent map (a HAMT): a member's change rewrites its own partitions' entries, not a copy of every
    # partition of the group (100,000 in the largest group: 6 ms of CPU per member change as dict copies)
    partition_epochs: Mapping[tuple[str, int], int] = field(default_factory=immutables.Map)
    classic_members: int = 0
    reconciled_members: int = 0  # members STABLE at the assignment epoch (the state in O(1))
    # in memory only
    rebalance_epochs: Mapping[str, int] = field(default_factory=FrozenMap)  # member -> epoch its time-out watches
    metadata_refresh_deadline_ms: int = 0
    metadata_refresh_epoch: int = 0
    regex_resolution_pending: bool = False  # a resolution is scheduled (REGEX_KEY)
    target_pending: bool = False  # a target assignment is being computed off the event loop (ASSIGN_KEY)
    join_timers: frozenset[str] = frozenset()  # classic members whose rejoin time-out runs
    target_cut: bool = False  # loaded with a target write cut in the middle (.record): recompute it
    targets_in_members: bool = False  # loaded from a version 1 record (.record): the load writes version 2
    # in a live handover: member id -> the (topic name, partition)s the owner daemon holds for it, which are
    # the target instead of the assignor's (zkcoord.core.handover.consumer_group); None: no handover
    handover_shares: Mapping[str, frozenset[tuple[str, int]]] | None = None
    dead: bool = False

    # -- state -------------------------------------------------------------------------
    @property
    def state(self) -> GroupState:
        """Kafka's ``maybeUpdateGroupState``, computed."""
        if self.dead:
            return GroupState.DEAD
        if not self.members:
            return GroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return GroupState.ASSIGNING
        if self.reconciled_members < len(self.members):
            return GroupState.RECONCILING
        return GroupState.STABLE

    @property
    def phase(self) -> GroupPhase:
        return _PHASES[self.state]

    @property
    def size(self) -> int:
        return len(self.members)

    def static_member(self, instance_id: str | None) -> ConsumerMember | None:
        member_id = self.static_members.get(instance_id) if instance_id is not None else None
        return None if member_id is None else self.members.get(member_id)

    def target(self, member_id: str) -> Target:
        return self.targets.get(member_id, EMPTY_TARGET)

    def partition_epoch(self, topic_id: str, partition: int) -> int:
        """The epoch of the member holding the partition, NO_EPOCH if free (Kafka's ``currentPartitionEpoch``)."""
        return self.partition_epochs.get((topic_id, partition), NO_EPOCH)

    def has_metadata_expired(self, now_ms: int) -> bool:
        return now_ms >= self.metadata_refresh_deadline_ms or self.group_epoch < self.metadata_refresh_epoch

    # -- changes -------------------------------------------------------------------------
    def with_assignment_epoch(self, epoch: int, timestamp_ms: int) -> ConsumerGroup:
        """Kafka's ``setTargetAssignmentMetadata``: a new target assignment epoch."""
        reconciled = sum(1 for m in self.members.values() if m.is_reconciled_to(epoch))
        return replace(self, assignment_epoch=epoch, assignment_timestamp_ms=timestamp_ms,
                       reconciled_members=reconciled)

    def with_member(self, member: ConsumerMember) -> ConsumerGroup:
        """Kafka's ``updateMember``: add or replace one member, its indexes with it."""
        old = self.members.get(member.member_id)
        group = self._indexes_without(old) if old is not None else self
        return group._indexes_with(member)

    def without_member(self, member_id: str) -> ConsumerGroup:
        """Kafka's ``removeMember`` (its target assignment stays: remove it with :meth:`without_target`)."""
        old = self.members.get(member_id)
        if old is None:
            return self
        return self._indexes_without(old)

    def with_target(self, member_id: str, target: Target) -> ConsumerGroup:
        return replace(self, targets=_set(self.targets, member_id, target))

    def with_targets(self, targets: Mapping[str, Target]) -> ConsumerGroup:
        """Several members' targets set at once (one copy of the map, not one per member)."""
        if not targets:
            return self
        updated = _thawed(self.targets)
        updated.update(targets)
        return replace(self, targets=FrozenMap(updated))

    def without_target(self, member_id: str) -> ConsumerGroup:
        if member_id not in self.targets:
            return self
        targets = _thawed(self.targets)
        del targets[member_id]
        return replace(self, targets=FrozenMap(targets))

    def with_regex(self, regex: str, resolved: ResolvedRegex | None) -> ConsumerGroup:
        regexes = _thawed(self.resolved_regexes)
        if resolved is None:
            regexes.pop(regex, None)
        else:
            regexes[regex] = resolved
        return replace(self, resolved_regexes=FrozenMap(regexes))

    def _indexes_with(self, member: ConsumerMember) -> ConsumerGroup:
        with _persistent(self.partition_epochs).mutate() as changing:
            for held in (member.assigned, member.pending_revocation):
                for topic_id, partitions in held.items():
                    for partition in partitions:
                        changing[(topic_id, partition)] = member.member_epoch
            epochs = changing.finish()
        statics = self.static_members
        if member.instance_id is not None:
            statics = _set(statics, member.instance_id, member.member_id)
        return replace(
            self, members=_set(self.members, member.member_id, member), static_members=statics,
            subscribed_names=_count(self.subscribed_names, member.subscribed_topic_names, 1),
            regex_subscribers=_count(self.regex_subscribers, (member.regex,) if member.regex else (), 1),
            assignor_counts=_count(self.assignor_counts, (member.server_assignor,) if member.server_assignor else (), 1),
            partition_epochs=epochs, classic_members=self.classic_members + member.uses_classic_protocol,
            reconciled_members=self.reconciled_members + member.is_reconciled_to(self.assignment_epoch))

    def _indexes_without(self, member: ConsumerMember) -> ConsumerGroup:
        with _persistent(self.partition_epochs).mutate() as changing:
            for held in (member.assigned, member.pending_revocation):
                for topic_id, partitions in held.items():
                    for partition in partitions:
                        if changing.get((topic_id, partition)) == member.member_epoch:
                            del changing[(topic_id, partition)]
            epochs = changing.finish()
        members = _thawed(self.members)
        members.pop(member.member_id, None)
        statics = self.static_members
        if member.instance_id is not None and statics.get(member.instance_id) == member.member_id:
            statics = FrozenMap((k, v) for k, v in statics.items() if k != member.instance_id)
        rebalance = self.rebalance_epochs
        if member.member_id in rebalance:
            rebalance = FrozenMap((k, v) for k, v in rebalance.items() if k != member.member_id)
        joins = self.join_timers - {member.member_id} if member.member_id in self.join_timers else self.join_timers
        return replace(
            self, members=FrozenMap(members), static_members=statics,
            subscribed_names=_count(self.subscribed_names, member.subscribed_topic_names, -1),
            regex_subscribers=_count(self.regex_subscribers, (member.regex,) if member.regex else (), -1),
            assignor_counts=_count(self.assignor_counts, (member.server_assignor,) if member.server_assignor else (), -1),
            partition_epochs=epochs, classic_members=self.classic_members - member.uses_classic_protocol,
            reconciled_members=self.reconciled_members - member.is_reconciled_to(self.assignment_epoch),
            rebalance_epochs=rebalance, join_timers=joins)


def _set(mapping: Mapping, key: Any, value: Any) -> FrozenMap:
    if isinstance(mapping, FrozenMap):
        return mapping.set(key, value)
    updated = dict(mapping)
    updated[key] = value
    return FrozenMap(updated)


def new_consumer_group(group_id: str, offset_storage: str = "zookeeper") -> ConsumerGroup:
    """A consumer group that has never had members: group and assignment
    epoch 1, as Kafka 4.4 starts them."""
    return ConsumerGroup(group_id=group_id, offset_storage=offset_storage)


def target_of(assignment: Mapping[str, Iterable[int]]) -> Target:
    """A target assignment value, in the given order (empty topics left out)."""
    return FrozenMap((t, tuple(p)) for t, p in assignment.items() if p)


def _persistent(mapping: Mapping) -> immutables.Map:
    return mapping if isinstance(mapping, immutables.Map) else immutables.Map(mapping)


def _thawed(mapping: Mapping) -> dict:
    """A mutable copy: a FrozenMap's own dict copied at C speed (``dict()`` of
    a Mapping goes through ``__getitem__`` once per key, 40x slower at
    10,000 entries, and every member change copies the group's indexes)."""
    return mapping.thaw() if isinstance(mapping, FrozenMap) else dict(mapping)
