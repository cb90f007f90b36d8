"""``uniform`` for a heterogeneous group: Kafka 4.4's
``UniformHeterogeneousAssignmentBuilder``, step for step.

1. Each member keeps its current partitions of the topics it still
   subscribes to; the others are dropped.
2. The unassigned partitions, topic by topic (most partitions per
   subscriber first, then fewer subscribers, then topic id), each go to
   the least loaded subscriber of the topic (fewest partitions, then lowest
   member index).
3. Up to 16 rounds over the topics with two or more subscribers move
   partitions from a topic's most loaded subscribers to its least loaded
   ones (a member's highest-numbered partition of the topic first), until a
   whole round moves nothing.

Members are numbered in Java's order of the group's member ids (the only
``HashMap`` order the result depends on); everything else is sorted.

Worked example: ``m1`` subscribes to ``a`` (4 partitions) and ``b`` (2),
``m2`` to ``a`` only. ``a`` has 2 partitions per subscriber, ``b`` 2, and
``b`` has fewer subscribers, so ``b`` goes first, both to ``m1``; then each
partition of ``a`` goes to the least loaded of the two, which is ``m2``
until the loads are equal:

>>> from zkcoord.core.assignors.spec import GroupSpec, MemberSpec, TopicSpec
>>> from zkcoord.core.assignors.uniform import uniform_assign
>>> a, b = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg"
>>> group = GroupSpec(members={"m1": MemberSpec(("a", "b")), "m2": MemberSpec(("a",))},
...                   topics={"a": TopicSpec(a, 4), "b": TopicSpec(b, 2)})
>>> result = uniform_assign(group)
>>> {m: {t: sorted(ps) for t, ps in tps.items()} for m, tps in sorted(result.items())}
{'m1': {'AAAAAAAAAAAAAAAAAAAAAg': [0, 1], 'AAAAAAAAAAAAAAAAAAAAAQ': [3]}, 'm2': {'AAAAAAAAAAAAAAAAAAAAAQ': [0, 1, 2]}}
"""

from __future__ import annotations

from zkcoord.core.assignors.java_hash import uuid_bits
from zkcoord.core.assignors.spec import PartitionAssignorError, Prepared
from zkcoord.core.assignors.target import MemberTarget

__all__ = ["assign_heterogeneous"]

MAX_ITERATION_COUNT = 16


class _Balancer:
    """``MemberAssignmentBalancer``: a least loaded range growing rightwards
    and a most loaded range growing leftwards over the members sorted by
    load, read against the live loads."""

    __slots__ = ("sizes", "members", "least_end", "least_count", "next_least",
                 "most_start", "most_end", "most_count", "next_most")

    def __init__(self, sizes: list[int]):
        self.sizes = sizes
        self.members: list[int] = []

    def initialize(self, members: list[int]) -> int:
        """Start over on ``members``; returns most minus least load."""
        if not members:
            raise ValueError("Cannot balance an empty subscriber list.")
        sizes = self.sizes
        self.members = ordered = sorted(members, key=lambda i: (sizes[i], i))
        self.least_end, self.least_count, self.next_least = 0, sizes[ordered[0]] - 1, 0
        n = len(ordered)
        self.most_start, self.most_end, self.most_count = n, n, sizes[ordered[-1]] + 1
        self.next_most = n - 1
        return sizes[ordered[-1]] - sizes[ordered[0]]

    def next_least_loaded(self) -> int:
        members, sizes = self.members, self.sizes
        if self.next_least >= self.least_end:
            self.least_count += 1
            while self.least_end < len(members) and sizes[members[self.least_end]] == self.least_count:
                self.least_end += 1
            self.next_least = 0
        member = members[self.next_least]
        self.next_least += 1
        return member

    def next_most_loaded(self) -> int:
        members, sizes = self.members, self.sizes
        if self.next_most < self.most_start:
            if self.most_end <= self.most_start and self.most_start > 0:
                self.most_count = sizes[members[self.most_start - 1]]
            else:
                self.most_count -= 1
            while self.most_start > 0 and sizes[members[self.most_start - 1]] == self.most_count:
                self.most_start -= 1
            self.next_most = self.most_end - 1
        if self.next_most < 0:
            return -1
        member = members[self.next_most]
        self.next_most -= 1
        return member

    def exclude_most_loaded(self) -> None:
        members = self.members
        member = members[self.next_most + 1]
        members[self.next_most + 1] = members[self.most_end - 1]
        members[self.most_end - 1] = member
        self.most_end -= 1

    def is_balanced(self) -> bool:
        return self.most_count - self.least_count <= 1


class _Builder:
    """The builder's state: members by index, each topic's subscribers
    (ascending member indices), partition owners (-1: none) and loads."""

    def __init__(self, prepared: Prepared):
        self.prepared = prepared
        self.member_ids = prepared.member_ids
        self.counts = prepared.partition_counts
        self.subscribers: dict[str, list[int]] = {}
        for index, member_id in enumerate(self.member_ids):
            for topic_id in prepared.subscribed_id_sets[member_id]:
                self.subscribers.setdefault(topic_id, []).append(index)
        self.owners = {t: [-1] * self.counts[t] for t in self.subscribers}
        self.sizes = [0] * len(self.member_ids)
        self.targets: dict[str, MemberTarget] = {}

    def topic_order(self, topic_id: str) -> tuple:
        """``topicComparator``: partitions per subscriber descending, then
        subscriber count ascending, then ``Uuid.compareTo``."""
        subscribers = len(self.subscribers[topic_id])
        return -(self.counts[topic_id] / subscribers), subscribers, uuid_bits(topic_id)

    def revoke(self) -> None:
        """``maybeRevokePartitions``."""
        for index, member_id in enumerate(self.member_ids):
            target = self.targets[member_id] = MemberTarget(self.prepared.old_assignment(member_id))
            subscribed = self.prepared.subscribed_id_sets[member_id]
            for topic_id, partitions in target.old.items():
                if topic_id not in subscribed:
                    target.drop_topic(topic_id)
                    continue
                self.sizes[index] += len(partitions)
                row = self.owners[topic_id]
                for partition in partitions:
                    if not 0 <= partition < len(row):
                        raise PartitionAssignorError(
                            f"Member {member_id} is assigned partition {partition} of topic {topic_id}, "
                            f"which has {len(row)} partitions.")
                    row[partition] = index

    def assign_partition(self, topic_id: str, partition: int, index: int) -> None:
        """``assignPartition``: from its owner, if any, to member ``index``."""
        row = self.owners[topic_id]
        old = row[partition]
        if old != -1:
            self.targets[self.member_ids[old]].remove(topic_id, partition)
            self.sizes[old] -= 1
        subscribers = len(self.subscribers[topic_id])
        per_subscriber = (self.counts[topic_id] + subscribers - 1) // subscribers
        self.targets[self.member_ids[index]].add(topic_id, partition, int(per_subscriber / 0.75 + 1))
        row[partition] = index
        self.sizes[index] += 1

    def assign_remaining(self) -> None:
        """``computeUnassignedPartitions`` + ``assignRemainingPartitions``."""
        unassigned = {t: [p for p, owner in enumerate(row) if owner == -1] for t, row in self.owners.items()}
        balancer = _Balancer(self.sizes)
        for topic_id in sorted((t for t, ps in unassigned.items() if ps), key=self.topic_order):
            balancer.initialize(self.subscribers[topic_id])
            for partition in unassigned[topic_id]:
                self.assign_partition(topic_id, partition, balancer.next_least_loaded())

    def balance(self) -> None:
        """``balance`` / ``balanceTopics``."""
        topics = sorted((t for t, s in self.subscribers.items() if len(s) >= 2), key=self.topic_order)
        if not topics:
            return
        balancer = _Balancer(self.sizes)
        last = -1
        for _ in range(MAX_ITERATION_COUNT):
            for index, topic_id in enumerate(topics):
                if index == last:
                    return
                if self.balance_topic(topic_id, balancer) > 0 or last == -1:
                    last = index

    def balance_topic(self, topic_id: str, balancer: _Balancer) -> int:
        """``balanceTopic``: returns how many partitions moved."""
        if balancer.initialize(self.subscribers[topic_id]) <= 1:
            return 0
        row = self.owners[topic_id]
        count = len(row)
        partitions = sorted(range(count), key=lambda p: (row[p] + 1) * count + p)  # by owner, then partition
        start: dict[int, int] = {}
        end: dict[int, int] = {}
        for i, partition in enumerate(partitions):
            owner = row[partition]
            start.setdefault(owner, i)
            end[owner] = i + 1
        moved = 0
        while not balancer.is_balanced():
            while True:
                most = balancer.next_most_loaded()
                if most == -1:
                    break
                if most not in end or end[most] - start[most] <= 0:
                    balancer.exclude_most_loaded()
                    continue
                break
            if most == -1:
                break
            end[most] -= 1
            partition = partitions[end[most]]
            least = balancer.next_least_loaded()
            if balancer.is_balanced():
                break
            self.assign_partition(topic_id, partition, least)
            moved += 1
        return moved


def assign_heterogeneous(prepared: Prepared) -> dict[str, MemberTarget]:
    """``UniformHeterogeneousAssignmentBuilder.build``: the members' new
    assignments (none at all when nobody subscribes to a known topic)."""
    builder = _Builder(prepared)
    if not builder.subscribers:
        return {}
    builder.revoke()
    builder.assign_remaining()
    builder.balance()
    return builder.targets
