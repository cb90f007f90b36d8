"""Benchmark: one zkcoord daemon, direct and through its gateway, beside the Kafka 3.9 broker's own group coordinator.

Run by hand, never by the test suite; it prints a table and ratios and never
asserts on time (see ``bench/README.md``)::

    .venv/bin/python bench/bench_coordinator.py            # everything, ~3-4 minutes
    .venv/bin/python bench/bench_coordinator.py --only heartbeat --duration-s 5

The script owns its whole environment: it starts a sandbox (``zkcoord local
up``) in a state directory of its own, one ``zkcoord run`` daemon in a fresh
ZooKeeper chroot, and stops both at the end, on error and on Ctrl-C too.
Each scenario runs on each of ``--targets``, in this order, with the same
client (``group_client.py``), the same API versions and the same settings:

- ``zkcoord``: the daemon's own listener (``--listen``);
- ``gateway``: the same daemon's gateway (``--gateway-listen``, started only
  when this target is asked for): the members bootstrap from it, and its
  FindCoordinator sends them to the owner's gateway (this daemon's), so the
  group requests take the gateway's path into the same group manager;
- ``kafka``: the broker's own group coordinator.

The scenarios:

1. heartbeat: members of Stable groups send heartbeats back to back (closed
   loop: the maximum rate), then paced at ``--paced-rate`` in total (the
   latency at that load).
2. commit: the same members commit their partitions' offsets with their
   generation, back to back.
3. rebalance: a Stable group of ``--rebalance-members`` members sharing
   ``--partitions`` partitions (range-assigned by the leader), then one more
   member joins; the time until every member has its new assignment. Members
   notice through heartbeats every ``--heartbeat-interval-ms``. Each round's
   join comes at a random moment within one heartbeat interval (seeded by
   ``--join-phase-seed``; the same moments for both targets), so that the
   rounds sample the members' heartbeat cycle instead of joining at a fixed
   delay after the previous rebalance. The report splits each median into
   the wait until the last old member noticed (its next heartbeat: the same
   client and interval on both servers) and what follows it.
4. ZooKeeper writes per rebalance (zkcoord): ZooKeeper's own counters
   around each rebalance: transactions (``srvr`` Zxid), znode writes in our
   chroot (``mntr`` per-namespace write count), and the state znode's version.

The report gives the ratios zkcoord / kafka with their goals, and gateway /
zkcoord (one daemon, one run) with the gateway's goal: its heartbeat and
commit figures within 10% of the direct daemon's.

Files: this one (settings, scenarios, report), ``group_client.py`` (the
Kafka client and group member), ``bench_env.py`` (sandbox, daemon, meters).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyspy_report  # noqa: E402
from bench_env import Environment, cpu_cores, cpu_snapshot, zk_counters  # noqa: E402  (after the path tweak)
from group_client import (  # noqa: E402
    BenchError, KafkaConnection, Member, Schedule, commit_errors, common_versions, find_coordinator, heartbeat_errors,
    leave_all, member_requests, open_notice, served_versions,
)
from load_procs import LoadProcesses, MemberSpec, Run  # noqa: E402

COMMIT_TOPIC = "bench-commits"
REBALANCE_TOPIC = "bench-rebalance"
OFFSET_SENTINEL = 0x0123_4567_89AB_0000  # + partition number; patched per commit
TARGETS = ("zkcoord", "gateway", "kafka")
# The process that serves each target: the gateway runs inside the daemon.
SERVER_PROCESS = {"zkcoord": "zkcoord", "gateway": "zkcoord", "kafka": "kafka"}
GATEWAY_GOAL = 0.10  # the gateway's heartbeat and commit figures within 10% of the direct daemon's


@dataclass(frozen=True)
class Settings:
    members: int = 100
    groups: int = 10
    duration_s: float = 10.0
    warmup_s: float = 1.0
    paced_rate: int = 10_000
    commit_partitions: int = 1
    rebalance_members: int = 100
    partitions: int = 1000
    rebalance_rounds: int = 5
    heartbeat_interval_ms: int = 100
    session_timeout_ms: int = 30_000
    rebalance_timeout_ms: int = 60_000
    join_phase_seed: int = 1
    notice: str = "on"  # members use the rebalance notice where offered (zkcoord does; Kafka, the gateway not)
    only: tuple[str, ...] = ("heartbeat", "commit", "rebalance")
    targets: tuple[str, ...] = TARGETS
    profile: str = ""  # "", "cprofile" or "pyinstrument": run the daemon under it; "py-spy": sample each load run
    load_processes: int = 1  # 1: the members' requests from this process; N: from N processes of their own
    load_rounds: int = 1  # heartbeat and commit runs: every target this many times, alternating

    def __post_init__(self) -> None:
        if self.members < self.groups or self.members % self.groups:
            raise SystemExit(f"--members {self.members} must be a multiple of --groups {self.groups}")
        unknown = set(self.only) - {"heartbeat", "commit", "rebalance"} | set(self.targets) - set(TARGETS)
        if unknown:
            raise SystemExit(f"unknown scenario or target: {', '.join(sorted(unknown))}")
        if self.load_rounds < 1:
            raise SystemExit(f"--load-rounds {self.load_rounds} must be at least 1")
        if self.notice not in ("on", "off"):
            raise SystemExit(f"--notice {self.notice!r} must be on or off")

    @property
    def interval_s(self) -> float:
        return self.heartbeat_interval_ms / 1000


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


@dataclass
class LoadResult:
    scenario: str
    target: str
    requests: int
    duration_s: float
    p50_ms: float
    p99_ms: float
    errors: dict[int, int]
    cpu: dict[str, float]
    zk_txns: int = 0
    round: int = 0  # of --load-rounds, from 0

    @property
    def rate(self) -> float:
        return self.requests / self.duration_s

    @property
    def server(self) -> str:
        """The process that served the target (the gateway's is the daemon)."""
        return SERVER_PROCESS[self.target]

    @property
    def server_us_per_request(self) -> float:
        """Server CPU per request: less disturbed by other work than the rate."""
        return self.cpu.get(self.server, 0.0) * self.duration_s / max(self.requests, 1) * 1e6


@dataclass
class RebalanceRound:
    target: str
    members_before: int
    total_ms: float
    noticed_ms: float  # the last old member got REBALANCE_IN_PROGRESS
    joined_ms: float  # the last JoinGroup response of the new generation
    zk_txns: int
    znode_writes: int
    state_versions: int | None
    cpu: dict[str, float] = field(default_factory=dict)


# -- members -----------------------------------------------------------------------------

@dataclass
class Target:
    """Where members bootstrap (FindCoordinator), and what FindCoordinator
    answered there per group: (node id, host, port) of the connections the
    members then open."""
    name: str
    address: tuple[str, int]
    coordinators: dict[str, tuple[int, str, int]] = field(default_factory=dict)
    connect: dict = field(default_factory=dict)  # KafkaConnection.open's ssl_context / login

    def describe_coordinators(self, groups: list[str]) -> str:
        answers = collections.Counter(self.coordinators[g] for g in groups)
        return ", ".join(f"node {n} at {h}:{p}" + (f" ({count} groups)" if len(answers) > 1 else "")
                         for (n, h, p), count in answers.items())


async def open_members(target: Target, groups: list[str], per_group: int, topic: str, partitions: int,
                       versions: dict[str, int], settings: Settings) -> list[Member]:
    finder = await KafkaConnection.open(*target.address, "zkcoord-bench", **target.connect)
    try:
        for g in groups:
            target.coordinators[g] = await find_coordinator(finder, g, versions["FindCoordinator"])
    finally:
        finder.close()
    members = []
    for group in groups:
        _, host, port = target.coordinators[group]
        for i in range(per_group):
            conn = await KafkaConnection.open(host, port, f"bench-{i}", **target.connect)
            notice = None
            if settings.notice == "on" and topic == REBALANCE_TOPIC:
                notice = await open_notice(host, port, f"bench-{i}")
            members.append(Member(conn, group, topic, partitions, versions, settings.session_timeout_ms,
                                  settings.rebalance_timeout_ms, notice))
    return members


def _stable(members: list[Member], quiet_s: float, newer_than: int = -1) -> bool:
    by_group = collections.defaultdict(list)
    for member in members:
        by_group[member.group].append(member)
    now = time.perf_counter()
    for group_members in by_group.values():
        since = [m.stable_since for m in group_members]
        generations = {m.synced_generation for m in group_members}
        if None in since or len(generations) != 1 or generations.pop() <= newer_than:
            return False
        if now - max(since) < quiet_s:
            return False
    return True


async def wait_stable(members: list[Member], tasks: list[asyncio.Task], quiet_s: float,
                      newer_than: int = -1, timeout_s: float = 180.0) -> None:
    """Until every group is Stable at one generation (> ``newer_than``) for ``quiet_s``."""
    deadline = time.perf_counter() + timeout_s
    while not _stable(members, quiet_s, newer_than):
        for task in tasks:
            if task.done():
                task.result()  # raises the member's error
                raise BenchError("a member stopped maintaining its membership")
        if time.perf_counter() > deadline:
            waiting = sum(m.stable_since is None for m in members)
            raise BenchError(f"groups not Stable after {timeout_s:g} s ({waiting} members rejoining)")
        await asyncio.sleep(0.02)


def maintain(members: list[Member], stop: asyncio.Event, settings: Settings) -> list[asyncio.Task]:
    return [asyncio.get_running_loop().create_task(m.maintain(stop, settings.interval_s)) for m in members]


async def close_members(members: list[Member]) -> None:
    try:
        await asyncio.wait_for(leave_all(members), 30)
    finally:
        for member in members:
            member.conn.close()
            if member.notice is not None:
                member.notice.close()


# -- scenarios -------------------------------------------------------------------------------

def member_spec(member: Member) -> MemberSpec:
    """What a load process needs to send ``member``'s requests on a connection of its own."""
    host, port = member.conn.peer
    return MemberSpec(host, port, member.group, member.member_id, member.generation, dict(member.versions),
                      member.conn.client_id, member.topic, tuple(member.assignment))


async def _sample(pids: dict[str, int], env: Environment, start: float, end: float,
                  counters: bool) -> tuple[dict, int]:
    """CPU use of ``pids`` (and ZooKeeper transactions) between two perf_counter instants."""
    await asyncio.sleep(max(0.0, start - time.perf_counter()))
    a, zk_a = cpu_snapshot(pids), (await asyncio.to_thread(zk_counters, env.zk_port, env.namespace)
                                   if counters else (0, 0))
    await asyncio.sleep(max(0.0, end - time.perf_counter()))
    b, zk_b = cpu_snapshot(pids), (await asyncio.to_thread(zk_counters, env.zk_port, env.namespace)
                                   if counters else (0, 0))
    return cpu_cores(a, b), zk_b[0] - zk_a[0]


async def _spy(env: Environment, start: float, seconds: float, path: Path) -> Path | None:
    """py-spy on the daemon from ``start`` (perf_counter) for ``seconds``; the samples' file."""
    await asyncio.sleep(max(0.0, start - time.perf_counter()))
    process = pyspy_report.record(env.pids["zkcoord"], seconds, path)
    if process is None:
        return None
    await asyncio.to_thread(process.wait)
    return path


async def load(scenario: str, target: Target, members: list[Member], env: Environment, settings: Settings,
               paced_rate: int | None = None) -> LoadResult:
    """Every member sends its request over its own connection, one at a time:
    back to back, or (``paced_rate``) at ``members / paced_rate`` s intervals."""
    committing = scenario.startswith("commit")
    sentinels = [OFFSET_SENTINEL + i for i in range(settings.commit_partitions)]
    templates = [m.commit_template(sentinels) if committing else m.heartbeat_template() for m in members]
    errors_of = commit_errors if committing else heartbeat_errors
    errors: collections.Counter = collections.Counter()
    workers = None
    pids = env.pids
    if settings.load_processes > 1:
        workers = LoadProcesses(settings.load_processes, [member_spec(m) for m in members],
                                Run(committing, tuple(sentinels)), env.connect_spec)
        pids = {**env.pids, **workers.pids}
        await workers.ready()
    schedule = Schedule.from_now(settings.warmup_s, settings.duration_s, len(members), paced_rate)
    if workers is not None:
        workers.start(schedule)
    sampler = asyncio.get_running_loop().create_task(
        _sample(pids, env, schedule.measure_from, schedule.end, committing))
    spy = loop_task = None
    if settings.profile == "py-spy" and SERVER_PROCESS[target.name] == "zkcoord":
        spy_path = env.workdir / f"py-spy-{target.name}-{scenario.replace(' ', '-').replace('/', '')}.txt"
        loop_task = asyncio.get_running_loop().create_task(_spy(env, schedule.measure_from, settings.duration_s, spy_path))
    if workers is None:
        per_member = await asyncio.gather(*(member_requests(m.conn, templates[i], i, schedule, len(sentinels), errors_of,
                                                            errors) for i, m in enumerate(members)))
        cpu, zk_txns = await sampler
    else:
        try:
            latencies, their_errors = await workers.results()
            cpu, zk_txns = await sampler
        finally:
            workers.close()
        per_member = [latencies]
        errors.update(their_errors)
    for name in list(cpu):  # the load processes are the client
        if name.startswith("load-"):
            cpu["client"] += cpu.pop(name)
    if loop_task is not None:
        spy = await loop_task
        if spy is not None:
            pyspy_report.summary(spy)
    latencies = sorted(x for member_latencies in per_member for x in member_latencies)
    return LoadResult(scenario, target.name, len(latencies), settings.duration_s, percentile(latencies, 0.5) * 1e3,
                      percentile(latencies, 0.99) * 1e3, dict(errors), cpu, zk_txns)


async def steady_state(target: Target, versions: dict[str, int], env: Environment,
                       settings: Settings, round_index: int = 0) -> list[LoadResult]:
    """Heartbeats and commits from members of ``--groups`` Stable groups
    (new ones in each round)."""
    groups = [f"bench-{target.name}-{i}" + (f"-r{round_index}" if round_index else "") for i in range(settings.groups)]
    per_group = settings.members // settings.groups
    members = await open_members(target, groups, per_group, COMMIT_TOPIC, per_group * settings.commit_partitions,
                                 versions, settings)
    results = []

    async def measure(scenario: str, paced_rate: int | None = None) -> None:
        result = await load(scenario, target, members, env, settings, paced_rate=paced_rate)
        result.round = round_index
        results.append(result)
        _progress(result, settings.load_rounds)

    try:
        stop = asyncio.Event()
        tasks = maintain(members, stop, settings)
        await wait_stable(members, tasks, quiet_s=5 * settings.interval_s)
        stop.set()
        await asyncio.gather(*tasks)
        print(f"  {target.name}: {len(groups)} groups of {per_group} Stable; FindCoordinator on "
              f"{target.address[0]}:{target.address[1]} answered {target.describe_coordinators(groups)}", flush=True)
        if "heartbeat" in settings.only:
            await measure("heartbeat max")
            await measure(f"heartbeat @{settings.paced_rate}/s", paced_rate=settings.paced_rate)
        if "commit" in settings.only:
            await measure("commit max")
    finally:
        await close_members(members)
    return results


def _progress(result: LoadResult, rounds: int = 1) -> None:
    of = f" (round {result.round + 1} of {rounds})" if rounds > 1 else ""
    print(f"  {result.target}: {result.scenario}: {result.rate:,.0f}/s, p99 {result.p99_ms:.1f} ms{of}", flush=True)


def _last(member: Member, what: str, since: float, generation: int | None = None) -> float | None:
    times = [t for w, t, g in member.events if w == what and t >= since and (generation is None or g == generation)]
    return max(times) if times else None


async def rebalance(target: Target, versions: dict[str, int], env: Environment,
                    settings: Settings) -> list[RebalanceRound]:
    group = f"bench-rebalance-{target.name}"
    members = await open_members(target, [group], settings.rebalance_members, REBALANCE_TOPIC,
                                 settings.partitions, versions, settings)
    offered = members[0].notice is not None
    print(f"  {target.name}: rebalance notice {'used (offered by the server)' if offered else 'not used'}"
          f"{'' if offered or settings.notice == 'off' else ' (not offered by the server)'}", flush=True)
    stop = asyncio.Event()
    tasks = maintain(members, stop, settings)
    rounds = []
    phases = random.Random(settings.join_phase_seed)  # the same join moments for every target
    try:
        await wait_stable(members, tasks, quiet_s=1.0)
        for _ in range(settings.rebalance_rounds):
            phase_s = phases.uniform(0.0, settings.interval_s)
            rounds.append(await _one_rebalance(target, group, members, tasks, stop, versions, env, settings,
                                               phase_s))
            r = rounds[-1]
            print(f"  {target.name}: rebalance {r.members_before} -> {r.members_before + 1}: {r.total_ms:.0f} ms, "
                  f"{r.zk_txns} ZooKeeper transactions", flush=True)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
        await close_members(members)
    return rounds


async def _one_rebalance(target, group, members, tasks, stop, versions, env, settings,
                         phase_s: float) -> RebalanceRound:
    await wait_stable(members, tasks, quiet_s=1.0)
    await asyncio.sleep(phase_s)  # a random point of the members' heartbeat cycle
    (newcomer,) = await open_members(target, [group], 1, REBALANCE_TOPIC, settings.partitions, versions, settings)
    before_generation = members[0].synced_generation
    zk_before = await asyncio.to_thread(zk_counters, env.zk_port, env.namespace)
    version_before = await asyncio.to_thread(env.state_version, group)
    cpu_before = cpu_snapshot(env.pids)
    t0 = time.perf_counter()
    old = list(members)
    members.append(newcomer)
    tasks.append(asyncio.get_running_loop().create_task(newcomer.maintain(stop, settings.interval_s)))
    await wait_stable(members, tasks, quiet_s=0.0, newer_than=before_generation)
    generation = members[0].synced_generation
    done = max(_last(m, "synced", t0, generation) for m in members)
    cpu = cpu_cores(cpu_before, cpu_snapshot(env.pids))
    await wait_stable(members, tasks, quiet_s=1.0, newer_than=before_generation)  # no second rebalance
    if members[0].synced_generation != generation:
        generation = members[0].synced_generation
        done = max(_last(m, "synced", t0, generation) for m in members)
    noticed = [_last(m, "noticed", t0) for m in old]
    joined = max(_last(m, "joined", t0, generation) for m in members)
    zk_after = await asyncio.to_thread(zk_counters, env.zk_port, env.namespace)
    version_after = await asyncio.to_thread(env.state_version, group)
    versions_written = None if version_after is None or version_before is None else version_after - version_before
    return RebalanceRound(target.name, len(old), (done - t0) * 1e3,
                          (max(t for t in noticed if t is not None) - t0) * 1e3 if any(noticed) else float("nan"),
                          (joined - t0) * 1e3, zk_after[0] - zk_before[0], zk_after[1] - zk_before[1],
                          versions_written, cpu)


# -- the run and the report ----------------------------------------------------------------

def target_addresses(env: Environment) -> dict[str, tuple[str, int] | None]:
    """Where each target's members bootstrap: the daemon's listener, its gateway, the broker."""
    return {"zkcoord": env.daemon_address, "gateway": env.gateway_address, "kafka": env.kafka_address}


async def run(env: Environment, settings: Settings) -> tuple[list[LoadResult], list[RebalanceRound], dict]:
    addresses = target_addresses(env)
    targets = [Target(name, addresses[name], connect=env.connect) for name in settings.targets]
    served = []
    for target in targets:
        conn = await KafkaConnection.open(*target.address, "zkcoord-bench", **target.connect)
        served.append(await served_versions(conn))
        conn.close()
    versions = common_versions(*served)
    print(f"API versions used for {', '.join(settings.targets)}: "
          + ", ".join(f"{k} v{v}" for k, v in versions.items()), flush=True)
    loads, rounds = [], []
    if {"heartbeat", "commit"} & set(settings.only):
        for round_index in range(settings.load_rounds):  # alternating: a slow spell of the machine hits both
            for target in targets:
                loads += await steady_state(target, versions, env, settings, round_index)
    if "rebalance" in settings.only:
        for target in targets:
            rounds += await rebalance(target, versions, env, settings)
    return loads, rounds, versions


def _fmt_cpu(cpu: dict[str, float], server: str) -> str:
    return (f"{cpu.get(server, 0):5.2f} {cpu.get('zookeeper', 0):5.2f} {cpu.get('client', 0):5.2f} "
            f"{cpu.get('other', 0):5.2f}")


def _goal(ok: bool) -> str:
    return "met" if ok else "MISSED"


def median_results(loads: list[LoadResult]) -> list[LoadResult]:
    """One result per (scenario, target), in the order first run: each
    figure the median of its rounds' (errors summed), ``round`` -1."""
    grouped: dict[tuple[str, str], list[LoadResult]] = {}
    for r in loads:
        grouped.setdefault((r.scenario, r.target), []).append(r)
    out = []
    for (scenario, target), runs in grouped.items():
        if len(runs) == 1:
            out.append(runs[0])
            continue
        errors: collections.Counter = collections.Counter()
        for r in runs:
            errors.update(r.errors)
        cpu_keys = dict.fromkeys(k for r in runs for k in r.cpu)
        out.append(LoadResult(scenario, target, round(statistics.median(r.requests for r in runs)), runs[0].duration_s,
                              statistics.median(r.p50_ms for r in runs), statistics.median(r.p99_ms for r in runs),
                              dict(errors), {k: statistics.median(r.cpu.get(k, 0.0) for r in runs) for k in cpu_keys},
                              round(statistics.median(r.zk_txns for r in runs)), round=-1))
    return out


def _load_table(loads: list[LoadResult], rounds: int) -> None:
    print(f"{'scenario':<22} {'target':<8} " + (f"{'round':>5} " if rounds > 1 else "")
          + f"{'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7} "
          f"{'zk txn/s':>9} {'server us/req':>14}   cores: server    zk client other")
    for r in loads:
        errors = sum(r.errors.values())
        which = (f"{'med' if r.round < 0 else r.round + 1:>5} " if rounds > 1 else "")
        print(f"{r.scenario:<22} {r.target:<8} {which}{r.rate:>9,.0f} {r.p50_ms:>8.2f} {r.p99_ms:>8.2f} {errors:>7} "
              f"{r.zk_txns / r.duration_s:>9,.0f} {r.server_us_per_request:>14.0f}   {'':>6}{_fmt_cpu(r.cpu, r.server)}")
        if r.errors:
            print(f"{'':<31}error codes: {r.errors}")


def report(loads: list[LoadResult], rounds: list[RebalanceRound], settings: Settings) -> None:
    print("\n== load (closed loop: every connection has one request in flight) ==")
    _load_table(loads, settings.load_rounds)
    medians = median_results(loads)
    if settings.load_rounds > 1:
        print(f"\n== load: medians of {settings.load_rounds} rounds (each figure on its own) ==")
        _load_table(medians, settings.load_rounds)
    if rounds:
        print(f"\n== rebalance: {settings.rebalance_members} members + 1 joining, {settings.partitions} partitions, "
              f"heartbeat every {settings.heartbeat_interval_ms} ms (all targets) ==")
        print(f"{'target':<8} {'members':>9} {'total ms':>9} {'noticed ms':>11} {'joined ms':>10} "
              f"{'zk txns':>8} {'znode writes':>13} {'state versions':>15}")
        for r in rounds:
            print(f"{r.target:<8} {f'{r.members_before}->{r.members_before + 1}':>9} {r.total_ms:>9.0f} "
                  f"{r.noticed_ms:>11.0f} {r.joined_ms:>10.0f} {r.zk_txns:>8} {r.znode_writes:>13} "
                  f"{'-' if r.state_versions is None else r.state_versions:>15}")
    _ratios(medians, rounds, settings, loads)


def _ratios(loads: list[LoadResult], rounds: list[RebalanceRound], settings: Settings,
            every_round: list[LoadResult] = ()) -> None:
    """The ratios and goals of ``loads`` (one per scenario and target: the
    medians of several rounds), with each round's own ratios after them."""
    print("\n== ratios zkcoord / kafka, and goals" + (f" (medians of {settings.load_rounds} rounds)"
                                                    if settings.load_rounds > 1 else "") + " ==")
    by = {(r.scenario, r.target): r for r in loads}
    each = {(r.scenario, r.target, r.round): r for r in every_round}
    for scenario in dict.fromkeys(r.scenario for r in loads):
        z, k = by.get((scenario, "zkcoord")), by.get((scenario, "kafka"))
        if z and k:
            print(f"{scenario:<22} rate {z.rate / k.rate:5.2f}x   p50 {z.p50_ms / k.p50_ms:5.2f}x   "
                  f"p99 {z.p99_ms / k.p99_ms:5.2f}x")
            pairs = [(each[(scenario, "zkcoord", i)], each[(scenario, "kafka", i)]) for i in range(settings.load_rounds)
                     if (scenario, "zkcoord", i) in each and (scenario, "kafka", i) in each]
            if len(pairs) > 1:
                print(f"{'':<22} each round: rate {', '.join(f'{a.rate / b.rate:.2f}x' for a, b in pairs)}; "
                      f"p99 {', '.join(f'{a.p99_ms / b.p99_ms:.2f}x' for a, b in pairs)}")
    z_max, z_paced = by.get(("heartbeat max", "zkcoord")), by.get((f"heartbeat @{settings.paced_rate}/s", "zkcoord"))
    if z_max:
        print(f"goal heartbeats >= 10,000/s: {z_max.rate:,.0f}/s, {_goal(z_max.rate >= 10_000)} "
              f"(one core at {z_max.server_us_per_request:.0f} us/heartbeat would give "
              f"{1e6 / max(z_max.server_us_per_request, 1):,.0f}/s)")
    if z_paced:
        ok = z_paced.rate >= 0.95 * settings.paced_rate and z_paced.p99_ms < 10
        print(f"goal p99 < 10 ms at {settings.paced_rate:,}/s: achieved {z_paced.rate:,.0f}/s with p99 "
              f"{z_paced.p99_ms:.1f} ms, {_goal(ok)}")
    z_commit = by.get(("commit max", "zkcoord"))
    if z_commit:
        print(f"goal commits >= 5,000/s: {z_commit.rate:,.0f}/s, {_goal(z_commit.rate >= 5_000)} "
              f"({z_commit.rate / max(z_commit.zk_txns / z_commit.duration_s, 1e-9):.0f} commits per "
              f"ZooKeeper multi)")
    z_rounds = [r.total_ms for r in rounds if r.target == "zkcoord"]
    k_rounds = [r.total_ms for r in rounds if r.target == "kafka"]
    if z_rounds and k_rounds:
        ratio = statistics.median(z_rounds) / statistics.median(k_rounds)
        print(f"goal rebalance latency ratio <= 1.0: median {statistics.median(z_rounds):.0f} ms / "
              f"{statistics.median(k_rounds):.0f} ms = {ratio:.2f}, {_goal(ratio <= 1.0)}")
        after = {t: [r.total_ms - r.noticed_ms for r in rounds if r.target == t] for t in ("zkcoord", "kafka")}
        noticed = {t: [r.noticed_ms for r in rounds if r.target == t] for t in ("zkcoord", "kafka")}
        print(f"  split (medians): until the last old member noticed {statistics.median(noticed['zkcoord']):.0f} "
              f"vs {statistics.median(noticed['kafka']):.0f} ms; from then to the last new assignment "
              f"{statistics.median(after['zkcoord']):.1f} vs {statistics.median(after['kafka']):.1f} ms "
              f"({statistics.median(after['zkcoord']) / statistics.median(after['kafka']):.2f}x)")
    z_txns = [r.zk_txns for r in rounds if r.target == "zkcoord"]
    if z_txns:
        print(f"goal ZooKeeper writes per rebalance <= 2: max {max(z_txns)} transactions, {_goal(max(z_txns) <= 2)}")
    _gateway_ratios(by, rounds, settings)
    print("numbers are preliminary on a shared 2-core machine: see the 'other' cores column")


def _gateway_ratios(by: dict[tuple[str, str], LoadResult], rounds: list[RebalanceRound], settings: Settings) -> None:
    """gateway / zkcoord: one daemon in one run, through its gateway and through its own listener."""
    pairs = {scenario: (by[(scenario, "gateway")], by[(scenario, "zkcoord")])
             for scenario, target in by if target == "gateway" and (scenario, "zkcoord") in by}
    g_rounds = [r.total_ms for r in rounds if r.target == "gateway"]
    z_rounds = [r.total_ms for r in rounds if r.target == "zkcoord"]
    if not pairs and not (g_rounds and z_rounds):
        return
    print("\n== ratios gateway / zkcoord (the same daemon: its gateway vs its own listener)"
          + (", and goals ==" if pairs else " =="))
    for scenario, (g, z) in pairs.items():
        print(f"{scenario:<22} rate {g.rate / z.rate:5.2f}x   p50 {g.p50_ms / z.p50_ms:5.2f}x   "
              f"p99 {g.p99_ms / z.p99_ms:5.2f}x   server us/req "
              f"{g.server_us_per_request / max(z.server_us_per_request, 1e-9):5.2f}x")
    low, high = 1 - GATEWAY_GOAL, 1 + GATEWAY_GOAL

    def judged(ok: bool, g: LoadResult, z: LoadResult) -> str:
        return _goal(ok) if not (g.errors or z.errors) else "MISSED (error responses: not comparable)"

    paced = f"heartbeat @{settings.paced_rate}/s"
    if pairs:
        print(f"goal: the gateway's heartbeat and commit figures within {GATEWAY_GOAL:.0%} of the direct daemon's")
    if "heartbeat max" in pairs:
        g, z = pairs["heartbeat max"]
        ratio = g.rate / z.rate
        print(f"  heartbeats, closed loop: {g.rate:,.0f}/s vs {z.rate:,.0f}/s = {ratio:.2f}x (>= {low:.2f}), "
              f"{judged(ratio >= low, g, z)}")
    if paced in pairs:
        g, z = pairs[paced]
        ratio = g.p99_ms / z.p99_ms
        kept_up = g.rate >= low * z.rate
        print(f"  heartbeat p99 at {settings.paced_rate:,}/s: {g.p99_ms:.2f} ms vs {z.p99_ms:.2f} ms = {ratio:.2f}x "
              f"(<= {high:.2f}; achieved {g.rate:,.0f}/s vs {z.rate:,.0f}/s), "
              f"{judged(ratio <= high and kept_up, g, z)}")
    if "commit max" in pairs:
        g, z = pairs["commit max"]
        ratio = g.rate / z.rate
        print(f"  commits, closed loop: {g.rate:,.0f}/s vs {z.rate:,.0f}/s = {ratio:.2f}x (>= {low:.2f}), "
              f"{judged(ratio >= low, g, z)}")
    if g_rounds and z_rounds:
        ratio = statistics.median(g_rounds) / statistics.median(z_rounds)
        notice = (" (not a goal; with --notice on the direct members also use the rebalance notice, which the "
                  "gateway does not offer: --notice off compares heartbeats alone)" if settings.notice == "on"
                  else " (not a goal)")
        print(f"rebalance latency: median {statistics.median(g_rounds):.0f} ms / {statistics.median(z_rounds):.0f} ms "
              f"= {ratio:.2f}x{notice}")


def print_profile(path: Path, top: int = 30) -> None:
    if not path.exists():
        print(f"no profile at {path} (the daemon did not exit cleanly)")
        return
    if path.suffix == ".txt":  # pyinstrument's text report: a call tree with time per frame
        lines = path.read_text().splitlines()
        print(f"\n== zkcoord daemon profile ({path}; first {4 * top} lines) ==")
        print("\n".join(lines[:4 * top]))
        return
    import pstats

    print(f"\n== zkcoord daemon profile ({path}; top {top} by own time, then cumulative) ==")
    stats = pstats.Stats(str(path))
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(r"zkcoord", top)


def parse_args(argv: list[str] | None = None) -> tuple[Settings, Path | None, Path | None]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = Settings()
    helps = {
        "members": "members of the heartbeat/commit groups", "groups": "groups they form",
        "paced_rate": "heartbeats/s in total in the paced run",
        "commit_partitions": "partitions per OffsetCommit", "rebalance_members": "members before the join",
        "partitions": "partitions the rebalance group shares", "rebalance_rounds": "joins measured",
        "heartbeat_interval_ms": "how often members heartbeat while not under load (every target)",
        "session_timeout_ms": "members' session time-out", "rebalance_timeout_ms": "members' rebalance time-out",
        "duration_s": "measured seconds per load run", "warmup_s": "unmeasured seconds before each",
        "join_phase_seed": "seed of each rebalance round's join moment within a heartbeat interval",
        "load_rounds": "heartbeat and commit runs: every target this many times, alternating (new groups each "
                       "time); the ratios and goals are judged on each figure's median, each round's ratios "
                       "printed too",
        "load_processes": "heartbeat and commit runs: 1 sends every member's requests from this process; N "
                          "from N processes of their own (bench/load_procs.py), when one process cannot keep "
                          "up with the server",
        "notice": "on: rebalance members keep a held heartbeat in flight where the server offers the "
                  "rebalance notice (the daemon's listener does; Kafka and the gateway do not); off: "
                  "heartbeats only, on every target",
    }
    for name, text in helps.items():
        default = getattr(defaults, name)
        parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default,
                            help=f"{text} [default: {default}]")
    parser.add_argument("--only", default=",".join(defaults.only), help="heartbeat,commit,rebalance")
    parser.add_argument("--targets", default=",".join(defaults.targets),
                        help="any of zkcoord (the daemon's own listener), gateway (the same daemon's gateway; "
                             "the daemon then runs one) and kafka (the broker's coordinator), in the order run "
                             f"[default: {','.join(defaults.targets)}]")
    parser.add_argument("--profile", choices=["cprofile", "pyinstrument", "py-spy"], default="",
                        help="run the daemon under this profiler and print its hot spots "
                             "(pyinstrument: pip install pyinstrument into the venv); py-spy: sample the "
                             "running daemon during each of its load runs and print where its time went "
                             "(pip install py-spy; pyspy_report.py)")
    parser.add_argument("--workers", type=int, default=1,
                        help="the daemon's zkcoord run --workers (each its own node; members reach the owning "
                             "worker through FindCoordinator); its CPU counts every worker [default: 1]")
    parser.add_argument("--secure", action="store_true",
                        help="TLS on both sides: a secure sandbox (zkcoord local up --secure: SASL_SSL with "
                             "SCRAM-SHA-512 and Kafka's AclAuthorizer on the broker) and the daemon started as that "
                             "sandbox starts its own (SASL_SSL, SCRAM, the same ACLs); every member connects over "
                             "TLS and logs in as the sandbox's admin user, on every target")
    parser.add_argument("--workdir", type=Path, help="where logs, the sandbox and the profile go [a new temp dir]")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    args = vars(parser.parse_args(argv))
    workdir, json_path = args.pop("workdir"), args.pop("json")
    workers, secure = args.pop("workers"), args.pop("secure")
    args["only"] = tuple(s for s in args["only"].split(",") if s)
    args["targets"] = tuple(s for s in args["targets"].split(",") if s)
    if secure and "rebalance" in args["only"] and args["notice"] == "on":
        parser.error("--secure: the rebalance notice connection is plaintext only; add --notice off")
    return Settings(**args), workdir, json_path, workers, secure


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    settings, workdir, json_path, workers, secure = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM cleans up as Ctrl-C does
    workdir = workdir or Path(tempfile.mkdtemp(prefix="zkcoord-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"zkcoord benchmark; workdir {workdir}; {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    env = Environment(workdir, topic=COMMIT_TOPIC, profiler=settings.profile, gateway="gateway" in settings.targets,
                      topic_partitions=settings.members // settings.groups * settings.commit_partitions,
                      workers=workers, secure=secure)
    print(f"zkcoord run --workers {workers}" + (" (TLS: SASL_SSL on the daemon and the broker)" if secure else ""),
          flush=True)
    code = 1
    try:
        env.start()
        loads, rounds, versions = asyncio.run(run(env, settings))
        report(loads, rounds, settings)
        if json_path:
            json_path.write_text(json.dumps({"settings": asdict(settings), "versions": versions,
                                             "addresses": target_addresses(env),
                                             "load": [asdict(r) for r in loads],
                                             "rebalance": [asdict(r) for r in rounds]}, indent=2))
        code = 0
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("\ninterrupted", file=sys.stderr)
        code = 130
    except BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # let the cleanup finish
            signal.signal(sig, signal.SIG_IGN)
        env.stop()
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if env.profile_path is not None and code == 0:
        print_profile(env.profile_path)
    print(f"logs in {workdir}")
    return code


if __name__ == "__main__":
    sys.exit(main())
