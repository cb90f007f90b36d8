"""zkcoord's Kafka clients logging in with Kafka's client properties, on real
servers: a zkcoord daemon listening with SASL_SSL (SCRAM users written by
Kafka 3.9's own ConfigCommand, ACLs by its AclCommand, a local CA) in front
of the test sandbox's PLAINTEXT brokers.

* The thin consumer joins a group through the SASL_SSL daemon while its
  broker connections stay PLAINTEXT (``coordinator_security``), and
  ``zkcoord describe --command-config`` shows that group live from the
  daemon; a wrong password, a user without a group ACL, no login at all:
  each its own clear outcome.
* ``--command-config`` against the PLAINTEXT brokers: a PLAINTEXT file works
  for migrate, groups, describe; SASL or TLS settings are refused at the
  first answer (kafka-python alone would retry until its bootstrap time-out
  and say only that no broker answered).
* Spark tasks log in with the settings the job sent them (stores inline).
* No password in any output or log line.
"""

from __future__ import annotations

import json
import logging

import pytest
from click.testing import CliRunner

from tests.integration.test_client_support import ThreadDaemons, create_topic, eventually
from tests.integration.test_daemon_security import kafka_acls, kafka_configs
from tests.integration.test_migrate_spark import spark  # noqa: F401 (the module's Spark session fixture)
from zkcoord.cli.main import cli
from zkcoord.client import Consumer, ConsumerConfig
from zkcoord.config import DaemonConfig
from zkcoord.errors import AuthenticationError, AuthorizationError
from zkcoord.kafka.client_security import KafkaClientSecurity
from zkcoord.local.certs import make_local_ca
from zkcoord.server.daemon import Daemon

pytestmark = pytest.mark.integration

PASSWORDS = {"alice": "alice-Kl-4Rw", "bob": "bob-Kl-8Vn"}
WRONG = "not-alices-Kl-2Qp"


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return make_local_ca(tmp_path_factory.mktemp("ca"))


def scram(tmp_path, ca, user: str, password: str | None = None, protocol: str = "SASL_SSL") -> str:
    """A Java client properties file logging in as ``user`` with SCRAM-SHA-512."""
    path = tmp_path / f"{user}-{protocol.lower()}{'-wrong' if password else ''}.properties"
    path.write_text(f"security.protocol={protocol}\nsasl.mechanism=SCRAM-SHA-512\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                    f'username="{user}" password="{password or PASSWORDS[user]}";\n'
                    f"ssl.truststore.location={ca.ca_certificate_pem}\n")
    return str(path)


@pytest.fixture
def secured_daemon(zk_hosts, services, ca):
    """One daemon listening with SASL_SSL and Kafka's ACLs: alice may READ groups
    alice-* and topics t-*; bob is a user with no ACL."""
    for user, password in PASSWORDS.items():
        kafka_configs(zk_hosts, user, password)
    for resource in (("--group", "alice-"), ("--topic", "t-")):
        kafka_acls(zk_hosts, "--add", "--allow-principal", "User:alice", "--operation", "Read", *resource,
                   "--resource-pattern-type", "prefixed")
    config = DaemonConfig(
        zookeeper=zk_hosts, listen="SASL_SSL://127.0.0.1:0", node_id=1, group_initial_rebalance_delay_ms=0,
        zk_session_timeout_ms=6000, bootstrap_servers=services.bootstrap_servers,
        ssl_keystore_location=str(ca.server_keystore_pem), ssl_key_password=ca.key_password,
        sasl_enabled_mechanisms="SCRAM-SHA-512", authorizer_class_name="kafka.security.authorizer.AclAuthorizer",
        super_users="User:admin")
    daemons = ThreadDaemons(zk_hosts, count=0)
    daemons.daemons = [Daemon(config)]
    with daemons:
        yield daemons


def describe(zk_hosts: str, group: str, *args: str):
    result = CliRunner().invoke(cli, ["describe", group, "--members", "--output", "json", "--zookeeper", zk_hosts,
                                      *args])
    return result, (json.loads(result.stdout) if result.exit_code == 0 else None)


def test_a_consumer_and_describe_through_a_sasl_ssl_daemon(tmp_path, services, zk_hosts, secured_daemon, ca,
                                                           unique_name, caplog):
    caplog.set_level(logging.DEBUG)
    topic = unique_name("t")
    create_topic(services.bootstrap_servers, topic, 2)
    alice = scram(tmp_path, ca, "alice")
    # heartbeats 25 s apart: the first member hears of the second one's join through the notice connection
    base = dict(coordinators=secured_daemon.addresses, bootstrap_servers=services.bootstrap_servers,
                session_timeout_ms=60_000, heartbeat_interval_ms=25_000, request_timeout_ms=40_000,
                bootstrap_timeout_ms=10_000)
    members = [Consumer(ConsumerConfig(**base, group_id="alice-g", client_id=f"alice-app-{i}",
                                       coordinator_security=KafkaClientSecurity.from_file(alice))) for i in (1, 2)]
    consumer = members[0].start()
    try:
        consumer.subscribe([topic])
        eventually(lambda: len(consumer.assignment()) == 2, "alice's consumer owns both partitions",
                   step=lambda: consumer.poll(timeout_ms=100))
        notice = consumer._kafka._coordinator._notice
        eventually(lambda: notice._sock is not None, "the notice connection is open (TLS, SCRAM login)")
        members[1].start().subscribe([topic])
        eventually(lambda: all(len(m.assignment()) == 1 for m in members), "each member owns one partition",
                   step=lambda: [m.poll(timeout_ms=50) for m in members])
        assert (notice.notices, notice._unsupported) == (1, None)
        (address,) = secured_daemon.addresses.split(",")

        result, report = describe(zk_hosts, "alice-g", "--command-config", alice)
        assert result.exit_code == 0, result.output
        (group,) = report["groups"]
        assert (group["state"], group["read_from"], group["coordinator"]["node_id"]) == ("Stable", "daemon", 1)
        assert sorted((m["client_id"], m["partitions"], m["member_id"]) for m in group["members"]) == [
            (f"alice-app-{i}", 1, m.membership().member_id) for i, m in enumerate(members, 1)]

        # no login: the SASL_SSL listener closes the connection; the group is shown as stored, and says why
        result, report = describe(zk_hosts, "alice-g")
        assert result.exit_code == 0, result.output
        (group,) = report["groups"]
        assert group["read_from"] == "zookeeper"
        assert any(f"its owner {address} (1) did not answer DescribeGroups (closed the connection at its first "
                   "request (ApiVersions); is it a TLS listener? security.protocol is PLAINTEXT)" in note
                   for note in group["notes"]), group["notes"]

        # a wrong password: one error line naming the daemon and the login, not the password
        result, _ = describe(zk_hosts, "alice-g", "--command-config", scram(tmp_path, ca, "alice", WRONG))
        assert result.exit_code == 2
        assert result.output.startswith(
            f"error: zkcoord daemon at {address} refused the login (SASL_SSL, SCRAM-SHA-512 as alice): {address} "
            f"refused the SCRAM-SHA-512 login of user 'alice': SaslAuthenticationFailedError")
        assert len(result.output.splitlines()) == 1 and WRONG not in result.output

        wrong = ConsumerConfig(**base, group_id="alice-g",
                               coordinator_security=KafkaClientSecurity.from_file(scram(tmp_path, ca, "alice", WRONG)))
        with pytest.raises(AuthenticationError) as refused:
            Consumer(wrong).start()
        assert str(refused.value).startswith(
            f"the zkcoord daemons at {address} refused the login (SASL_SSL, SCRAM-SHA-512 as alice): {address} "
            "refused the SCRAM-SHA-512 login of user 'alice'")

        # a CA that did not sign the daemon's certificate: refused at the TLS handshake
        other_ca = make_local_ca(tmp_path / "other-ca")
        untrusting = ConsumerConfig(**base, group_id="alice-g", coordinator_security=KafkaClientSecurity.from_file(
            scram(tmp_path / "other-ca", other_ca, "alice")))
        with pytest.raises(AuthenticationError) as refused:
            Consumer(untrusting).start()
        assert str(refused.value).startswith(
            f"the zkcoord daemons at {address} refused the login (SASL_SSL, SCRAM-SHA-512 as alice): TLS to {address}: "
            "the server's certificate is not accepted: self-signed certificate in certificate chain (check "
            "ssl.truststore.* and that 127.0.0.1 is a name in the certificate)")

        # bob logs in, but no ACL lets him into a group: the consumer's poll says so
        bob = Consumer(ConsumerConfig(**base, group_id="alice-g2", client_id="bob-app",
                                      coordinator_security=KafkaClientSecurity.from_file(scram(tmp_path, ca, "bob"))))
        bob.start()
        try:
            bob.subscribe([topic])
            with pytest.raises(AuthorizationError) as denied:
                eventually(lambda: False, "bob's poll is refused", timeout_s=30,
                           step=lambda: bob.poll(timeout_ms=100))
            assert "GroupAuthorizationFailedError" in str(denied.value)
            assert "daemons: SASL_SSL, SCRAM-SHA-512 as bob" in str(denied.value)
        finally:
            bob.close(autocommit=False)
    finally:
        for member in members:
            member.close()
    logged = "\n".join(record.getMessage() for record in caplog.records)
    for secret in (*PASSWORDS.values(), WRONG, ca.key_password.value):
        assert secret not in logged


@pytest.fixture
def legacy_group(zk, services, unique_name) -> tuple[str, str]:
    """A group with a legacy offset (0) of a topic with one empty partition."""
    group, topic = unique_name("g"), unique_name("t")
    create_topic(services.bootstrap_servers, topic, 1)
    zk.create(f"/consumers/{group}/offsets/{topic}/0", b"0", makepath=True)
    return group, topic


def test_command_config_against_the_plaintext_brokers(tmp_path, services, zk_hosts, legacy_group, ca):
    group, topic = legacy_group
    bootstrap = services.bootstrap_servers
    plaintext = tmp_path / "plaintext.properties"
    plaintext.write_text("security.protocol=PLAINTEXT\n")
    runner = CliRunner()
    env = {"ZKCOORD_ZOOKEEPER": zk_hosts, "ZKCOORD_BOOTSTRAP_SERVERS": bootstrap}

    planned = runner.invoke(cli, ["migrate", "plan", "--group", group, "--output", "json",
                                  "--command-config", str(plaintext)], env=env)
    assert planned.exit_code == 0, planned.output
    rows = json.loads(planned.stdout)["groups"][0]["partitions"]
    assert [(r["topic"], r["partition"], r["legacy"], r["log_end"], r["decision"]) for r in rows] == [
        (topic, 0, "0", 0, "copy")]
    listed = runner.invoke(cli, ["groups", "--output", "json"], env={**env, "ZKCOORD_KAFKA_CLIENT_CONFIG":
                                                                      str(plaintext)})
    assert listed.exit_code == 0, listed.output
    assert group in [g["group"] for g in json.loads(listed.stdout)["groups"]]

    # SASL over TLS to a plaintext listener: the TLS handshake ends at once
    sasl_ssl = scram(tmp_path, ca, "alice")
    tls_refused = (f"error: Kafka at {bootstrap} refused the login (SASL_SSL, SCRAM-SHA-512 as alice): TLS handshake "
                   f"with {bootstrap} failed: the server closed the connection (is it a plaintext listener?); check "
                   "the client properties (--command-config, ZKCOORD_KAFKA_CLIENT_CONFIG) and the user's password\n")
    for args in (["migrate", "plan", "--group", group], ["migrate", "apply", "--group", group],
                 ["describe", group], ["migrate", "run-job", "--group", group, "--report-dir", str(tmp_path / "r")]):
        # a long time-out: the answer comes from the login check, not from waiting for kafka-python's
        result = runner.invoke(cli, [*args, "--timeout-ms", "120000", "--command-config", sasl_ssl], env=env)
        assert (result.exit_code, result.output) == (2, tls_refused), args
    # SASL without TLS: the broker answers SaslHandshake with ILLEGAL_SASL_STATE
    sasl_plaintext = scram(tmp_path, ca, "alice", protocol="SASL_PLAINTEXT")
    result = runner.invoke(cli, ["consume", topic, "--coordinators", "127.0.0.1:1", "--group", "alice-g",
                                 "--command-config", sasl_plaintext], env=env)
    assert (result.exit_code, result.output) == (2, (
        f"error: Kafka at {bootstrap} refused the login (SASL_PLAINTEXT, SCRAM-SHA-512 as alice): {bootstrap} "
        "refused the SCRAM-SHA-512 login of user 'alice': IllegalSaslStateError (the listener takes no SASL logins: "
        "is it a PLAINTEXT or SSL listener?); check the client properties (--command-config, "
        "ZKCOORD_KAFKA_CLIENT_CONFIG) and the user's password\n"))
    assert PASSWORDS["alice"] not in result.output


def test_spark_tasks_log_in_with_the_settings_they_were_sent(tmp_path, services, zk, zk_hosts, legacy_group, spark):
    """The job's tasks build their Kafka client from the pickled settings, with
    the stores inline (the files are gone before the job runs): their login
    against the PLAINTEXT broker fails as it should, and that error comes back
    to the driver as it was, without a secret."""
    from zkcoord.kafka.login import portable
    from zkcoord.migrate.plan import Selection
    from zkcoord.migrate.spark_job import JobConfig, run_job

    group, _ = legacy_group
    own_ca = make_local_ca(tmp_path / "ca")
    security = KafkaClientSecurity.from_file(scram(tmp_path, own_ca, "alice"))
    config = JobConfig(zk_hosts, services.bootstrap_servers, Selection(groups=(group,)), str(tmp_path / "report"),
                       timeout_ms=60_000, kafka_security=portable(security))
    for path in own_ca.directory.iterdir():
        path.unlink()
    bootstrap = services.bootstrap_servers
    with pytest.raises(AuthenticationError) as refused:
        run_job(config, spark)
    assert str(refused.value) == (
        f"Kafka at {bootstrap} refused the login (SASL_SSL, SCRAM-SHA-512 as alice): TLS handshake with {bootstrap} "
        "failed: the server closed the connection (is it a plaintext listener?); check the client properties "
        "(--command-config, ZKCOORD_KAFKA_CLIENT_CONFIG) and the user's password")
