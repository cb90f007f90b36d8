"""OffsetCommit and OffsetFetch against a consumer group (Kafka 4.4's
``ConsumerGroup.validateOffsetCommit`` / ``validateOffsetFetch``).

A commit names its member and its member epoch:

* an anonymous commit (epoch below 0) is allowed while the group has no
  member (admin tools, ``--reset-offsets``);
* an unknown member: UNKNOWN_MEMBER_ID; a consumer-protocol member must use
  OffsetCommit v9 or later: UNSUPPORTED_VERSION;
* the member's epoch: allowed; a newer one: STALE_MEMBER_EPOCH (a member
  speaking the classic protocol: ILLEGAL_GENERATION);
* an older epoch: allowed for partitions the member held at that epoch
  already (its assignment epoch of the partition is not newer), so a member
  can commit what it consumed while it moves to its next epoch; one other
  partition makes it STALE_MEMBER_EPOCH (ILLEGAL_GENERATION) for the whole
  commit (:func:`zkcoord.core.offset_commit.decide_commit`).
"""

from __future__ import annotations

from collections.abc import Callable

from zkcoord.core.consumer.model import ConsumerGroup, ConsumerMember
from zkcoord.core.errors import ErrorCode

__all__ = ["validate_commit", "validate_fetch"]

E = ErrorCode
PartitionCheck = Callable[[str, int], ErrorCode]


def validate_commit(group: ConsumerGroup | None, request, config) -> ErrorCode | PartitionCheck:
    """NONE, a group-level error, or a check of each (topic, partition) (the module's rules)."""
    if group is None:
        return E.NONE if request.generation_or_epoch < 0 else E.ILLEGAL_GENERATION
    epoch = request.generation_or_epoch
    if epoch < 0 and not group.members:
        return E.NONE
    member = group.members.get(request.member_id)
    if member is None:
        return E.UNKNOWN_MEMBER_ID
    if not member.uses_classic_protocol and request.api_version < 9:
        return E.UNSUPPORTED_VERSION
    if epoch == member.member_epoch:
        return E.NONE
    stale = E.ILLEGAL_GENERATION if member.uses_classic_protocol else E.STALE_MEMBER_EPOCH
    if epoch > member.member_epoch:
        return stale
    return _held_at(member, epoch, stale, config.image)


def _held_at(member: ConsumerMember, epoch: int, stale: ErrorCode, image) -> PartitionCheck:
    def check(topic: str, partition: int) -> ErrorCode:
        topic_id = image.id_of(topic)
        held = None if topic_id is None else member.assignment_epoch(topic_id, partition)
        return stale if held is None or epoch < held else E.NONE
    return check


def validate_fetch(group: ConsumerGroup, member_id: str | None, member_epoch: int) -> ErrorCode:
    """OffsetFetch v9+ names its member: it must be one, at its epoch."""
    if member_id is None and member_epoch < 0:
        return E.NONE
    member = group.members.get(member_id)
    if member is None:
        return E.UNKNOWN_MEMBER_ID
    if member_epoch != member.member_epoch:
        return E.ILLEGAL_GENERATION if member.uses_classic_protocol else E.STALE_MEMBER_EPOCH
    return E.NONE
