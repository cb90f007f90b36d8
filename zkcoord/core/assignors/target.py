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

from zkcoord.core.assignors.java_hash import INT_KEYS, UUID_KEYS, JavaHashMap, hash_set_capacity, inserted_order

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
        topics = self.topics if self.topics is not None else self._copy()
        partitions = topics.get(topic_id)
        if partitions is None:
            partitions = topics[topic_id] = set()
        partitions.add(partition)
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
        """The new map's iteration order in Java. The map of topics is
        rebuilt op by op (a run of ``computeIfAbsent`` of one present topic
        changes nothing after its first call); a set of partitions only ever
        added to is ordered by :func:`inserted_order`, one with removals is
        rebuilt op by op."""
        if self.topics is None:
            return tuple((t, tuple(ps)) for t, ps in self.old.items())
        topics = JavaHashMap(UUID_KEYS, 0)
        sets: dict[str, _SetLog] = {}
        # The topic of the last computeIfAbsent, while the map has not changed
        # since and has no resize pending (computeIfAbsent resizes first).
        last = None
        for entry in self.log:
            op = entry[0]
            if op == _COPY:
                topics = JavaHashMap(UUID_KEYS, len(self.old))
                for t, ps in self.old.items():
                    topics.add(t)
                    sets[t] = _SetLog(hash_set_capacity(len(ps), jdk), ps)
                last = None
            elif op == _DROP:
                topics.remove(entry[1])
                sets.pop(entry[1], None)
                last = None
            elif op == _ADD:  # computeIfAbsent(topic, new HashSet<>(capacity)).add(p)
                _, t, p, capacity = entry
                if t != last or not topics.settled:
                    if topics.compute_if_absent(t):
                        sets[t] = _SetLog(capacity, ())
                    last = t
                sets[t].add(p)
            else:
                _, t, p = entry
                log = sets.get(t)
                if log is not None and log.remove(p) and not log.live:
                    topics.remove(t)
                    del sets[t]
                    last = None
        return tuple((t, sets[t].order()) for t in topics)


class _SetLog:
    """The history of one ``HashSet<Integer>``: its capacity, its ops."""

    __slots__ = ("capacity", "ops", "live", "removed")

    def __init__(self, capacity: int | None, initial):
        self.capacity = capacity
        self.ops: list[int] = list(initial)  # p added, ~p removed
        self.live = set(self.ops)
        self.removed = False

    def add(self, p: int) -> None:
        if p not in self.live:
            self.live.add(p)
            self.ops.append(p)

    def remove(self, p: int) -> bool:
        if p not in self.live:
            return False
        self.live.discard(p)
        self.ops.append(~p)
        self.removed = True
        return True

    def order(self) -> tuple[int, ...]:
        if not self.removed:
            return tuple(inserted_order(INT_KEYS, self.ops, self.capacity))
        table = JavaHashMap(INT_KEYS, self.capacity)
        for p in self.ops:
            if p >= 0:
                table.add(p)
            else:
                table.remove(~p)
        return tuple(table)


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
