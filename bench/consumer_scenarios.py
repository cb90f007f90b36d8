"""The consumer-protocol benchmark's scenarios (``bench_consumer_protocol.py``).

Owns what one scenario does on one target and what it measures; the
settings, the environment and the report live in the benchmark's main file.
A target is a coordinator reached the way clients reach it (FindCoordinator
on its bootstrap address), with the brokers that hold its topics:

- ``zkcoord``: the daemon's own listener, KIP-848 members (``consumer_client``);
- ``kafka4``: Kafka 4.4's own coordinator (the sandbox's KRaft node), the same members;
- ``zkcoord-classic``: the daemon's listener, classic members (``group_client.Member``:
  JoinGroup/SyncGroup/Heartbeat, range-assigned by the leader): ``classic_scenario.py``.

Rounds are seeded: before each measured moment every old member's next
heartbeat is put at ``t0 + u * interval`` with ``u`` drawn from
``random.Random(seed, round)``, the same draws on every target, so that two
coordinators see the same heartbeat phases and differ only in how they
answer. Between rounds members heartbeat at the coordinator's interval;
while a group is set up (never measured) they heartbeat faster.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bench_env import ZkWrites, cpu_cores, cpu_snapshot, zk_write_counters
from consumer_client import ConsumerMember, check_described, describe, settled, settled_at
from group_client import (
    BenchError, KafkaConnection, RequestTemplate, Schedule, find_coordinator, heartbeat_errors, member_requests,
)

SETTLE_TIMEOUT_S = 180.0


@dataclass
class Target:
    name: str
    address: tuple[str, int]  # where members bootstrap (FindCoordinator)
    broker: tuple[str, int]  # where its topics are created and grown
    process: str  # the process serving it (CPU)
    protocol: str  # "consumer" or "classic"
    heartbeat_version: int = 1
    classic_versions: dict[str, int] = field(default_factory=dict)
    counts_zk: bool = False  # zkcoord: read ZooKeeper's counters around rounds

    async def coordinator(self, group: str) -> tuple[str, int]:
        finder = await KafkaConnection.open(*self.address, "zkcoord-bench")
        try:
            _, host, port = await find_coordinator(finder, group, 3)
        finally:
            finder.close()
        return host, port


@dataclass
class Meter:
    """CPU seconds per process and ZooKeeper's counters over a stretch of time."""
    env: object
    target: Target

    async def start(self) -> None:
        self._cpu = cpu_snapshot(self.env.pids)
        self._zk = await self._counters()

    async def stop(self) -> tuple[dict[str, float], ZkWrites | None]:
        """(CPU seconds per process, "client" and "other"; ZooKeeper's counters' change or None)."""
        after = cpu_snapshot(self.env.pids)
        zk = await self._counters()
        self.wall_s = after.wall - self._cpu.wall
        cpu_s = {name: cores * self.wall_s for name, cores in cpu_cores(self._cpu, after).items()}
        return cpu_s, (zk - self._zk if zk is not None else None)

    async def _counters(self) -> ZkWrites | None:
        if not self.target.counts_zk:
            return None
        return await asyncio.to_thread(zk_write_counters, self.env.zk_port, self.env.namespaces)


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


# -- KIP-848 members ---------------------------------------------------------------------------------

class Runner:
    """Members heartbeating by ``consumer_client``'s rules, one task each."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.members: list[ConsumerMember] = []
        self.tasks: list[asyncio.Task] = []

    def add(self, member: ConsumerMember) -> None:
        self.members.append(member)
        self.tasks.append(asyncio.get_running_loop().create_task(member.run(self.stop)))

    def check(self) -> None:
        for task in self.tasks:
            if task.done():
                task.result()  # a member's error
                raise BenchError("a member stopped heartbeating")

    async def until(self, done: Callable[[], bool], what: str, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        deadline = time.perf_counter() + timeout_s
        while not done():
            self.check()
            if time.perf_counter() > deadline:
                raise BenchError(f"{what}: not reached within {timeout_s:g} s")
            await asyncio.sleep(0.005)

    def fast(self, interval_s: float | None) -> None:
        for member in self.members:
            member.fast_interval_s = interval_s
            member.wake()

    async def halt(self) -> None:
        self.stop.set()
        for member in self.members:
            member.wake()
        await asyncio.wait_for(asyncio.gather(*self.tasks, return_exceptions=True), 60)
        for task in self.tasks:
            if not task.cancelled() and task.exception() is not None and not isinstance(
                    task.exception(), ConnectionError):
                raise task.exception()


async def open_consumers(target: Target, group: str, topic: str, count: int, settings,
                         prefix: str) -> list[ConsumerMember]:
    host, port = await target.coordinator(group)

    async def one(i: int) -> ConsumerMember:
        conn = await KafkaConnection.open(host, port, f"{prefix}-{i}")
        return ConsumerMember(conn, group, [topic], target.heartbeat_version, settings.rebalance_timeout_ms,
                              name=f"{prefix}-{i}")

    members = []
    for start in range(0, count, 100):
        members += await asyncio.gather(*(one(i) for i in range(start, min(count, start + 100))))
    return members


async def close_consumers(members: Sequence[ConsumerMember]) -> None:
    for start in range(0, len(members), 100):
        batch = members[start:start + 100]
        await asyncio.gather(*(m.leave() for m in batch), return_exceptions=True)
    for member in members:
        member.conn.close()


async def set_up(runner: Runner, members: Sequence[ConsumerMember], partitions: int, settings, what: str) -> None:
    """Members join and heartbeat fast until the group is settled; then at the coordinator's interval."""
    for member in members:
        member.fast_interval_s = settings.setup_heartbeat_ms / 1000
        runner.add(member)
    await runner.until(lambda: settled(members, partitions), what)
    runner.fast(None)


def phases(settings, scenario: str, round_no: int, count: int) -> list[float]:
    """Each old member's next heartbeat in this round, as a fraction of the interval (the same on every target)."""
    rng = random.Random(f"{settings.seed}/{scenario}/{round_no}")
    return [rng.random() for _ in range(count)]


@dataclass
class JoinRound:
    target: str
    members_before: int
    total_ms: float
    join_ms: float  # the newcomer's joining heartbeat, sent to answered
    target_seen_ms: float  # the first old member's answer at the new epoch
    last_revoked_ms: float  # the last old member's acknowledged revocation answered
    final_step_ms: float  # latency of the heartbeat that completed the round
    heartbeats: int
    heartbeat_p50_ms: float
    heartbeat_max_ms: float
    fenced: int
    retries: int  # heartbeats answered COORDINATOR_LOAD_IN_PROGRESS and the like, asked again
    cpu_s: dict[str, float]
    zk: ZkWrites | None


def _troubles(members: Sequence[ConsumerMember], before: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """(fences, retried answers) of ``members`` since ``before`` (counted from their start)."""
    return (sum(m.fenced for m in members) - before[0], sum(m.retries for m in members) - before[1])


def _round_log(members: Sequence[ConsumerMember], t0: float):
    entries = [(m, e) for m in members for e in m.log if e[1] >= t0]
    for member in members:
        member.log.clear()
        member.keep_log = False
    return entries


async def _check_described(target: Target, group: str, members: Sequence[ConsumerMember]) -> None:
    """What the coordinator says of the settled group (ConsumerGroupDescribe)
    against the members' own view: printed, not judged."""
    conn = await KafkaConnection.open(*await target.coordinator(group), "zkcoord-bench-describe")
    try:
        problems = check_described(await describe(conn, group), members)
    finally:
        conn.close()
    print(f"  {target.name}: {group}: ConsumerGroupDescribe "
          + ("agrees with the members: every one at the assignment epoch, owning its target" if not problems
             else f"DISAGREES: {'; '.join(problems[:5])}" + (f" (+{len(problems) - 5})" if len(problems) > 5 else "")),
          flush=True)


def _last_acknowledged(entries, newcomer: ConsumerMember, t0: float) -> float:
    """When the last old member's acknowledgement of a revocation was answered
    (its heartbeat after the answer that took partitions away)."""
    last = t0
    by_member: dict[int, list] = {}
    for member, entry in entries:
        if member is not newcomer:
            by_member.setdefault(id(member), []).append(entry)
    for log in by_member.values():
        log.sort()
        for i, (_, _, kind, _, before, after) in enumerate(log[:-1]):
            if kind == "assigned" and after < before:
                last = max(last, log[i + 1][1])
    return last


async def join_scenario(target: Target, env, settings, topic: str) -> list[JoinRound]:
    """A group of ``join_members`` over ``join_partitions``; each round one member joins."""
    group = f"join-{target.name}"
    members = await open_consumers(target, group, topic, settings.join_members, settings, f"{target.name}-join")
    runner = Runner()
    rounds = []
    try:
        await set_up(runner, members, settings.join_partitions, settings, f"{group}: settled")
        print(f"  {target.name}: {group}: {len(members)} members settled over {settings.join_partitions} partitions",
              flush=True)
        for round_no in range(settings.join_rounds):
            rounds.append(await _join_round(target, env, settings, topic, runner, round_no))
            r = rounds[-1]
            print(f"  {target.name}: join {r.members_before} -> {r.members_before + 1}: {r.total_ms:,.0f} ms "
                  f"(target seen {r.target_seen_ms:,.0f}, last revocation acknowledged {r.last_revoked_ms:,.0f}, "
                  f"final step {r.final_step_ms:.1f} ms, {r.heartbeats} heartbeats)", flush=True)
        await _check_described(target, group, runner.members)
    finally:
        await runner.halt()
        await close_consumers(runner.members or members)
    return rounds


async def _join_round(target: Target, env, settings, topic: str, runner: Runner, round_no: int) -> JoinRound:
    interval_s = settings.heartbeat_interval_ms / 1000
    await asyncio.sleep(settings.quiet_s)
    old = list(runner.members)
    await runner.until(lambda: settled(old, settings.join_partitions), "settled before the round")
    (newcomer,) = await open_consumers(target, old[0].group, topic, 1, settings,
                                       f"{target.name}-join-new{round_no}")
    meter = Meter(env, target)
    await meter.start()
    troubles_before = _troubles(old)
    t0 = time.perf_counter() + 0.02
    epoch_before = old[0].epoch
    for member, u in zip(old, phases(settings, "join", round_no, len(old))):
        member.keep_log = True
        member.schedule(t0 + u * interval_s)
    newcomer.keep_log = True
    await asyncio.sleep(max(0.0, t0 - time.perf_counter()))
    runner.add(newcomer)
    everyone = old + [newcomer]
    await runner.until(lambda: settled(everyone, settings.join_partitions), f"round {round_no}: settled")
    done = settled_at(everyone)
    cpu_s, zk = await meter.stop()
    entries = _round_log(everyone, t0)
    latencies = sorted(e[1] - e[0] for _, e in entries)
    seen = [e[1] for m, e in entries if m is not newcomer and e[3] > epoch_before]
    final = [e[1] - e[0] for _, e in entries if e[1] == done]
    joined = [e[1] - e[0] for m, e in entries if m is newcomer and e[2] == "join"]
    return JoinRound(target.name, len(old), (done - t0) * 1e3, (joined[0] if joined else 0.0) * 1e3,
                     (min(seen, default=done) - t0) * 1e3,
                     (_last_acknowledged(entries, newcomer, t0) - t0) * 1e3, (final[0] if final else 0.0) * 1e3, len(entries),
                     _median(latencies) * 1e3, (latencies[-1] if latencies else 0.0) * 1e3,
                     *_troubles(everyone, troubles_before), cpu_s, zk)


# -- the KIP's scenario: partitions added under a settled group --------------------------------------

@dataclass
class GrowRound:
    target: str
    total_ms: float
    created_ms: float  # CreatePartitions answered
    noticed_ms: float  # the first member's answer at a new epoch
    final_step_ms: float
    heartbeats: int
    fenced: int
    retries: int
    cpu_s: dict[str, float]
    zk: ZkWrites | None


async def grow_scenario(target: Target, env, settings, topics: Sequence[str], grower) -> list[GrowRound]:
    """Per round a fresh group of ``kip_members`` on a fresh topic of
    ``kip_initial_partitions``; then ``kip_added_partitions`` are added
    (``grower``: ``open()``, ``grow(topic, total)``, ``close()``, blocking,
    run in a thread)."""
    rounds = []
    total = settings.kip_initial_partitions + settings.kip_added_partitions
    for round_no, topic in enumerate(topics):
        group = f"kip-{target.name}-{round_no}"
        members = await open_consumers(target, group, topic, settings.kip_members, settings, f"{target.name}-kip")
        runner = Runner()
        try:
            await set_up(runner, members, settings.kip_initial_partitions, settings, f"{group}: settled")
            await asyncio.sleep(settings.quiet_s)
            await asyncio.to_thread(grower.open)
            meter = Meter(env, target)
            await meter.start()
            troubles_before = _troubles(members)
            interval_s = settings.heartbeat_interval_ms / 1000
            t0 = time.perf_counter() + 0.02
            epoch_before = members[0].epoch
            for member, u in zip(members, phases(settings, "kip", round_no, len(members))):
                member.keep_log = True
                member.schedule(t0 + u * interval_s)
            await asyncio.sleep(max(0.0, t0 - time.perf_counter()))
            t0 = time.perf_counter()
            await asyncio.to_thread(grower.grow, topic, total)
            created = time.perf_counter()
            await runner.until(lambda: settled(members, total), f"{group}: {total} partitions owned")
            done = settled_at(members)
            cpu_s, zk = await meter.stop()
            entries = _round_log(members, t0)
            noticed = [e[1] for _, e in entries if e[3] > epoch_before]
            final = [e[1] - e[0] for _, e in entries if e[1] == done]
            rounds.append(GrowRound(target.name, (done - t0) * 1e3, (created - t0) * 1e3,
                                    (min(noticed, default=done) - t0) * 1e3, (final[0] if final else 0) * 1e3,
                                    len(entries), *_troubles(members, troubles_before), cpu_s, zk))
            r = rounds[-1]
            print(f"  {target.name}: {settings.kip_members} members, {topic} {settings.kip_initial_partitions} -> "
                  f"{total} partitions: {r.total_ms:,.0f} ms (created {r.created_ms:,.0f}, first noticed "
                  f"{r.noticed_ms:,.0f})", flush=True)
        finally:
            await asyncio.to_thread(grower.close)
            await runner.halt()
            await close_consumers(members)
    return rounds


# -- steady heartbeats ---------------------------------------------------------------------------------

@dataclass
class LoadResult:
    scenario: str
    target: str
    requests: int
    duration_s: float
    p50_ms: float
    p99_ms: float
    errors: dict[int, int]
    cpu_cores: dict[str, float]
    zk_txns: int

    @property
    def rate(self) -> float:
        return self.requests / self.duration_s


def percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


async def steady_scenario(target: Target, env, settings, topic: str) -> list[LoadResult]:
    """``steady_members`` members in ``steady_groups`` settled groups; their
    steady heartbeat (nothing to report) back to back, then paced."""
    per_group = settings.steady_members // settings.steady_groups
    groups = [f"steady-{target.name}-{i}" for i in range(settings.steady_groups)]
    members: list[ConsumerMember] = []
    for group in groups:
        members += await open_consumers(target, group, topic, per_group, settings, f"{target.name}-steady")
    runner = Runner()
    results = []
    try:
        for member in members:
            member.fast_interval_s = settings.setup_heartbeat_ms / 1000
            runner.add(member)
        by_group = [[m for m in members if m.group == g] for g in groups]
        await runner.until(lambda: all(settled(g, settings.steady_partitions) for g in by_group),
                           f"{target.name}: {len(groups)} steady groups settled")
        runner.fast(None)
        await asyncio.sleep(settings.quiet_s)  # a last target (assignment interval) has reached everyone
        await runner.until(lambda: all(settled(g, settings.steady_partitions) for g in by_group),
                           f"{target.name}: steady groups settled")
        await runner.halt()
        kinds = await asyncio.gather(*(m.heartbeat() for m in members))
        if set(kinds) != {"beat"}:
            raise BenchError(f"{target.name}: the steady groups are not steady ({sorted(set(kinds))})")
        print(f"  {target.name}: {len(groups)} groups of {per_group} settled over {settings.steady_partitions} "
              "partitions", flush=True)
        templates = [m.heartbeat_template() for m in members]
        results.append(await load("heartbeat max", target, members, templates, env, settings))
        _progress(results[-1])
        results.append(await load(f"heartbeat @{settings.paced_rate}/s", target, members, templates, env, settings,
                                  settings.paced_rate))
        _progress(results[-1])
    finally:
        await runner.halt()
        await close_consumers(members)
    return results


def _progress(r: LoadResult) -> None:
    print(f"  {r.target}: {r.scenario}: {r.rate:,.0f}/s, p50 {r.p50_ms:.2f} ms, p99 {r.p99_ms:.2f} ms", flush=True)


async def load(scenario: str, target: Target, members: Sequence[ConsumerMember], templates: Sequence[RequestTemplate],
               env, settings, paced_rate: int | None = None) -> LoadResult:
    """Each member sends its template over its own connection, one at a
    time: back to back, or at ``members / paced_rate`` s intervals."""
    schedule = Schedule.from_now(settings.warmup_s, settings.duration_s, len(members), paced_rate)
    errors: dict[int, int] = {}

    async def sample() -> tuple[dict[str, float], int]:
        await asyncio.sleep(max(0.0, schedule.measure_from - time.perf_counter()))
        meter = Meter(env, target)
        await meter.start()
        await asyncio.sleep(max(0.0, schedule.end - time.perf_counter()))
        cpu_s, zk = await meter.stop()
        return {k: v / meter.wall_s for k, v in cpu_s.items()}, (zk.zxid if zk else 0)

    sampler = asyncio.get_running_loop().create_task(sample())
    per_member = await asyncio.gather(*(member_requests(m.conn, templates[i], i, schedule, 0, heartbeat_errors, errors)
                                        for i, m in enumerate(members)))
    cores, txns = await sampler
    latencies = sorted(x for lat in per_member for x in lat)
    return LoadResult(scenario, target.name, len(latencies), settings.duration_s, percentile(latencies, 0.5) * 1e3,
                      percentile(latencies, 0.99) * 1e3, errors, cores, txns)


# -- ZooKeeper writes per reconciliation step (zkcoord) ------------------------------------------------

@dataclass
class Step:
    label: str
    zk: ZkWrites
    latency_ms: float


async def writes_scenario(target: Target, env, settings, topic: str) -> list[Step]:
    """A settled group of ``join_members`` over ``join_partitions`` whose
    members are then stepped one heartbeat at a time (nobody else
    heartbeats), ZooKeeper's counters read around each: a steady heartbeat,
    a join and the reconciliation it causes, a leave and the one it causes."""
    group = f"writes-{target.name}"
    members = await open_consumers(target, group, topic, settings.join_members, settings, f"{target.name}-writes")
    runner = Runner()
    steps: list[Step] = []
    pause_s = settings.assignment_interval_ms / 1000 + 0.2  # the next heartbeat may compute a target

    async def measure(label: str, member: ConsumerMember, leave: bool = False) -> str:
        before = await asyncio.to_thread(zk_write_counters, env.zk_port, env.namespaces)
        start = time.perf_counter()
        kind = "leave" if leave else await member.heartbeat()
        if leave:
            await member.leave()
        latency = time.perf_counter() - start
        after = await asyncio.to_thread(zk_write_counters, env.zk_port, env.namespaces)
        steps.append(Step(label, after - before, latency * 1e3))
        return kind

    async def step_everyone(order: Sequence[ConsumerMember], after_leave: bool) -> None:
        first = after_leave
        for member in order:
            owned = member.owned_count()
            kind = await measure("heartbeat", member)
            grew, shrank = member.owned_count() > owned, member.owned_count() < owned
            label = ("first heartbeat after the leave (computes the new target)" if first else
                     "told to revoke" if shrank else "given partitions" if grew else
                     "told its new epoch only" if kind == "epoch" else "nothing changes")
            steps[-1].label = label
            first = False
            if member.acknowledging:
                await measure("acknowledges a revocation" if shrank else "acknowledges an assignment", member)

    try:
        await set_up(runner, members, settings.join_partitions, settings, f"{group}: settled")
        await runner.halt()
        await asyncio.sleep(pause_s)
        await measure("steady heartbeat (nothing changes)", members[0])
        (newcomer,) = await open_consumers(target, group, topic, 1, settings, f"{target.name}-writes-new")
        members.append(newcomer)
        await measure("join (creates the member, computes the new target)", newcomer)
        order = members[:-1]
        random.Random(f"{settings.seed}/writes").shuffle(order)
        await step_everyone(order, after_leave=False)
        await step_everyone([newcomer], after_leave=False)
        await asyncio.sleep(pause_s)
        leaver = order[0]
        await measure("leave (epoch -1)", leaver, leave=True)
        await asyncio.sleep(pause_s)
        await step_everyone([m for m in members if m is not leaver], after_leave=True)
        if not settled([m for m in members if m is not leaver], settings.join_partitions):
            raise BenchError(f"{group}: not settled after stepping every member once more")
        probe = await asyncio.to_thread(env.zk_multi_latencies_ms, 50, 540)
        steps.append(Step("ZooKeeper alone: a 2-znode multi of 540 B from the benchmark (x50)", ZkWrites(0, 0, 0),
                          _median(probe)))
    finally:
        await runner.halt()
        await close_consumers(members)
    return steps
