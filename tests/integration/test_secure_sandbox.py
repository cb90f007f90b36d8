"""The secure sandbox (`zkcoord local up --secure`) end to end, as issue 17
asks: real SASL_SSL brokers with Kafka's AclAuthorizer, zkcoord daemons and
gateways enforcing the same users and ACLs, ZooKeeper with SASL and ACLs,
and stock clients (Kafka's Java console consumer, librdkafka) logging in
with the files `zkcoord local env` points at.

The secure sandbox has a state directory of its own
(``$ZKCOORD_TEST_STATE_DIR-secure``, which ``.ci/run`` also brings down, else
a temporary directory removed with it:
:func:`tests.support.state_dirs.state_directory`) and is brought down after
the module, also when a test fails."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import pytest
from kafka.protocol.admin.groups import DeleteGroupsRequest, DescribeGroupsRequest
from kafka.protocol.consumer.group import LeaveGroupRequest, OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata import ApiVersionsRequest

from tests.support import java_tools
from tests.support.state_dirs import state_directory
from tests.support.wire import WireClient, find_coordinator, open_client, parse_address
from zkcoord.errors import AuthenticationError
from zkcoord.kafka.client_security import KafkaClientSecurity
from zkcoord.local import secure
from zkcoord.local.sandbox import Sandbox
from zkcoord.password import Password
from zkcoord.security.properties import read_properties

pytestmark = pytest.mark.integration

E_NONE, E_GROUP_AUTH = 0, 30
TOPIC, RECORDS = "orders", 30


@pytest.fixture(scope="module")
def secured():
    with state_directory(os.environ.get("ZKCOORD_TEST_STATE_DIR"), "secure") as state_dir:
        sandbox = Sandbox(state_dir, log=print)
        try:
            state, _ = sandbox.up(brokers=1, daemons=2, secure=True)
            material = secure.load(sandbox.state_dir)
            _produce(material, sandbox.bootstrap_servers(state))
            yield sandbox, state, material
        finally:
            sandbox.down()


def _produce(material, bootstrap_servers: str) -> None:
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    options = material.client_security("admin").kafka_python_options()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, **options)
    try:
        admin.create_topics([NewTopic(TOPIC, 3, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, acks="all", **options)
    for i in range(RECORDS):
        producer.send(TOPIC, f"v{i}".encode(), partition=i % 3)
    producer.flush()
    producer.close()


def _java_properties(material, user: str) -> dict[str, str]:
    return read_properties(material.client_properties(user))


def _librdkafka(material, user: str, group: str, bootstrap: str):
    from confluent_kafka import Consumer

    config = {k.strip(): v.strip() for k, _, v in (line.partition("=") for line in
              (material.client_dir / f"{user}.librdkafka.conf").read_text().splitlines() if "=" in line)}
    return Consumer({**config, "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})


def test_alice_consumes_through_the_gateway_with_kafkas_java_consumer(secured):
    sandbox, state, material = secured
    records = java_tools.consume(sandbox.gateway_addresses(state), TOPIC, group="alice-g", max_messages=RECORDS,
                                 consumer_properties=_java_properties(material, "alice"))
    assert sorted(r.value for r in records) == sorted(f"v{i}" for i in range(RECORDS))


def test_bob_is_refused_a_group_until_kafka_acls_lets_him_in(secured):
    sandbox, state, material = secured
    gateways = sandbox.gateway_addresses(state)
    group = f"alice-g2-{uuid.uuid4().hex[:6]}"
    consumer = _librdkafka(material, "bob", group, gateways)
    try:
        consumer.subscribe([TOPIC])
        error = _first_error(consumer, 30)
        assert error is not None and error.name() == "GROUP_AUTHORIZATION_FAILED", error
    finally:
        consumer.close()
    # Kafka's own kafka-acls, through a broker, as admin: the running daemons see it
    admin_config = material.client_properties("admin")
    java_tools.run_tool("kafka.admin.AclCommand", "--bootstrap-server", sandbox.bootstrap_servers(state),
                        "--command-config", str(admin_config), "--add", "--allow-principal", "User:bob",
                        "--operation", "Read", "--group", group)
    consumer = _librdkafka(material, "bob", group, gateways)
    try:
        consumer.subscribe([TOPIC])
        got = _values(consumer, RECORDS, 60)
        assert sorted(got) == sorted(f"v{i}" for i in range(RECORDS))
    finally:
        consumer.close()


def _first_error(consumer, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is not None:
            return message.error()
    return None


def _values(consumer, count: int, timeout_s: float) -> list[str]:
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is None:
            continue
        assert message.error() is None, message.error()
        got.append(message.value().decode())
    return got


def _make_user(material, bootstrap: str, user: str) -> Password:
    from kafka import KafkaAdminClient
    from kafka.admin import UserScramCredentialUpsertion

    password = Password(uuid.uuid4().hex)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **material.client_security("admin").kafka_python_options())
    try:
        assert admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion(user, "SCRAM-SHA-512", password.value)]) == {user: None}
    finally:
        admin.close()
    return password


def test_mallory_cannot_evict_rewind_or_delete_alices_group(secured):
    sandbox, state, material = secured
    gateways = sandbox.gateway_addresses(state)
    mallory_password = _make_user(material, sandbox.bootstrap_servers(state), "mallory")
    group = f"alice-m-{uuid.uuid4().hex[:6]}"
    alice = _librdkafka(material, "alice", group, gateways)
    try:
        alice.subscribe([TOPIC])
        assert len(_values(alice, RECORDS, 60)) == RECORDS
        alice.commit(asynchronous=False)

        async def attacks():
            admin_security = material.client_security("admin")
            # the group's owner (its daemon's gateway), as a client finds it: any other daemon
            # answers NOT_COORDINATOR. Mallory cannot ask (FindCoordinator needs DESCRIBE on the
            # group): she is sent there too, so her refusals come from the owner itself.
            owner = await find_coordinator(gateways, group, security=admin_security)
            admin = await open_client(*owner, security=admin_security, client_id="test")
            described = await admin.call(DescribeGroupsRequest(version=5, groups=[group],
                                                               include_authorized_operations=False))
            assert [(g.error_code, len(g.members)) for g in described.groups] == [(E_NONE, 1)], described
            member = described.groups[0].members[0].member_id
            mallory = await _logged_in(owner, KafkaClientSecurity("SASL_SSL", "SCRAM-SHA-512", "mallory",
                                                                   mallory_password, _trust(material)))
            left = await mallory.call(LeaveGroupRequest(version=3, group_id=group, members=[
                LeaveGroupRequest.MemberIdentity(member_id=member, group_instance_id=None)]))
            rewound = await mallory.call(OffsetCommitRequest(
                version=7, group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=TOPIC, partitions=[
                    OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                        partition_index=p, committed_offset=0, committed_metadata="") for p in range(3)])]))
            deleted = await mallory.call(DeleteGroupsRequest(version=2, groups_names=[group]))
            fetched = await admin.call(OffsetFetchRequest(version=7, group_id=group, topics=None,
                                                          require_stable=False))
            after = await admin.call(DescribeGroupsRequest(version=5, groups=[group],
                                                           include_authorized_operations=False))
            await mallory.close()
            await admin.close()
            return member, left, rewound, deleted, fetched, after

        member, left, rewound, deleted, fetched, after = asyncio.run(attacks())
        assert left.error_code == E_GROUP_AUTH
        assert [p.error_code for t in rewound.topics for p in t.partitions] == [E_GROUP_AUTH] * 3
        assert [(r.group_id, r.error_code) for r in deleted.results] == [(group, E_GROUP_AUTH)]
        assert fetched.error_code == E_NONE, fetched
        assert sorted(p.committed_offset for t in fetched.topics for p in t.partitions) == [10, 10, 10]
        assert [(g.error_code, [m.member_id for m in g.members]) for g in after.groups] == [(E_NONE, [member])]
    finally:
        alice.close()


def _trust(material):
    from zkcoord.security.tls import SslSettings

    return SslSettings(truststore_type="PEM", truststore_location=str(material.ca_pem))


async def _logged_in(address, security, timeout_s: float = 10.0) -> WireClient:
    """A new user's credentials reach the daemons through their ZooKeeper watch: log in once they have."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await open_client(*address, security=security, client_id="test")
        except AuthenticationError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


def test_plaintext_is_not_served_by_daemons_or_gateways(secured):
    sandbox, state, _ = secured
    addresses = [parse_address(a) for a in (sandbox.daemon_addresses(state) + "," +
                                            sandbox.gateway_addresses(state)).split(",")]

    async def plain(address):
        client = await WireClient.connect(*address)
        try:
            await client.call(ApiVersionsRequest(version=0), timeout_s=10)
        except (ConnectionError, asyncio.IncompleteReadError):
            return "closed"
        finally:
            await client.close()
        return "answered"

    assert [asyncio.run(plain(a)) for a in addresses] == ["closed"] * len(addresses)


def test_an_unauthenticated_zookeeper_client_cannot_write_zkcoords_znodes(secured):
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoAuthError

    sandbox, state, _ = secured
    client = KazooClient(hosts=sandbox.zookeeper_address(state), timeout=10)
    client.start(timeout=30)
    try:
        nodes = client.get_children("/zkcoord/nodes")
        assert nodes  # readable
        attempts = {
            "plant a contender": lambda: client.create("/coordinators/alice-g/x-", b"", sequence=True),
            "plant a registration": lambda: client.create("/zkcoord/nodes/99", b"{}"),
            "rewrite a registration": lambda: client.set(f"/zkcoord/nodes/{nodes[0]}", b"{}"),
            "delete a registration": lambda: client.delete(f"/zkcoord/nodes/{nodes[0]}"),
            "read SCRAM credentials": lambda: client.get("/config/users/alice"),
        }
        refused = []
        for what, attempt in attempts.items():
            try:
                attempt()
            except NoAuthError:
                refused.append(what)
        assert refused == list(attempts)
    finally:
        client.stop()
        client.close()


def test_no_password_in_any_log(secured):
    sandbox, _, material = secured
    secrets_ = [p.value for p in material.passwords.values()] + [
        material.store_password.value, material.key_password.value, material.zookeeper_password.value]
    leaks = [(path.name, s[:3] + "...") for path in (sandbox.state_dir / "logs").iterdir()
             for s in secrets_ if s in path.read_text(errors="replace")]
    assert leaks == []
