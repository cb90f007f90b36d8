"""Server-side partition assignors of KIP-848's consumer protocol:
``uniform`` and ``range``, giving Kafka 4.4's assignments for the same input.

Pure functions of a :class:`GroupSpec` (no I/O, no clock), each a
step-for-step port of Kafka's class, checked against Kafka's own jars by
``tests/integration/test_assignors_differential.py``:

* :func:`uniform_assign`: ``UniformAssignor`` (balance, then stickiness);
  Kafka's default (``group.consumer.assignors`` starts with ``uniform``);
* :func:`range_assign`: ``RangeAssignor`` (co-partitioned ranges, static
  members first).

Kafka's results depend on Java's ``HashMap`` iteration orders; the input
says the orders Kafka's coordinator would build (:mod:`.spec`), and
:mod:`.java_hash` reproduces Java's orders from them exactly. Each result is
a :class:`GroupAssignment`: member id to {topic id: frozenset of
partitions}, with :meth:`GroupAssignment.record_order` for the order in
which Kafka would write a member's new assignment.

>>> group = GroupSpec(members={"m1": MemberSpec(("a",)), "m2": MemberSpec(("a",))},
...                   topics={"a": TopicSpec("AAAAAAAAAAAAAAAAAAAAAQ", 4)})
>>> sorted((m, sorted(ps)) for m, tps in assign("range", group).items() for ps in tps.values())
[('m1', [0, 1]), ('m2', [2, 3])]
"""

from __future__ import annotations

from collections.abc import Callable

from zkcoord.core.assignors.range_assignor import range_assign
from zkcoord.core.assignors.spec import GroupSpec, MemberSpec, PartitionAssignorError, SubscriptionType, TopicSpec
from zkcoord.core.assignors.target import GroupAssignment
from zkcoord.core.assignors.uniform import uniform_assign

__all__ = [
    "ASSIGNORS", "GroupAssignment", "GroupSpec", "MemberSpec", "PartitionAssignorError", "SubscriptionType",
    "TopicSpec", "assign", "range_assign", "uniform_assign",
]

ASSIGNORS: dict[str, Callable[[GroupSpec], GroupAssignment]] = {
    "uniform": uniform_assign,
    "range": range_assign,
}


def assign(name: str, group: GroupSpec) -> GroupAssignment:
    """Run the assignor Kafka calls ``name`` (``group.remote.assignor``).
    :class:`PartitionAssignorError` for an unknown name, as Kafka's
    UNSUPPORTED_ASSIGNOR answer says."""
    try:
        assignor = ASSIGNORS[name]
    except KeyError:
        raise PartitionAssignorError(
            f"Assignor {name!r} is not supported; supported assignors: {', '.join(ASSIGNORS)}.") from None
    return assignor(group)
