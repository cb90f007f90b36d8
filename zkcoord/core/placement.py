"""Which live daemon a group nobody owns is sent to: rendezvous hashing.

FindCoordinator for a group without an elected owner does not contend (an
election leaves znodes behind, and a lookup must not grow ZooKeeper): it
names :func:`choose_node` of the live daemons, and that daemon contends when
the group's first JoinGroup, OffsetCommit, ... arrives
(:mod:`zkcoord.server.manager`). The choice is only a hint: any daemon that
gets a request for a group nobody owns contends, the election decides, and a
client sent to a daemon that loses gets NOT_COORDINATOR and looks up again,
as with Kafka. Rendezvous (highest random weight) hashing makes every daemon
that sees the same live set name the same daemon, and a daemon joining or
leaving moves only the groups it wins or held.

When a daemon leaves the live set (its ZooKeeper session ended: killed,
partitioned, stopped), each daemon still alive takes over, at once, the
groups nobody owns that the placement over the new live set names it for
(:func:`groups_to_take`, :func:`takeover_due`; carried out by
:mod:`zkcoord.server.takeover`): every group of the one that left finds
exactly one new owner without any client asking, and no two survivors
contend for the same group.

Pure: the weights are SHA-256 digests, the same in every process (Python's
``hash`` of a str is salted per process).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = ["choose_node", "groups_to_take", "takeover_due"]


def _weight(group_id: str, node_id: int) -> bytes:
    key = f"{node_id}\x00{group_id}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(key).digest()


def choose_node(group_id: str, node_ids: Iterable[int]) -> int | None:
    """The node id of ``node_ids`` with the highest weight for ``group_id``;
    None when there is none. Ties (equal digests) go to the lower id.

    >>> choose_node("payments", [1, 2, 3]) == choose_node("payments", [3, 2, 1])
    True
    >>> choose_node("payments", [])
    """
    best: tuple[bytes, int] | None = None
    for node_id in node_ids:
        candidate = (_weight(group_id, node_id), -node_id)
        if best is None or candidate > best:
            best = candidate
    return None if best is None else -best[1]


def groups_to_take(unowned: Iterable[str], live: Iterable[int], node_id: int) -> list[str]:
    """Of the groups nobody owns, those ``node_id`` takes over: the ones
    :func:`choose_node` names it for among the ``live`` daemons (none when it
    is not live itself), in the order given.

    >>> groups_to_take(["a", "b", "c"], [1], 1)
    ['a', 'b', 'c']
    >>> groups_to_take(["a", "b", "c"], [2], 1)
    []
    """
    live = sorted(set(live))
    if node_id not in live:
        return []
    return [group for group in unowned if choose_node(group, live) == node_id]


def takeover_due(before: Iterable[int] | None, after: Iterable[int], node_id: int) -> bool:
    """Whether the live daemons going from ``before`` (None: not seen yet,
    this daemon is starting) to ``after`` calls for a takeover by
    ``node_id``: a daemon left (its groups have no owner now), or ``node_id``
    itself is live again after its session ended (its groups that nobody
    took have no owner either). A daemon starting, or only joining ones, do not.

    >>> takeover_due({1, 2}, {1}, 1), takeover_due({1}, {1, 2}, 1), takeover_due(None, {1, 2}, 1)
    (True, False, False)
    >>> takeover_due({2}, {1, 2}, 1)
    True
    """
    if before is None:
        return False
    before, after = set(before), set(after)
    return node_id in after and (bool(before - after) or node_id not in before)
