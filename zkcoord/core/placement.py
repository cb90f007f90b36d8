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

Pure: the weights are SHA-256 digests, the same in every process (Python's
``hash`` of a str is salted per process).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = ["choose_node"]


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
