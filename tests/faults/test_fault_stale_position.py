"""Regression: a consumer that misses a generation in the middle of a
rebalance must not resume from its old positions.

Found by the fault run (``test_fault_run.py``, 100 faults, seed 3021404162):
two partitions' committed offsets went back by 46 records. kafka-python
3.0.12 keeps an eager member's partitions (and their fetch positions) across
JoinGroup and keeps the state of every partition that is in both the old and
the new assignment (``assign_from_subscribed``). A member stopped after its
``on_revoked`` misses the next generation(s), in which another member
consumes and commits further; when it comes back and is assigned one of its
old partitions again, it resumes from its stale position and commits it,
rewinding the group. Kafka's Java consumer clears an eager member's
assignment when it revokes (``onJoinPrepare``), so positions come from the
committed offsets after every rebalance; the thin consumer must too
(``zkcoord/client/coordinator.py``, fix 3).

The interleaving, made deterministic: A consumes both partitions of the
topic; C (subscribed to another topic) is stopped, so the next JoinGroup
round waits for it; B joins; A revokes, commits and is stopped before
it rejoins; C and then A are dropped, B alone takes both
partitions and commits 20; A continues, its JoinGroup as the old member fails,
it joins as a new member and is given one of its old partitions. Without
the fix it resumes at 10 (asserted on the position it logs when assigned).

A stops itself (the worker's ``--stop-after-revoke``) right after the commit
in its ``on_revoked``. The test used to SIGSTOP it when its log showed a
revocation followed by a commit, which also held while A was already in the
``on_assigned`` of the rebalance C's arrival started, positions read (10)
but not yet logged: the event then appeared after SIGCONT, after B's
commits, and looked like a stale resume (seen once under load; an injected
sleep before the log line reproduced it every time).

C is stopped, and A armed, only once the group is Stable and both were
assigned in its generation. C's arrival starts a rebalance, and A, the
leader, starts another when it sees C's topic; the test used to go on as
soon as the stored group counted two members. Once (a CI run) C was
stopped before it rejoined A's second round, which then waited for C
while A had already revoked, unarmed; B joined that same round, and A,
given one partition, never revoked again nor stopped.

Both topics are known to every broker before a consumer starts. Once (a
run of the whole suite) A, as the leader, assigned C nothing: the broker
A asked did not know C's just-created topic yet. The group looked
settled; A's next metadata, finding the topic, started the rebalance the
paragraph above describes, and A never stopped.
"""

from __future__ import annotations

import json
import signal
import time
import uuid

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from tests.faults.checker import read_jsonl
from tests.faults.harness import LIVENESS_S, ConsumerPool, quiet, replicas
from tests.support.cluster_faults import ClusterFaults
from tests.support.daemons import DaemonFleet, wait_for
from zkcoord.core.group import from_record

pytestmark = pytest.mark.faults


def produce(bootstrap: str, topic: str, per_partition: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for p in (0, 1):
        for i in range(per_partition):
            producer.send(topic, value=b"r%d" % i, partition=p)
    producer.flush()
    producer.close()


def stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (state T in /proc/<pid>/stat)."""
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "T"


def settled(group, *logs) -> bool:
    """Whether ``group`` (the stored record) is Stable with as many members
    as ``logs``, and each log's last assignment is of its generation and
    not empty: no
    rebalance is under way or owed (C's arrival starts one, and A, the
    leader, starts another once it sees C's topic), so the next one is
    the one B's arrival starts. Stopping C in a round it has not rejoined
    yet would let B join that round, which A revoked for before it was armed:
    A would then never stop."""
    if group is None or group.state.value != "Stable" or len(group.members) != len(logs):
        return False
    last = [[e for e in log if e["ev"] == "assigned"][-1:] for log in logs]
    # each one given partitions: an empty assignment is a leader that did not see the member's topic yet
    return all(found and found[0]["gen"] == group.generation_id and found[0]["partitions"] for found in last)


def test_a_member_back_from_a_missed_generation_resumes_from_the_committed_offsets(fault_sandbox, fault_chroot,
                                                                                   tmp_path):
    hosts, zk = fault_chroot
    bootstrap = fault_sandbox.bootstrap_servers
    topic, other, group = f"stale-{uuid.uuid4().hex[:8]}", f"other-{uuid.uuid4().hex[:8]}", "stale-group"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    admin.create_topics([NewTopic(topic, 2, replicas(bootstrap)), NewTopic(other, 1, replicas(bootstrap))])
    admin.close()
    # Every broker knows both topics before a consumer starts. A, the leader, assigns from the metadata
    # it has: a broker not told of C's topic yet gave C nothing, and A's later metadata, finding the
    # topic, started another rebalance, after the group had looked settled (a run saw A never stop).
    cluster = ClusterFaults(fault_sandbox.sandbox, timeout_s=LIVENESS_S, say=print)
    cluster.wait_topic(topic, 2)
    cluster.wait_topic(other, 1)

    def offsets():
        found = {}
        for p in (0, 1):
            path = f"/consumers/{group}/offsets/{topic}/{p}"
            if zk.exists(path):
                found[p] = int(zk.get(path)[0])
        return found

    def stored():
        data = quiet(lambda: zk.get(f"/coordinators/{group}/state")[0])
        return from_record(group, json.loads(data)) if data else None

    def members():
        found = stored()
        return sorted(found.members) if found else []

    def events(index: int) -> list[dict]:
        return [e for path in sorted(tmp_path.glob(f"consumer-{index}-*.jsonl"))
                for e in read_jsonl(path.read_text())[0]]

    with DaemonFleet(hosts, zk, tmp_path / "daemons", options=dict(
            zk_session_timeout_ms=4000, group_initial_rebalance_delay_ms=0, bootstrap_servers=bootstrap)) as fleet:
        daemon = fleet.start(1)
        arm = tmp_path / "stop-a-after-revoke"
        pool = ConsumerPool(3, tmp_path, coordinators=f"127.0.0.1:{daemon.port}", bootstrap=bootstrap, group=group,
                            topic=topic, session_timeout_ms=6000)
        try:
            produce(bootstrap, topic, 10)
            pool.start(0, stop_after_revoke=arm)  # A consumes both partitions of the topic
            wait_for(lambda: offsets() == {0: 10, 1: 10}, LIVENESS_S, "A committed 10 on both partitions", 0.1)
            pool.start(1, topic=other)  # C, of another topic: A keeps both partitions
            wait_for(lambda: settled(stored(), events(0), events(1)), LIVENESS_S,
                     "A (with both partitions) and C in a Stable group, both assigned in its generation", 0.1)
            pool.procs[1].send_signal(signal.SIGSTOP)  # C will not rejoin: the next JoinGroup round waits for it
            arm.touch()  # A's next revocation (B joining) stops A after its commit
            pool.start(2)  # B joins: A revokes, commits and stops itself before its JoinGroup
            wait_for(lambda: stopped(pool.procs[0].pid), LIVENESS_S, "A stopped itself after revoking", 0.01)
            arm.unlink()
            try:
                wait_for(lambda: members() and all(m.startswith("c2-") for m in members()), LIVENESS_S,
                         "the group went on with B alone", 0.1)
                produce(bootstrap, topic, 10)
                wait_for(lambda: offsets() == {0: 20, 1: 20}, LIVENESS_S, "B committed 20 on both partitions", 0.1)
            finally:
                pool.procs[0].send_signal(signal.SIGCONT)
            resumed = time.time()

            def back():
                return [e for e in events(0) if e["ev"] == "assigned" and e["t"] > resumed and e["partitions"]]

            assigned = wait_for(back, LIVENESS_S, "A assigned a partition again", 0.1)[0]
            samples = []
            deadline = time.monotonic() + 5  # observe the committed offsets for a while after A's return
            while time.monotonic() < deadline:
                samples.append(offsets())
                time.sleep(0.1)
        finally:
            pool.procs[1].send_signal(signal.SIGCONT)
            pool.stop_all(30)
            pool.close()

    assert assigned["positions"] == {str(p): 20 for p in assigned["partitions"]}, assigned
    assert all(s == {0: 20, 1: 20} for s in samples), [s for s in samples if s != {0: 20, 1: 20}][:3]
