"""The classic group's states and the table of their transitions.

Owns :class:`GroupState` (Kafka's ``GroupState``: each state says in its
``action`` how it answers requests and how it is left) and
``VALID_PREVIOUS``, the transition table (Kafka's ``validPreviousStates``):
a state change is legal only if the current state is in
``VALID_PREVIOUS[target]``. :func:`check_transition` enforces it; every
transition of :mod:`zkcoord.core.rebalance` goes through it.
"""

from __future__ import annotations

from enum import Enum

from zkcoord.core.frozenmap import FrozenMap
from zkcoord.errors import StateError

__all__ = ["GroupState", "VALID_PREVIOUS", "check_transition", "can_rebalance"]


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
