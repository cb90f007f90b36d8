"""Stock clients under random faults, checked as Kafka's system tests check them.

Three ``zkcoord run`` daemons with gateways in front of the fault sandbox's
broker; Kafka's VerifiableProducer (``acks=all``) and four consumers of one
group on a 6-partition topic, every one a process bootstrapped from the
gateways: two Kafka 4.4 VerifiableConsumers (one a static member), one
Kafka 3.9 VerifiableConsumer (4.4's with the consumer protocol) and a
librdkafka consumer printing the same events; the group protocol, classic
or consumer, is drawn from the seed. Faults, one after another, each
waiting until the system is back: those of
:class:`tests.faults.harness.Faults` on daemons and ZooKeeper (kill -9 of a
daemon, the group's owner half of the time; SIGSTOP of a daemon past its
session; a ZooKeeper restart; ZooKeeper expiring a daemon's session) and
those of :class:`tests.faults.stock_faults.StockFaults` on the consumers
(a clean bounce, a kill -9), and, on the fault sandbox's ZooKeeper ensemble
and three brokers, the harness's ZooKeeper leader, follower and quorum
losses and kill -9 of a broker behind the gateways (the topic replicated 3
times). Then the producer stops, the group drains to
what was acknowledged, the consumers stop and
:func:`tests.faults.stock_checker.check_stock` gives its verdicts over
everything the clients printed: no violation; records consumed again are
counted per cause (a hard kill, a commit refused while the group moved, a
partition lost) and printed.

The seed is printed; ``ZKCOORD_FAULT_SEED=<seed>`` replays the same choices
and ``ZKCOORD_STOCK_FAULTS=<n>`` sets how many faults (default 6: ``make
test`` keeps it short). Waits are bounded waits for a condition.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from tests.faults.harness import LIVENESS_S, Faults, JsonLines, replicas, seed_from_env
from tests.faults.stock_faults import StockFaults
from tests.support.cluster_faults import ClusterFaults
from tests.support.daemons import DaemonFleet, wait_for
from tests.support.verifiable import StockClients
from zkcoord.local.procs import free_port

FAULTS = int(os.environ.get("ZKCOORD_STOCK_FAULTS", "6"))
PARTITIONS = 6
ZK_SESSION_TIMEOUT_MS = 4000
SESSION_TIMEOUT_MS = 6000
CLASSIC = {"session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 500}
pytestmark = [pytest.mark.faults, pytest.mark.timeout(900 + FAULTS * 120)]


class StockRunFaults(Faults):
    """The harness's daemon and ZooKeeper faults, and the stock consumers' own."""

    KINDS = ("daemon-kill-9", "daemon-sigstop", "zookeeper-restart", "session-expiry",
             *StockFaults.KINDS)
    # on the fault sandbox's ensemble and three brokers: a broker killed under the gateways too
    CLUSTER_KINDS = (*Faults.ENSEMBLE_KINDS, *Faults.BROKER_KINDS)

    def __init__(self, *args, stock: StockFaults, clients: StockClients, **kwargs):
        super().__init__(*args, **kwargs)
        self.stock, self.clients = stock, clients

    def inject(self, number: int) -> str:
        line = super().inject(number)
        # a daemon restarted has new gateway ports: the next consumers start from the live ones
        self.clients.bootstrap = gateways(self.fleet)
        return line

    def _stock_consumer_bounce(self) -> str:
        return self.stock.apply("stock-consumer-bounce")

    def _stock_consumer_kill_9(self) -> str:
        return self.stock.apply("stock-consumer-kill-9")


def gateways(fleet: DaemonFleet) -> str:
    return ",".join(d.gateway_address for d in fleet.daemons.values() if d.alive() and d.gateway)


def zk_offsets(zk, group: str, topic: str) -> dict[tuple[str, int], int]:
    path = f"/consumers/{group}/offsets/{topic}"
    if not zk.exists(path):
        return {}
    return {(topic, int(p)): int(zk.get(f"{path}/{p}")[0]) for p in zk.get_children(path)}


def quiet_offsets(zk, group: str, topic: str) -> dict[tuple[str, int], int]:
    try:
        return zk_offsets(zk, group, topic)
    except Exception:  # ZooKeeper restarting under the run: asked again
        return {}


def test_stock_clients_under_random_faults(fault_sandbox, fault_chroot, tmp_path):
    from zkcoord.errors import MissingToolError
    from zkcoord.local import jars

    try:
        jars.kafka4_distribution()
    except MissingToolError as exc:
        pytest.skip(f"Kafka's VerifiableConsumer 4.4 needs Java 17+ and the Kafka 4.x jars: {exc}")
    seed = seed_from_env()
    rng = random.Random(seed)
    protocol = rng.choice(("classic", "consumer"))
    print(f"\nstock fault run: ZKCOORD_FAULT_SEED={seed} ZKCOORD_STOCK_FAULTS={FAULTS} protocol={protocol} "
          f"(logs in {tmp_path})")
    hosts, zk = fault_chroot
    bootstrap = fault_sandbox.bootstrap_servers
    topic, group = f"stock-{uuid.uuid4().hex[:8]}", "stock-group"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    admin.create_topics([NewTopic(topic, PARTITIONS, replicas(bootstrap))])
    admin.close()
    ClusterFaults(fault_sandbox.sandbox, timeout_s=LIVENESS_S, say=print).wait_topic(topic, PARTITIONS)
    ports = {n: free_port() for n in (1, 2, 3)}
    options = dict(zk_session_timeout_ms=ZK_SESSION_TIMEOUT_MS, group_initial_rebalance_delay_ms=0,
                   bootstrap_servers=bootstrap, gateway_listen="127.0.0.1:0", topic_metadata_refresh_ms=1000,
                   group_consumer_session_timeout_ms=SESSION_TIMEOUT_MS, group_consumer_heartbeat_interval_ms=500,
                   group_consumer_assignment_interval_ms=0)
    started = time.monotonic()
    verdict = None
    with DaemonFleet(hosts, zk, tmp_path / "daemons", options=options) as fleet:
        for node_id, port in ports.items():
            fleet.start(node_id, listen=f"127.0.0.1:{port}")
        with StockClients(gateways(fleet), topic, group, tmp_path / "clients",
                          partitions=[(topic, p) for p in range(PARTITIONS)], classic_properties=CLASSIC) as clients:
            run = JsonLines(tmp_path / "run.jsonl")
            stock = StockFaults(rng, clients)
            state = fault_sandbox.sandbox.load()
            kinds = StockRunFaults.KINDS
            if state.zookeeper_peers and len(state.brokers) >= 3:
                kinds += StockRunFaults.CLUSTER_KINDS
            print(f"fault kinds drawn from: {', '.join(kinds)}")
            faults = StockRunFaults(rng, fault_sandbox.sandbox, fleet, ports, None, group, fault_sandbox.zookeeper,
                                    run, stock=stock, clients=clients, kinds=kinds,
                                    cluster=ClusterFaults(fault_sandbox.sandbox, timeout_s=LIVENESS_S, say=print),
                                    topic=topic, partitions=PARTITIONS)
            try:
                clients.start_producer(100)
                clients.start_java("s1", protocol=protocol)
                clients.start_java("s2", protocol=protocol, instance_id=f"{group}-s2")
                clients.start_java("s3", protocol=protocol, kafka4=protocol != "classic")
                clients.start_rdkafka("s4", protocol=protocol, assignor="range" if protocol == "classic" else None)
                clients.wait_balanced("four members", timeout_s=LIVENESS_S)
                clients.wait_consumed_more(100, "before the faults", timeout_s=LIVENESS_S)
                for number in range(1, FAULTS + 1):
                    time.sleep(rng.uniform(1.0, 4.0))
                    faults.inject(number)
                    clients.wait_balanced(f"after fault {number}", timeout_s=LIVENESS_S)
                clients.stop_producer()
                clients.wait_all_consumed("after the faults", timeout_s=300)
                ends = {tp: max(offsets) + 1 for tp, offsets in clients.acked().items()}
                wait_for(lambda: all(quiet_offsets(zk, group, topic).get(tp, -1) >= end for tp, end in ends.items()),
                         300, "the group's commits at the ends", 0.5)
                clients.stop_all()
                died = clients.died()
                verdict = clients.check(final_committed=zk_offsets(zk, group, topic),
                                        allowed_duplicates=stock.allowed_duplicates)
            finally:
                run.close()
                counts = dict(faults.counts)
    figures = {"seed": seed, "protocol": protocol, "faults": counts, "duration_s": round(time.monotonic() - started),
               "send_errors": len(clients.send_errors()), **(verdict.summary() if verdict else {})}
    print("stock fault run summary: " + json.dumps(figures))
    if verdict is None or verdict.violations or died:
        kept = Path(tempfile.gettempdir()) / f"zkcoord-stock-fault-run-{seed}-{uuid.uuid4().hex[:6]}"
        shutil.copytree(tmp_path, kept)
        print(f"the run's logs are kept in {kept}")
    for v in verdict.violations:
        print(f"VIOLATION {v.kind}: {v.detail}")
    assert verdict.violations == [], f"seed {seed}: {len(verdict.violations)} violation(s), first: {verdict.violations[0]}"
    assert died == [], f"seed {seed}: consumers exited by themselves: {died}"
    assert verdict.acked > 0 and verdict.commits > 0
