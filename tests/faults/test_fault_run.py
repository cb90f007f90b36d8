"""A consumer group under random faults, checked as a whole.

Three ``zkcoord run`` daemons, a producer and six consumers
(``tests/faults/worker.py`` processes, :class:`zkcoord.client.Consumer`) of
one group on a 12-partition topic run while faults are injected one after
another: kill -9 of a daemon (restarted), SIGSTOP of a daemon until
ZooKeeper expired its session (then SIGCONT), a ZooKeeper restart (SIGTERM
or kill -9), ZooKeeper expiring a daemon's session, kill -9 of a consumer
(restarted), SIGSTOP of a consumer until the group rebalanced without it
(then SIGCONT: it comes back with a stale generation). Daemon faults hit
the group's owner half of the time. Then the faults stop, the producer stops, the group drains
until every partition's committed offset reaches what was produced, the
consumers leave, and :mod:`tests.faults.checker` checks everything that was
logged (see its docstring for the properties).

On the fault sandbox's ZooKeeper ensemble (3 servers) and 3 brokers
(``tests/faults/conftest.py``), the topic replicated 3 times, the kinds of
issue 29 are drawn too (:class:`tests.faults.harness.Faults`): kill -9 of
the ensemble's leader (restarted), a follower lost for a while, the quorum
lost then regained, kill -9 of a broker (a partition's leader, the group's
Kafka coordinator, or any; restarted), a daemon's wall clock jumped (every
daemon runs through :mod:`tests.support.clock_shift`), and, as root, the
network cuts of :mod:`tests.support.net_fault_kinds` (every daemon in a
network namespace of its own: a daemon cut from ZooKeeper until its session
expired, a daemon cut from its clients); not root: those kinds are left out
with the reason printed. ``ZKCOORD_FAULT_KINDS=k1,k2`` restricts the draw to
some kinds (replaying a seed needs the same kinds).

The seed is printed; ``ZKCOORD_FAULT_SEED=<seed>`` replays the same choices
and ``ZKCOORD_FAULTS=<n>`` sets how many faults (default 20; ``make faults``
runs 200). Waits are bounded waits for a condition, never a pass/fail on
time. The summary printed at the end gives each of the checker's verdicts
and the count of each fault kind.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError

from tests.faults.checker import Violation, check_commits_durable, check_run, load_dir, summary, verdicts
from tests.faults.harness import (
    LIVENESS_S,
    ConsumerPool,
    Faults,
    JsonLines,
    Monitor,
    Producer,
    faults_from_env,
    quiet,
    seed_from_env,
)
from tests.faults.harness import zookeeper_ports
from tests.support import broken_fence, netns
from tests.support.clock_shift import WallClock
from tests.support.cluster_faults import ClusterFaults
from tests.support.daemons import wait_for
from tests.support.group_run import WrappedFleet
from tests.support.net_fault_kinds import NetFaults
from zkcoord.local.procs import free_port

FAULTS = faults_from_env(20)
PARTITIONS = 12
CONSUMERS = 6
ZK_SESSION_TIMEOUT_MS = 4000
pytestmark = [pytest.mark.faults, pytest.mark.timeout(600 + FAULTS * 60)]


def available_kinds(sandbox, say=print) -> tuple[str, ...]:
    """Every kind this sandbox and this user allow (the network cuts need
    root and namespaces: left out with the reason printed), restricted by
    ``ZKCOORD_FAULT_KINDS`` when set."""
    state = sandbox.load()
    kinds = list(Faults.KINDS)
    if state.zookeeper_peers:
        kinds += Faults.ENSEMBLE_KINDS
    else:
        say("fault kinds: no ZooKeeper ensemble in the fault sandbox: no leader, follower or quorum faults")
    if len(state.brokers) >= 3:
        kinds += Faults.BROKER_KINDS
    else:
        say("fault kinds: fewer than 3 brokers: no broker kills")
    kinds += Faults.CLOCK_KINDS
    reason = netns.available()
    if reason is None:
        kinds += [k for k in Faults.NET_KINDS if k != "consumer-coordinator-cut"]
    else:
        say(f"fault kinds: the network faults {', '.join(Faults.NET_KINDS)} are left out: {reason}")
    wanted = os.environ.get("ZKCOORD_FAULT_KINDS")
    if wanted:
        chosen = [k.strip() for k in wanted.split(",") if k.strip()]
        unknown = set(chosen) - set(kinds)
        assert not unknown, f"ZKCOORD_FAULT_KINDS: {sorted(unknown)} not available here; available: {kinds}"
        kinds = chosen
    return tuple(kinds)


def replication_factor(sandbox) -> int:
    return min(3, len(sandbox.load().brokers))


STORAGE_MODES = ("zookeeper", "dual")


def make_dual(hosts: str, zk, bootstrap: str, group: str, topic: str, tmp_path: Path) -> None:
    """Put the group in ``dual`` offset storage before anyone joins it: its
    offsets start at 0 in ZooKeeper, ``zkcoord migrate apply`` backs them up,
    commits them to Kafka and switches the group to dual; from then on every
    commit goes to Kafka (through the group's coordinator broker, which
    ``broker-kill-9`` may kill) and to ZooKeeper (which the monitor samples)."""
    for p in range(PARTITIONS):
        zk.create(f"/consumers/{group}/offsets/{topic}/{p}", b"0", makepath=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZKCOORD_") or k == "ZKCOORD_TEST_STATE_DIR"}
    done = subprocess.run([sys.executable, "-m", "zkcoord", "migrate", "apply", "--group", group, "--zookeeper", hosts,
                           "--bootstrap-servers", bootstrap, "--output", "json", "--timeout-ms", "30000"],
                          capture_output=True, text=True, env=env, timeout=300)
    (tmp_path / "migrate-apply.out").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, f"migrate apply of {group} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
    assert json.loads(zk.get(f"/zkcoord/migrations/{group}")[0])["phase"] == "dual", done.stdout


def kafka_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets in Kafka (a fresh admin client: one made
    before a broker restart may not find it again), retried while a restarted
    broker loads them."""
    def read():
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
        try:
            found = admin.list_group_offsets({group: None})[group]
        except KafkaError:  # a coordinator loading: asked again
            return None
        finally:
            admin.close()
        return {tp.partition: meta.offset for tp, meta in found.items() if tp.topic == topic and meta.offset >= 0} \
            or None

    return wait_for(read, LIVENESS_S, f"{group}'s committed offsets read from Kafka", 1.0)


@dataclass
class FaultRun:
    seed: int
    violations: list
    figures: dict
    drained: object
    unexpected: list
    exits: dict
    log: object
    producer_failed: int
    counts: dict


def fault_run(fault_sandbox, fault_chroot, tmp_path, faults_wanted: int, kinds: tuple[str, ...],
              seed: int | None = None, breaks: tuple[str, ...] = ()) -> FaultRun:
    """One seeded run (module docstring) of ``faults_wanted`` faults drawn
    from ``kinds``; ``breaks``: every daemon runs with those fences broken
    (:mod:`tests.support.broken_fence`). Prints the verdicts; keeps the logs
    of a run that found anything."""
    seed = seed_from_env() if seed is None else seed
    print(f"\nfault run: ZKCOORD_FAULT_SEED={seed} ZKCOORD_FAULTS={faults_wanted} (logs in {tmp_path})"
          + (f" daemons with broken {', '.join(breaks)}" if breaks else ""))
    rng = random.Random(seed)
    hosts, zk = fault_chroot
    sandbox = fault_sandbox.sandbox
    storage = os.environ.get("ZKCOORD_FAULT_STORAGE") or rng.choice(STORAGE_MODES)
    assert storage in STORAGE_MODES, f"ZKCOORD_FAULT_STORAGE={storage}: one of {STORAGE_MODES}"
    print(f"fault kinds drawn from: {', '.join(kinds)}; the group's offset storage: {storage}")
    bootstrap = fault_sandbox.bootstrap_servers
    topic, group = f"faults-{uuid.uuid4().hex[:8]}", "fault-group"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    admin.create_topics([NewTopic(topic, PARTITIONS, replication_factor(sandbox))])
    admin.close()
    cluster = ClusterFaults(sandbox, timeout_s=LIVENESS_S, say=print)
    cluster.wait_topic(topic, PARTITIONS)  # before make_dual commits to it
    events = tmp_path / "events"
    events.mkdir()
    if storage == "dual":
        make_dual(hosts, zk, bootstrap, group, topic, tmp_path)
    ports = {n: free_port() for n in (1, 2, 3)}
    started = time.monotonic()
    options = dict(zk_session_timeout_ms=ZK_SESSION_TIMEOUT_MS, group_initial_rebalance_delay_ms=0,
                   bootstrap_servers=bootstrap)
    clocks = {n: WallClock(tmp_path / f"clock-{n}") for n in ports}
    net_kinds = [k for k in kinds if k in Faults.NET_KINDS]
    with contextlib.ExitStack() as stack:
        spaces = {}
        if net_kinds:
            namespaces = stack.enter_context(netns.Namespaces())
            spaces = {n: namespaces.create() for n in ports}

        def wrapper(n):
            def wrapped(argv):
                argv = clocks[n].wrap(argv)
                if breaks:  # the clock launcher runs the broken-fence launcher, which runs the daemon
                    argv = broken_fence.wrap(*breaks)(argv)
                return spaces[n].wrap(argv) if spaces else argv
            return wrapped

        wrappers = {n: wrapper(n) for n in ports}
        fleet = stack.enter_context(WrappedFleet(hosts, zk, tmp_path / "daemons", options=options, wrappers=wrappers))
        net = NetFaults(rng, fleet, spaces, {}, zookeeper_ports(fault_sandbox.zookeeper)) if spaces else None

        def listen(node_id: int, port: int) -> str:
            return spaces[node_id].listen(port) if spaces else f"127.0.0.1:{port}"

        for node_id, port in ports.items():
            fleet.start(node_id, listen=listen(node_id, port))
        coordinators = ",".join(listen(n, p) for n, p in ports.items())
        run = JsonLines(events / "run.jsonl")
        monitor = Monitor(hosts, group, topic, PARTITIONS, JsonLines(events / "monitor.jsonl"))
        producer = Producer(bootstrap, topic, PARTITIONS, JsonLines(events / "producer.jsonl"))
        pool = ConsumerPool(CONSUMERS, events, coordinators=coordinators, bootstrap=bootstrap, group=group,
                            topic=topic)
        faults = Faults(rng, sandbox, fleet, ports, pool, group, fault_sandbox.zookeeper, run, kinds=kinds,
                        cluster=cluster, net=net, clocks=clocks, topic=topic, partitions=PARTITIONS, listen=listen)
        drained, exits, unexpected, kafka_final = None, {}, [], None
        try:
            monitor.start()
            pool.start_all()
            producer.start()
            wait_for(lambda: len(quiet(monitor.offsets) or {}) == PARTITIONS, LIVENESS_S,
                     "every partition has a committed offset")
            for number in range(1, faults_wanted + 1):
                time.sleep(rng.uniform(1.0, 4.0))
                unexpected += [f"c{i} exited with {pool.procs[i].returncode}" for i in pool.dead()]
                faults.inject(number)
            producer.stop()
            ends = dict(producer.ends)
            print(f"faults over after {time.monotonic() - started:.0f} s; draining to {ends}")
            unexpected += [f"c{i} exited with {pool.procs[i].returncode}" for i in pool.dead()]
            try:
                wait_for(lambda: all(o >= ends.get(p, 0) for p, o in (quiet(monitor.offsets) or {}).items())
                         and len(quiet(monitor.offsets) or {}) == PARTITIONS, 300, "the group drained", 0.5)
                drained = True
            except AssertionError as exc:
                drained = str(exc)
            exits = pool.stop_all()
            monitor.final()
            kafka_final = kafka_offsets(bootstrap, group, topic) if storage == "dual" else None
        finally:
            producer.stop()
            monitor.stop()
            pool.close()
            run.close()
            fleet.close()  # before the namespaces go: a process in one keeps it
        daemon_logs = sorted((tmp_path / "daemons").glob("daemon-*.log"))

    log = load_dir(events, group, daemon_logs)
    violations = check_run(log)
    if kafka_final is not None:  # dual: Kafka's copy keeps every acknowledged commit too
        violations += [Violation(v.kind, f"in Kafka: {v.detail}")
                       for v in check_commits_durable(log.commits, kafka_final)]
    figures = {"seed": seed, "storage": storage, "faults": dict(sorted(faults.counts.items())),
               "duration_s": round(time.monotonic() - started),
               "produced_sent": producer.sent, "produce_failed": producer.failed, **summary(log),
               "consumer_processes": sum(pool.incarnations.values()) + len(pool.incarnations),
               "worker_exits": exits, "violations": len(violations)}
    print("fault run summary: " + json.dumps(figures))
    print("fault run verdicts: " + "; ".join(f"{n} {name}" for name, n in verdicts(violations).items())
          + f"; {figures['consumed_again']} records consumed again (duplicates after kills and fencing: allowed, "
          "counted)")
    print("fault kinds: " + ", ".join(f"{kind} {faults.counts.get(kind, 0)}" for kind in kinds))
    for v in violations[:50]:
        print(f"VIOLATION {v.kind}: {v.detail}")
    if (violations or drained is not True or unexpected) and not breaks:
        # pytest keeps only its last few temporary directories: keep this run's logs.
        kept = Path(tempfile.gettempdir()) / f"zkcoord-fault-run-{seed}-{uuid.uuid4().hex[:6]}"
        shutil.copytree(tmp_path, kept)
        print(f"the run's logs are kept in {kept}")
    return FaultRun(seed, violations, figures, drained, unexpected, exits, log, producer.failed, dict(faults.counts))


def test_consumer_group_under_random_faults(fault_sandbox, fault_chroot, tmp_path):
    kinds = available_kinds(fault_sandbox.sandbox)
    result = fault_run(fault_sandbox, fault_chroot, tmp_path, FAULTS, kinds)
    seed, violations, drained, exits, log = result.seed, result.violations, result.drained, result.exits, result.log
    assert violations == [], f"seed {seed}: {len(violations)} violation(s), first: {violations[0]}"
    assert drained is True, f"seed {seed}: {drained}"
    assert result.unexpected == [], f"seed {seed}: consumers died by themselves: {result.unexpected}"
    assert all(code == 0 for code in exits.values()), f"seed {seed}: worker exits {exits}"
    # Nothing vacuous: each check had material.
    assert log.produced and log.assignments and log.history and log.samples and result.producer_failed == 0
    assert any(c.acked for c in log.commits)


# The same run, one new kind at a time, against daemons whose fences are deliberately broken
# (tests/support/broken_fence.py). By default the fences against a deposed owner: offset commits and
# state writes unfenced, a lost session ignored (the group kept): a daemon that lost its session goes
# on writing, which the checker must see as stale commits. "none" is the baseline: the same daemons,
# no fault. Opt-in (a few minutes each): ZKCOORD_TEST_BROKEN_FENCES=1; ZKCOORD_BROKEN_FAULTS=<n>
# faults per run (default 6); ZKCOORD_BROKEN_BREAKS=b1,b2 other breaks (generation: stale members'
# commits accepted). Each prints its verdicts; the figures are in docs/testing.md.
BROKEN_FAULTS = int(os.environ.get("ZKCOORD_BROKEN_FAULTS", "6"))
BROKEN_BREAKS = tuple(b for b in os.environ.get("ZKCOORD_BROKEN_BREAKS", "commit-fence,state-fence,session-loss")
                      .split(",") if b)
# Kinds that depose no owner (every daemon keeps its ZooKeeper session: a leader or follower lost,
# a quorum lost for seconds, a broker killed, a wall clock moved, a daemon cut from its clients):
# the fences against a deposed owner are never tried, so breaking them cannot show. Their runs are
# kept as a record (they pass when the checker finds nothing; a violation there would be news).
# What those kinds do try is broken, one guard at a time, in targeted tests: the clock jump
# (group-wall-clock, suspension-wall-clock) in tests/integration/test_clock_faults.py and
# test_net_faults.py, the clients' cut (generation) in test_net_faults.py; the ensemble and broker
# kinds try no ownership guard (docs/testing.md, "Broken fences").
DEPOSES_NO_OWNER = {*Faults.ENSEMBLE_KINDS, *Faults.BROKER_KINDS, *Faults.CLOCK_KINDS, "daemon-clients-cut"}


@pytest.mark.skipif(os.environ.get("ZKCOORD_TEST_BROKEN_FENCES") != "1",
                    reason="the broken-fence demonstrations run with ZKCOORD_TEST_BROKEN_FENCES=1")
@pytest.mark.parametrize("kind", ["none", *Faults.ENSEMBLE_KINDS, *Faults.BROKER_KINDS, *Faults.CLOCK_KINDS,
                                  "daemon-zookeeper-cut", "daemon-clients-cut", "session-expiry"])
def test_each_new_kind_against_broken_fences(fault_sandbox, fault_chroot, tmp_path, kind):
    available = available_kinds(fault_sandbox.sandbox)
    if kind != "none" and kind not in available:
        pytest.skip(f"{kind} is not available here (see the printed reason)")
    wanted = 0 if kind == "none" else BROKEN_FAULTS
    result = fault_run(fault_sandbox, fault_chroot, tmp_path, wanted, (kind,) if wanted else ("daemon-kill-9",),
                       breaks=BROKEN_BREAKS)
    counted = verdicts(result.violations)
    print(f"BROKEN FENCES ({', '.join(BROKEN_BREAKS)}) under {kind} x{wanted}: "
          + ", ".join(f"{n} {name}" for name, n in counted.items()) + f"; figures {json.dumps(result.figures)}")
    if kind == "none" or (kind in DEPOSES_NO_OWNER and "generation" not in BROKEN_BREAKS):
        return  # a record, not a demonstration (above)
    assert result.violations, f"seed {result.seed}: the checker found nothing wrong with broken fences under {kind}"
