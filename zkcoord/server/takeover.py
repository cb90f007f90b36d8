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
   directories and their owners' contenders read in multiReads:
   :meth:`~zkcoord.zk.ownership.GroupOwnership.orphans`);
2. contend for those placed here (:meth:`~zkcoord.zk.ownership.GroupOwnership.contend_many`:
   contenders created in multis of 500, the elections read back in
   multiReads, the won contenders' watches set by multiReads);
3. load the won groups (:meth:`~zkcoord.server.manager.GroupManager.take_many`:
   state znodes read in multiReads, the runtimes made and loaded, their
   legacy registrations looked at in bulk), batch by batch, each batch
   served as soon as it is loaded.

Groups still held by a daemon that left (a stopping daemon unregisters
first and then releases its groups, batch by batch; a release cut short
leaves election nodes until its session closes) are looked at again every
:data:`RESCAN_S` until none is left, so each is taken as soon as it is free.

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
RESCAN_S = 0.5  # while groups of daemons that left are still held, look again this often
RESCANS = 240  # at most this many times (2 minutes): a stopping daemon's release, a session's expiry


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
        rescans = 0  # rounds left while groups of daemons that left are still held (their release under way)
        while True:
            self._wake.clear()
            try:
                live = set(await self._manager.nodes.nodes(on_change=self._wake.set))
                if takeover_due(known, live, node_id):
                    rescans = RESCANS
                if rescans:
                    leaving = await self.take_orphans(live, gone=(known or set()) - live)
                    rescans = rescans - 1 if leaving else 0
                known = live
            except ZkcoordError as exc:
                log.warning("takeover: %s; trying again in %g s", exc, RETRY_S)
                await asyncio.sleep(RETRY_S)
                continue  # ``known`` unchanged: the same change is looked at again
            if rescans:
                try:
                    async with asyncio.timeout(RESCAN_S):
                        await self._wake.wait()
                except TimeoutError:
                    pass
            else:
                await self._wake.wait()

    async def take_orphans(self, live: set[int], gone: set[int] = frozenset()) -> int:
        """Take every group nobody owns that the placement over ``live``
        names this daemon for (``gone``: the daemons that left, for the
        log). Returns how many groups are still held by daemons not live
        (their release or their session's end is under way: look again soon)."""
        manager, ownership = self._manager, self._manager.ownership
        started, cpu = time.monotonic(), time.process_time()
        orphans = await ownership.orphans(live)
        mine = [g for g in groups_to_take(orphans.unowned, live, manager.node_id) if manager.takeable(g)]
        listed = time.monotonic()
        if not mine:
            log.info("takeover (node(s) %s gone): none of the %d groups nobody owns is placed here; %d held by "
                     "daemons not live", _names(gone), len(orphans.unowned), orphans.leaving)
            return orphans.leaving
        loaded, others = await manager.take_many(mine)
        failed = [g for g, answer in others.items() if isinstance(answer, BaseException)]
        log.info("took over %d groups (node(s) %s gone) in %.0f ms (%.0f ms of CPU, the daemon's, serving meanwhile "
                 "included): %d of the %d groups nobody owned are placed here (listed in %.0f ms), %d served, %d lost "
                 "to another daemon, %d failed%s; %d held by daemons not live", len(loaded), _names(gone),
                 (time.monotonic() - started) * 1e3, (time.process_time() - cpu) * 1e3, len(mine),
                 len(orphans.unowned), (listed - started) * 1e3, len(loaded), len(others) - len(failed), len(failed),
                 f" (first: {others[failed[0]]})" if failed else "", orphans.leaving)
        return orphans.leaving


def _names(nodes: set[int]) -> str:
    return ", ".join(str(n) for n in sorted(nodes)) or "none"
