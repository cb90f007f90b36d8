"""``zkcoord migrate apply`` under random faults, then checked for loss.

Legacy offsets are seeded for 50 groups x 20 partitions (and Kafka already
holds offsets for some partitions of some groups, ahead or behind), then
``zkcoord migrate apply --all`` runs as a subprocess while faults are
injected at random moments: kill -9 of the apply process, a ZooKeeper
restart, a broker restart, ZooKeeper expiring the apply's session (found by
its client port in ZooKeeper's ``cons`` listing). Apply is run again until
it exits 0 and every fault has been injected. Then: ``migrate verify --all``
exits 0; every group is in ``dual``; every Kafka committed offset is the
larger of the legacy and the earlier Kafka offset (nothing lost, nothing
rewound); the legacy offsets are byte for byte unchanged; each backup still
holds Kafka's offsets from before.

The seed is printed; ``ZKCOORD_FAULT_SEED`` replays it, ``ZKCOORD_FAULTS``
scales the number of faults (a third of it, at least 6).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata
from kazoo.exceptions import KazooException

from tests.faults.harness import (
    REPO,
    expire_session,
    faults_from_env,
    replicas,
    restart_zookeeper,
    seed_from_env,
    sessions_of,
    zookeeper_ports,
)
from tests.support.daemons import process_marker, wait_for

GROUPS = 50
PARTITIONS = 20
RECORDS = 30
FAULTS = max(6, faults_from_env(20) // 3)
PER_ROUND = 6  # faults per batch of GROUPS groups
pytestmark = [pytest.mark.faults, pytest.mark.timeout(600 + FAULTS * 60)]
KINDS = ("apply-kill-9", "zookeeper-restart", "broker-restart", "session-expiry")


def migrate(*args: str, hosts: str, bootstrap: str, out_path, timeout_s: float = 300.0) -> subprocess.Popen:
    argv = [sys.executable, "-X", process_marker(), "-m", "zkcoord", "migrate", *args, "--zookeeper", hosts,
            "--bootstrap-servers", bootstrap, "--output", "json", "--timeout-ms", "15000"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZKCOORD_") or k == "ZKCOORD_TEST_STATE_DIR"}
    with open(out_path, "ab") as out:
        return subprocess.Popen(argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=env)


def kafka_offsets(bootstrap: str, groups) -> dict[str, dict[tuple[str, int], int]]:
    """Kafka's committed offsets of ``groups``, read by a fresh admin client
    (one made before a broker restart may not find the broker again), retried
    while the restarted broker loads its offsets."""
    def read():
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
        try:
            found = {}
            for group in groups:
                answer = admin.list_group_offsets({group: None})[group]
                found[group] = {(tp.topic, tp.partition): oam.offset for tp, oam in answer.items() if oam.offset >= 0}
            return found
        except KafkaError:
            return None
        finally:
            admin.close()

    return wait_for(read, 120, "Kafka's committed offsets read", 1.0)


def wait_exit(proc: subprocess.Popen, timeout_s: float = 300.0) -> int:
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"migrate did not exit within {timeout_s:g} s") from None


def test_migrate_apply_under_random_faults(fault_sandbox, fault_chroot, tmp_path):
    seed = seed_from_env()
    print(f"\nmigration fault run: ZKCOORD_FAULT_SEED={seed} faults={FAULTS} (logs in {tmp_path})")
    rng = random.Random(seed)
    hosts, zk = fault_chroot
    bootstrap, sandbox = fault_sandbox.bootstrap_servers, fault_sandbox.sandbox
    zk_port = zookeeper_ports(fault_sandbox.zookeeper)  # every server of the ensemble
    topic = f"migrate-faults-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, replicas(bootstrap))], wait_for_metadata=True)
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for p in range(PARTITIONS):
        for i in range(RECORDS):
            producer.send(topic, value=b"r%d" % i, partition=p)
    producer.flush()
    producer.close()

    injected: list[str] = []
    runs: list[int] = []
    rounds = 0
    while len(injected) < FAULTS:
        rounds += 1
        groups = [f"legacy-{seed % 10_000}-r{rounds}-{i:02d}" for i in range(GROUPS)]
        legacy, before = seed_groups(zk, bootstrap, rng, topic, groups)
        # Each fault fires once apply has started on a random number of this round's groups.
        targets = sorted(rng.randrange(GROUPS) for _ in range(min(PER_ROUND, FAULTS - len(injected))))
        print(f"round {rounds}: {GROUPS} groups, faults after {targets} group(s) started")
        while True:
            proc = migrate("apply", "--pattern", f"legacy-{seed % 10_000}-r{rounds}-.*", hosts=hosts,
                           bootstrap=bootstrap, out_path=tmp_path / "apply.out")
            while targets:
                if started_groups(zk, groups) >= targets[0]:
                    targets.pop(0)
                    kind = rng.choice(KINDS)
                    what = inject(kind, rng, proc, sandbox, fault_sandbox.zookeeper, zk_port)
                    injected.append(f"{kind}: {what}")
                    print(f"fault {len(injected)}: {injected[-1]}")
                elif proc.poll() is not None:
                    break
                else:
                    time.sleep(0.02)
            runs.append(wait_exit(proc))
            print(f"apply run {len(runs)} exited {runs[-1]}")
            if runs[-1] == 0 and not targets:
                break
            assert len(runs) < FAULTS * 3 + 10, f"seed {seed}: apply keeps failing: exits {runs}"
        check_round(zk, hosts, bootstrap, tmp_path, seed, topic, groups, legacy, before)
    print("migration fault run summary: " + json.dumps({
        "seed": seed, "rounds": rounds, "groups": rounds * GROUPS, "partitions": rounds * GROUPS * PARTITIONS,
        "faults": len(injected), "apply_runs": len(runs), "apply_exits": runs,
        "duration_s": round(time.monotonic() - started)}))


def seed_groups(zk, bootstrap, rng, topic, groups):
    """Legacy offsets for ``groups``, and Kafka offsets already there for a few of them."""
    legacy = {g: {p: rng.randint(0, RECORDS) for p in range(PARTITIONS)} for g in groups}
    pending = [zk.create_async(f"/consumers/{g}/offsets/{topic}/{p}", str(o).encode(), makepath=True)
               for g, offsets in legacy.items() for p, o in offsets.items()]
    for op in pending:
        op.get(timeout=30)
    before = {g: {p: rng.randint(0, RECORDS) for p in rng.sample(range(PARTITIONS), 4)}
              for g in rng.sample(groups, 5)}

    def commit_before():
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
        try:
            for g, offsets in before.items():
                admin.alter_group_offsets(g, {TopicPartition(topic, p): OffsetAndMetadata(o, "", None)
                                              for p, o in offsets.items()})
            return True
        except KafkaError:  # the broker may still be loading after a restart of an earlier round
            return False
        finally:
            admin.close()

    wait_for(commit_before, 120, "Kafka offsets committed before the migration", 1.0)
    return legacy, before


def started_groups(zk, groups) -> int:
    """How many of ``groups`` apply has started on (have a migration record)."""
    try:
        return len(set(zk.get_children("/zkcoord/migrations")) & set(groups))
    except KazooException:  # absent yet, or ZooKeeper restarting
        return 0


def check_round(zk, hosts, bootstrap, tmp_path, seed, topic, groups, legacy, before) -> None:
    """verify finds Kafka behind nowhere, and ZooKeeper behind exactly where
    Kafka was ahead before (apply keeps it); Kafka holds max(legacy, Kafka
    before) everywhere; the legacy offsets are unchanged; every group is in
    dual; backups hold the before."""
    out = tmp_path / f"verify-{len(groups)}-{groups[0]}.out"
    verify = migrate("verify", "--pattern", f"{groups[0].rsplit('-', 1)[0]}-.*", hosts=hosts, bootstrap=bootstrap,
                     out_path=out)
    ahead = {g: [[topic, p, legacy[g][p], o] for p, o in sorted(before.get(g, {}).items()) if o > legacy[g][p]]
             for g in groups}
    code = wait_exit(verify)
    assert code == (1 if any(ahead.values()) else 0), out.read_text()[-3000:]
    text = out.read_text()
    start = next(i for i, line in enumerate(text.splitlines(keepends=True)) if line.startswith("{"))
    document, _ = json.JSONDecoder().raw_decode("".join(text.splitlines(keepends=True)[start:]))  # a summary follows
    assert document["schema"] == "zkcoord/migrate-verify/v1"
    found = {r["group"]: r for r in document["groups"]}
    assert {g: found[g]["behind"] for g in groups} == {g: [] for g in groups}, f"seed {seed}: Kafka behind"
    assert {g: [[b["topic"], b["partition"], b["zookeeper"], b["kafka"]] for b in found[g]["zookeeper_behind"]]
            for g in groups} == ahead, f"seed {seed}: ZooKeeper behind Kafka elsewhere than where Kafka was ahead"
    expected = {g: {(topic, p): max(o, before.get(g, {}).get(p, -1)) for p, o in legacy[g].items()} for g in groups}
    got = kafka_offsets(bootstrap, groups)
    wrong = {g: {tp: (want, got[g].get(tp)) for tp, want in expected[g].items() if got[g].get(tp) != want}
             for g in groups}
    wrong = {g: diff for g, diff in wrong.items() if diff}
    assert wrong == {}, f"seed {seed}: Kafka offsets differ from the plan (want, got): {wrong}"
    legacy_now = {g: {p: int(zk.get(f"/consumers/{g}/offsets/{topic}/{p}")[0]) for p in range(PARTITIONS)}
                  for g in groups}
    assert legacy_now == legacy, f"seed {seed}: legacy offsets changed"
    modes = {g: json.loads(zk.get(f"/coordinators/{g}/state")[0]).get("os") for g in groups}
    assert set(modes.values()) == {"dual"}, modes
    phases = {g: json.loads(zk.get(f"/zkcoord/migrations/{g}")[0])["phase"] for g in groups}
    assert set(phases.values()) == {"dual"}, phases
    backups = {g: json.loads(zk.get(f"/zkcoord/migrations/{g}/backup")[0])["kafka"] for g in before}
    assert backups == {g: [[topic, p, o] for p, o in sorted(offs.items())] for g, offs in before.items()}


def inject(kind: str, rng: random.Random, proc: subprocess.Popen, sandbox, zk_address: str, zk_port) -> str:
    if kind == "apply-kill-9":
        if proc.poll() is not None:
            return f"apply had already exited {proc.returncode}"
        proc.kill()
        return "apply killed"
    if kind == "zookeeper-restart":
        kill = rng.random() < 0.5
        names = restart_zookeeper(sandbox, kill=kill)
        return ("ZooKeeper" if len(names) == 1 else f"every ZooKeeper server ({len(names)})") + \
            (" killed -9 and restarted" if kill else " stopped and restarted")
    if kind == "broker-restart":
        kill = rng.random() < 0.5
        broker = rng.choice([b.name for b in sandbox.load().brokers])
        sandbox.restart_server(broker, kill=kill)
        return f"broker {broker} " + ("killed -9 and restarted" if kill else "stopped and restarted")
    sessions = sessions_of(proc.pid, zk_port) if proc.poll() is None else []
    for session in sessions:
        expire_session(zk_address, session)
    return f"sessions {[hex(s) for s in sessions]} of apply expired by ZooKeeper"
