"""Benchmark: KIP-848's consumer protocol on zkcoord's daemon beside Kafka 4.4's own coordinator.

Run by hand, never by the test suite; it prints tables and ratios against
the peer measured in the same run and never asserts on time (see
``bench/README.md``)::

    .venv/bin/python bench/bench_consumer_protocol.py            # everything, ~10 minutes
    .venv/bin/python bench/bench_consumer_protocol.py --quick    # every scenario, smaller and shorter
    .venv/bin/python bench/bench_consumer_protocol.py --only join --join-rounds 3

The script owns its whole environment: a sandbox (``zkcoord local up
--kafka4``: ZooKeeper, a Kafka 3.9 broker in ZooKeeper mode and a Kafka 4.4
node in KRaft mode, the latter with this run's ``group.consumer.*``
settings) in a state directory of its own, one ``zkcoord run`` daemon in the
brokers' ZooKeeper root (it learns topics from ``/brokers/topics``, as a
production daemon beside ZooKeeper-mode brokers does), and it stops both at
the end, on error, on Ctrl-C and on SIGTERM. Both coordinators get the same
heartbeat interval, session time-out and assignment interval; both use
their default server-side assignor (uniform).

Targets (``--targets``), in the order run:

- ``zkcoord``: the daemon's listener, KIP-848 members (``consumer_client.py``);
  their topics on the 3.9 broker;
- ``kafka4``: the Kafka 4.4 node's coordinator, the same members; their
  topics on that node;
- ``zkcoord-classic`` (join only): the daemon's listener, classic members
  (``group_client.Member``, range-assigned by the leader), same group size;
- ``java4-gateway``: reserved for Kafka's Java 4.4 consumers through
  zkcoord's gateway (not measured yet; see :func:`java4_gateway`).

Scenarios (``--only``):

1. ``join``: a settled group of ``--join-members`` over ``--join-partitions``;
   one member joins; the time until every member is at one epoch and owns
   its share (seeded heartbeat phases, the same on every target).
2. ``kip``: KIP-848's "10 consumers adding 900 partitions": a settled group of
   ``--kip-members`` on a topic of ``--kip-initial-partitions``, then
   ``--kip-added-partitions`` added (CreatePartitions); the time until every
   member owns its share. Kafka published 5 s for its new protocol (103 s
   for the classic one).
3. ``steady``: ``--steady-members`` members in ``--steady-groups`` settled
   groups send their steady heartbeat back to back, then paced.
4. ``writes`` (zkcoord): ZooKeeper transactions, znode writes and bytes per
   reconciliation step (join, revocation, acknowledgement, leave, ...).

Files: this one (settings, environment, report), ``consumer_scenarios.py``
(the scenarios), ``classic_scenario.py`` (the classic baseline),
``consumer_client.py`` (the KIP-848 member),
``group_client.py`` (the connection, classic members), ``bench_env.py``
(sandbox, daemon, meters).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

# This checkout's code, in this process and in the ones it starts (zkcoord local, zkcoord run), whatever
# the venv's editable install points at.
REPOSITORY = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(Path(__file__).resolve().parent), str(REPOSITORY)]
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")]))

from bench_env import Environment  # noqa: E402  (after the path tweak)
from consumer_client import heartbeat_version  # noqa: E402
from classic_scenario import classic_join_scenario  # noqa: E402
from consumer_scenarios import Target, grow_scenario, join_scenario, steady_scenario, writes_scenario  # noqa: E402
from group_client import BenchError, KafkaConnection, common_versions, served_versions  # noqa: E402

TARGETS = ("zkcoord", "kafka4", "zkcoord-classic", "java4-gateway")
SCENARIOS = ("join", "kip", "steady", "writes")
JOIN_TOPIC, STEADY_TOPIC, KIP_TOPIC = "bench-cp-join", "bench-cp-steady", "bench-cp-kip"
KAFKA_PUBLISHED_KIP_S = 5.0  # KIP-848: "10 consumers adding 900 partitions: 5 s against 103 s"
SERVER_PROCESS = {"zkcoord": "zkcoord", "kafka4": "kafka4", "zkcoord-classic": "zkcoord"}


@dataclass(frozen=True)
class Settings:
    heartbeat_interval_ms: int = 5000
    session_timeout_ms: int = 45_000
    assignment_interval_ms: int = 1000
    rebalance_timeout_ms: int = 300_000  # the Java consumer's max.poll.interval.ms
    classic_rebalance_timeout_ms: int = 60_000
    setup_heartbeat_ms: int = 250  # while a group is set up (never measured)
    quiet_s: float = 1.5  # before each measured round: longer than the assignment interval
    seed: int = 1
    join_members: int = 100
    join_partitions: int = 1000
    join_rounds: int = 5
    kip_members: int = 10
    kip_initial_partitions: int = 100
    kip_added_partitions: int = 900
    kip_rounds: int = 3
    steady_members: int = 1000
    steady_groups: int = 10
    steady_partitions: int = 1000
    duration_s: float = 10.0
    warmup_s: float = 2.0
    paced_rate: int = 2000
    only: tuple[str, ...] = SCENARIOS
    targets: tuple[str, ...] = ("zkcoord", "kafka4", "zkcoord-classic")
    profile: str = ""

    def __post_init__(self) -> None:
        unknown = set(self.only) - set(SCENARIOS) | set(self.targets) - set(TARGETS)
        if unknown:
            raise SystemExit(f"unknown scenario or target: {', '.join(sorted(unknown))} "
                             f"(scenarios: {', '.join(SCENARIOS)}; targets: {', '.join(TARGETS)})")
        if self.steady_members % self.steady_groups:
            raise SystemExit(f"--steady-members {self.steady_members} must be a multiple of --steady-groups "
                             f"{self.steady_groups}")
        if not 1 <= self.heartbeat_interval_ms <= 15_000:
            raise SystemExit("--heartbeat-interval-ms must be 1 to 15000 (Kafka's maximum heartbeat interval)")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise SystemExit("--heartbeat-interval-ms must be below --session-timeout-ms")
        if self.quiet_s * 1000 <= self.assignment_interval_ms:
            raise SystemExit("--quiet-s must be longer than --assignment-interval-ms")

    def kafka4_config(self) -> list[str]:
        """``--kafka4-config`` values: Kafka's bounds moved so that our values are accepted."""
        hb, session = self.heartbeat_interval_ms, self.session_timeout_ms
        return [f"group.consumer.heartbeat.interval.ms={hb}", f"group.consumer.min.heartbeat.interval.ms={min(hb, 5000)}",
                f"group.consumer.session.timeout.ms={session}",
                f"group.consumer.min.session.timeout.ms={min(session, 45_000)}",
                f"group.consumer.max.session.timeout.ms={max(session, 60_000)}",
                f"group.consumer.assignment.interval.ms={self.assignment_interval_ms}"]

    def daemon_args(self) -> tuple[str, ...]:
        return ("--group-consumer-heartbeat-interval-ms", str(self.heartbeat_interval_ms),
                "--group-consumer-session-timeout-ms", str(self.session_timeout_ms),
                "--group-consumer-assignment-interval-ms", str(self.assignment_interval_ms))


QUICK = {"join_rounds": 2, "kip_rounds": 1, "steady_members": 200, "steady_groups": 2, "duration_s": 3.0,
         "warmup_s": 1.0, "heartbeat_interval_ms": 1000, "paced_rate": 1000}


# -- the environment and the targets ---------------------------------------------------------------

def make_environment(workdir: Path, settings: Settings) -> Environment:
    sandbox_args = ("--kafka4", *(a for kv in settings.kafka4_config() for a in ("--kafka4-config", kv)))
    return Environment(workdir, topic=None, topic_partitions=0, profiler=settings.profile,
                       daemon_args=settings.daemon_args(), sandbox_args=sandbox_args, broker_chroot=True,
                       keep_sandbox_logs=True)


def topics_needed(settings: Settings) -> list[tuple[str, int]]:
    topics = []
    if {"join", "writes"} & set(settings.only):
        topics.append((JOIN_TOPIC, settings.join_partitions))
    if "steady" in settings.only:
        topics.append((STEADY_TOPIC, settings.steady_partitions))
    if "kip" in settings.only:
        topics += [(f"{KIP_TOPIC}-{i}", settings.kip_initial_partitions) for i in range(settings.kip_rounds)]
    return topics


ADMIN_TIMEOUT_MS = 300_000  # a 3.9 broker in ZooKeeper mode creates 1,000 partitions in tens of seconds on 2 busy cores


def _admin(broker: tuple[str, int], client_id: str):
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=f"{broker[0]}:{broker[1]}", client_id=client_id,
                            request_timeout_ms=ADMIN_TIMEOUT_MS)


def create_topics(broker: tuple[str, int], topics: list[tuple[str, int]]) -> None:
    """Create ``topics`` on ``broker`` and wait until every partition has a leader."""
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError

    admin = _admin(broker, "zkcoord-bench")
    where = f"{broker[0]}:{broker[1]}"
    try:
        admin.create_topics([NewTopic(name, num_partitions=n, replication_factor=1) for name, n in topics],
                            timeout_ms=ADMIN_TIMEOUT_MS)
        deadline = time.monotonic() + ADMIN_TIMEOUT_MS / 1000
        wanted = dict(topics)
        while wanted:
            for described in admin.describe_topics(list(wanted)):
                leaders = [p for p in described["partitions"] if p["leader_id"] >= 0]
                if described["error_code"] == 0 and len(leaders) == wanted[described["name"]]:
                    del wanted[described["name"]]
            if wanted and time.monotonic() > deadline:
                raise BenchError(f"topics {', '.join(wanted)} on {where}: not every partition has a leader after "
                                 f"{ADMIN_TIMEOUT_MS / 1000:g} s")
            time.sleep(0.5)
    except KafkaError as exc:
        raise BenchError(f"creating topics on {where}: {exc}") from None
    finally:
        admin.close()


class Grower:
    """CreatePartitions on one broker, from an admin client connected
    beforehand (:meth:`open`), so that a round times the request alone."""

    def __init__(self, broker: tuple[str, int]) -> None:
        self.broker = broker
        self._admin = None

    def open(self) -> None:
        self._admin = _admin(self.broker, "zkcoord-bench-grow")

    def grow(self, topic: str, total: int) -> None:
        from kafka.admin import NewPartitions
        from kafka.errors import KafkaError

        try:
            self._admin.create_partitions({topic: NewPartitions(total_count=total)}, timeout_ms=ADMIN_TIMEOUT_MS)
        except KafkaError as exc:
            raise BenchError(f"adding partitions to {topic} on {self.broker[0]}:{self.broker[1]}: {exc}") from None

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None


async def make_targets(env: Environment, settings: Settings) -> list[Target]:
    if "java4-gateway" in settings.targets:
        java4_gateway()
    brokers = {"zkcoord": env.kafka_address, "zkcoord-classic": env.kafka_address, "kafka4": env.kafka4_address}
    addresses = {"zkcoord": env.daemon_address, "zkcoord-classic": env.daemon_address, "kafka4": env.kafka4_address}
    targets = []
    for name in settings.targets:
        conn = await KafkaConnection.open(*addresses[name], "zkcoord-bench")
        try:
            served = await served_versions(conn)
        finally:
            conn.close()
        target = Target(name, addresses[name], brokers[name], SERVER_PROCESS[name],
                        "classic" if name == "zkcoord-classic" else "consumer", counts_zk=name.startswith("zkcoord"))
        if target.protocol == "consumer":
            target.heartbeat_version = heartbeat_version(served, f"{name} at {addresses[name][0]}:{addresses[name][1]}")
        else:
            target.classic_versions = common_versions(served)
        targets.append(target)
    return targets


def java4_gateway() -> None:
    """The next target (issue 25's later step): Kafka's Java 4.4 consumers
    (``group.protocol=consumer``) bootstrapping from zkcoord's gateway, on the
    same groups and rounds. It needs a driver JVM that runs N consumers,
    timestamps each ``onPartitionsAssigned``/``onPartitionsRevoked`` and takes
    the round's start from the benchmark (tests/support/java has the
    harness pattern), and the daemon started with ``--bootstrap-servers``
    and ``--gateway-listen`` (``Environment(gateway=True)``). Until then:"""
    raise BenchError("target java4-gateway is not measured yet (Kafka's Java 4.4 consumers through zkcoord's "
                     "gateway: the next step of issue 25); leave it out of --targets")


async def run(env: Environment, settings: Settings) -> dict:
    targets = await make_targets(env, settings)
    for target in targets:
        print(f"{target.name}: bootstrap {target.address[0]}:{target.address[1]}, "
              + (f"ConsumerGroupHeartbeat v{target.heartbeat_version}" if target.protocol == "consumer" else
                 "classic " + ", ".join(f"{k} v{v}" for k, v in target.classic_versions.items())), flush=True)
    topics = topics_needed(settings)
    brokers = list(dict.fromkeys(t.broker for t in targets))
    print(f"creating {len(topics)} topics ({sum(n for _, n in topics):,} partitions) on "
          f"{', '.join(f'{h}:{p}' for h, p in brokers)} ...", flush=True)
    await asyncio.gather(*(asyncio.to_thread(create_topics, broker, topics) for broker in brokers))
    results: dict = {"join": [], "classic": [], "kip": [], "steady": [], "writes": []}
    consumer = [t for t in targets if t.protocol == "consumer"]
    if "join" in settings.only:
        print("\n== join ==", flush=True)
        for target in targets:
            if target.protocol == "consumer":
                results["join"] += await join_scenario(target, env, settings, JOIN_TOPIC)
            else:
                results["classic"] += await classic_join_scenario(target, env, settings, JOIN_TOPIC)
    if "kip" in settings.only:
        print("\n== kip: partitions added ==", flush=True)
        kip_topics = [f"{KIP_TOPIC}-{i}" for i in range(settings.kip_rounds)]
        for target in consumer:
            results["kip"] += await grow_scenario(target, env, settings, kip_topics, Grower(target.broker))
    if "steady" in settings.only:
        print("\n== steady heartbeats ==", flush=True)
        for target in consumer:
            results["steady"] += await steady_scenario(target, env, settings, STEADY_TOPIC)
    if "writes" in settings.only:
        print("\n== ZooKeeper writes per step ==", flush=True)
        for target in consumer:
            if target.name == "zkcoord":
                results["writes"] += await writes_scenario(target, env, settings, JOIN_TOPIC)
    return results


# -- the report ----------------------------------------------------------------------------------------

def _med(values) -> str:
    """median [min-max] of a list of numbers, ms or counts."""
    values = list(values)
    if not values:
        return "-"
    m = statistics.median(values)
    return f"{m:,.0f} [{min(values):,.0f}-{max(values):,.0f}]" if len(values) > 1 else f"{m:,.0f}"


def _median(values) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


def _goal(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _troubles(r) -> str:
    return (f"  fenced {r.fenced}" if r.fenced else "") + (f"  retried {r.retries}" if r.retries else "")


def _zk(zk) -> str:
    return "-" if zk is None else f"{zk.zxid:>5} {zk.writes:>6} {zk.bytes:>9,}"


def report(results: dict, settings: Settings) -> None:
    hb = settings.heartbeat_interval_ms
    if results["join"] or results["classic"]:
        print(f"\n== join: {settings.join_members} members + 1 joining, {settings.join_partitions} partitions, "
              f"heartbeat interval {hb} ms, seeded phases (seed {settings.seed}) ==")
        print(f"{'target':<16} {'members':>8} {'total ms':>9} {'join ms':>8} {'seen ms':>8} {'revoked ms':>10} {'final ms':>9} "
              f"{'beats':>6} {'beat p50':>9} {'beat max':>9} {'server cpu s':>12} {'zk txn writes     bytes':>24}")
        for r in results["join"]:
            print(f"{r.target:<16} {f'{r.members_before}->{r.members_before + 1}':>8} {r.total_ms:>9,.0f} "
                  f"{r.join_ms:>8.1f} {r.target_seen_ms:>8,.0f} {r.last_revoked_ms:>10,.0f} {r.final_step_ms:>9.1f} {r.heartbeats:>6} "
                  f"{r.heartbeat_p50_ms:>9.2f} {r.heartbeat_max_ms:>9.1f} "
                  f"{r.cpu_s.get(SERVER_PROCESS[r.target], 0):>12.3f} {_zk(r.zk):>24}"
                  + _troubles(r))
        if results["classic"]:
            print(f"{'target':<16} {'members':>8} {'total ms':>9} {'noticed ms':>10} {'joined ms':>9} "
                  f"{'server cpu s':>12} {'zk txn writes     bytes':>24}")
            for r in results["classic"]:
                print(f"{r.target:<16} {f'{r.members_before}->{r.members_before + 1}':>8} {r.total_ms:>9,.0f} "
                      f"{r.noticed_ms:>10,.0f} {r.joined_ms:>9,.0f} {r.cpu_s.get('zkcoord', 0):>12.3f} {_zk(r.zk):>24}")
    if results["kip"]:
        total = settings.kip_initial_partitions + settings.kip_added_partitions
        print(f"\n== kip: {settings.kip_members} members, {settings.kip_initial_partitions} -> {total} partitions, "
              f"heartbeat interval {hb} ms ==")
        print(f"{'target':<16} {'total ms':>9} {'created ms':>10} {'noticed ms':>10} {'final ms':>9} {'beats':>6} "
              f"{'server cpu s':>12} {'zk txn writes     bytes':>24}")
        for r in results["kip"]:
            print(f"{r.target:<16} {r.total_ms:>9,.0f} {r.created_ms:>10,.0f} {r.noticed_ms:>10,.0f} "
                  f"{r.final_step_ms:>9.1f} {r.heartbeats:>6} {r.cpu_s.get(SERVER_PROCESS[r.target], 0):>12.3f} "
                  f"{_zk(r.zk):>24}" + _troubles(r))
    if results["steady"]:
        print(f"\n== steady heartbeats: {settings.steady_members} members in {settings.steady_groups} groups ==")
        print(f"{'scenario':<22} {'target':<8} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7} {'zk txn/s':>9} "
              f"{'server us/req':>14}   cores: server    zk client other")
        for r in results["steady"]:
            server = SERVER_PROCESS[r.target]
            us = r.cpu_cores.get(server, 0) * r.duration_s / max(r.requests, 1) * 1e6
            print(f"{r.scenario:<22} {r.target:<8} {r.rate:>9,.0f} {r.p50_ms:>8.2f} {r.p99_ms:>8.2f} "
                  f"{sum(r.errors.values()):>7} {r.zk_txns / r.duration_s:>9,.0f} {us:>14.0f}   {'':>6}"
                  f"{r.cpu_cores.get(server, 0):5.2f} {r.cpu_cores.get('zookeeper', 0):5.2f} "
                  f"{r.cpu_cores.get('client', 0):5.2f} {r.cpu_cores.get('other', 0):5.2f}")
            if r.errors:
                print(f"{'':<31}error codes: {r.errors}")
    if results["writes"]:
        print(f"\n== ZooKeeper per reconciliation step (zkcoord; {settings.join_members} members over "
              f"{settings.join_partitions} partitions; medians [min-max]) ==")
        print(f"{'step':<66} {'count':>5} {'transactions':>12} {'znode writes':>14} {'bytes':>20} {'fsync ms':>9} "
              f"{'ms':>6}")
        labels = list(dict.fromkeys(s.label for s in results["writes"]))
        for label in labels:
            steps = [s for s in results["writes"] if s.label == label]
            fsyncs = sum(s.zk.fsyncs for s in steps)
            fsync = f"{sum(s.zk.fsync_ms for s in steps) / fsyncs:.1f}" if fsyncs else "-"
            print(f"{label:<66} {len(steps):>5} {_med(s.zk.zxid for s in steps):>12} "
                  f"{_med(s.zk.writes for s in steps):>14} {_med(s.zk.bytes for s in steps):>20} {fsync:>9} "
                  f"{_median(s.latency_ms for s in steps):>6.1f}")
        print("  ms: the step's heartbeat as the member timed it (sent to answered); fsync ms: ZooKeeper's mean "
              "transaction-log fsync in those steps (whole ms)")
    ratios(results, settings)


def ratios(results: dict, settings: Settings) -> None:
    print("\n== ratios zkcoord / kafka4 (medians), and goals ==")
    join = {t: [r.total_ms for r in results["join"] if r.target == t] for t in ("zkcoord", "kafka4")}
    if join["zkcoord"] and join["kafka4"]:
        z, k = _median(join["zkcoord"]), _median(join["kafka4"])
        print(f"join: {z:,.0f} ms / {k:,.0f} ms = {z / k:.3f} (goal <= 1.0: {_goal(z / k <= 1.0)}); "
              f"spreads {_med(join['zkcoord'])} / {_med(join['kafka4'])} ms")
        part = {t: [x - settings.heartbeat_interval_ms for x in v] for t, v in join.items()}
        print(f"  beyond the newcomer's heartbeat interval (total - {settings.heartbeat_interval_ms} ms): "
              f"{_median(part['zkcoord']):,.1f} / {_median(part['kafka4']):,.1f} ms; spreads {_med(part['zkcoord'])} / "
              f"{_med(part['kafka4'])} ms")
        final = {t: _median(r.final_step_ms for r in results["join"] if r.target == t) for t in join}
        joined = {t: _median(r.join_ms for r in results["join"] if r.target == t) for t in join}
        beat = {t: _median(r.heartbeat_p50_ms for r in results["join"] if r.target == t) for t in join}
        cpu = {t: _median(r.cpu_s.get(SERVER_PROCESS[t], 0) for r in results["join"] if r.target == t) for t in join}
        print(f"  the coordinators' own part: join {joined['zkcoord']:.1f} / {joined['kafka4']:.1f} ms, "
              f"final step {final['zkcoord']:.1f} / {final['kafka4']:.1f} ms, "
              f"heartbeat p50 in the rounds {beat['zkcoord']:.2f} / {beat['kafka4']:.2f} ms, server CPU per round "
              f"{cpu['zkcoord']:.3f} / {cpu['kafka4']:.3f} s")
    classic = [r.total_ms for r in results["classic"]]
    if classic and join["zkcoord"]:
        z = _median(join["zkcoord"])
        print(f"join, zkcoord's classic protocol / its consumer protocol: {_median(classic):,.0f} ms / {z:,.0f} ms = "
              f"{_median(classic) / z:.2f} (not a goal)")
    kip = {t: [r.total_ms for r in results["kip"] if r.target == t] for t in ("zkcoord", "kafka4")}
    if kip["zkcoord"] or kip["kafka4"]:
        line = ", ".join(f"{t} {_median(v) / 1000:.2f} s" for t, v in kip.items() if v)
        print(f"kip (10 consumers, 900 partitions added): {line}; Kafka published {KAFKA_PUBLISHED_KIP_S:g} s "
              f"(103 s for the classic protocol)" + (f"; ratio {_median(kip['zkcoord']) / _median(kip['kafka4']):.3f}"
                                                     if kip["zkcoord"] and kip["kafka4"] else ""))
    by = {(r.scenario, r.target): r for r in results["steady"]}
    for scenario in dict.fromkeys(r.scenario for r in results["steady"]):
        z, k = by.get((scenario, "zkcoord")), by.get((scenario, "kafka4"))
        if z and k:
            print(f"{scenario:<22} rate {z.rate / k.rate:5.2f}x   p50 {z.p50_ms / k.p50_ms:5.2f}x   "
                  f"p99 {z.p99_ms / k.p99_ms:5.2f}x")
    print("figures from a shared 2-core machine: compare within one run; see each round's CPU and the load average")


# -- the command line ----------------------------------------------------------------------------

HELPS = {
    "heartbeat_interval_ms": "heartbeat interval both coordinators give (Kafka's default: 5000)",
    "session_timeout_ms": "session time-out both coordinators give",
    "assignment_interval_ms": "shortest time between two target assignments, both coordinators",
    "rebalance_timeout_ms": "KIP-848 members' rebalance time-out",
    "classic_rebalance_timeout_ms": "classic members' rebalance time-out",
    "setup_heartbeat_ms": "heartbeat interval while a group is set up (not measured)",
    "quiet_s": "pause before each measured round", "seed": "seed of the heartbeat phases",
    "join_members": "members before the join", "join_partitions": "partitions of the join group's topic",
    "join_rounds": "joins measured per target", "kip_members": "members of the kip group",
    "kip_initial_partitions": "the kip topic's partitions before", "kip_added_partitions": "partitions added",
    "kip_rounds": "kip rounds per target (a fresh group and topic each)",
    "steady_members": "members heartbeating in the steady scenario", "steady_groups": "groups they form",
    "steady_partitions": "partitions of the steady groups' topic", "duration_s": "measured seconds per load run",
    "warmup_s": "unmeasured seconds before each", "paced_rate": "heartbeats/s in total in the paced run",
}


def parse_args(argv: list[str] | None = None) -> tuple[Settings, Path | None, Path | None]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = Settings()
    for name, text in HELPS.items():
        default = getattr(defaults, name)
        parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=None,
                            help=f"{text} [default: {default}" + (f"; --quick: {QUICK[name]}" if name in QUICK else "")
                            + "]")
    parser.add_argument("--quick", action="store_true", help="smaller and shorter: " +
                        ", ".join(f"{k.replace('_', '-')} {v}" for k, v in QUICK.items()))
    parser.add_argument("--only", default=",".join(SCENARIOS), help=f"any of {','.join(SCENARIOS)}")
    parser.add_argument("--targets", default=",".join(defaults.targets),
                        help=f"any of {','.join(TARGETS)} [default: {','.join(defaults.targets)}]")
    parser.add_argument("--profile", choices=["cprofile", "pyinstrument"], default="",
                        help="run the daemon under this profiler and print its hot spots")
    parser.add_argument("--workdir", type=Path, help="where logs, the sandbox and the profile go [a new temp dir]")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    args = vars(parser.parse_args(argv))
    workdir, json_path, quick = args.pop("workdir"), args.pop("json"), args.pop("quick")
    values = {k: v for k, v in args.items() if v is not None}
    for name, value in (QUICK.items() if quick else ()):
        values.setdefault(name, value)
    values["only"] = tuple(s for s in values["only"].split(",") if s)
    values["targets"] = tuple(s for s in values["targets"].split(",") if s)
    known = {f.name for f in fields(Settings)}
    return Settings(**{k: v for k, v in values.items() if k in known}), workdir, json_path


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    settings, workdir, json_path = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM cleans up as Ctrl-C does
    workdir = workdir or Path(tempfile.mkdtemp(prefix="zkcoord-cp-bench-"))
    try:
        workdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"error: --workdir {workdir}: {exc.strerror}", file=sys.stderr)
        return 2
    print(f"zkcoord consumer-protocol benchmark; workdir {workdir}; {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    print("settings: " + ", ".join(f"{f.name}={getattr(settings, f.name)}" for f in fields(Settings)), flush=True)
    env = make_environment(workdir, settings)
    code = 1
    try:
        if "java4-gateway" in settings.targets:
            java4_gateway()
        env.start()
        results = asyncio.run(run(env, settings))
        report(results, settings)
        if json_path:
            json_path.write_text(json.dumps({"settings": asdict(settings),
                                             **{k: [asdict(r) for r in v] for k, v in results.items()}},
                                            indent=1, default=str))
        code = 0
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("\ninterrupted", file=sys.stderr)
        code = 130
    except BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
    except (OSError, ConnectionError, asyncio.TimeoutError) as exc:
        print(f"benchmark failed: {type(exc).__name__}: {exc or 'timed out'}", file=sys.stderr)
    except Exception as exc:  # a bug here: say where, without a traceback
        tb = exc.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        print(f"benchmark failed (unexpected {type(exc).__name__} at {Path(tb.tb_frame.f_code.co_filename).name}:"
              f"{tb.tb_lineno}): {exc}", file=sys.stderr)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # let the cleanup finish
            signal.signal(sig, signal.SIG_IGN)
        env.stop()
        signal.signal(signal.SIGINT, signal.default_int_handler)
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if env.profile_path is not None and code == 0:
        from bench_coordinator import print_profile

        print_profile(env.profile_path)
    print(f"logs in {workdir}")
    return code


if __name__ == "__main__":
    sys.exit(main())
