"""The classic group's states, what each does, and the table of their transitions.

Owns :class:`GroupState` (Kafka's ``GroupState``: each state says in its
``action`` how it answers requests and how it is left), :data:`BEHAVIOUR`,
the table of what each state does that the handlers and the runtime act
on (they ask the table, never compare states themselves for these), and
``VALID_PREVIOUS``, the transition table (Kafka's ``validPreviousStates``):
a state change is legal only if the current state is in
``VALID_PREVIOUS[target]``. :func:`check_transition` enforces it; every
transition of :mod:`zkcoord.core.rebalance` goes through it.

The rest of the rebalance (which JoinGroup ends the join phase, which
SyncGroup carries the assignment) follows Kafka's ``GroupCoordinator``
step by step in :mod:`zkcoord.core.group` and :mod:`zkcoord.core.rebalance`,
in Kafka's own order, so it reads against Kafka's code.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from zkcoord.core.errors import ErrorCode
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.phases import GroupPhase
from zkcoord.errors import StateError

__all__ = ["GroupState", "Behaviour", "BEHAVIOUR", "VALID_PREVIOUS", "check_transition", "can_rebalance"]


class GroupState(Enum):
    """The five states of a classic group; the value is Kafka's printed name.

    Each state's ``action`` says how it answers requests (from Kafka's
    ``GroupMetadata.scala``); allowed predecessors are in ``VALID_PREVIOUS``.
    """

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @property
    def action(self) -> str:
        """What the coordinator does in this state, and how it leaves it."""
        return _ACTIONS[self]


_ACTIONS = {
    GroupState.EMPTY: (
        "No members (offsets may remain). Join from a new member starts a "
        "rebalance (-> PreparingRebalance, after the initial rebalance delay); "
        "sync, heartbeat, leave and member offset commits get "
        "UNKNOWN_MEMBER_ID; standalone commits (generation -1) are allowed; "
        "DeleteGroups -> Dead."
    ),
    GroupState.PREPARING_REBALANCE: (
        "Park JoinGroup requests until every known member has rejoined or the "
        "rebalance timeout passes; heartbeats and SyncGroup get "
        "REBALANCE_IN_PROGRESS; leave removes the member; commits of the "
        "previous generation are allowed. Join phase complete -> "
        "CompletingRebalance (new generation), or Empty if nobody is left."
    ),
    GroupState.COMPLETING_REBALANCE: (
        "Waiting for the leader's assignment: park followers' SyncGroup; "
        "heartbeats answer NONE; offset commits get REBALANCE_IN_PROGRESS. "
        "Leader SyncGroup -> Stable; new member, changed metadata, leave or "
        "failure -> PreparingRebalance."
    ),
    GroupState.STABLE: (
        "Normal operation: heartbeats answered NONE, SyncGroup answered with "
        "the stored assignment, followers' unchanged JoinGroup answered with "
        "the current generation, commits of the current generation allowed. "
        "Failure, leave, leader join or changed metadata -> PreparingRebalance."
    ),
    GroupState.DEAD: (
        "Final: the group was deleted or unloaded. Every request gets "
        "COORDINATOR_NOT_AVAILABLE so clients rediscover the coordinator."
    ),
}

@dataclass(frozen=True)
class Behaviour:
    """What a classic group in one state does, where handlers and the runtime ask.

    * ``phase``: the state in every group type's words (:class:`GroupPhase`).
    * ``heartbeat``: the answer to a current member's Heartbeat of the
      current generation; ``heartbeat_restarts_session``: whether it
      restarts the member's session.
    * ``member_commit``: the answer to a current member's OffsetCommit of
      the current generation (an anonymous one is decided by the group's
      emptiness); ``commit_is_heartbeat``: whether an accepted one restarts
      the member's session, as Kafka counts it.
    * ``sync_at_once``: a SyncGroup is answered from what is stored, never
      parked and never written (the fast path may answer it).
    * ``shows_assignment``: DescribeGroups shows the protocol and each
      member's metadata and assignment.
    """

    phase: GroupPhase
    heartbeat: ErrorCode
    heartbeat_restarts_session: bool
    member_commit: ErrorCode
    commit_is_heartbeat: bool
    sync_at_once: bool
    shows_assignment: bool


_E = ErrorCode
BEHAVIOUR: FrozenMap[GroupState, Behaviour] = FrozenMap({
    #                                  phase                    heartbeat                  restarts  member_commit
    #                                  commit_is_heartbeat  sync_at_once  shows_assignment
    GroupState.EMPTY: Behaviour(GroupPhase.EMPTY, _E.UNKNOWN_MEMBER_ID, False, _E.NONE,
                                False, False, False),
    GroupState.PREPARING_REBALANCE: Behaviour(GroupPhase.REBALANCING, _E.REBALANCE_IN_PROGRESS, True, _E.NONE,
                                              True, False, False),
    GroupState.COMPLETING_REBALANCE: Behaviour(GroupPhase.REBALANCING, _E.NONE, True, _E.REBALANCE_IN_PROGRESS,
                                               False, False, False),
    GroupState.STABLE: Behaviour(GroupPhase.STABLE, _E.NONE, True, _E.NONE,
                                 True, True, True),
    GroupState.DEAD: Behaviour(GroupPhase.DEAD, _E.COORDINATOR_NOT_AVAILABLE, False, _E.COORDINATOR_NOT_AVAILABLE,
                               False, False, False),
})


_S = GroupState
VALID_PREVIOUS: FrozenMap[GroupState, frozenset[GroupState]] = FrozenMap(
    {
        _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
        _S.PREPARING_REBALANCE: frozenset(
            {_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}
        ),
        _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
        _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
        _S.DEAD: frozenset(
            {_S.STABLE, _S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE, _S.EMPTY, _S.DEAD}
        ),
    }
)


def check_transition(group_id: str, current: GroupState, target: GroupState) -> None:
    """Raise :class:`StateError` unless ``current -> target`` is in the table."""
    if current not in VALID_PREVIOUS[target]:
        allowed = ", ".join(sorted(s.value for s in VALID_PREVIOUS[target]))
        raise StateError(
            f"group {group_id!r} cannot move from {current.value} to "
            f"{target.value}; {target.value} may only follow: {allowed}. "
            "This is a bug in the group state machine."
        )


def can_rebalance(state: GroupState) -> bool:
    """Kafka's ``canRebalance``: may this state move to PreparingRebalance?"""
    return state in VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]
