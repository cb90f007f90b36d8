"""One member's new assignment while an assignor builds it, and the result.

Kafka's assignors start each member from its current assignment, an
immutable map, and deep-copy it (``AssignorHelpers.deepCopyAssignment``) at
the first change. :class:`MemberTarget` does the same with Python sets and
logs each change, so that :meth:`GroupAssignment.record_order` can replay
them on the Java structures of :mod:`~zkcoord.core.assignors.java_hash`
and give the order in which Kafka iterates the new map: the order of the
``ConsumerGroupTargetAssignmentMemberValue`` record Kafka writes, and so
of the next run's input. The replay is done only when asked for.
"""

from __future__ import annotations

from collections.abc import Mapping

from zkcoord.core.assignors.java_hash import INT_KEYS, UUID_KEYS, JavaHashMap, hash_set_capacity

__all__ = ["GroupAssignment", "MemberTarget", "RecordOrder"]

RecordOrder = tuple[tuple[str, tuple[int, ...]], ...]

# Log entries: (_COPY,), (_DROP, topic), (_ADD, topic, partition, capacity of a new set or None), (_REMOVE, topic, p)
_COPY, _DROP, _ADD, _REMOVE = range(4)


class MemberTarget:
    """A member's assignment under construction: ``old`` (topic id to
    partitions in Java's iteration order) until the first change, then a
    copy of it."""

    __slots__ = ("old", "topics", "log")

    def __init__(self, old: Mapping[str, list[int]]):
        self.old = old
        self.topics: dict[str, set[int]] | None = None
        self.log: list[tuple] = []

    def _copy(self) -> dict[str, set[int]]:
        if self.topics is None:
            self.topics = {t: set(ps) for t, ps in self.old.items()}
            self.log.append((_COPY,))
        return self.topics

    def copy(self) -> None:
        """``deepCopyAssignment`` when the map is still the old one."""
        self._copy()

    def drop_topic(self, topic_id: str) -> None:
        self._copy().pop(topic_id, None)
        self.log.append((_DROP, topic_id))

    def add(self, topic_id: str, partition: int, new_set_capacity: int | None = None) -> None:
        """``computeIfAbsent(topic, new HashSet<>(capacity)).add(partition)``."""
        self._copy().setdefault(topic_id, set()).add(partition)
        self.log.append((_ADD, topic_id, partition, new_set_capacity))

    def remove(self, topic_id: str, partition: int) -> None:
        """Remove one partition, and the topic once it has none left."""
        topics = self._copy()
        partitions = topics.get(topic_id)
        if partitions is not None:
            partitions.discard(partition)
            if not partitions:
                del topics[topic_id]
        self.log.append((_REMOVE, topic_id, partition))

    def result(self) -> dict[str, frozenset[int]]:
        source = self.old if self.topics is None else self.topics
        return {t: frozenset(ps) for t, ps in source.items() if ps}

    def replay(self, jdk: int) -> RecordOrder:
        """The new map's iteration order in Java."""
        if self.topics is None:
            return tuple((t, tuple(ps)) for t, ps in self.old.items())
        topics: JavaHashMap | None = None
        sets: dict[str, JavaHashMap] = {}
        for entry in self.log:
            op = entry[0]
            if op == _COPY:
                topics = JavaHashMap(UUID_KEYS, len(self.old))
                for t, ps in self.old.items():
                    topics.add(t)
                    sets[t] = JavaHashMap(INT_KEYS, hash_set_capacity(len(ps), jdk), ps)
            elif op == _DROP:
                topics.remove(entry[1])
                sets.pop(entry[1], None)
            elif op == _ADD:  # computeIfAbsent(topic, new HashSet<>(capacity)).add(p)
                _, t, p, capacity = entry
                if topics.compute_if_absent(t):
                    sets[t] = JavaHashMap(INT_KEYS, capacity)
                sets[t].add(p)
            else:
                _, t, p = entry
                if t in sets:
                    sets[t].remove(p)
                    if not len(sets[t]):
                        topics.remove(t)
                        del sets[t]
        return tuple((t, tuple(sets[t])) for t in topics)


class GroupAssignment(dict):
    """The assignors' result: member id to {topic id: frozenset of
    partitions} (every member of the group, an empty dict for none). It
    compares equal to a plain dict with the same items.

    :meth:`record_order` gives one member's assignment in the order Kafka
    iterates its new map, which is the order of the record Kafka writes
    when the assignment changed (and so of the next run's
    :attr:`MemberSpec.assignment`)."""

    def __init__(self, members: dict[str, dict[str, frozenset[int]]], orders: dict, jdk: int):
        super().__init__(members)
        self._orders = orders
        self._jdk = jdk

    def record_order(self, member_id: str) -> RecordOrder:
        order = self._orders.get(member_id)
        if order is None:
            return ()
        if isinstance(order, MemberTarget):
            order = self._orders[member_id] = order.replay(self._jdk)
        return order
