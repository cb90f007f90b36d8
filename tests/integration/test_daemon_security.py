"""A daemon with TLS and SASL on its listener and Kafka's ACLs enforced, on
the real ZooKeeper of the test sandbox: users and ACLs written by Kafka 3.9's
own tools (kafka-configs, kafka-acls) in the test's chroot; clients logging
in with zkcoord's client (kafka-python's SASL mechanisms) over TLS."""

from __future__ import annotations

import asyncio
import logging

import pytest
from kafka.protocol.admin.groups import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest, LeaveGroupRequest, OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest
from kafka.protocol.sasl import SaslHandshakeRequest

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

PASSWORDS = {"alice": "alice-pw-7Qe", "bob": "bob-pw-9Xz", "mallory": "mallory-pw-3Kd"}
E_NONE, E_GROUP_AUTH, E_TOPIC_AUTH, E_UNKNOWN_MEMBER = 0, 30, 29, 25
SASL_AUTH_FAILED, UNSUPPORTED_MECHANISM = 58, 33


def kafka_configs(zk_hosts: str, user: str, password: str) -> None:
    run_tool("kafka.admin.ConfigCommand", "--zookeeper", zk_hosts, "--alter", "--add-config",
             f"SCRAM-SHA-512=[iterations=4096,password={password}]", "--entity-type", "users", "--entity-name", user)


def kafka_acls(zk_hosts: str, *args: str) -> None:
    run_tool("kafka.admin.AclCommand", "--authorizer-properties", f"zookeeper.connect={zk_hosts}", *args)


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return make_local_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def secured(zk_hosts, ca):
    """Users alice, bob, mallory; alice may READ groups alice-* and READ topic t-*."""
    for user, password in PASSWORDS.items():
        kafka_configs(zk_hosts, user, password)
    kafka_acls(zk_hosts, "--add", "--allow-principal", "User:alice", "--operation", "Read",
               "--group", "alice-", "--resource-pattern-type", "prefixed")
    kafka_acls(zk_hosts, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "t-",
               "--resource-pattern-type", "prefixed")
    return DaemonConfig(
        zookeeper=zk_hosts, listen="SASL_SSL://127.0.0.1:0", node_id=1, group_initial_rebalance_delay_ms=0,
        ssl_keystore_location=str(ca.server_keystore_pem), ssl_key_password=ca.key_password,
        sasl_enabled_mechanisms="SCRAM-SHA-512", authorizer_class_name="kafka.security.authorizer.AclAuthorizer",
        super_users="User:admin")


def client_security(ca, user: str, password: str | None = None) -> KafkaClientSecurity:
    return KafkaClientSecurity("SASL_SSL", "SCRAM-SHA-512", user, Password(password or PASSWORDS[user]),
                               SslSettings(truststore_location=str(ca.ca_certificate_pem)))


async def connect(address, security) -> WireClient:
    connection = await open_kafka_connection(*address, security, client_id=security.sasl_username)
    return WireClient(connection.reader, connection.writer, security.sasl_username)


def join(group: str, member_id: str = ""):
    from kafka.protocol.consumer.group import JoinGroupRequest

    return JoinGroupRequest(version=5, group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                            member_id=member_id, group_instance_id=None, protocol_type="consumer",
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"m")])


def test_logins_and_acls_on_a_sasl_ssl_listener(secured, ca, caplog):
    caplog.set_level(logging.INFO)

    async def scenario():
        daemon = Daemon(secured)
        running = await daemon.start()
        address = running.advertised
        try:
            alice = await connect(address, client_security(ca, "alice"))
            found = await alice.call(FindCoordinatorRequest(version=3, key="alice-g", key_type=0))
            assert (found.error_code, found.node_id) == (E_NONE, 1)
            joined = await alice.call(join("alice-g"))
            if joined.error_code == 79:  # MEMBER_ID_REQUIRED
                joined = await alice.call(join("alice-g", joined.member_id))
            assert joined.error_code == E_NONE
            member, generation = joined.member_id, joined.generation_id
            synced = await alice.call(SyncGroupRequest(
                version=3, group_id="alice-g", generation_id=generation, member_id=member, group_instance_id=None,
                assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=member, assignment=b"a")]))
            assert synced.error_code == E_NONE
            committed = await alice.call(OffsetCommitRequest(
                version=7, group_id="alice-g", generation_id_or_member_epoch=generation, member_id=member,
                group_instance_id=None, topics=[
                    OffsetCommitRequest.OffsetCommitRequestTopic(name=name, partitions=[
                        OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=42, committed_metadata="")])
                    for name in ("t-mine", "other")]))
            assert {t.name: t.partitions[0].error_code for t in committed.topics} == {
                "t-mine": E_NONE, "other": E_TOPIC_AUTH}

            # bob is a user, but no ACL lets him near alice's group
            bob = await connect(address, client_security(ca, "bob"))
            assert (await bob.call(join("alice-g2"))).error_code == E_GROUP_AUTH
            assert (await bob.call(FindCoordinatorRequest(version=3, key="alice-g", key_type=0))).error_code \
                == E_GROUP_AUTH
            # mallory knows alice's member id: no eviction, no rewind, no delete, nothing listed or described
            mallory = await connect(address, client_security(ca, "mallory"))
            left = await mallory.call(LeaveGroupRequest(version=3, group_id="alice-g", members=[
                LeaveGroupRequest.MemberIdentity(member_id=member, group_instance_id=None)]))
            assert left.error_code == E_GROUP_AUTH
            rewound = await mallory.call(OffsetCommitRequest(
                version=7, group_id="alice-g", generation_id_or_member_epoch=-1, member_id="",
                group_instance_id=None, topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="t-mine", partitions=[
                    OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=0, committed_metadata="")])]))
            assert rewound.topics[0].partitions[0].error_code == E_GROUP_AUTH
            deleted = await mallory.call(DeleteGroupsRequest(version=2, groups_names=["alice-g"]))
            assert [(r.group_id, r.error_code) for r in deleted.results] == [("alice-g", E_GROUP_AUTH)]
            described = await mallory.call(DescribeGroupsRequest(version=5, groups=["alice-g"],
                                                                 include_authorized_operations=True))
            assert (described.groups[0].error_code, described.groups[0].members) == (E_GROUP_AUTH, [])
            assert (await mallory.call(ListGroupsRequest(version=4, states_filter=[]))).groups == []

            # alice's member is still there, her offset unchanged; she sees her group and what she may do
            beat = await alice.call(HeartbeatRequest(version=3, group_id="alice-g", generation_id=generation,
                                                     member_id=member, group_instance_id=None))
            assert beat.error_code == E_NONE
            fetched = await alice.call(OffsetFetchRequest(version=7, group_id="alice-g", topics=[
                OffsetFetchRequest.OffsetFetchRequestTopic(name=n, partition_indexes=[0]) for n in ("t-mine", "other")],
                require_stable=False))
            assert {t.name: (t.partitions[0].committed_offset, t.partitions[0].error_code) for t in fetched.topics} \
                == {"t-mine": (42, E_NONE), "other": (-1, E_TOPIC_AUTH)}
            listed = await alice.call(ListGroupsRequest(version=4, states_filter=[]))
            assert [g.group_id for g in listed.groups] == ["alice-g"]
            described = await alice.call(DescribeGroupsRequest(version=5, groups=["alice-g"],
                                                               include_authorized_operations=True))
            assert described.groups[0].authorized_operations == {3, 8}  # READ and the implied DESCRIBE

            # an ACL added with kafka-acls takes effect without a restart
            await asyncio.to_thread(kafka_acls, secured.zookeeper, "--add", "--allow-principal", "User:bob",
                                    "--operation", "Read", "--group", "alice-g2")
            for _ in range(200):
                if (await bob.call(join("alice-g2"))).error_code != E_GROUP_AUTH:
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("bob's new ACL did not take effect within 10 s")

            # a wrong password, an unknown user, a mechanism not enabled: refused
            with pytest.raises(AuthenticationError, match="SCRAM-SHA-512"):
                await connect(address, client_security(ca, "alice", "not-her-password"))
            with pytest.raises(AuthenticationError):
                await connect(address, client_security(ca, "nobody", "whatever"))
            with pytest.raises(AuthenticationError, match="SCRAM-SHA-256"):
                await connect(address, KafkaClientSecurity("SASL_SSL", "SCRAM-SHA-256", "alice",
                                                           Password(PASSWORDS["alice"]),
                                                           SslSettings(truststore_location=str(ca.ca_certificate_pem))))
            # PLAINTEXT on a TLS listener: no answer, the connection ends
            reader, writer = await asyncio.open_connection(*address)
            plain = WireClient(reader, writer, "plain")
            with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
                await plain.call(ApiVersionsRequest(version=0))
            for client in (alice, bob, mallory):
                await client.close()
        finally:
            await daemon.stop()

    asyncio.run(scenario())
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert not any(password in logged for password in PASSWORDS.values())
    assert "not-her-password" not in logged


def test_a_sasl_plaintext_listener_reads_nothing_before_the_login(zk_hosts, secured, ca):
    config = DaemonConfig(zookeeper=zk_hosts, listen="SASL_PLAINTEXT://127.0.0.1:0", node_id=1,
                          sasl_enabled_mechanisms="SCRAM-SHA-512")

    async def scenario():
        daemon = Daemon(config)
        running = await daemon.start()
        try:
            client = await WireClient.connect(*running.advertised)
            versions = await client.call(ApiVersionsRequest(version=3, client_software_name="t",
                                                            client_software_version="1"))
            keys = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
            assert keys[17] == (1, 1) and keys[36] == (0, 2)
            with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):  # a group API before the login
                await client.call(FindCoordinatorRequest(version=3, key="alice-g", key_type=0))
            client = await WireClient.connect(*running.advertised)
            shaken = await client.call(SaslHandshakeRequest(version=1, mechanism="PLAIN"))
            assert (shaken.error_code, shaken.mechanisms) == (UNSUPPORTED_MECHANISM, ["SCRAM-SHA-512"])
            security = KafkaClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-512", "alice", Password(PASSWORDS["alice"]))
            alice = await connect(running.advertised, security)
            found = await alice.call(FindCoordinatorRequest(version=3, key="anything", key_type=0))
            assert found.error_code == E_NONE  # no authorizer on this daemon: everything is allowed
            await alice.close()
        finally:
            await daemon.stop()

    asyncio.run(scenario())
