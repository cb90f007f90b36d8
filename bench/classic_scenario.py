"""The consumer-protocol benchmark's classic baseline: zkcoord's classic
protocol on the same join scenario (``bench_consumer_protocol.py``, target
``zkcoord-classic``).

Owns a classic member's heartbeat loop that the benchmark can reschedule
(:class:`ClassicDriver` around ``group_client.Member``: the Java consumer's
eager protocol, the leader's range assignment, heartbeats only), and the
join rounds, with the same seeded phases as the KIP-848 targets
(``consumer_scenarios.phases``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench_env import ZkWrites
from consumer_scenarios import SETTLE_TIMEOUT_S, Meter, Target, phases
from group_client import NONE, REJOIN, UNKNOWN_MEMBER_ID, BenchError, KafkaConnection, Member, leave_all


# -- classic members (zkcoord-classic) -----------------------------------------------------------------

class ClassicDriver:
    """A ``group_client.Member`` heartbeating every interval (reschedulable,
    as :class:`ConsumerMember`), rejoining when told (the Java consumer's
    eager protocol with a leader's range assignment)."""

    def __init__(self, member: Member, interval_s: float) -> None:
        self.member, self.interval_s = member, interval_s
        self.fast_interval_s: float | None = None
        self._next_due = 0.0
        self._pinned: float | None = None
        self._wake = asyncio.Event()

    def schedule(self, at: float) -> None:
        self._next_due = self._pinned = at
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def _due_after(self, now: float) -> float:
        if self._pinned is not None and self._pinned > now:
            return self._pinned
        self._pinned = None
        return now + (min(self.interval_s, self.fast_interval_s) if self.fast_interval_s else self.interval_s)

    async def run(self, stop: asyncio.Event) -> None:
        m = self.member
        rejoin = m.synced_generation < 0
        while not stop.is_set():
            if rejoin:
                m.stable_since = None
                await m.join()
                code = await m.sync()
                if code == NONE:
                    rejoin, m.stable_since = False, time.perf_counter()
                    self._next_due = self._due_after(m.stable_since)
                elif code == UNKNOWN_MEMBER_ID:
                    m.member_id = ""
                elif code not in REJOIN:
                    raise BenchError(f"SyncGroup {m.group}: error {code}")
                continue
            delay = self._next_due - time.perf_counter()
            if delay > 0:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), delay)
                except asyncio.TimeoutError:
                    pass
                continue
            code = await m.heartbeat()
            self._next_due = self._due_after(time.perf_counter())
            if code == NONE:
                continue
            if code not in REJOIN:
                raise BenchError(f"Heartbeat {m.group}: error {code}")
            m.events.append(("noticed", time.perf_counter(), m.generation))
            rejoin = True
            if code == UNKNOWN_MEMBER_ID:
                m.member_id = ""


def classic_settled(drivers: Sequence[ClassicDriver], partitions: int, newer_than: int = -1) -> bool:
    members = [d.member for d in drivers]
    generations = {m.synced_generation for m in members}
    return (None not in {m.stable_since for m in members} and len(generations) == 1
            and generations.pop() > newer_than and sum(len(m.assignment) for m in members) == partitions)


@dataclass
class ClassicRound:
    target: str
    members_before: int
    total_ms: float
    noticed_ms: float  # the last old member told of the rebalance
    joined_ms: float  # the last JoinGroup answer of the new generation
    cpu_s: dict[str, float]
    zk: ZkWrites | None


async def classic_join_scenario(target: Target, env, settings, topic: str) -> list[ClassicRound]:
    group = f"join-{target.name}"
    host, port = await target.coordinator(group)
    interval_s = settings.heartbeat_interval_ms / 1000

    async def new_driver(i: int) -> ClassicDriver:
        conn = await KafkaConnection.open(host, port, f"{target.name}-{i}")
        member = Member(conn, group, topic, settings.join_partitions, target.classic_versions,
                        settings.session_timeout_ms, settings.classic_rebalance_timeout_ms)
        return ClassicDriver(member, interval_s)

    drivers = [await new_driver(i) for i in range(settings.join_members)]
    stop = asyncio.Event()
    tasks: list[asyncio.Task] = []
    rounds = []

    def add(driver: ClassicDriver) -> None:
        tasks.append(asyncio.get_running_loop().create_task(driver.run(stop)))

    async def until(done: Callable[[], bool], what: str) -> None:
        deadline = time.perf_counter() + SETTLE_TIMEOUT_S
        while not done():
            for task in tasks:
                if task.done():
                    task.result()
                    raise BenchError("a classic member stopped")
            if time.perf_counter() > deadline:
                raise BenchError(f"{what}: not reached within {SETTLE_TIMEOUT_S:g} s")
            await asyncio.sleep(0.005)

    try:
        for driver in drivers:
            driver.fast_interval_s = settings.setup_heartbeat_ms / 1000
            add(driver)
        await until(lambda: classic_settled(drivers, settings.join_partitions), f"{group}: Stable")
        for driver in drivers:
            driver.fast_interval_s = None
        print(f"  {target.name}: {group}: {len(drivers)} classic members Stable", flush=True)
        for round_no in range(settings.join_rounds):
            await asyncio.sleep(settings.quiet_s)
            old = list(drivers)
            await until(lambda: classic_settled(old, settings.join_partitions), "Stable before the round")
            newcomer = await new_driver(len(drivers))
            generation = old[0].member.synced_generation
            meter = Meter(env, target)
            await meter.start()
            t0 = time.perf_counter() + 0.02
            for driver, u in zip(old, phases(settings, "join", round_no, len(old))):
                driver.schedule(t0 + u * interval_s)
            await asyncio.sleep(max(0.0, t0 - time.perf_counter()))
            drivers.append(newcomer)
            add(newcomer)
            await until(lambda: classic_settled(drivers, settings.join_partitions, generation), "the new generation")
            new_generation = drivers[0].member.synced_generation
            done = max(_last(d.member, "synced", t0, new_generation) for d in drivers)
            cpu_s, zk = await meter.stop()
            noticed = [_last(d.member, "noticed", t0) for d in old]
            joined = max(_last(d.member, "joined", t0, new_generation) for d in drivers)
            rounds.append(ClassicRound(target.name, len(old), (done - t0) * 1e3,
                                       (max([t for t in noticed if t], default=t0) - t0) * 1e3,
                                       (joined - t0) * 1e3, cpu_s, zk))
            r = rounds[-1]
            print(f"  {target.name}: join {r.members_before} -> {r.members_before + 1}: {r.total_ms:,.0f} ms "
                  f"(last old member noticed {r.noticed_ms:,.0f}, joined {r.joined_ms:,.0f})", flush=True)
    finally:
        stop.set()
        for driver in drivers:
            driver.wake()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 90)
        try:
            await asyncio.wait_for(leave_all([d.member for d in drivers]), 30)
        finally:
            for driver in drivers:
                driver.member.conn.close()
    return rounds


def _last(member: Member, what: str, since: float, generation: int | None = None) -> float:
    times = [t for w, t, g in member.events if w == what and t >= since and (generation is None or g == generation)]
    return max(times) if times else since
