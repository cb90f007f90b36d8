"""What an assignor is given: the group's members and the cluster's topics.

This module owns the assignors' input, shaped after what Kafka's
coordinator hands its assignors (``GroupSpecImpl``, built by
``TargetAssignmentBuilder``), and the orders in which Kafka's assignors
see it, because Kafka's results depend on them:

* **members**: ``GroupSpec.memberIds()`` is the key set of a ``HashMap``
  that ``TargetAssignmentBuilder`` fills with ``put`` in the order it walks
  the group's members. :attr:`GroupSpec.members` is taken in that order,
  and :meth:`Prepared.member_ids` is Java's iteration order of those keys.
* **subscriptions**: a member's subscribed topic ids are Kafka's
  ``TopicIds``: its subscribed topic names (``new HashSet<>(list)`` of the
  names the member sent, in the order it sent them), each resolved to its
  id, the names of no known topic left out. :attr:`MemberSpec.
  subscribed_topic_names` is that list.
* **current assignment**: a member's current target assignment is
  Kafka's ``Assignment.fromRecord``: a ``HashMap`` (``Collectors.toMap``)
  of ``new HashSet<>(partitions)``, built from the
  ``ConsumerGroupTargetAssignmentMemberValue`` record in its order.
  :attr:`MemberSpec.assignment` is that record: topic id to partitions,
  both in record order (give sorted lists when no order is known; the
  assignors' ``record_order`` gives the order Kafka would write).
* the JDK: ``new HashSet<>(collection)`` sizes its table differently
  before and after JDK 19 (:func:`java_hash.hash_set_capacity`), and so
  may iterate differently; :attr:`GroupSpec.jdk` says which to follow
  (default 17, the JDK zkcoord's sandbox runs Kafka on).

Topic ids are Kafka ``Uuid`` strings (unpadded URL-safe base64 of 16 bytes,
as ZooKeeper's ``/brokers/topics/<topic>`` holds them). Rack ids are
carried for the coordinator, but Kafka 4.4's ``uniform`` and ``range``
never read racks, so neither do these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property

from zkcoord.core.assignors.java_hash import (
    INT_KEYS, STRING_KEYS, UUID_KEYS, hash_set_capacity, inserted_order, uuid_bits,
)
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.errors import ZkcoordError

__all__ = ["GroupSpec", "MemberSpec", "PartitionAssignorError", "Prepared", "SubscriptionType", "TopicSpec"]


class PartitionAssignorError(ZkcoordError):
    """Kafka's ``PartitionAssignorException``: the assignor cannot assign
    this group (the message says why, as Kafka's does)."""


class SubscriptionType(Enum):
    """Kafka's ``SubscriptionType``: homogeneous when every member
    subscribes to the same topic names."""

    HOMOGENEOUS = "Homogeneous"
    HETEROGENEOUS = "Heterogeneous"


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic of the cluster's metadata: its id and partition count."""

    topic_id: str
    partitions: int

    def __post_init__(self) -> None:
        uuid_bits(self.topic_id)  # a ValueError naming the id when it is not a Kafka Uuid
        if self.partitions < 0:
            raise ValueError(f"topic {self.topic_id}: partition count {self.partitions} is negative")


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """One member as the assignor sees it.

    ``subscribed_topic_names``: the names the member subscribed to, in the
    order it sent them. ``assignment``: its current target assignment,
    topic id to partitions, in the order of Kafka's record. ``instance_id``
    (static membership) orders members in ``range``; ``rack_id`` is
    unused by both assignors, as in Kafka 4.4."""

    subscribed_topic_names: tuple[str, ...] = ()
    assignment: Mapping[str, Sequence[int]] = field(default_factory=dict)
    instance_id: str | None = None
    rack_id: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "subscribed_topic_names", tuple(self.subscribed_topic_names))
        frozen = FrozenMap({t: tuple(dict.fromkeys(ps)) for t, ps in self.assignment.items()})
        object.__setattr__(self, "assignment", frozen)


@dataclass(frozen=True)
class GroupSpec:
    """The group to assign: ``members`` (member id to spec, in the order
    the coordinator walks them), ``topics`` (topic name to id and partition
    count: the metadata image), the subscription type (None: Kafka's rule,
    :meth:`Prepared.subscription_type`) and the JDK whose ``HashSet``
    sizing to follow."""

    members: Mapping[str, MemberSpec]
    topics: Mapping[str, TopicSpec]
    subscription_type: SubscriptionType | None = None
    jdk: int = 17


class Prepared:
    """A :class:`GroupSpec` with Kafka's views and orders worked out (lazily:
    each assignor uses only some)."""

    def __init__(self, group: GroupSpec):
        self.group = group
        self.members = group.members
        self.partition_counts: dict[str, int] = {t.topic_id: t.partitions for t in group.topics.values()}
        self._ids_by_name = {name: t.topic_id for name, t in group.topics.items()}

    @cached_property
    def member_ids(self) -> list[str]:
        """``GroupSpec.memberIds()`` in Java's ``HashMap`` order."""
        return inserted_order(STRING_KEYS, list(self.members))

    @cached_property
    def subscription_type(self) -> SubscriptionType:
        """Kafka's ``ModernGroup.subscriptionType``: homogeneous when every
        subscribed name (resolvable or not) is subscribed by every member."""
        if self.group.subscription_type is not None:
            return self.group.subscription_type
        # Every name subscribed by every member: all members' name sets are equal.
        lists = {member.subscribed_topic_names for member in self.members.values()}
        return SubscriptionType.HOMOGENEOUS if len({frozenset(names) for names in lists}) <= 1 else \
            SubscriptionType.HETEROGENEOUS

    def subscribed_names(self, member_id: str) -> list[str]:
        """The member's ``new HashSet<>(names)``, in Java's order."""
        names = self.members[member_id].subscribed_topic_names
        capacity = hash_set_capacity(len(names), self.group.jdk)
        return inserted_order(STRING_KEYS, list(dict.fromkeys(names)), capacity)

    def subscribed_ids(self, member_id: str) -> list[str]:
        """The member's ``TopicIds`` in iteration order (names without a
        topic left out)."""
        ids = self._ids_by_name
        return [ids[n] for n in self.subscribed_names(member_id) if n in ids]

    @cached_property
    def subscribed_id_sets(self) -> dict[str, frozenset[str]]:
        """Each member's resolvable subscribed topic ids (``TopicIds.contains``)."""
        ids = self._ids_by_name
        return {m: frozenset(ids[n] for n in spec.subscribed_topic_names if n in ids)
                for m, spec in self.members.items()}

    def names_count(self, member_id: str) -> int:
        """``TopicIds.size()``: the member's distinct subscribed names, known or not."""
        return len(set(self.members[member_id].subscribed_topic_names))

    @cached_property
    def assigned(self) -> dict[str, set[int]]:
        """``GroupSpec.isPartitionAssigned``: every member's current partitions, by topic."""
        out: dict[str, set[int]] = {}
        for spec in self.members.values():
            for topic_id, partitions in spec.assignment.items():
                out.setdefault(topic_id, set()).update(partitions)
        return out

    def current_topics(self, member_id: str) -> list[str]:
        """The member's current assignment's topics in Java's order
        (``Collectors.toMap``: ``new HashMap<>()``, in record order)."""
        return inserted_order(UUID_KEYS, list(self.members[member_id].assignment))

    def current_partitions(self, member_id: str, topic_id: str) -> list[int]:
        """One topic's current partitions in Java's order (``new HashSet<>(list)``)."""
        partitions = list(self.members[member_id].assignment[topic_id])
        return inserted_order(INT_KEYS, partitions, hash_set_capacity(len(partitions), self.group.jdk))

    def old_assignment(self, member_id: str) -> dict[str, list[int]]:
        """The member's current assignment as Kafka iterates it: topics and
        each topic's partitions in Java's order."""
        if not self.members[member_id].assignment:
            return {}
        return {t: self.current_partitions(member_id, t) for t in self.current_topics(member_id)}
