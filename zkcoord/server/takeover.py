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
2. reserve them all as *loading* (:meth:`TakeoverLoading.take_many`, part
   of the group manager), then, 500 at a time, contend
   (:meth:`~zkcoord.zk.ownership_bulk.BulkOwnership.contend_many`:
   contenders created in one multi, the elections read back in multiReads,
   the won contenders' watches set in one SetWatches);
3. load the won ones: state znodes read in multiReads, the runtimes made
   and loaded, their legacy registrations and mode requests looked at and
   watched in bulk; each batch is served as soon as it is loaded, while the
   next contends (:data:`BATCHES_AT_ONCE` batches in flight).

A daemon that gave its session up (:mod:`zkcoord.core.session_loss`) and
got it back from ZooKeeper (it had not expired it) is live all along as far
as the watch can see: :meth:`Takeover.rejoined` starts its round.

Groups still held by a daemon that left (a stopping daemon unregisters
first and then releases its groups, batch by batch; a release cut short
leaves election nodes until its session closes) are looked at again every
:data:`RESCAN_S` until none is left, so each is taken as soon as it is free.
A round does not wait for the groups it reserved to be loaded before the
next looks: their loads go on in the background (:data:`BATCHES_AT_ONCE`
batches in flight across all rounds), so a group released while an
earlier round loads thousands is reserved within a rescan, not after that
load. (Before, the 2,500 groups a stopping daemon released after the first
round's listing waited the 10 s of its load, and their members, told to
come here meanwhile, contended for them one at a time.)

Meanwhile a request for one of these groups waits for its step (a
heartbeat of a group loading is answered at once, as Kafka answers it). A
request for a group nobody owns that comes between the live daemons'
change and the reservation waits for the reservation (:meth:`Takeover.settled`)
rather than contend for the group alone: in a reconnect storm thousands of
them would otherwise each take a group one at a time.

A FindCoordinator for a group in transit waits too, while rounds are due
(:meth:`Takeover.released`, at most :data:`PARK_S`): one still held by a
daemon that left, for the round that finds it free; one nobody owns that
is placed here and not reserved yet, for the next round's reservation.
Then it names the group's new owner. (Answered COORDINATOR_NOT_AVAILABLE
at once, as before, each of a stopping daemon's members asked again every
100 ms to 1 s, KIP-580's backoff, until its group was free: 10,000 members
looking up tens of thousands of times while this daemon took their groups
over, its CPU per group five times what it is after a kill -9. Parked,
each asks once, and is told to come here when its group is reserved, its
heartbeat then answered at once.) A group the last round found held by a
daemon that left is known to be in transit without a read
(:meth:`Takeover.held_by_gone`): a daemon just started would otherwise
read each group's election to learn it.

The requests a round releases together (parked lookups, requests that
waited for its reservation) are answered each after a random part of
:data:`WAKE_SPREAD_S`: a member times its next heartbeat from the last one
it sent, so members answered in one instant would heartbeat in one instant
ever after (bunches of 300-660 in 10 ms after a kill -9, bench_scale.py).

A takeover that fails (ZooKeeper trouble) is tried again a second later;
groups it did not get are still taken when their members ask, as before.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

from zkcoord.core.errors import ErrorCode
from zkcoord.core.placement import groups_to_take, takeover_due
from zkcoord.errors import ZkcoordError
from zkcoord.server.group_runtime import GroupRuntime, GroupUnavailableError
from zkcoord.tasks import Background, retrieve
from zkcoord.wire.bulk_work import TimeSlice, pause_every
from zkcoord.zk.ownership import BATCH

__all__ = ["Takeover", "TakeoverLoading"]

log = logging.getLogger(__name__)
E = ErrorCode
RETRY_S = 1.0  # a takeover that failed is tried again this much later
RESCAN_S = 0.5  # while groups of daemons that left are still held, look again this often
BATCHES_AT_ONCE = 2  # a takeover's batches in flight: one contends or reads while the other loads
RESCANS = 240  # at most this many times (2 minutes): a stopping daemon's release, a session's expiry
SETTLE_WAIT_S = 10.0  # the longest requests wait for a takeover's reservation
# The longest a FindCoordinator for a group in transit waits for a round to find it free: a stopping
# daemon releases 10,000 groups in about 1.5 s, and a round looks again RESCAN_S after the last one ended.
PARK_S = 3.0
# Requests a round releases together (parked lookups, requests waiting for its reservation) are answered
# each after a random part of this: members answered in the same instant heartbeat in the same instant ever
# after (the next heartbeat is timed from the last one sent), thousands of them in a few milliseconds.
WAKE_SPREAD_S = 1.0


class Takeover:
    """Watches the live daemons and takes the orphaned groups placed here."""

    def __init__(self, manager: Any) -> None:  # the GroupManager (which imports this module)
        self._manager = manager
        self._wake = asyncio.Event()
        self._pending = False  # a round is listing the groups to take here: they are not reserved yet
        self._next_round: asyncio.Future | None = None  # settled when the next round has reserved its groups
        self._task: asyncio.Task | None = None
        self._rejoined = False  # rejoined(): the next round is due whatever the live daemons did
        self._rescans = 0  # rounds left while groups of daemons that left are still held (their release under way)
        self._leaving = 0  # how many groups the last round found held by daemons not live
        self._gone_held: set[str] = set()  # those groups, while rounds are due (held_by_gone())
        self._parked: dict[str, list[asyncio.Future]] = {}  # group in transit -> its lookups waiting (released())
        self._next_listing: asyncio.Future | None = None  # settled when the next round has reserved (released())
        self._slots: asyncio.Semaphore | None = None  # the batches in flight, across the rounds' loads
        self._background = Background(log, "takeover")

    def start(self) -> None:
        if self._task is None:
            self._task = self._background.spawn(self._watch(), "take over the groups of daemons that left")

    def stop(self) -> None:
        self._background.cancel_all()  # the watch, and the rounds' loads under way
        self._task = None
        self._rescans = 0
        self._round_reserved(pending=False)
        self._unpark_all()

    @property
    def pending(self) -> bool:
        """A takeover round here is listing the groups it will take (:meth:`settled`)."""
        return self._pending

    async def settled(self) -> None:
        """While a round of a takeover here is listing the groups it will
        take (a daemon just left, or groups of daemons that left are still
        held), wait for its reservation: a request for a group nobody owns
        must not contend for it alone just before the takeover reserves it,
        nor a lookup read ZooKeeper for it (zkcoord.server.manager waits
        here). At most :data:`SETTLE_WAIT_S`."""
        if not self._pending:
            return
        if self._next_round is None:
            loop = asyncio.get_running_loop()
            self._next_round = future = loop.create_future()
            loop.call_later(SETTLE_WAIT_S, lambda: future.done() or future.set_result(None))  # one timer for all
        await asyncio.shield(self._next_round)
        await _spread()

    @property
    def expecting(self) -> bool:
        """A round here is under way or due: a daemon just left, or groups of
        daemons that left are still held and are looked at again soon."""
        return self._task is not None and (self._pending or self._rescans > 0)

    async def released(self, held: list[str], free_here: list[str] = (), timeout_s: float = PARK_S) -> None:
        """While rounds are due (:attr:`expecting`), wait at most
        ``timeout_s`` in all for a round that finds each of ``held`` free
        (nobody owns it: reserved here if placed here, or left to the daemon
        placement names), and for the next round's reservation if there are
        ``free_here`` (groups nobody owns, placed here, not reserved: the
        next round reserves those it lists; one it does not, a group with
        no election directory yet, is new and is not waited for again).
        A FindCoordinator for a group still held by a daemon that left, or
        released but not reserved yet, names its new owner then rather than
        COORDINATOR_NOT_AVAILABLE or this daemon now (module docstring).
        Returns at once when no round is due."""
        if not self.expecting or not (held or free_here):
            return
        loop = asyncio.get_running_loop()
        waiting = []
        for i, group_id in enumerate(held):
            await pause_every(i)
            future = loop.create_future()
            self._parked.setdefault(group_id, []).append(future)
            waiting.append((group_id, future))
        if free_here:
            if self._next_listing is None:
                self._next_listing = loop.create_future()
            waiting.append((None, self._next_listing))
        try:
            done, _ = await asyncio.wait([f for _, f in waiting], timeout=timeout_s)
            if done:  # released by a round, with others: spread (a wait that ran out was released by nobody)
                await _spread()
        finally:  # (cut short by a cancellation, what is left is dropped when its group is free, or at stop)
            for i, (group_id, future) in enumerate(waiting):
                await pause_every(i)
                parked = self._parked.get(group_id)
                if parked is not None and future in parked:
                    parked.remove(future)
                    if not parked:
                        del self._parked[group_id]

    def _unpark(self, group_ids) -> None:
        """Wake the lookups parked on ``group_ids`` (:meth:`released`)."""
        for group_id in group_ids:
            for future in self._parked.pop(group_id, ()):
                if not future.done():
                    future.set_result(None)

    def _unpark_all(self) -> None:
        self._gone_held = set()
        self._unpark(list(self._parked))
        self._listed()

    def held_by_gone(self, group_id: str) -> bool:
        """Did the last round find ``group_id`` held by a daemon that left
        (while rounds are due)? A lookup for it then waits for the round
        that finds it free (:meth:`released`) without reading who owns it
        first: thousands of members look their groups up while a stopping
        daemon releases them, and this daemon (just started, maybe) would
        read each group's election three times to learn what the round
        already knows."""
        return group_id in self._gone_held and self.expecting

    async def _still_held(self, groups: list[str]) -> None:
        """A round found ``groups`` held by daemons that left: remember them
        for :meth:`held_by_gone`, and wake the lookups parked on any other
        group (free, or owned by a live daemon now: their answer is known)."""
        self._leaving, self._gone_held = len(groups), set(groups)
        for i, group_id in enumerate(list(self._parked)):
            await pause_every(i)
            if group_id not in self._gone_held:
                self._unpark([group_id])

    def _listed(self) -> None:
        """A round has reserved what it listed: the lookups waiting for that wake."""
        listing, self._next_listing = self._next_listing, None
        if listing is not None and not listing.done():
            listing.set_result(None)

    async def _unpark_free(self, unowned: list[str]) -> None:
        """Wake the lookups parked on the groups a round found free, and
        those waiting for its reservation; the list is walked a slice at a
        time (it may name every group)."""
        self._listed()
        if not self._parked:
            return
        if len(unowned) <= len(self._parked):
            for i, group_id in enumerate(unowned):
                await pause_every(i)
                if group_id in self._parked:
                    self._unpark([group_id])
        else:
            free = set(unowned)
            for i, group_id in enumerate(list(self._parked)):
                await pause_every(i)
                if group_id in free:
                    self._unpark([group_id])

    def _round_reserved(self, pending: bool) -> None:
        self._pending = pending
        waiting, self._next_round = self._next_round, None
        if waiting is not None and not waiting.done():
            waiting.set_result(None)

    def _changed(self) -> None:  # the live daemons' watch, on the loop
        self._pending = True
        self._wake.set()

    def rejoined(self) -> None:
        """This daemon's session, given up, is back (its registration never
        went, so the watch saw nothing): take over as after an expiry."""
        self._rejoined = True
        self._changed()

    async def _watch(self) -> None:
        node_id = self._manager.node_id
        known: set[int] | None = None
        while True:
            self._wake.clear()
            try:
                live = set(await self._manager.nodes.nodes(on_change=self._changed))
                if takeover_due(known, live, node_id) or (self._rejoined and node_id in live):
                    self._rescans = RESCANS
                self._rejoined = False
                if self._rescans:
                    leaving = await self.take_orphans(live, gone=(known or set()) - live, wait=False)
                    self._rescans = self._rescans - 1 if leaving else 0
                known = live
            except ZkcoordError as exc:
                log.warning("takeover: %s; trying again in %g s", exc, RETRY_S)
                self._round_reserved(pending=False)  # requests take their groups alone meanwhile
                await asyncio.sleep(RETRY_S)
                continue  # ``known`` unchanged: the same change is looked at again
            self._round_reserved(pending=self._wake.is_set())  # a change came meanwhile: its round is next
            if not self.expecting:
                self._unpark_all()  # no round is due: the parked lookups answer what is
            if self._rescans:
                try:
                    async with asyncio.timeout(RESCAN_S):
                        await self._wake.wait()
                except TimeoutError:
                    pass
            else:
                await self._wake.wait()

    async def take_orphans(self, live: set[int], gone: set[int] = frozenset(), wait: bool = True) -> int:
        """Take every group nobody owns that the placement over ``live``
        names this daemon for (``gone``: the daemons that left, for the
        log). Returns how many groups are still held by daemons not live
        (their release or their session's end is under way: look again soon).
        ``wait`` False: return once the groups are reserved, their loads
        going on in the background (the watch's rounds: module docstring)."""
        manager, ownership = self._manager, self._manager.ownership
        started, cpu = time.monotonic(), time.process_time()
        self._pending = True  # requests for groups nobody owns wait for this round's reservation
        orphans = await ownership.orphans()
        mine = [g for g in groups_to_take(orphans.unowned, live, manager.node_id) if manager.takeable(g)]
        reserved = manager.reserve_many(mine)
        self._round_reserved(pending=False)  # requests for these now wait for their load; the others go on
        await self._unpark_free(orphans.unowned)  # their lookups: this daemon (reserved) or the one placement names
        listed = time.monotonic()
        if reserved and not wait:  # loaded in the background, whatever the rest of this round meets
            self._background.spawn(self._load(reserved, len(orphans.unowned), gone, started, cpu, listed),
                                   f"load the {len(reserved)} groups a takeover reserved")
        taken = await self._manager.take_reserved(reserved) if reserved and wait else None
        await self._still_held(await ownership.leaving(orphans, live) if orphans.held else [])
        if taken is not None:
            self._log_round(reserved, taken, len(orphans.unowned), gone, started, cpu, listed)
        elif not reserved:
            log.info("takeover (node(s) %s gone): none of the %d groups nobody owns is placed here; %d held by "
                     "daemons not live", _names(gone), len(orphans.unowned), self._leaving)
        return self._leaving

    async def _load(self, reserved: dict, unowned: int, gone: set[int], started: float, cpu: float,
                    listed: float) -> None:
        """A round's groups contended for and loaded in the background
        (``take_orphans(wait=False)``), and its log line. A failure of
        ZooKeeper is logged; the groups not taken are looked at again a
        second later."""
        try:
            taken = await self._manager.take_reserved(reserved)
        except ZkcoordError as exc:
            log.warning("takeover: %s; the groups not taken are looked at again in %g s", exc, RETRY_S)
            self._rescans = max(self._rescans, 1)
            asyncio.get_running_loop().call_later(RETRY_S, self._wake.set)
            return
        self._log_round(reserved, taken, unowned, gone, started, cpu, listed)

    def _log_round(self, reserved: dict, taken: tuple[list[str], dict], unowned: int, gone: set[int],
                   started: float, cpu: float, listed: float) -> None:
        loaded, others = taken
        failed = [g for g, answer in others.items() if isinstance(answer, BaseException)]
        log.info("took over %d groups (node(s) %s gone) in %.0f ms (%.0f ms of CPU, the daemon's, serving meanwhile "
                 "included): %d of the %d groups nobody owned are placed here (listed in %.0f ms, all loaded after "
                 "%.0f ms), %d served, %d lost to another daemon, %d failed%s; %d held by daemons not live",
                 len(loaded), _names(gone), (time.monotonic() - started) * 1e3, (time.process_time() - cpu) * 1e3,
                 len(reserved), unowned, (listed - started) * 1e3, (time.monotonic() - started) * 1e3, len(loaded),
                 len(others) - len(failed), len(failed), f" (first: {others[failed[0]]})" if failed else "",
                 self._leaving)

    def batch_slots(self) -> asyncio.Semaphore:
        """The :data:`BATCHES_AT_ONCE` slots every round's batches share:
        rounds loading at once do not multiply the batches in flight."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(BATCHES_AT_ONCE)
        return self._slots


async def _spread() -> None:
    """Wait a random part of :data:`WAKE_SPREAD_S` (see there)."""
    await asyncio.sleep(random.uniform(0, WAKE_SPREAD_S))


def _names(nodes: set[int]) -> str:
    return ", ".join(str(n) for n in sorted(nodes)) or "none"


class TakeoverLoading:
    """The group manager's part of a takeover: many groups reserved,
    contended for and loaded at once (module docstring, steps 2 and 3).
    Mixed into :class:`~zkcoord.server.manager.GroupManager`: it works on
    the manager's state (``_loading``, ``_taking``, ``runtimes``,
    ``_stopping``) and with its one-group steps (``_prepare``, ``_serve``)."""

    async def _taken_here(self, group_ids: list[str], eligible) -> set[str]:
        """Those of ``group_ids`` a takeover here is taking, when clients may be sent here."""
        taking = {g for g in group_ids if g in self._taking}
        if not taking:
            return taking
        try:
            info = await self.nodes.node(self.node_id)
        except ZkcoordError:
            return set()
        return taking if info is not None and (eligible is None or eligible(info)) else set()

    def takeable(self, group_id: str) -> bool:
        """May a takeover take this group: not served, loading or contended here, and not stopping?"""
        return not (self._stopping or group_id in self.runtimes or group_id in self._loading
                    or self.ownership.is_owned(group_id) or self.ownership.is_contending(group_id))

    async def take_many(self, group_ids: list[str]) -> tuple[list[str], dict]:
        """:meth:`reserve_many`, then :meth:`take_reserved`."""
        return await self.take_reserved(self.reserve_many(group_ids))

    def reserve_many(self, group_ids: list[str]) -> dict[str, asyncio.Future]:
        """Mark the groups a takeover is to take (those :meth:`takeable`) as
        *loading*, at once: a request for one from now on gets what a loading
        group answers (Heartbeat NONE, COORDINATOR_LOAD_IN_PROGRESS) or
        waits for its load, instead of contending for it or loading it on
        its own. {group: the future its load settles}."""
        loop = asyncio.get_running_loop()
        futures = {}
        for group_id in group_ids:
            if self.takeable(group_id):
                futures[group_id] = future = loop.create_future()
                future.add_done_callback(retrieve)
                future.add_done_callback(lambda _f, g=group_id: self._taking.discard(g))
                self._loading[group_id] = future
                self._taking.add(group_id)
        return futures

    async def take_reserved(self, futures: dict[str, asyncio.Future]) -> tuple[list[str], dict]:
        """Contend for and load the groups :meth:`reserve_many` reserved,
        batch by batch (:meth:`~zkcoord.zk.ownership_bulk.BulkOwnership.contend_many`,
        then the won ones' states read in multiReads, their legacy
        registrations and mode requests looked at in bulk). Returns (the ids
        now served here, {id: the winner's node id or the error} of the others)."""
        served, others = [], {}
        slots = self.takeover.batch_slots()  # shared by the rounds loading at once

        async def take(batch: list[str]) -> None:
            async with slots:
                answers = await self.ownership.contend_many(batch)
                won = []
                for group_id in batch:
                    answer = answers.get(group_id)
                    if answer == self.node_id:
                        won.append(group_id)
                        continue
                    others[group_id] = answer
                    code = E.NOT_COORDINATOR if isinstance(answer, int) else E.COORDINATOR_NOT_AVAILABLE
                    futures[group_id].set_exception(GroupUnavailableError(group_id, code, f"not taken: {answer}"))
                served.extend(await self._load_slice(won, futures))

        try:
            chosen = list(futures)
            async with asyncio.TaskGroup() as batches:  # one batch's ZooKeeper round trips overlap another's loading
                for start in range(0, len(chosen), BATCH):
                    batches.create_task(take(chosen[start:start + BATCH]))
        finally:
            for group_id, future in futures.items():
                if self._loading.get(group_id) is future:
                    del self._loading[group_id]
                if not future.done():
                    future.set_exception(GroupUnavailableError(group_id, E.COORDINATOR_LOAD_IN_PROGRESS,
                                                               "its load was interrupted"))
        return served, others

    async def _load_slice(self, chunk: list[str], futures: dict) -> list[str]:
        """Load the groups of ``chunk`` (won here), their states read
        together; serve each as soon as all of them are loaded. The ids served."""
        try:
            reads = await self.store.load_many(chunk)
        except ZkcoordError as exc:
            reads = dict.fromkeys(chunk, exc)
        prepared = {}
        slice_ = TimeSlice()  # a third of a millisecond a group: requests wait at most a slice, not a batch
        for group_id in chunk:
            await slice_.pause()
            try:
                prepared[group_id] = await self._prepare(group_id, reads[group_id], quiet=True)
            except GroupUnavailableError as exc:
                futures[group_id].set_exception(exc)
        if self.handovers is not None and prepared:
            try:
                await self.handovers.loaded_many(list(prepared.values()))
            except ZkcoordError as exc:
                for group_id, runtime in prepared.items():
                    await runtime.unload(f"not loaded: {exc}")
                    futures[group_id].set_exception(
                        GroupUnavailableError(group_id, E.COORDINATOR_LOAD_IN_PROGRESS, str(exc)))
                return []
        served = []
        for group_id, runtime in prepared.items():  # no yield: each is served, then its offsets' part, together
            if runtime.active and self.ownership.is_owned(group_id) and not self._stopping:
                self._serve(group_id, runtime, offsets=False)
                futures[group_id].set_result(runtime)
                served.append(runtime)
            else:
                await runtime.unload("lost while loading")
                futures[group_id].set_exception(GroupUnavailableError(group_id, E.NOT_COORDINATOR, "lost meanwhile"))
        await self.group_offsets.loaded_many(served)
        if served and self.topic_watcher is not None:
            self._background.spawn(self._track_many(served), f"watch the topics of {len(served)} groups")
        return [r.group_id for r in served]

    async def _track_many(self, runtimes: list[GroupRuntime]) -> None:
        """:meth:`_track_topics` of a takeover's groups, in one task, after they are served."""
        from zkcoord.server.subscriptions import subscribed_topics

        for i, runtime in enumerate(runtimes):
            await pause_every(i)
            if runtime.active:
                await self.topic_watcher.track(runtime.group_id, subscribed_topics(runtime.group))

