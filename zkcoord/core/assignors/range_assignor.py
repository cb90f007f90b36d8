"""The ``range`` assignor: Kafka 4.4's (server-side) ``RangeAssignor``.

Members are sorted: static members first by instance id, then the others by
member id (``String.compareTo``; a stable sort, so members that compare
equal keep Java's ``HashMap`` order of the group's member ids). Each topic
is then cut into consecutive ranges, one per subscriber in that order: a
topic of P partitions over S subscribers gives each ``P // S`` partitions
and the first ``P % S`` subscribers one more. Topics are independent, so
topics with equal partition counts and subscribers are co-partitioned. No
stickiness: the current assignment is not read.

Worked example: three members over a 5-partition topic; the static member
comes first, then the others by id:

>>> from zkcoord.core.assignors.spec import GroupSpec, MemberSpec, TopicSpec
>>> a = "AAAAAAAAAAAAAAAAAAAAAQ"
>>> group = GroupSpec(members={"m-b": MemberSpec(("a",)), "m-a": MemberSpec(("a",)),
...                            "m-z": MemberSpec(("a",), instance_id="i-1")},
...                   topics={"a": TopicSpec(a, 5)})
>>> result = range_assign(group)
>>> {m: sorted(result[m][a]) for m in ("m-z", "m-a", "m-b")}
{'m-z': [0, 1], 'm-a': [2, 3], 'm-b': [4]}
"""

from __future__ import annotations

from zkcoord.core.assignors.java_hash import UUID_KEYS, inserted_order, java_string_compare_key
from zkcoord.core.assignors.spec import GroupSpec, Prepared, SubscriptionType
from zkcoord.core.assignors.target import GroupAssignment

__all__ = ["range_assign"]

NAME = "range"


class _Topic:
    """``RangeAssignor.TopicMetadata``: the next range to hand out."""

    __slots__ = ("topic_id", "partitions", "members", "min_quota", "extra", "next_range")

    def __init__(self, topic_id: str, partitions: int, members: int):
        self.topic_id = topic_id
        self.partitions = partitions
        self.members = members
        self.min_quota = -1
        self.extra = -1
        self.next_range = 0

    def next(self) -> tuple[int, ...]:
        """``maybeComputeQuota`` + ``addPartitionsToAssignment``: the next range."""
        if self.min_quota == -1:
            self.min_quota, self.extra = divmod(self.partitions, self.members)
        quota = self.min_quota
        if self.extra > 0:
            quota += 1
            self.extra -= 1
        start = self.next_range
        end = min(start + quota, self.partitions)
        self.next_range = end
        return tuple(range(start, end))


def _sorted_member_ids(prepared: Prepared) -> list[str]:
    """``sortMemberIds``: static members by instance id, then the rest by member id."""
    members = prepared.members

    def key(member_id: str) -> tuple:
        instance_id = members[member_id].instance_id
        if instance_id is not None:
            return 0, java_string_compare_key(instance_id)
        return 1, java_string_compare_key(member_id)

    return sorted(prepared.member_ids, key=key)


def range_assign(group: GroupSpec) -> GroupAssignment:
    """Kafka's ``RangeAssignor.assign`` for ``group``: member id to
    {topic id: frozenset of partitions}, every member present."""
    prepared = Prepared(group)
    if not group.members:
        return GroupAssignment({}, {}, group.jdk)
    member_ids = _sorted_member_ids(prepared)
    counts = prepared.partition_counts
    if prepared.subscription_type is SubscriptionType.HOMOGENEOUS:
        first = prepared.subscribed_ids(member_ids[0])
        topics = {t: _Topic(t, counts[t], len(member_ids)) for t in first}
        subscriptions = {m: first for m in member_ids}
    else:
        topics = {}
        subscriptions = {m: prepared.subscribed_ids(m) for m in member_ids}
        for member_id in member_ids:
            for topic_id in subscriptions[member_id]:
                topic = topics.get(topic_id)
                if topic is None:
                    topic = topics[topic_id] = _Topic(topic_id, counts[topic_id], 0)
                topic.members += 1
    members: dict[str, dict[str, frozenset[int]]] = {}
    orders = {}
    topic_orders: dict[tuple, list[str]] = {}  # one HashMap order per (capacity, topics): members share them
    for member_id in member_ids:
        ranges = {}
        for topic_id in subscriptions[member_id]:
            partitions = topics[topic_id].next()
            if partitions:
                ranges[topic_id] = partitions
        members[member_id] = {t: frozenset(ps) for t, ps in ranges.items()}
        key = (_map_capacity(prepared, member_id, len(topics)), tuple(ranges))
        order = topic_orders.get(key)
        if order is None:
            order = topic_orders[key] = inserted_order(UUID_KEYS, list(ranges), key[0])
        orders[member_id] = tuple((t, ranges[t]) for t in order)
    return GroupAssignment({m: members[m] for m in group.members}, orders, group.jdk)


def _map_capacity(prepared: Prepared, member_id: str, topic_count: int) -> int:
    """The capacity Kafka gives a member's new map: ``(int) (n / .75f + 1)``
    of its topics (homogeneous: the subscribed topics' count; heterogeneous:
    ``TopicIds.size()``, its subscribed names)."""
    if prepared.subscription_type is SubscriptionType.HOMOGENEOUS:
        return int(topic_count / 0.75 + 1)
    return int(prepared.names_count(member_id) / 0.75 + 1)
