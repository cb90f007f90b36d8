"""An OffsetCommit decided against its group: what to write, and what follows.

This module owns the pure decision of an OffsetCommit, so a commit follows
the rule every write follows (decide, persist, then apply, then answer):

1. :func:`decide_commit` asks the group's kind whether the commit may be
   stored (:meth:`~zkcoord.core.groups.GroupKind.validate_offset_commit`:
   the generation for classic members, the member epoch for KIP-848's) and
   returns a :class:`CommitDecision`: the group's error, the offsets to
   write, and the offset storage mode they go to (the group's, at the moment
   of the decision).
2. The runtime queues the write where the mode says, still under the
   group's lock, so a commit accepted for generation N is ordered before
   every commit decided after it; the write itself is awaited outside the
   lock (:meth:`~zkcoord.server.group_runtime.GroupRuntime.write_then_apply`).
3. Once the write is accepted, :func:`after_commit` is applied: Kafka counts
   an accepted commit of a member as a heartbeat (the kind says when).

The partitions refused before the group is asked (a topic the cluster does
not have, metadata over the limit: :mod:`zkcoord.core.limits`) are not in
``offsets``: they get their own error whatever the group answers.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from zkcoord.core.errors import ErrorCode
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.groups import kind_of
from zkcoord.core.messages import Outcome

__all__ = ["CommitRequest", "CommitDecision", "decide_commit", "after_commit"]

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class CommitRequest:
    """An OffsetCommit: ``offsets`` are ``{(topic, partition): (offset,
    metadata)}`` still to be decided (the early refusals taken out);
    ``generation_or_epoch`` is the request's ``generation_id_or_member_epoch``."""

    member_id: str
    generation_or_epoch: int
    instance_id: str | None
    offsets: Mapping[TopicPartition, tuple[int, str]] = field(default_factory=FrozenMap)
    api_version: int = 0
    token: Hashable = None


@dataclass(frozen=True)
class CommitDecision:
    """``error`` NONE: write ``offsets`` to the ``mode`` store; else write
    nothing and answer every partition with ``error``."""

    error: ErrorCode
    mode: str
    offsets: Mapping[TopicPartition, tuple[int, str]] = field(default_factory=FrozenMap)

    @property
    def writes(self) -> bool:
        return self.error is ErrorCode.NONE and bool(self.offsets)


def decide_commit(group: Any, request: CommitRequest, exists: bool, config=None) -> CommitDecision:
    """The decision for ``request`` on ``group`` (``exists``: Kafka knows the
    group: a stored state, members or committed offsets; a group that does
    not exist takes only a commit without a generation). The group's kind
    answers NONE, an error for the whole commit, or a check per partition
    (a consumer group's member at an older epoch), whose first refusal is
    the whole commit's error, as in Kafka."""
    if not exists and request.generation_or_epoch >= 0 and request.api_version >= 9:
        # OffsetMetadataManager.validateOffsetCommit: from v9 (KIP-848's) the group's absence is said
        # as it is; before, it is ILLEGAL_GENERATION as it always was.
        return CommitDecision(ErrorCode.GROUP_ID_NOT_FOUND, group.offset_storage)
    verdict = kind_of(group).validate_offset_commit(group if exists else None, request, config)
    if not isinstance(verdict, ErrorCode):
        # Kafka's partition validator throws out of the whole commit (OffsetMetadataManager.commitOffset):
        # the first partition it refuses, in request order, refuses them all, and nothing is written.
        verdict = next((code for code in (verdict(t, p) for t, p in request.offsets)
                        if code is not ErrorCode.NONE), ErrorCode.NONE)
    kept = request.offsets if verdict is ErrorCode.NONE else FrozenMap()
    return CommitDecision(verdict, group.offset_storage, kept)


def after_commit(group: Any, request: CommitRequest, decision: CommitDecision, now_ms: int) -> Outcome:
    """What an accepted commit changes in the group once its offsets are
    stored: a member's session restarts where its kind counts a commit as a
    heartbeat. Nothing for an anonymous or refused commit."""
    if decision.error is not ErrorCode.NONE or not request.member_id:
        return Outcome(group)
    return kind_of(group).touch_member(group, request.member_id, now_ms)
