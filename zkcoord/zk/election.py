"""Who owns a group: reading its election, the one way everyone reads it.

A group's election is the ephemeral sequential znodes
``/coordinators/<group>/owner/<uuid>__lock__<seq>`` (:mod:`zkcoord.zk.paths`).
The daemon (:mod:`zkcoord.zk.ownership`), the migration commands and Spark
tasks (:mod:`zkcoord.zk.modes`, :mod:`zkcoord.zk.batch`) and
inspection (:mod:`zkcoord.zk.group_reads`) all read it through this module,
so a deposed owner's write is refused, and an owner is named, the same way
whichever package asks.

The rules:

1. Only names with a contender sequence take part; others are ignored.
   They are ordered by their sequence *as a number*.
2. The lowest contender owns the group. Its data is the owner's node id in
   ASCII digits (a daemon's id, or :data:`~zkcoord.zk.modes.TOOL_NODE_ID`
   for a migration command).
3. A lowest contender that has gone by the time it is read hands the
   election to the next one: the reader goes on to it.
4. A lowest contender whose data is not a node id is a
   :class:`~zkcoord.errors.StateError`, everywhere. Nobody can tell who owns
   the group, and each guess is unsafe: "nobody" would let a command write
   behind a live owner; an id no daemon has would make the group
   unavailable without saying why. The daemon answers that group's clients
   COORDINATOR_NOT_AVAILABLE, commands exit with the error, and inspection
   shows it. The message names the znode to delete.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kazoo.exceptions import NoNodeError

from zkcoord.core.legacy_values import partition_number
from zkcoord.errors import StateError
from zkcoord.zk import aio, paths

__all__ = ["ordered", "node_id_of", "lowest", "TOOL_NODE_ID"]

TOOL_NODE_ID = 2**31 - 1  # a migrate command's contender holds it (zkcoord.zk.modes); no daemon registers it


def ordered(children: Iterable[str]) -> list[str]:
    """The contenders among a group's owner directory's children, lowest first (rule 1)."""
    found = [(int(seq), name) for name in children if (seq := paths.contender_sequence(name)) is not None]
    return [name for _, name in sorted(found)]


def node_id_of(group: str, path: str, data: bytes) -> int:
    """The node id a contender znode holds; StateError if it holds anything else (rule 4)."""
    text = data.decode("ascii", errors="replace").strip()
    if partition_number(text) is None:  # the same rule: ASCII digits up to int32, as node ids are on the wire
        raise StateError(f"contender znode {path} of group {group!r} holds {data[:40]!r}, not a node id, so "
                         "nobody can tell who owns the group; delete that znode if no daemon or zkcoord "
                         "command wrote it")
    return int(text)


async def lowest(client: Any, group: str, watch: Callable | None = None,
                 children: Iterable[str] | None = None) -> tuple[int, int] | None:
    """(owner's node id, session id that holds its contender) of ``group``,
    None when nobody contends. ``watch`` goes on the owner directory's
    children (a one-shot kazoo watch); ``children``, when the caller has
    just listed them, saves the listing. StateError by rule 4."""
    if children is None:
        try:
            children = await aio.call(client.get_children_async, paths.owner_dir(group), watch)
        except NoNodeError:
            return None
    for name in ordered(children):
        path = paths.contender(group, name)
        try:
            data, stat = await aio.call(client.get_async, path)
        except NoNodeError:
            continue  # rule 3: it left while we looked, the next one owns the group
        return node_id_of(group, path, data), stat.ephemeralOwner
    return None
