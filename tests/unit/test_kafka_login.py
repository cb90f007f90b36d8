"""The Kafka login of zkcoord's commands and clients, without a network:
``--command-config`` on every command with ``--bootstrap-servers`` (and its
variable), bad files as one line with no secret, the settings travelling to
Spark tasks (pickled, stores inline, repr hidden), the thin consumer's
settings, and Kafka's login and ACL refusals as zkcoord errors."""

from __future__ import annotations

import pickle
import shutil

import click
import kafka.errors as Errors
import pytest
from click.testing import CliRunner
from kafka import TopicPartition

from tests.unit.test_kafka_offsets import ScriptedAdmin, offsets_with
from zkcoord.cli.kafka_login import COMMAND_CONFIG_ENV, kafka_login_options
from zkcoord.cli.main import cli
from zkcoord.client.config import ConsumerConfig
from zkcoord.client.network import SECURITY_KEYS, ZkcoordConnectionManager
from zkcoord.errors import AuthenticationError, AuthorizationError, ConfigError
from zkcoord.kafka.client_security import KafkaClientSecurity
from zkcoord.kafka.login import check_login, portable, split_servers
from zkcoord.local.certs import make_local_ca
from zkcoord.migrate.plan import Selection
from zkcoord.migrate.spark_job import JobConfig
from zkcoord.migrate.spark_tasks import TaskSpec
from zkcoord.password import Password
from zkcoord.security.tls import SslSettings

SECRET = "s3cr3t-Pw-8Jq"


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return make_local_ca(tmp_path_factory.mktemp("ca"), clients=["alice"])


def properties(tmp_path, text: str, name: str = "client.properties") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def scram_file(tmp_path, ca, password: str = SECRET) -> str:
    return properties(tmp_path, "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                                "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                                f'username="alice" password="{password}";\n'
                                f"ssl.truststore.location={ca.ca_certificate_pem}\n")


# ------------------------------------------------------------------ the option on every command
def _commands(group, prefix=()):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


def test_every_command_with_bootstrap_servers_takes_command_config():
    with_kafka = {" ".join(name): {p.name: p for p in c.params} for name, c in _commands(cli)
                  if any("--bootstrap-servers" in p.opts for p in c.params)}
    lacking = sorted(name for name, params in with_kafka.items() if "command_config" not in params)
    # the daemon reads the same file through its own setting, --kafka-client-config, from the same variable
    assert lacking == ["run"]
    assert with_kafka["run"]["kafka_client_config"].opts == ["--kafka-client-config"]
    assert {"describe", "groups", "consume", "burrow-config", "migrate plan", "migrate apply", "migrate verify",
            "migrate finalize", "migrate rollback", "migrate run-job"} == set(with_kafka) - {"run"}
    for name, params in with_kafka.items():
        if name != "run":
            assert params["command_config"].opts == ["--command-config"], name
            assert params["command_config"].envvar == COMMAND_CONFIG_ENV, name


@click.command()
@kafka_login_options
def _probe(kafka_security):
    click.echo(repr(kafka_security))
    click.echo("-" if kafka_security is None else kafka_security.describe())


def test_command_config_from_the_flag_or_the_variable(tmp_path, ca):
    runner = CliRunner()
    assert runner.invoke(_probe, []).output == "None\n-\n"
    assert runner.invoke(_probe, [], env={COMMAND_CONFIG_ENV: ""}).output == "None\n-\n"
    path = scram_file(tmp_path, ca)
    by_flag = runner.invoke(_probe, ["--command-config", path])
    by_variable = runner.invoke(_probe, [], env={COMMAND_CONFIG_ENV: path})
    assert by_flag.exit_code == 0 and by_flag.output == by_variable.output
    shown, described = by_flag.output.splitlines()
    assert described == "SASL_SSL, SCRAM-SHA-512 as alice"
    assert "sasl_password=[hidden]" in shown and SECRET not in shown


@pytest.mark.parametrize("args, text, expected", [
    (["migrate", "plan", "--all"], "security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\nsasl.jaas.config="
     f'org.apache.kafka.common.security.scram.ScramLoginModule required username="a" password="{SECRET}";\n',
     "sasl.mechanism GSSAPI: zkcoord's clients do not log in with it yet"),
    (["describe", "g"], f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=a\n"
     f"sasl.password={SECRET}\nsasl.jaas.config=x\n", "both sasl.jaas.config and sasl.username/sasl.password"),
    (["groups"], "security.protocol=SSL\nssl.truststore.location=/nonexistent/ca.pem\n",
     "ssl.truststore.location: /nonexistent/ca.pem does not exist"),
    (["migrate", "run-job", "--all"], "security.protocol=SSL\nssl.keystore.location={keystore}\n"
     f"ssl.key.password={SECRET}\n", "cannot be decrypted with ssl.key.password"),
    (["consume", "t", "--coordinators", "c:1", "--group", "g"], "security.protocol=TLS\n",
     "security.protocol is 'TLS'"),
])
def test_a_bad_file_is_one_error_line_exit_2_without_the_secret(tmp_path, ca, args, text, expected):
    path = properties(tmp_path, text.format(keystore=ca.clients["alice"].keystore_pem))
    env = {"ZKCOORD_ZOOKEEPER": "127.0.0.1:1", "ZKCOORD_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    result = CliRunner().invoke(cli, [*args, "--command-config", path], env=env)
    assert result.exit_code == 2, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: client properties file {path}: "), lines
    assert expected in lines[0] and SECRET not in result.output


def test_a_missing_file_is_named():
    result = CliRunner().invoke(cli, ["groups", "--zookeeper", "127.0.0.1:1", "--command-config", "/no/such.props"])
    assert (result.exit_code, result.output) == (2, "error: properties file /no/such.props does not exist\n")


# ------------------------------------------------------------------ the login check
def test_no_check_without_tls_or_sasl():
    check_login("127.0.0.1:1", None, timeout_s=0.1)  # nothing to refuse: no connection tried
    check_login("127.0.0.1:1", KafkaClientSecurity(), timeout_s=0.1)
    assert split_servers("k1:9093, [::1]:9094,k3") == [("k1", 9093), ("::1", 9094), ("k3", 9092)]


# ------------------------------------------------------------------ Spark tasks
def test_task_specs_carry_the_login_inline_pickled_and_hidden(tmp_path, ca):
    copied = shutil.copytree(ca.directory, tmp_path / "ca")
    alice = copied / "alice-keystore.pem"
    security = KafkaClientSecurity("SASL_SSL", "SCRAM-SHA-512", "alice", Password(SECRET), SslSettings(
        truststore_location=str(copied / "truststore.p12"), truststore_password=ca.store_password,
        keystore_location=str(alice), key_password=ca.key_password))
    shipped = portable(security)
    tls = shipped.ssl
    assert (tls.truststore_location, tls.keystore_location, tls.truststore_password) == (None, None, None)
    assert tls.keystore_key.value.startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----")  # still under its password
    assert tls.truststore_certificates.value == security.ssl.trusted_certificates_pem()
    spec = JobConfig("zk:2181", "k:9092", Selection(all_groups=True), str(tmp_path / "r"),
                     kafka_security=shipped).task_spec()
    assert spec.kafka_security == shipped
    shutil.rmtree(copied)  # an executor has none of the files
    received = pickle.loads(pickle.dumps(spec))
    assert received == spec
    options = received.kafka_security.kafka_python_options()
    assert options["ssl_context"].verify_mode.name == "CERT_REQUIRED"
    assert options["sasl_plain_password"] == SECRET
    for text in (repr(received), str(received), repr(options)):
        for secret in (SECRET, ca.key_password.value, ca.store_password.value, "PRIVATE KEY", "BEGIN CERTIFICATE"):
            assert secret not in text
    assert portable(None) is None
    plaintext = KafkaClientSecurity("SASL_PLAINTEXT", "PLAIN", "a", Password(SECRET))
    assert portable(plaintext) is plaintext
    assert "kafka_security=None" in repr(TaskSpec("zk:2181", "k:9092"))


# ------------------------------------------------------------------ the thin consumer
def test_consumer_settings_log_in_to_brokers_and_daemons(ca):
    security = KafkaClientSecurity("SASL_SSL", "SCRAM-SHA-512", "alice", Password(SECRET),
                                   SslSettings(truststore_location=str(ca.ca_certificate_pem)))
    base = dict(coordinators="c:9300", bootstrap_servers="k:9092", group_id="g")
    config = ConsumerConfig(**base, security=security)
    assert config.daemon_security is security and SECRET not in repr(config)
    options = config.kafka_options()
    assert (options["security_protocol"], options["sasl_mechanism"], options["sasl_plain_username"],
            options["sasl_plain_password"]) == ("SASL_SSL", "SCRAM-SHA-512", "alice", SECRET)
    assert "security_protocol" not in ConsumerConfig(**base).kafka_options()
    daemons_only = ConsumerConfig(**base, coordinator_security=security)
    assert daemons_only.daemon_security is security and "sasl_mechanism" not in daemons_only.kafka_options()
    with pytest.raises(ConfigError, match="security must be Kafka client settings .* got a str"):
        ConsumerConfig(**base, security="alice.properties")


def test_daemon_nodes_get_their_own_settings():
    from kafka.net.selector import NetworkSelector

    daemon = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": "a",
              "sasl_plain_password": SECRET, "client_id": "not a security key"}
    net = NetworkSelector()
    try:
        manager = ZkcoordConnectionManager(net, zkcoord_daemons=(("d", 9300),), coordinator_options=daemon,
                                           bootstrap_servers="k:9092", security_protocol="SSL")
        assert manager.config["security_protocol"] == "SSL"  # the brokers'
        assert set(manager._daemon_security) == set(SECURITY_KEYS)
        assert (manager._daemon_security["security_protocol"], manager._daemon_security["ssl_context"]) == (
            "SASL_PLAINTEXT", None)
        assert [manager.is_daemon(n) for n in ("zkcoord-0", "coordinator-3", 0, "bootstrap-0")] == [
            True, True, False, False]
    finally:
        net.close()


# ------------------------------------------------------------------ Kafka's refusals
def test_refusals_after_the_login_name_what_and_who():
    login = offsets_with(ScriptedAdmin(list_groups=[Errors.SaslAuthenticationFailedError("bad password")]))
    login.security = KafkaClientSecurity("SASL_PLAINTEXT", "PLAIN", "alice", Password(SECRET))
    with pytest.raises(AuthenticationError) as refused:
        login.list_groups()
    assert str(refused.value) == ("Kafka at k1:9092,k2:9092 refused the login (SASL_PLAINTEXT, PLAIN as alice): "
                                  "[Error 58] SaslAuthenticationFailedError: bad password; check the client settings "
                                  "(--command-config, kafka_client_config) and the user's credentials")
    tp = TopicPartition("t", 0)
    denied = offsets_with(ScriptedAdmin(alter_group_offsets=[{tp: Errors.TopicAuthorizationFailedError}]))
    with pytest.raises(AuthorizationError) as refused:
        denied.commit_offsets("g", {("t", 0): 5})
    assert str(refused.value) == ("Kafka at k1:9092,k2:9092 refused offsets of group 'g': t-0 "
                                  "TopicAuthorizationFailedError: not authorized for PLAINTEXT; grant READ on the "
                                  "group and the topics")
    refusal = {"g": {"error": "[Error 30] GroupAuthorizationFailedError: "}}
    group = offsets_with(ScriptedAdmin(describe_groups=[refusal]))
    with pytest.raises(AuthorizationError) as refused:
        group.group("g")
    assert str(refused.value) == ("Kafka at k1:9092,k2:9092 refused to let us describe group(s) 'g': not authorized "
                                  "([Error 30] GroupAuthorizationFailedError: group 'g') for PLAINTEXT; grant "
                                  "DESCRIBE/READ on the topics and groups")


def test_the_consumers_refusals_from_kafka_python():
    from zkcoord.client.errors import translate

    refused = translate(Errors.SaslAuthenticationFailedError("invalid credentials"), "poll", "brokers: PLAINTEXT")
    assert type(refused) is AuthenticationError and str(refused) == (
        "poll: a broker or zkcoord daemon refused the login (brokers: PLAINTEXT): [Error 58] "
        "SaslAuthenticationFailedError: invalid credentials; check the consumer's security settings (--command-config)")
    denied = translate(Errors.GroupAuthorizationFailedError(), "poll")
    assert type(denied) is AuthorizationError and str(denied) == (
        "poll: not authorized: [Error 30] GroupAuthorizationFailedError; an ACL must allow READ on the group and the "
        "topics")
