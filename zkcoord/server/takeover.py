"""Eager takeover: the groups of a daemon whose session ended, taken at once and in bulk.

This module owns the daemon's watch on the live daemons (``/zkcoord/nodes``)
for one purpose: when a daemon leaves the live set (killed, partitioned,
stopped: its ZooKeeper session ended, so its registration and every
contender of its groups went in one step), or this daemon is live again
after its own session ended, every group nobody owns that the placement
over the live daemons names this daemon for is taken over now, not when one
of its members asks (:func:`~zkcoord.core.placement.takeover_due`,
:func:`~zkcoord.core.placement.groups_to_take`). Each live daemon does the
same with the same view, so each orphaned group finds one new owner.

A takeover, in bulk at every step:

1. list the groups nobody owns (``/coordinators`` listed once, the owner
   directories read in multiReads: :meth:`~zkcoord.zk.ownership.GroupOwnership.unowned_groups`);
2. contend for those placed here (:meth:`~zkcoord.zk.ownership.GroupOwnership.contend_many`:
   contenders created in multis of 500, the elections read back in
   multiReads, the won contenders' watches set by multiReads);
3. load the won groups (:meth:`~zkcoord.server.manager.GroupManager.load_many`:
   state znodes read in multiReads, the runtimes made and loaded, their
   legacy registrations looked at in bulk).

Meanwhile a request for one of these groups waits for its step (a
heartbeat of a group loading is answered at once, as Kafka answers it).
A takeover that fails (ZooKeeper trouble) is tried again a second later;
groups it did not get are still taken when their members ask, as before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from zkcoord.core.placement import groups_to_take, takeover_due
from zkcoord.errors import ZkcoordError
from zkcoord.tasks import Background

if TYPE_CHECKING:
    from zkcoord.server.manager import GroupManager

__all__ = ["Takeover"]

log = logging.getLogger(__name__)
RETRY_S = 1.0  # a takeover that failed is tried again this much later


class Takeover:
    """Watches the live daemons and takes the orphaned groups placed here."""

    def __init__(self, manager: GroupManager) -> None:
        self._manager = manager
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._background = Background(log, "takeover")

    def start(self) -> None:
        if self._task is None:
            self._task = self._background.spawn(self._watch(), "take over the groups of daemons that left")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _watch(self) -> None:
        node_id = self._manager.node_id
        known: set[int] | None = None
        while True:
            self._wake.clear()
            try:
                live = set(await self._manager.nodes.nodes(on_change=self._wake.set))
                if takeover_due(known, live, node_id):
                    await self.take_orphans(live, gone=(known or set()) - live)
                known = live
            except ZkcoordError as exc:
                log.warning("takeover: %s; trying again in %g s", exc, RETRY_S)
                await asyncio.sleep(RETRY_S)
                continue  # ``known`` unchanged: the same change is looked at again
            await self._wake.wait()

    async def take_orphans(self, live: set[int], gone: set[int] = frozenset()) -> list[str]:
        """Take every group nobody owns that the placement over ``live``
        names this daemon for (``gone``: the daemons that left, for the log);
        the ids now served here."""
        manager, ownership = self._manager, self._manager.ownership
        started = time.monotonic()
        unowned = await ownership.unowned_groups()
        mine = [g for g in groups_to_take(unowned, live, manager.node_id) if manager.takeable(g)]
        listed = time.monotonic()
        if not mine:
            log.info("takeover (node(s) %s gone): none of the %d groups nobody owns is placed here",
                     _names(gone), len(unowned))
            return []
        answers = await ownership.contend_many(mine)
        won = [g for g in mine if answers.get(g) == manager.node_id]
        contended = time.monotonic()
        loaded = await manager.load_many(won)
        failed = [g for g in mine if isinstance(answers.get(g), BaseException)]
        log.info("took over %d groups (node(s) %s gone) in %.0f ms: %d of %d groups nobody owned are placed here "
                 "(listed in %.0f ms), %d won (contended in %.0f ms), %d loaded (%.0f ms), %d lost to another "
                 "daemon, %d failed%s", len(loaded), _names(gone), (time.monotonic() - started) * 1e3, len(mine),
                 len(unowned), (listed - started) * 1e3, len(won), (contended - listed) * 1e3, len(loaded),
                 (time.monotonic() - contended) * 1e3, len(mine) - len(won) - len(failed), len(failed),
                 f" (first: {answers[failed[0]]})" if failed else "")
        return loaded


def _names(nodes: set[int]) -> str:
    return ", ".join(str(n) for n in sorted(nodes)) or "none"
