"""The gateway of an in-process daemon, over the wire, in front of the
sandbox's real broker: what ApiVersions advertises, how Metadata,
DescribeCluster and FindCoordinator answers are rewritten, the
registration, the gateway's metrics, and a start that fails with a gateway
bound."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest
from kafka.protocol.admin.cluster import DescribeClusterRequest
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_daemon_protocol import daemon_config, join
from tests.support.http import http_get
from tests.support.wire import WireClient, parse_address
from zkcoord.core.gateway import GATEWAY_NODE_ID_BASE
from zkcoord.errors import NodeIdInUseError
from zkcoord.local.procs import free_port
from zkcoord.server.daemon import Daemon
from zkcoord.wire.registry import COORDINATOR_APIS

pytestmark = pytest.mark.integration
HIDDEN = {25, 28, 47, 68, 69}


def gateway_config(zk_hosts: str, bootstrap: str, node_id: int, **extra):
    return dataclasses.replace(daemon_config(zk_hosts, node_id), bootstrap_servers=bootstrap,
                               gateway_listen="127.0.0.1:0", metrics_listen="127.0.0.1:0", **extra)


async def call(address: tuple[str, int], request):
    client = await WireClient.connect(*address, "gateway-test")
    try:
        return await client.call(request)
    finally:
        await client.close()


def test_what_a_client_of_the_gateway_is_told(services, zk_hosts, zk, unique_name):
    broker_host, broker_port = parse_address(services.bootstrap_servers.split(",")[0])

    async def scenario():
        daemon = Daemon(gateway_config(zk_hosts, services.bootstrap_servers, 7))
        running = await daemon.start()
        try:
            gateway = running.gateway
            node = json.loads(zk.get("/zkcoord/nodes/7")[0])
            assert (node["gateway_host"], node["gateway_port"]) == gateway

            versions = await call(gateway, ApiVersionsRequest(version=3, client_software_name="t",
                                                             client_software_version="1"))
            table = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
            assert {0, 1, 2, 3, 19, 22, 60} <= set(table)  # the brokers' APIs
            assert not HIDDEN & set(table)
            for key in (11, 12, 13, 14, 15, 16, 42):
                assert table[key] == (COORDINATOR_APIS[key].min_version, COORDINATOR_APIS[key].max_version)
            assert table[10][1] == 4
            assert table[1][1] == 15 and table[0][1] == 9  # no leader hints by default: every answer streams
            features = {f.name for f in versions.supported_features or []}
            assert "zkcoord.rebalance.notice" in features  # zkcoord's consumers keep their notice here too

            metadata = await call(gateway, MetadataRequest(version=9, topics=[], allow_auto_topic_creation=False,
                                                           include_topic_authorized_operations=False))
            brokers = {b.node_id: (b.host, b.port) for b in metadata.brokers}
            assert brokers[GATEWAY_NODE_ID_BASE + 7] == gateway
            real = [b for b in brokers if b < GATEWAY_NODE_ID_BASE]
            assert real and all(brokers[b][0] == gateway[0] and brokers[b] != (broker_host, broker_port)
                                for b in real)

            cluster = await call(gateway, DescribeClusterRequest(version=0, include_cluster_authorized_operations=False))
            assert {b.broker_id: (b.host, b.port) for b in cluster.brokers} == brokers

            group = unique_name("g")
            found = await call(gateway, FindCoordinatorRequest(version=3, key=group, key_type=0))
            assert (found.error_code, found.node_id, (found.host, found.port)) == (
                0, GATEWAY_NODE_ID_BASE + 7, gateway)
            tx_id = unique_name("tx")
            for _ in range(300):  # the broker creates __transaction_state on the first lookup: retriable until then
                tx = await call(gateway, FindCoordinatorRequest(version=4, key_type=1, coordinator_keys=[tx_id]))
                coordinator = tx.coordinators[0]
                if coordinator.error_code != 15:
                    break
                await asyncio.sleep(0.1)
            assert coordinator.error_code == 0 and (coordinator.host, coordinator.port) == brokers[coordinator.node_id]

            status, body = await http_get(daemon.metrics_port, "/metrics")
            found_metrics = {(s.name, tuple(sorted(s.labels.items()))): s.value
                             for f in text_string_to_metric_families(body.decode()) for s in f.samples}
            assert found_metrics[("zkcoord_gateway_forwarded_requests_total", (("api", "Metadata"),))] >= 1
            assert found_metrics[("zkcoord_gateway_brokers", ())] == len(real)
            assert found_metrics[("zkcoord_requests_total", (("api", "FindCoordinator"), ("error", "NONE")))] >= 1
        finally:
            await daemon.stop()

    asyncio.run(scenario())


def _produce_and_read_back(gateway: str, topic: str) -> list[str]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(bootstrap_servers=gateway, acks="all")
    for i in range(50):
        producer.send(topic, f"v{i}".encode(), partition=0)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=gateway, auto_offset_reset="earliest", consumer_timeout_ms=20000)
    consumer.assign([TopicPartition(topic, 0)])
    try:
        got = []
        for record in consumer:
            got.append(record.value.decode())
            if len(got) == 50:
                break
        return got
    finally:
        consumer.close()


def test_with_leader_hints_fetch_and_produce_keep_the_brokers_versions(services, zk_hosts, unique_name):
    topic = unique_name("t")

    async def scenario():
        daemon = Daemon(gateway_config(zk_hosts, services.bootstrap_servers, 3, gateway_leader_hints="on"))
        running = await daemon.start()
        try:
            versions = await call(running.gateway, ApiVersionsRequest(version=3, client_software_name="t",
                                                                     client_software_version="1"))
            broker = await call(parse_address(services.bootstrap_servers.split(",")[0]),
                                ApiVersionsRequest(version=3, client_software_name="t", client_software_version="1"))
            mine = {k.api_key: k.max_version for k in versions.api_keys}
            theirs = {k.api_key: k.max_version for k in broker.api_keys}
            assert (mine[0], mine[1]) == (theirs[0], theirs[1])  # Kafka 3.9: Produce v11, Fetch v17
            gateway = "%s:%d" % running.gateway
            sent = await asyncio.to_thread(_produce_and_read_back, gateway, topic)
            assert sent == [f"v{i}" for i in range(50)]  # through the decode-and-rewrite path, byte for byte
        finally:
            await daemon.stop()

    asyncio.run(scenario())


def test_an_owner_without_a_gateway_is_named_as_unavailable(services, zk_hosts, unique_name):
    group = unique_name("g")

    async def scenario():
        plain = Daemon(daemon_config(zk_hosts, 1))
        with_gateway = Daemon(gateway_config(zk_hosts, services.bootstrap_servers, 2))
        plain_running = await plain.start()
        running = await with_gateway.start()
        try:
            # Nobody owns the group: the gateway names only a daemon it can name, daemon 2.
            unowned = await call(running.gateway, FindCoordinatorRequest(version=3, key=group, key_type=0))
            assert (unowned.error_code, unowned.node_id) == (0, GATEWAY_NODE_ID_BASE + 2)
            # A group's first JoinGroup to daemon 1 makes it the owner (MEMBER_ID_REQUIRED).
            taken = await call(plain_running.advertised, join(group))
            assert taken.error_code == 79
            owned = await call(plain_running.advertised, FindCoordinatorRequest(version=3, key=group, key_type=0))
            assert (owned.error_code, owned.node_id) == (0, 1)
            found = await call(running.gateway, FindCoordinatorRequest(version=3, key=group, key_type=0))
            assert found.error_code == 15 and "runs no gateway" in found.error_message
        finally:
            await with_gateway.stop()
            await plain.stop()

    asyncio.run(scenario())


def test_a_start_that_fails_undoes_what_it_started(services, zk_hosts):
    """Daemon.start's steps are undone, last first, when one fails: a second
    daemon with the first one's node id fails to register, after binding its
    listener, its metrics endpoint and its gateway; all three are closed
    again and its ZooKeeper session ended. The first daemon serves on."""

    async def refused(address: tuple[str, int]) -> bool:
        try:
            _, writer = await asyncio.open_connection(*address)
        except OSError:
            return True
        writer.close()
        return False

    async def scenario():
        first = Daemon(gateway_config(zk_hosts, services.bootstrap_servers, 7))
        running = await first.start()
        try:
            port = free_port()
            second = Daemon(gateway_config(zk_hosts, services.bootstrap_servers, 7, listen=f"127.0.0.1:{port}"))
            with pytest.raises(NodeIdInUseError):
                await second.start()
            assert second.metrics_port and second.gateway.bound_port  # they were bound
            for address in (("127.0.0.1", port), ("127.0.0.1", second.metrics_port),
                            ("127.0.0.1", second.gateway.bound_port)):
                assert await refused(address), address
            assert not second.conn.connected
            versions = await call(running.gateway, ApiVersionsRequest(version=3, client_software_name="t",
                                                                      client_software_version="1"))
            assert versions.error_code == 0
        finally:
            await first.stop()

    asyncio.run(scenario())
