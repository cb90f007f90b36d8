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

The seed is printed; ``ZKCOORD_FAULT_SEED=<seed>`` replays the same choices
and ``ZKCOORD_FAULTS=<n>`` sets how many faults (default 20; ``make faults``
runs 200). Waits are bounded waits for a condition, never a pass/fail on
time.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from tests.faults.checker import check_run, load_dir, summary
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
from tests.support.daemons import DaemonFleet, wait_for
from zkcoord.local.procs import free_port

FAULTS = faults_from_env(20)
PARTITIONS = 12
CONSUMERS = 6
ZK_SESSION_TIMEOUT_MS = 4000
pytestmark = [pytest.mark.faults, pytest.mark.timeout(600 + FAULTS * 60)]


def test_consumer_group_under_random_faults(fault_sandbox, fault_chroot, tmp_path):
    seed = seed_from_env()
    print(f"\nfault run: ZKCOORD_FAULT_SEED={seed} ZKCOORD_FAULTS={FAULTS} (logs in {tmp_path})")
    rng = random.Random(seed)
    hosts, zk = fault_chroot
    bootstrap = fault_sandbox.bootstrap_servers
    topic, group = f"faults-{uuid.uuid4().hex[:8]}", "fault-group"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    admin.close()
    events = tmp_path / "events"
    events.mkdir()
    ports = {n: free_port() for n in (1, 2, 3)}
    started = time.monotonic()
    options = dict(zk_session_timeout_ms=ZK_SESSION_TIMEOUT_MS, group_initial_rebalance_delay_ms=0,
                   bootstrap_servers=bootstrap)
    with DaemonFleet(hosts, zk, tmp_path / "daemons", options=options) as fleet:
        for node_id, port in ports.items():
            fleet.start(node_id, listen=f"127.0.0.1:{port}")
        coordinators = ",".join(f"127.0.0.1:{p}" for p in ports.values())
        run = JsonLines(events / "run.jsonl")
        monitor = Monitor(hosts, group, topic, PARTITIONS, JsonLines(events / "monitor.jsonl"))
        producer = Producer(bootstrap, topic, PARTITIONS, JsonLines(events / "producer.jsonl"))
        pool = ConsumerPool(CONSUMERS, events, coordinators=coordinators, bootstrap=bootstrap, group=group,
                            topic=topic)
        faults = Faults(rng, fault_sandbox.sandbox, fleet, ports, pool, group, fault_sandbox.zookeeper, run)
        drained, exits, unexpected = None, {}, []
        try:
            monitor.start()
            pool.start_all()
            producer.start()
            wait_for(lambda: len(quiet(monitor.offsets) or {}) == PARTITIONS, LIVENESS_S,
                     "every partition has a committed offset")
            for number in range(1, FAULTS + 1):
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
        finally:
            producer.stop()
            monitor.stop()
            pool.close()
            run.close()
        daemon_logs = sorted((tmp_path / "daemons").glob("daemon-*.log"))

    log = load_dir(events, group, daemon_logs)
    violations = check_run(log)
    figures = {"seed": seed, "faults": faults.counts, "duration_s": round(time.monotonic() - started),
               "produced_sent": producer.sent, "produce_failed": producer.failed, **summary(log),
               "consumer_processes": sum(pool.incarnations.values()) + len(pool.incarnations),
               "worker_exits": exits, "violations": len(violations)}
    print("fault run summary: " + json.dumps(figures))
    for v in violations:
        print(f"VIOLATION {v.kind}: {v.detail}")
    if violations or drained is not True or unexpected:
        # pytest keeps only its last few temporary directories: keep this run's logs.
        kept = Path(tempfile.gettempdir()) / f"zkcoord-fault-run-{seed}-{uuid.uuid4().hex[:6]}"
        shutil.copytree(tmp_path, kept)
        print(f"the run's logs are kept in {kept}")
    assert violations == [], f"seed {seed}: {len(violations)} violation(s), first: {violations[0]}"
    assert drained is True, f"seed {seed}: {drained}"
    assert unexpected == [], f"seed {seed}: consumers died by themselves: {unexpected}"
    assert all(code == 0 for code in exits.values()), f"seed {seed}: worker exits {exits}"
    # Nothing vacuous: each check had material.
    assert log.produced and log.assignments and log.history and log.samples and producer.failed == 0
    assert any(c.acked for c in log.commits)
