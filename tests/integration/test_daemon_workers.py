"""``zkcoord run --workers 2``: one daemon of two worker processes, each its
own node in the group elections, behind shared listener, gateway and
metrics ports (zkcoord.server.supervisor, zkcoord.core.workers).

What is checked, with real processes and the test cluster:

* FindCoordinator asked on the shared port or on either worker's own port
  names the worker that owns the group (its own port); through the gateway,
  that worker's own gateway port.
* A kafka-python consumer bootstrapped from the shared gateway port
  consumes every record of a topic large enough that its Fetch answers are
  spliced (zkcoord.gateway.splice), and commits them.
* kill -9 of one worker: its group fails over to the other worker and is
  served again, while the other worker's group keeps its owner and its
  member's heartbeats are answered throughout; the supervisor starts the
  killed worker again with its node id.
* SIGTERM to the supervisor stops every worker: exit 0, no worker process
  left, no registration, no election node.
* The supervisor's /metrics has every worker's samples, labelled.
* A gateway broker port another process listens on (with SO_REUSEPORT) is
  left to it: no worker's socket joins it (connections to it all reach that
  process), the broker is not advertised on it, and the log says why.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time

import pytest
from kafka import KafkaProducer
from kafka.protocol.consumer.group import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest
from kafka.protocol.metadata import MetadataRequest

from tests.integration.test_gateway_clients import PythonMember, create_topic, log_ends, zk_offsets
from tests.support.daemons import DaemonFleet, start_worker_daemon, wait_for
from tests.support.placement import placed_name
from tests.support.ports import foreign_listener
from tests.support.wire import WireClient, find_coordinator, parse_addresses
from zkcoord.local.procs import free_port_range, http_get

pytestmark = pytest.mark.integration

WAIT_S = 60.0
OPTIONS = {"zk_session_timeout_ms": 4000, "group_initial_rebalance_delay_ms": 0, "topic_metadata_refresh_ms": 1000}


@pytest.fixture
def fleet(services, zk_hosts, zk, tmp_path):
    fleet = DaemonFleet(zk_hosts, zk, tmp_path / "logs",
                        options={"bootstrap_servers": services.bootstrap_servers, **OPTIONS})
    try:
        yield fleet
    finally:
        for path in sorted((tmp_path / "logs").glob("workers-*.log")):
            print(f"---- {path}:\n{path.read_text()[-6000:]}")
        fleet.close()


@pytest.fixture
def daemon(fleet):
    return start_worker_daemon(fleet, 2, 1, gateway_listen="auto", gateway_broker_ids="0-2")


def _join(group: str, member_id: str = "") -> JoinGroupRequest:
    return JoinGroupRequest(version=5, group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                            member_id=member_id, group_instance_id=None, protocol_type="consumer",
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])


async def _member(address: tuple[str, int], group: str, timeout_s: float = 30.0) -> tuple[WireClient, str, int]:
    """A member of ``group`` joined at its coordinator (found on ``address``):
    (its connection, member id, generation)."""
    host, port = await find_coordinator(address, group, timeout_s=timeout_s)
    client = await WireClient.connect(host, port)
    first = await client.call(_join(group))
    assert first.error_code == 79, first  # MEMBER_ID_REQUIRED
    joined = await client.call(_join(group, first.member_id))
    assert joined.error_code == 0, joined
    synced = await client.call(SyncGroupRequest(
        version=3, group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
        group_instance_id=None, assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
            member_id=joined.member_id, assignment=b"")]))
    assert synced.error_code == 0, synced
    return client, joined.member_id, joined.generation_id


async def _heartbeat(client: WireClient, group: str, member_id: str, generation: int) -> int:
    answer = await client.call(HeartbeatRequest(version=3, group_id=group, generation_id=generation,
                                                member_id=member_id, group_instance_id=None))
    return answer.error_code


def _groups_on_each_worker(daemon, unique_name) -> dict[int, str]:
    """A group id placed on each worker (by the lookup's hashing over both)."""
    nodes = sorted(daemon.workers)
    return {node: placed_name(unique_name, "g", (nodes, node)) for node in nodes}


def test_any_worker_names_the_worker_that_owns_the_group(daemon, fleet, unique_name):
    async def scenario():
        for node, group in _groups_on_each_worker(daemon, unique_name).items():
            client, _, _ = await _member(("127.0.0.1", daemon.listen_port), group)
            await client.close()
            assert fleet.contenders(group) == [node]
            owner = daemon.workers[node]
            ports = [daemon.listen_port] + [w["port"] for w in daemon.workers.values()]
            for port in ports:  # the shared port (either worker answers) and each worker's own
                assert await find_coordinator(("127.0.0.1", port), group) == (owner["host"], owner["port"])
            gateway_ports = [daemon.gateway_port] + [w["gateway_port"] for w in daemon.workers.values()]
            for port in gateway_ports:
                assert await find_coordinator(("127.0.0.1", port), group) == (owner["gateway_host"],
                                                                               owner["gateway_port"])

    asyncio.run(scenario())


def test_a_stock_consumer_through_the_workers_gateway_consumes_everything(services, daemon, zk, unique_name):
    topic, group = unique_name("t"), unique_name("g")
    create_topic(services.bootstrap_servers, topic, 3)
    padding = "x" * 2000  # 3,000 records of 2 KB: Fetch answers long enough to be spliced
    producer = KafkaProducer(bootstrap_servers=services.bootstrap_servers, acks="all", linger_ms=5)
    try:
        expected = set()
        for i in range(3000):
            value = f"r-{i}-{padding}"
            producer.send(topic, value=value.encode(), partition=i % 3)
            expected.add(value)
        producer.flush()
    finally:
        producer.close()
    member = PythonMember("kafka-python", f"127.0.0.1:{daemon.gateway_port}", group, topic).start()
    try:
        wait_for(lambda: member.values() >= expected, WAIT_S, "every record consumed through the gateway")
        ends = log_ends(services.bootstrap_servers, topic, 3)
        wait_for(lambda: zk_offsets(zk, group, topic) == ends, WAIT_S, "every offset committed")
    finally:
        member.close()
    assert len(member.records) == len({(p, o) for p, o, _ in member.records})  # none twice


def test_kill_9_of_a_worker_fails_over_its_groups_only(daemon, fleet, unique_name):
    groups = _groups_on_each_worker(daemon, unique_name)
    victim, survivor = sorted(daemon.workers)
    shared = ("127.0.0.1", daemon.listen_port)

    async def scenario():
        members = {node: await _member(shared, group) for node, group in groups.items()}
        for node, group in groups.items():
            assert fleet.contenders(group) == [node]
        os.kill(daemon.workers[victim]["pid"], signal.SIGKILL)
        # The survivor's group is answered throughout, by the same worker, while the victim's group's member
        # does what a client does (looks its coordinator up, heartbeats there) until it is served again.
        client, member_id, generation = members[survivor]
        _, lost_id, lost_generation = members[victim]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while True:
            assert await _heartbeat(client, groups[survivor], member_id, generation) == 0
            assert fleet.contenders(groups[survivor]) == [survivor]
            try:
                host, port = await find_coordinator(shared, groups[victim], timeout_s=1.0)
                again = await WireClient.connect(host, port)
                try:
                    if await _heartbeat(again, groups[victim], lost_id, lost_generation) == 0:
                        break
                finally:
                    await again.close()
            except (AssertionError, OSError):  # not taken over yet
                pass
            assert loop.time() < deadline, "the killed worker's group was not served again"
            await asyncio.sleep(0.5)
        for client, _, _ in members.values():
            await client.close()
        return fleet.contenders(groups[victim])[0]

    new_owner = asyncio.run(scenario())
    old_pid = daemon.workers[victim]["pid"]
    # served by a live worker: the survivor, or the killed worker started again with its node id
    assert fleet.registration(new_owner)["pid"] in daemon.worker_pids() - {old_pid}
    wait_for(lambda: (fleet.registration(victim) or {}).get("pid") in daemon.worker_pids() - {old_pid}, WAIT_S,
             f"worker node {victim} started again by the supervisor")


def test_sigterm_of_the_supervisor_stops_every_worker(daemon, fleet, unique_name):
    groups = _groups_on_each_worker(daemon, unique_name)

    async def scenario():
        for group in groups.values():
            client, _, _ = await _member(("127.0.0.1", daemon.listen_port), group)
            await client.close()

    asyncio.run(scenario())
    pids = daemon.worker_pids()
    assert len(pids) == 2
    daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.proc.wait(30) == 0
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or "zombie" in open(f"/proc/{pid}/status").read().lower()
    for node in daemon.workers:
        assert fleet.registration(node) is None
    for group in groups.values():
        assert fleet.contenders(group) == []


def test_the_supervisor_serves_every_workers_metrics_and_health(daemon):
    status, body = http_get(f"http://127.0.0.1:{daemon.metrics_port}/health")
    assert status == 200
    health = json.loads(body)
    assert health["status"] == "ready"
    assert sorted(w["node_id"] for w in health["workers"]) == sorted(daemon.workers)
    status, body = http_get(f"http://127.0.0.1:{daemon.metrics_port}/metrics")
    text = body.decode() if isinstance(body, bytes) else body
    assert status == 200
    for index in (1, 2):
        assert f'zkcoord_zookeeper_connected{{worker="{index}"}} 1.0' in text
    assert 'zkcoord_workers{state="ready"} 2.0' in text
    assert text.count("# TYPE zkcoord_groups_owned gauge") == 1


async def _brokers(address: tuple[str, int]) -> dict[int, tuple[str, int]]:
    client = await WireClient.connect(*address)
    try:
        metadata = await client.call(MetadataRequest(version=9, topics=[], allow_auto_topic_creation=False,
                                                     include_topic_authorized_operations=False))
    finally:
        await client.close()
    return {b.node_id: (b.host, b.port) for b in metadata.brokers}


def test_a_broker_port_another_process_listens_on_is_left_to_it_not_joined(services, fleet):
    # Every worker binds the gateway's broker ports with SO_REUSEPORT, so a plain bind cannot tell another
    # process's reuse-port listener from a sibling worker's: without the supervisor's check at the start, the
    # workers' sockets joined that listener and the kernel split its clients between the two processes.
    broker_id = min(asyncio.run(_brokers(parse_addresses(services.bootstrap_servers)[0])))
    assert 0 <= broker_id <= 2, broker_id  # within the gateway_broker_ids below
    gateway = free_port_range(1 + 3 + 2)  # G, brokers 0-2 on G+1..G+3, the two workers' own gateway ports
    port = gateway + 1 + broker_id
    with foreign_listener(True, port) as other:
        daemon = start_worker_daemon(fleet, 2, 1, avoid=frozenset(range(gateway, gateway + 6)),
                                     gateway_listen=f"127.0.0.1:{gateway}", gateway_broker_ids="0-2")
        assert f"broker {broker_id} will have no gateway port: cannot listen on 127.0.0.1:{port}" in daemon.log(400)
        refusal = f"no port for broker {broker_id}: port {port} is taken by another process"
        wait_for(lambda: all(any(refusal in line and f"[worker {k}]" in line for line in daemon.log(400).splitlines())
                             for k in (1, 2)), WAIT_S, "both workers saw the broker and left its port alone")
        advertised = asyncio.run(_brokers(("127.0.0.1", gateway)))
        assert broker_id not in advertised and port not in {p for _, p in advertised.values()}, advertised

        other.setblocking(False)
        for _ in range(32):  # one at a time: the other listener's backlog is small
            with socket.create_connection(("127.0.0.1", port), timeout=10):
                deadline = time.monotonic() + WAIT_S
                while True:  # a connection a worker had taken would never reach the other process
                    try:
                        other.accept()[0].close()
                        break
                    except BlockingIOError:
                        assert time.monotonic() < deadline, "a connection to the port did not reach its listener"
                        time.sleep(0.01)
