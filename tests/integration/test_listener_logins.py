"""The other ways in: client certificates on an SSL listener (the principal
is the certificate's subject, as Java prints it), PLAIN logins checked
against a broker-style JAAS users file, and a gateway that checks SASL
logins itself because its brokers (the test sandbox's) speak PLAINTEXT,
with a real librdkafka consumer through it. ACLs are written by Kafka's own
kafka-acls in the test's chroot."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest
from kafka.protocol.admin.groups import ListGroupsRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from tests.integration.test_daemon_protocol import daemon_config, join
from tests.support.java_tools import run_tool
from tests.support.wire import WireClient
from zkcoord.config import DaemonConfig
from zkcoord.errors import AuthenticationError
from zkcoord.kafka.client_security import KafkaClientSecurity, open_kafka_connection
from zkcoord.local.certs import make_local_ca
from zkcoord.password import Password
from zkcoord.security.tls import SslSettings
from zkcoord.server.daemon import Daemon

pytestmark = pytest.mark.integration

E_NONE, E_GROUP_AUTH = 0, 30
ALICE_DN = "CN=alice,OU=clients,O=zkcoord"
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"


def kafka_acls(zk_hosts: str, *args: str) -> None:
    run_tool("kafka.admin.AclCommand", "--authorizer-properties", f"zookeeper.connect={zk_hosts}", "--add", *args)


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return make_local_ca(tmp_path_factory.mktemp("ca"), clients=["alice", "eve"])


async def wire(address, security) -> WireClient:
    connection = await open_kafka_connection(*address, security, client_id="t")
    return WireClient(connection.reader, connection.writer, "t")


def test_client_certificates_name_the_principal_on_an_ssl_listener(zk_hosts, ca):
    kafka_acls(zk_hosts, "--allow-principal", f"User:{ALICE_DN}", "--operation", "Read", "--group", "alice-g")
    config = DaemonConfig(zookeeper=zk_hosts, listen="SSL://127.0.0.1:0", node_id=1,
                          group_initial_rebalance_delay_ms=0, ssl_keystore_location=str(ca.server_keystore_pkcs12),
                          ssl_keystore_password=ca.store_password, ssl_truststore_location=str(ca.ca_certificate_pem),
                          ssl_client_auth="required", authorizer_class_name=AUTHORIZER)

    def as_client(name: str | None) -> KafkaClientSecurity:
        client = ca.clients[name] if name else None
        return KafkaClientSecurity("SSL", ssl=SslSettings(
            truststore_location=str(ca.ca_certificate_pem),
            keystore_location=str(client.keystore_pkcs12) if client else None,
            keystore_password=ca.store_password if client else None))

    async def scenario():
        daemon = Daemon(config)
        running = await daemon.start()
        try:
            alice = await wire(running.advertised, as_client("alice"))
            joined = await alice.call(join("alice-g"))
            assert joined.error_code in (E_NONE, 79)  # MEMBER_ID_REQUIRED: the first step of a join
            eve = await wire(running.advertised, as_client("eve"))
            assert (await eve.call(join("alice-g"))).error_code == E_GROUP_AUTH
            with pytest.raises(AuthenticationError):  # no client certificate: the TLS handshake fails
                client = await wire(running.advertised, as_client(None))
                await client.call(FindCoordinatorRequest(version=3, key="alice-g", key_type=0))
            await alice.close()
            await eve.close()
        finally:
            await daemon.stop()

    asyncio.run(scenario())


def test_plain_logins_against_a_brokers_jaas_file(zk_hosts, tmp_path):
    users = tmp_path / "kafka_server_jaas.conf"
    users.write_text('KafkaServer {\n  org.apache.kafka.common.security.plain.PlainLoginModule required\n'
                     '  username="admin" password="admin-pw"\n  user_admin="admin-pw"\n  user_carol="carol-pw";\n};\n')
    config = DaemonConfig(zookeeper=zk_hosts, listen="SASL_PLAINTEXT://127.0.0.1:0", node_id=1,
                          sasl_enabled_mechanisms="PLAIN", sasl_plain_users_file=str(users),
                          metrics_listen="127.0.0.1:0")

    async def scenario():
        daemon = Daemon(config)
        running = await daemon.start()
        try:
            carol = await wire(running.advertised, KafkaClientSecurity("SASL_PLAINTEXT", "PLAIN", "carol",
                                                                       Password("carol-pw")))
            found = await carol.call(FindCoordinatorRequest(version=3, key="g", key_type=0))
            assert found.error_code == E_NONE
            await carol.close()
            with pytest.raises(AuthenticationError, match="Invalid username or password"):
                await wire(running.advertised, KafkaClientSecurity("SASL_PLAINTEXT", "PLAIN", "carol",
                                                                   Password("wrong")))
            users.write_text(users.read_text().replace('user_carol="carol-pw"', 'user_carol="new-pw"'))
            deadline = time.monotonic() + 10
            while True:  # the file is looked at again within a second
                try:
                    await (await wire(running.advertised, KafkaClientSecurity(
                        "SASL_PLAINTEXT", "PLAIN", "carol", Password("new-pw")))).close()
                    break
                except AuthenticationError:
                    assert time.monotonic() < deadline, "the changed users file was not read again"
                    await asyncio.sleep(0.2)
            logins = await _samples(running.metrics_port, "zkcoord_sasl_logins_total")
            assert logins[("PLAIN", "ok")] == 2 and logins[("PLAIN", "failed")] >= 2
        finally:
            await daemon.stop()

    asyncio.run(scenario())


def test_a_gateway_checks_logins_itself_in_front_of_plaintext_brokers(services, zk_hosts, unique_name):
    """librdkafka logs in with SCRAM to the gateway; the brokers behind it
    speak PLAINTEXT, so the gateway is the only one to check the login."""
    from confluent_kafka import Producer

    topic, group, password = unique_name("t"), "alice-gw", "alice-gw-pw"
    run_tool("kafka.admin.ConfigCommand", "--zookeeper", zk_hosts, "--alter", "--entity-type", "users",
             "--entity-name", "alice", "--add-config", f"SCRAM-SHA-256=[iterations=4096,password={password}]")
    kafka_acls(zk_hosts, "--allow-principal", "User:alice", "--operation", "Read", "--group", "alice-",
               "--resource-pattern-type", "prefixed")
    kafka_acls(zk_hosts, "--allow-principal", "User:alice", "--operation", "Read", "--topic", topic)
    config = dataclasses.replace(daemon_config(zk_hosts, 1), bootstrap_servers=services.bootstrap_servers,
                                 gateway_listen="SASL_PLAINTEXT://127.0.0.1:0", authorizer_class_name=AUTHORIZER,
                                 sasl_enabled_mechanisms="SCRAM-SHA-256")
    producer = Producer({"bootstrap.servers": services.bootstrap_servers})
    for i in range(9):
        producer.produce(topic, f"v{i}".encode())
    producer.flush(30)

    async def scenario():
        daemon = Daemon(config)
        running = await daemon.start()
        gateway = f"{running.gateway[0]}:{running.gateway[1]}"
        try:
            login = {"bootstrap.servers": gateway, "security.protocol": "SASL_PLAINTEXT",
                     "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "alice"}
            got = await asyncio.to_thread(_consume, {**login, "sasl.password": password, "group.id": group}, topic, 9)
            assert sorted(got) == [f"v{i}" for i in range(9)]
            error = await asyncio.to_thread(_first_error, {**login, "sasl.password": "wrong", "group.id": group},
                                            topic)
            assert error is not None and "Authentication failed" in error.str(), error
            # the group APIs answer as alice: her group is listed to her, no one else's
            alice = await wire(running.gateway, KafkaClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice",
                                                                    Password(password)))
            listed = await alice.call(ListGroupsRequest(version=4, states_filter=[]))
            assert [g.group_id for g in listed.groups] == [group]
            await alice.close()
        finally:
            await daemon.stop()

    asyncio.run(scenario())


async def _samples(port: int, name: str) -> dict[tuple[str, str], float]:
    from prometheus_client.parser import text_string_to_metric_families

    from tests.support.http import http_get

    _, body = await http_get(port, "/metrics")
    return {(s.labels["mechanism"], s.labels["result"]): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples
            if s.name == name}


def _consume(config: dict, topic: str, count: int) -> list[str]:
    from confluent_kafka import Consumer

    consumer = Consumer({**config, "auto.offset.reset": "earliest"})
    got, deadline = [], time.monotonic() + 60
    try:
        consumer.subscribe([topic])
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None:
                assert message.error() is None, message.error()
                got.append(message.value().decode())
    finally:
        consumer.close()
    return got


def _first_error(config: dict, topic: str):
    from confluent_kafka import Consumer

    errors = []
    consumer = Consumer({**config, "auto.offset.reset": "earliest", "error_cb": errors.append})
    deadline = time.monotonic() + 30
    try:
        consumer.subscribe([topic])
        while not errors and time.monotonic() < deadline:
            consumer.poll(0.5)
    finally:
        consumer.close()
    return errors[0] if errors else None
