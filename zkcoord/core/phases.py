"""Where a group stands, in words every group type shares.

Each group type has its own states (the classic group's five, KIP-848's
consumer group's own); what the rest of the daemon needs to know of any of
them is its :class:`GroupPhase`: the metrics time a rebalance from the first
REBALANCING to the next STABLE, a held heartbeat is answered when its group
leaves STABLE, the cleanup looks only at EMPTY groups, and a DEAD group is
no longer stored. A type maps each of its states to one phase in its own
state table.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["GroupPhase"]


class GroupPhase(Enum):
    EMPTY = "empty"  # no members (offsets may remain)
    REBALANCING = "rebalancing"  # members are being given a new assignment
    STABLE = "stable"  # every member holds its assignment
    DEAD = "dead"  # deleted or unloaded: nothing is served or stored
