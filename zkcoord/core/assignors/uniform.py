"""The ``uniform`` assignor: Kafka 4.4's ``UniformAssignor``, step for step.

Balance first, then stickiness. A homogeneous group (every member
subscribes to the same topics) goes through ``UniformHomogeneous
AssignmentBuilder``: each member keeps its current partitions up to its
quota (``partitions // members``, one more for the first ``partitions %
members`` members that can use it), and the unassigned partitions are
handed out in order to the members still under quota. A heterogeneous
group goes through ``UniformHeterogeneousAssignmentBuilder``
(:mod:`~zkcoord.core.assignors.uniform_heterogeneous`).

Where Kafka's result depends on Java's ``HashMap`` order (which member
comes first, the order of the subscribed topics, of a member's current
partitions), :class:`~zkcoord.core.assignors.spec.Prepared` gives that
order, so the result is Kafka's for the same input.

Worked example: ``m1`` holds all five partitions of ``a`` (3) and ``b``
(2) when ``m2`` joins. Five over two is a quota of 2, one member getting a
third. ``m1`` comes first in Java's order of the two ids (``"m1"`` and
``"m2"`` hash to buckets 4 and 5) and so gets the extra partition: it walks
its current assignment in Java's order, keeps ``a`` (3 partitions, within
its quota of 3) and gives up ``b``, whose partitions fill ``m2``:

>>> from zkcoord.core.assignors.spec import GroupSpec, MemberSpec, TopicSpec
>>> a, b = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg"
>>> group = GroupSpec(
...     members={"m1": MemberSpec(("a", "b"), {a: [0, 1, 2], b: [0, 1]}), "m2": MemberSpec(("a", "b"))},
...     topics={"a": TopicSpec(a, 3), "b": TopicSpec(b, 2)})
>>> result = uniform_assign(group)
>>> {m: {t: sorted(ps) for t, ps in tps.items()} for m, tps in sorted(result.items())}
{'m1': {'AAAAAAAAAAAAAAAAAAAAAQ': [0, 1, 2]}, 'm2': {'AAAAAAAAAAAAAAAAAAAAAg': [0, 1]}}
>>> result.record_order("m2")
(('AAAAAAAAAAAAAAAAAAAAAg', (0, 1)),)
"""

from __future__ import annotations

from zkcoord.core.assignors.java_hash import UUID_KEYS, hash_set_capacity, inserted_order
from zkcoord.core.assignors.spec import GroupSpec, PartitionAssignorError, Prepared, SubscriptionType
from zkcoord.core.assignors.target import GroupAssignment, MemberTarget
from zkcoord.core.assignors.uniform_heterogeneous import assign_heterogeneous

__all__ = ["uniform_assign"]

NAME = "uniform"


def uniform_assign(group: GroupSpec) -> GroupAssignment:
    """Kafka's ``UniformAssignor.assign`` for ``group``: member id to
    {topic id: frozenset of partitions}, every member present.
    :class:`PartitionAssignorError` where Kafka throws its
    ``PartitionAssignorException``."""
    prepared = Prepared(group)
    if not group.members:
        return GroupAssignment({}, {}, group.jdk)
    if prepared.subscription_type is SubscriptionType.HOMOGENEOUS:
        targets = _assign_homogeneous(prepared)
    else:
        targets = assign_heterogeneous(prepared)
    members = {m: (targets[m].result() if m in targets else {}) for m in group.members}
    return GroupAssignment(members, targets, group.jdk)


def _assign_homogeneous(prepared: Prepared) -> dict[str, MemberTarget]:
    """``UniformHomogeneousAssignmentBuilder.build``."""
    member_ids = prepared.member_ids
    first = member_ids[0]
    # new HashSet<>(first member's TopicIds): sized by its names, filled in its order
    topics = inserted_order(UUID_KEYS, prepared.subscribed_ids(first),
                            hash_set_capacity(prepared.names_count(first), prepared.group.jdk))
    if not topics:
        return {}
    unassigned: list[tuple[str, int]] = []
    total = 0
    for topic_id in topics:
        count = prepared.partition_counts[topic_id]
        taken = prepared.assigned.get(topic_id, ())
        unassigned.extend((topic_id, p) for p in range(count) if p not in taken)
        total += count
    targets, unfilled = _revoke(prepared, frozenset(topics), total, unassigned)
    _assign_remaining(targets, unfilled, unassigned)
    return targets


def _revoke(prepared: Prepared, subscribed: frozenset[str], total: int, unassigned: list[tuple[str, int]]
            ) -> tuple[dict[str, MemberTarget], list[tuple[str, int]]]:
    """``maybeRevokePartitions``: keep each member's partitions up to its
    quota; what is over it, or of a topic no longer subscribed, goes."""
    member_ids = prepared.member_ids
    n_members = len(member_ids)
    minimum, extra = divmod(total, n_members)
    targets: dict[str, MemberTarget] = {}
    unfilled: list[tuple[str, int]] = []
    for index, member_id in enumerate(member_ids):
        target = targets[member_id] = MemberTarget(prepared.old_assignment(member_id))
        quota, has_extra = minimum, False
        if extra > 0:
            quota, has_extra = quota + 1, True
        for topic_id, partitions in target.old.items():
            if topic_id not in subscribed:
                target.drop_topic(topic_id)
            elif len(partitions) <= quota:
                quota -= len(partitions)
            else:
                for partition in partitions:
                    if quota > 0:
                        quota -= 1
                    else:
                        target.remove(topic_id, partition)
                        unassigned.append((topic_id, partition))
        # A member that could not use its extra partition leaves it to a
        # later member, while enough members remain to take every extra one.
        if quota > 0 and has_extra and n_members - index > extra:
            quota, has_extra = quota - 1, False
        if quota > 0:
            unfilled.append((member_id, quota))
        if has_extra:
            extra -= 1
    return targets, unfilled


def _assign_remaining(targets: dict[str, MemberTarget], unfilled: list[tuple[str, int]],
                      unassigned: list[tuple[str, int]]) -> None:
    """``assignRemainingPartitions``: the unassigned partitions, in order,
    to the members under quota, in order."""
    at = 0
    for member_id, quota in unfilled:
        target = targets[member_id]
        target.copy()
        for topic_id, partition in unassigned[at:at + quota]:
            target.add(topic_id, partition)
        at = min(at + quota, len(unassigned))
    if at < len(unassigned):
        raise PartitionAssignorError("Partitions were left unassigned")
