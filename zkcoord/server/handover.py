"""The owner daemon's side of a live handover (issue 26, ``docs/handover.md``).

A consumer group this daemon owns (classic, or KIP-848's) is *in handover*
while legacy ZooKeeper consumers (Kafka 0.8.1-1.1) are registered under
``/consumers/<group>/ids``. Then one :class:`HandoverDriver` per group takes
part in the legacy consumers' rebalance on behalf of the group's members,
and :class:`Handovers` (one per daemon) notices such groups and ends their
drivers.

The driver's loop, one step at a time, never concurrently with itself:

1. read the legacy rebalance znodes (:class:`~zkcoord.zk.handover.LegacyRebalanceZk`),
   arming watches that wake it;
2. build the core's view: each member stands for a legacy consumer id
   (kept for as long as the member id lives), subscribing with one stream
   to each topic its JoinGroup names; a partition whose owner znode we hold
   for a member is ``quiesced`` once the group says the member no longer
   consumes it (``consuming``; the functions of the group's kind:
   :mod:`~zkcoord.core.handover.classic_group` or
   :mod:`~zkcoord.core.handover.consumer_group`, :func:`_side`);
3. :func:`~zkcoord.core.handover.decision.plan`, then its ZooKeeper steps
   (register, release, claim; ``carry_out``);
4. hand the plan's assignment to the group as its shares
   (``handle_shares``): a member gets exactly what we hold for it, a
   partition to give up or a newly held one makes a classic group rebalance
   and is a KIP-848 group's new target;
5. wait for a watch, a change of the group (membership, state, a rejoin), or
   the retry back-off, and go again.

A claim that finds the znode taken waits for its release (the owner
watches wake the loop at once) and otherwise retries as the legacy
consumers do (:class:`~zkcoord.core.handover.retries.Attempts`). When no
legacy consumer is registered any more, the driver unregisters the members,
releases what it holds and clears the shares: the group goes on under
zkcoord alone, each member keeping what it consumes.

When it starts on a group that was not in handover, the driver clears
every member's share at once (the group rebalances if it was Stable): nothing
is handed out until this daemon holds the znodes. A group whose record lists
handover ids (its previous owner was killed) keeps each member's share until
the first plan: the members' znodes are persistent and this daemon's now.
Registrations and owner znodes are written fenced (``fence_of``) and
persistent. Legacy consumers that gave up retrying (a partition of theirs
held too long) are nudged: one of the members is registered again, which
starts their rebalance (``needs_nudge``).

Not yet here (``docs/handover.md``, "What is left"): members asking for more
than one stream.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from zkcoord.core.groups import kind_of
from zkcoord.core.handover import classic_group, consumer_group
from zkcoord.core.handover.classic_group import CONSUMER_PROTOCOL_TYPE
from zkcoord.core.handover.decision import Member, plan
from zkcoord.core.handover.registration import is_zkcoord_consumer_id, split_thread_id, zkcoord_consumer_id
from zkcoord.core.handover.retries import Attempts, RetrySchedule, needs_nudge
from zkcoord.errors import NotOwnerError, ZkcoordError
from zkcoord.server.group_runtime import GroupRuntime
from zkcoord.tasks import Background
from zkcoord.zk.handover import LegacyRebalanceZk
from zkcoord.zk.ownership import Fence

__all__ = ["HandoverDriver", "Handovers", "legacy_ids"]

log = logging.getLogger(__name__)
SETTLED_RECHECK_S = 30.0  # a settled handover reads again this often even if no watch fired


def legacy_ids(consumer_ids) -> list[str]:
    """The registrations of legacy consumers (not zkcoord members of any daemon)."""
    return [cid for cid in consumer_ids if not is_zkcoord_consumer_id(cid)]


def _side(group: Any):
    """The handover functions of the group's kind (:func:`~zkcoord.core.groups.kind_of`):
    :mod:`~zkcoord.core.handover.consumer_group` for KIP-848's, else the classic group's."""
    return consumer_group if kind_of(group).name == "consumer" else classic_group


def _still_owned_after_rejoin(holder: str, members: dict[str, Member], rejoined) -> bool:
    """Whether a partition we wait for is held for one of our members that has
    rejoined this rebalance still owning it (a cooperative consumer): it gives
    it up only after the SyncGroup, so holding the join phase for it would
    only wait out the hold."""
    split = split_thread_id(holder)
    member = members.get(split[0]) if split is not None else None
    return member is not None and member.member_id in rejoined


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class HandoverDriver:
    """The handover loop of one group (module docstring)."""

    def __init__(self, runtime: GroupRuntime, zk: LegacyRebalanceZk, schedule: RetrySchedule,
                 fence_of: Callable[[str], Fence], on_end: Callable[[str], None],
                 kept: Callable[[], bool] = lambda: False, wall_ms: Callable[[], int] = _wall_ms) -> None:
        self.runtime = runtime
        self.group_id = runtime.group_id
        self._zk = zk
        self._schedule = schedule
        self._fence_of = fence_of
        self._on_end = on_end
        self._kept = kept
        self._wall_ms = wall_ms
        self._wake = asyncio.Event()
        self._attempts: Attempts | None = None
        self._hold_since: int | None = None  # when the join phase began waiting for the current target
        self._hold_target: frozenset = frozenset()
        self._unowned_since: int | None = None  # since when legacy ranges have had untaken partitions
        self._task: asyncio.Task | None = None
        self._last_problem: str | None = None
        self.last_plan = None  # for inspection and tests

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"handover of {self.group_id}")
        self.runtime.observers.append(self._group_changed)

    async def stop(self) -> None:
        if self._group_changed in self.runtime.observers:
            self.runtime.observers.remove(self._group_changed)
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def poke(self) -> None:
        self._wake.set()

    async def clear_shares(self) -> None:
        """Every member's share empty (the group rebalances if Stable)."""
        await self._set_shares({})

    def _group_changed(self, _group: Any) -> None:
        self._wake.set()

    # -- the loop ------------------------------------------------------------------
    async def _run(self) -> None:
        group = self.runtime.group
        if group.handover_ids is None:
            log.info("group %s: legacy ZooKeeper consumers share it; handover started", self.group_id)
            await self._set_shares({})  # nobody consumes what this daemon does not hold yet
        else:  # carried on from the record: the members keep what they were given, until the first plan
            log.info("group %s: carrying on its handover (%d legacy consumer ids of zkcoord members recorded)",
                     self.group_id, len(group.handover_ids))
            config = self.runtime.config
            await self._set_shares({mid: _side(group).assigned(m, config) or frozenset()
                                    for mid, m in group.members.items()})
        while self.runtime.active:
            self._wake.clear()
            try:
                timeout = await self._step()
            except NotOwnerError:
                return  # the runtime steps down too; the next owner carries on
            except ZkcoordError as exc:
                if str(exc) != self._last_problem:
                    log.warning("group %s: handover step failed, trying again: %s", self.group_id, exc)
                self._last_problem = str(exc)
                timeout = self._schedule.backoff_ms / 1000
            else:
                self._last_problem = None
            if timeout is None:  # the handover is over
                self._on_end(self.group_id)
                return
            if timeout == 0:
                continue
            try:
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def _step(self) -> float | None:
        """One read, plan and action; the seconds to wait for a wake-up
        before the next (0: at once; None: the handover is over)."""
        if await self._record_new_members():
            return 0
        ids = dict(self.runtime.group.handover_ids or {})
        reading = await self._zk.read(self.group_id, on_change=self.poke, recorded=set(ids.values()))
        group = self.runtime.group
        if not legacy_ids(reading.registrations) and not reading.problems and not self._kept():
            await self._end(reading)
            return None
        members = self._members(group, ids)
        quiesced = self._quiesced(group, reading, members)
        decided = plan(reading.view(members, quiesced))
        self.last_plan = decided
        shares = {members[cid].member_id: decided.assignment.get(cid, frozenset()) for cid in members}
        hold = self._hold(decided, members)
        if hold and not getattr(group, "handover_hold", hold):  # (a KIP-848 group has no join phase to hold)
            await self._set_shares(shares, hold)  # before the claims: the rebalance waits for them
        now = self._wall_ms()
        if decided.unregister or decided.register or decided.release or decided.claim:
            done = await self._zk.carry_out(self.group_id, decided, members, now, self._fence_of(self.group_id))
            if done.taken:
                attempts = self._attempts or Attempts.start(self._schedule, now)
                self._attempts = attempts.failed(now)
            else:
                self._attempts = None
            if decided.unregister or decided.register or done.released or done.claimed:
                return 0  # read what we did before handing anything out
        if await self._forget_departed(reading, ids):
            return 0
        await self._set_shares(shares, hold)
        if await self._nudge(decided, members, now):
            return 0
        if decided.unowned:
            return self._schedule.backoff_ms / 1000  # to see whether the legacy consumers take them
        if decided.settled:
            return SETTLED_RECHECK_S
        if self._attempts is not None and self._attempts.gave_up:
            return SETTLED_RECHECK_S  # as a legacy consumer that gave up: until something changes
        return self._schedule.backoff_ms / 1000

    async def _nudge(self, decided, members: dict[str, Member], now: int) -> bool:
        """Partitions of legacy consumers' ranges nobody has taken for two
        back-offs: they gave up retrying (we held a partition of theirs too
        long) and wait for the next change of ``ids``. Make one: register one
        of our members again (delete, then create). Whether it did."""
        if not decided.unowned or not members:
            self._unowned_since = None
            return False
        if self._unowned_since is None:
            self._unowned_since = now
        if not needs_nudge(self._unowned_since, now, self._schedule):
            return False
        cid = min(members)
        fence = self._fence_of(self.group_id)
        await self._zk.unregister(self.group_id, cid, fence)
        await self._zk.register(self.group_id, cid, members[cid].topics, now, fence)
        log.info("group %s: %d partition(s) of legacy consumers' ranges untaken for %d ms (they gave up retrying); "
                 "registered %s again to start their rebalance", self.group_id, len(decided.unowned),
                 now - self._unowned_since, cid)
        self._unowned_since = None
        return True

    async def _record_new_members(self) -> bool:
        """Give every member that has none a legacy consumer id, recorded in the
        group's state before anything is written for it; whether ids were added."""
        group = self.runtime.group
        ids = dict(group.handover_ids or {})
        new = [mid for mid in group.members if mid not in ids]
        if not new and group.handover_ids is not None:
            return False
        for mid in new:
            ids[mid] = zkcoord_consumer_id(self.group_id, self._wall_ms(), os.urandom(4).hex())
        if group.handover_ids is None:
            await self._zk.mark(self.group_id)  # before any znode a daemon would have to adopt exists
        await self.runtime.apply(lambda g, now: _side(g).handle_ids(g, ids, now, self.runtime.config))
        return bool(new)

    async def _forget_departed(self, reading, ids: dict[str, str]) -> bool:
        """Drop the recorded ids of members gone whose registration and owner
        znodes are gone too; whether any was dropped."""
        group = self.runtime.group
        holding = {split[0] for o in reading.owners.values() if o.ours
                   for split in [split_thread_id(o.holder)] if split is not None}
        keep = {mid: cid for mid, cid in ids.items()
                if mid in group.members or cid in reading.ours or cid in holding}
        if keep == ids:
            return False
        await self.runtime.apply(lambda g, now: _side(g).handle_ids(
            g, {mid: cid for mid, cid in (g.handover_ids or {}).items() if mid in keep or mid not in ids},
            now, self.runtime.config))
        return True

    def _hold(self, decided, members: dict[str, Member]) -> bool:
        """Whether the group's join phase should wait for partitions about to be
        held for its members (see ``handle_shares``): while their ranges are
        not all held, at most ``2 x rebalance.backoff.ms`` per target (a
        legacy consumer releases within its rebalance, or after one back-off),
        so a holder that does not release (a killed one, until its session
        expires) costs one bounded wait, not a rebalance after every wait.
        A partition held for a member of ours that rejoined still owning it
        does not count: it is released only after this rebalance."""
        threads = {t for m in members.values() for t in m.threads()}
        target = frozenset((tp, t) for tp, t in decided.target.items() if t in threads)
        rejoined = getattr(self.runtime.group, "awaiting_join", {})
        wanted = {c.holder for c in decided.claim} | {
            decided.target[tp] for tp, holder in decided.waiting.items()
            if not _still_owned_after_rejoin(holder, members, rejoined)}
        pending = bool(decided.register) or bool(wanted & threads)
        if not pending:
            self._hold_since = None
            return False
        now = self._wall_ms()
        if self._hold_since is None or self._hold_target != target:
            self._hold_since, self._hold_target = now, target
        return now - self._hold_since < 2 * self._schedule.backoff_ms

    def _members(self, group: Any, ids: dict[str, str]) -> dict[str, Member]:
        """The group's members as legacy consumers, by consumer id."""
        members: dict[str, Member] = {}
        if getattr(group, "protocol_type", None) not in (None, CONSUMER_PROTOCOL_TYPE):
            return members
        config = self.runtime.config
        for mid in group.members:
            topics = _side(group).subscribed_topics(group, mid, config)
            cid = ids.get(mid)
            if topics and cid is not None:  # without topics, nothing it could be handed: an empty share
                members[cid] = Member(cid, {t: 1 for t in sorted(topics)}, mid)
        return members

    def _quiesced(self, group: Any, reading, members: dict[str, Member]) -> set:
        config = self.runtime.config
        quiesced = set()
        for tp, owner in reading.owners.items():
            split = split_thread_id(owner.holder) if owner.ours else None
            member = members.get(split[0]) if split is not None else None
            if member is None or member.member_id not in group.members:
                continue
            still = _side(group).consuming(group, member.member_id, config)
            if still is not None and tp not in still:
                quiesced.add((tp, member.consumer_id))
        return quiesced

    async def _set_shares(self, shares: dict | None, hold: bool = False) -> None:
        group = self.runtime.group
        current = group.handover_shares
        held = getattr(group, "handover_hold", hold)  # a KIP-848 group has no join phase to hold
        if shares is not None and current is not None and held == hold and dict(current) == {
                mid: frozenset(p) for mid, p in shares.items() if mid in group.members}:
            return
        if shares is None and current is None:
            return
        await self.runtime.apply(lambda g, now: _side(g).handle_shares(g, shares, now, self.runtime.config, hold))

    async def _end(self, reading) -> None:
        """No legacy consumer left: the group is zkcoord's alone."""
        fence = self._fence_of(self.group_id)
        for cid in sorted(reading.ours):
            await self._zk.unregister(self.group_id, cid, fence)
        for tp, owner in sorted(reading.owners.items()):
            if owner.ours:
                await self._zk.release(self.group_id, tp, owner.holder, fence)
        await self.runtime.apply(lambda g, now: _side(g).handle_ids(g, None, now, self.runtime.config))
        await self._zk.unmark(self.group_id)
        await self._set_shares(None)
        log.info("group %s: no legacy consumer left; handover over, the group is zkcoord's alone", self.group_id)


class Handovers:
    """Which of this daemon's groups are in handover (one driver each)."""

    def __init__(self, zk: LegacyRebalanceZk, fence_of: Callable[[str], Fence],
                 schedule: RetrySchedule | None = None) -> None:
        self._zk = zk
        self._fence_of = fence_of
        self._schedule = schedule or RetrySchedule()
        self.drivers: dict[str, HandoverDriver] = {}
        self._runtimes: dict[str, GroupRuntime] = {}
        self._kept: dict[str, bool] = {}  # group -> an operator keeps it in handover (zkcoord handover keep)
        self._background = Background(log, "handovers")

    def __len__(self) -> int:
        return len(self.drivers)

    async def marked(self, on_change: Callable[[], None] | None = None) -> list[str]:
        """The groups in handover anywhere (markers), for their adoption."""
        return await self._zk.marked(on_change)

    async def loaded(self, runtime: GroupRuntime) -> None:
        """A group was loaded here: start its handover if legacy consumers
        share it, and watch its registrations either way."""
        self._runtimes[runtime.group_id] = runtime
        await self._probe(runtime.group_id)

    async def loaded_many(self, runtimes: list[GroupRuntime]) -> None:
        """Many groups were loaded here at once (a takeover): those legacy
        consumers may share (a registration under ``ids``, a handover in
        their record, a marker; read in bulk) are probed as :meth:`loaded`
        probes one; the others get the same watches, set in one request
        (:meth:`~zkcoord.zk.handover.LegacyRebalanceZk.watch_many`). All
        before this returns, so before they are served."""
        for runtime in runtimes:
            self._runtimes[runtime.group_id] = runtime
        zxid = self._zk.zxid()  # before the reads: their watches miss nothing since
        listed = await self._zk.consumer_ids_many([r.group_id for r in runtimes])
        marked = set(await self._zk.marked())
        shared = {r.group_id for r in runtimes if legacy_ids(listed[r.group_id] or ()) or r.group_id in marked
                  or r.group.handover_ids is not None}
        for group_id in sorted(shared):
            await self._probe(group_id)
        rest = {g: ids for g, ids in listed.items() if g not in shared}
        for group_id in rest:
            self._kept[group_id] = False  # no marker: what _probe finds
        try:
            await self._zk.watch_many(rest, zxid, lambda g: lambda: self._changed(g))
        except Exception as exc:  # connection trouble: one group at a time, in the background
            log.info("legacy registrations of %d groups not watched at once (%r); one at a time", len(rest), exc)
            self._background.spawn(self._probe_each(list(rest)), f"watch the legacy consumers of {len(rest)} groups")

    async def _probe_each(self, group_ids: list[str]) -> None:
        for group_id in group_ids:
            await self._probe_logged(group_id)

    async def _probe(self, group_id: str) -> None:
        runtime = self._runtimes.get(group_id)
        if runtime is None or not runtime.active:
            return
        ids = await self._zk.consumer_ids(group_id, on_change=lambda: self._changed(group_id))
        self._kept[group_id] = await self._zk.kept(group_id, on_change=lambda: self._changed(group_id))
        recorded = runtime.group.handover_ids is not None
        if group_id in self.drivers:
            self.drivers[group_id].poke()  # what it knows changed (kept or not)
            return
        if not (legacy_ids(ids) or recorded or self._kept[group_id]):
            return
        driver = HandoverDriver(runtime, self._zk, self._schedule, self._fence_of, self._ended,
                                kept=lambda: self._kept.get(group_id, False))
        self.drivers[group_id] = driver
        if not recorded:  # before any request is served: nobody consumes what this daemon does not hold yet
            await driver.clear_shares()
        driver.start()

    def _changed(self, group_id: str) -> None:
        driver = self.drivers.get(group_id)
        if driver is not None:
            driver.poke()
        if group_id in self._runtimes:
            self._background.spawn(self._probe_logged(group_id), f"look at the legacy consumers of {group_id}")

    async def _probe_logged(self, group_id: str) -> None:
        try:
            await self._probe(group_id)
        except ZkcoordError as exc:
            log.warning("group %s: could not look at its legacy consumers: %s", group_id, exc)

    def _ended(self, group_id: str) -> None:
        self.drivers.pop(group_id, None)

    async def unloaded(self, group_id: str) -> None:
        self._runtimes.pop(group_id, None)
        self._kept.pop(group_id, None)
        driver = self.drivers.pop(group_id, None)
        if driver is not None:
            await driver.stop()

    async def close(self) -> None:
        for group_id in list(self._runtimes):
            await self.unloaded(group_id)
        self._background.cancel_all()
