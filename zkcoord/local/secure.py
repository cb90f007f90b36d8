"""The secure sandbox (``zkcoord local up --secure``): everything the plain
sandbox runs, locked down as a Kafka operator locks a ZooKeeper-mode cluster.

Owns the secure sandbox's material and the steps only it takes:

* a local CA (:mod:`zkcoord.local.certs`) whose server certificate names
  ``localhost`` and ``127.0.0.1``: brokers read it as a PKCS12 key store,
  zkcoord's daemons as a PEM key store (so both formats serve for real);
* ZooKeeper with SASL (DIGEST-MD5): one login, ``kafka``, used by the
  brokers (``zookeeper.set.acl=true``: Kafka's znodes, the SCRAM
  credentials in ``/config/users`` among them, only that login may read or
  write) and by zkcoord, which must read those credentials (its own znodes
  get the same protection, ``zookeeper_set_acl``);
* brokers and daemons that accept SASL_SSL with SCRAM-SHA-512 only, Kafka's
  AclAuthorizer on the brokers and the same ACLs enforced by the daemons;
* the users ``admin`` (a super user; the brokers' and daemons' own login),
  ``alice`` (READ and DESCRIBE on groups prefixed ``alice-``, READ and
  DESCRIBE on every topic) and ``bob`` (READ on every topic, no group ACL),
  made with Kafka's own tools: ``admin`` before the brokers start
  (kafka-configs --zookeeper, as Kafka's docs bootstrap the inter-broker
  user), the others and the ACLs through the brokers, as ``admin``;
* the client configuration folder (``ZKCOORD_CLIENT_CONFIG_DIR``):
  ``<user>.properties`` (Java clients) and ``<user>.librdkafka.conf`` per user.

Passwords are random per sandbox, kept in ``secure/secure.json`` and the
client files (all 0600), never logged: the sandbox's own log lines name
users and files only.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from zkcoord.errors import SandboxError
from zkcoord.local import config_files, jars
from zkcoord.password import Password

__all__ = ["SecureMaterial", "USERS", "ZOOKEEPER_USER", "prepare", "load"]

USERS = ("admin", "alice", "bob")
ZOOKEEPER_USER = "kafka"
MECHANISM = "SCRAM-SHA-512"
ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
SUPER_USER = "User:admin"
_SCRAM_ITERATIONS = 4096
_TOOL_TIMEOUT_S = 120


@dataclass(frozen=True)
class SecureMaterial:
    """Where the secure sandbox's files are, and its passwords."""

    directory: Path  # <state>/secure
    client_dir: Path  # <state>/clients: ZKCOORD_CLIENT_CONFIG_DIR
    ca_pem: Path
    server_keystore_pem: Path  # daemons (key encrypted with key_password)
    server_keystore_pkcs12: Path  # brokers (store_password)
    store_password: Password
    key_password: Password
    zookeeper_password: Password
    passwords: dict  # user -> Password

    @property
    def zookeeper_server_jaas(self) -> Path:
        return self.directory / "zookeeper-server.jaas"

    @property
    def zookeeper_client_jaas(self) -> Path:
        """The ``Client`` login of the brokers and of zkcoord (its daemons and commands)."""
        return self.directory / "zookeeper-client.jaas"

    def client_properties(self, user: str) -> Path:
        return self.client_dir / f"{user}.properties"

    def client_security(self, user: str):
        """The KafkaClientSecurity of ``user`` (SASL_SSL, SCRAM-SHA-512, the CA as trust store)."""
        from zkcoord.kafka.client_security import KafkaClientSecurity
        from zkcoord.security.tls import SslSettings

        return KafkaClientSecurity("SASL_SSL", MECHANISM, user, self.passwords[user],
                                   SslSettings(truststore_type="PEM", truststore_location=str(self.ca_pem)))


def load(state_dir: Path) -> SecureMaterial | None:
    """The material of a secure sandbox in ``state_dir``, None for a plain one."""
    path = Path(state_dir) / "secure" / "secure.json"
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise SandboxError(f"{path} cannot be read ({exc}); run `zkcoord local down` and up again") from None
    root = path.parent
    return SecureMaterial(
        directory=root, client_dir=Path(raw["client_dir"]), ca_pem=root / "ca" / "ca.pem",
        server_keystore_pem=root / "ca" / "server-keystore.pem",
        server_keystore_pkcs12=root / "ca" / "server-keystore.p12",
        store_password=Password(raw["store_password"]), key_password=Password(raw["key_password"]),
        zookeeper_password=Password(raw["zookeeper_password"]),
        passwords={user: Password(pw) for user, pw in raw["passwords"].items()})


def prepare(state_dir: Path, log: Callable[[str], None]) -> SecureMaterial:
    """The secure sandbox's material, made once (a later ``up`` reuses it)."""
    found = load(state_dir)
    if found is not None:
        return found
    from zkcoord.local.certs import make_local_ca

    root = Path(state_dir) / "secure"
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    log(f"making a local CA and the users {', '.join(USERS)} in {root}")
    ca = make_local_ca(root / "ca")
    material = SecureMaterial(
        directory=root, client_dir=Path(state_dir) / "clients", ca_pem=ca.ca_certificate_pem,
        server_keystore_pem=ca.server_keystore_pem, server_keystore_pkcs12=ca.server_keystore_pkcs12,
        store_password=ca.store_password, key_password=ca.key_password,
        zookeeper_password=Password(secrets.token_urlsafe(18)),
        passwords={user: Password(secrets.token_urlsafe(18)) for user in USERS})
    _write_private(material.zookeeper_server_jaas,
                   config_files.zookeeper_server_jaas({ZOOKEEPER_USER: material.zookeeper_password}).value)
    _write_private(material.zookeeper_client_jaas,
                   config_files.zookeeper_client_jaas(ZOOKEEPER_USER, material.zookeeper_password).value)
    material.client_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for user in USERS:
        security = material.client_security(user)
        security.write_java_properties(material.client_properties(user))
        security.write_librdkafka_config(material.client_dir / f"{user}.librdkafka.conf")
    _write_private(root / "secure.json", json.dumps({
        "client_dir": str(material.client_dir), "store_password": material.store_password.value,
        "key_password": material.key_password.value, "zookeeper_password": material.zookeeper_password.value,
        "passwords": {user: pw.value for user, pw in material.passwords.items()}}, indent=2))
    return material


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


# -- ZooKeeper ---------------------------------------------------------------------------

def zookeeper_jvm_props(material: SecureMaterial) -> tuple[str, ...]:
    return (f"-Djava.security.auth.login.config={material.zookeeper_server_jaas}",)


# -- brokers -----------------------------------------------------------------------------

def broker_properties(material: SecureMaterial, port: int) -> str:
    """What a broker's server.properties gets on top of the plain sandbox's."""
    admin = Password(material.passwords["admin"])
    jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" '
            f'password="{admin.value}";')
    return "\n".join([
        f"listeners=SASL_SSL://127.0.0.1:{port}",
        f"advertised.listeners=SASL_SSL://127.0.0.1:{port}",
        "security.inter.broker.protocol=SASL_SSL",
        f"sasl.mechanism.inter.broker.protocol={MECHANISM}",
        f"sasl.enabled.mechanisms={MECHANISM}",
        f"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={jaas}",
        "ssl.keystore.type=PKCS12",
        f"ssl.keystore.location={material.server_keystore_pkcs12}",
        f"ssl.keystore.password={material.store_password.value}",
        f"ssl.key.password={material.store_password.value}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={material.ca_pem}",
        "ssl.client.auth=none",
        f"authorizer.class.name={ACL_AUTHORIZER}",
        f"super.users={SUPER_USER}",
        "allow.everyone.if.no.acl.found=false",
        "zookeeper.set.acl=true",
        "",
    ])


def broker_jvm_props(material: SecureMaterial) -> tuple[str, ...]:
    """The brokers' ZooKeeper login (the JAAS ``Client`` section)."""
    return (f"-Djava.security.auth.login.config={material.zookeeper_client_jaas}",)


def create_admin(material: SecureMaterial, zookeeper: str, log: Callable[[str], None]) -> None:
    """The brokers' own user, before any broker starts: Kafka's kafka-configs
    --zookeeper (the only way to make a SCRAM user with no broker up), logged
    in to ZooKeeper as the brokers are, so its znode gets their ACL."""
    log("creating SCRAM user admin with kafka-configs --zookeeper")
    password = material.passwords["admin"].value
    cmd = [jars.find_java(), "-Xmx256m", *broker_jvm_props(material), "-cp", jars.kafka_distribution(log).classpath,
           "kafka.admin.ConfigCommand", "--zookeeper", zookeeper, "--alter", "--entity-type", "users",
           "--entity-name", "admin", "--add-config",
           f"{MECHANISM}=[iterations={_SCRAM_ITERATIONS},password={password}]"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SandboxError(f"kafka-configs did not create user admin within {_TOOL_TIMEOUT_S} s") from None
    if done.returncode != 0:
        output = (done.stdout + done.stderr).replace(password, "[hidden]")
        raise SandboxError(f"kafka-configs could not create user admin (exit {done.returncode}):\n"
                           f"{output[-2000:]}")


def create_users_and_acls(material: SecureMaterial, bootstrap_servers: str, log: Callable[[str], None]) -> None:
    """alice and bob, and their ACLs, made through the brokers as admin."""
    from kafka import KafkaAdminClient
    from kafka.admin import (
        ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePattern, ResourceType,
        UserScramCredentialUpsertion,
    )

    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, client_id="zkcoord-sandbox",
                             request_timeout_ms=30_000,
                             **material.client_security("admin").kafka_python_options())
    try:
        log("creating SCRAM users alice and bob, and their ACLs, as admin")
        failed = admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion(user, MECHANISM, material.passwords[user].value,
                                         iterations=_SCRAM_ITERATIONS) for user in ("alice", "bob")])
        failed = {user: error for user, error in failed.items() if error}
        if failed:
            raise SandboxError(f"the brokers did not create users {', '.join(sorted(failed))}: {failed}")
        every_topic = ResourcePattern(ResourceType.TOPIC, "*", ACLResourcePatternType.LITERAL)
        alice_groups = ResourcePattern(ResourceType.GROUP, "alice-", ACLResourcePatternType.PREFIXED)
        acls = [ACL(f"User:{user}", "*", operation, ACLPermissionType.ALLOW, pattern)
                for user, operation, pattern in (
                    ("alice", ACLOperation.READ, alice_groups), ("alice", ACLOperation.DESCRIBE, alice_groups),
                    ("alice", ACLOperation.READ, every_topic), ("alice", ACLOperation.DESCRIBE, every_topic),
                    ("bob", ACLOperation.READ, every_topic))]
        result = admin.create_acls(acls)
        if result.get("failed"):
            raise SandboxError(f"the brokers did not create the sandbox's ACLs: {result['failed']}")
    finally:
        admin.close()


# -- zkcoord daemons ---------------------------------------------------------------------

def daemon_flags(material: SecureMaterial, port: int, gateway_port: int | None) -> tuple[list[str], dict]:
    """A sandbox daemon's flags and environment (the key password travels in
    the environment, never on a command line)."""
    flags = ["--listen", f"SASL_SSL://127.0.0.1:{port}",
             "--ssl-keystore-location", str(material.server_keystore_pem), "--ssl-keystore-type", "PEM",
             "--sasl-enabled-mechanisms", MECHANISM,
             "--authorizer-class-name", ACL_AUTHORIZER, "--super-users", SUPER_USER,
             "--kafka-client-config", str(material.client_properties("admin")),
             "--zookeeper-sasl-jaas-file", str(material.zookeeper_client_jaas), "--zookeeper-set-acl"]
    if gateway_port is not None:
        flags += ["--gateway-listen", f"SASL_SSL://127.0.0.1:{gateway_port}"]
    environment = {**os.environ, "ZKCOORD_SSL_KEY_PASSWORD": material.key_password.value}
    return flags, environment


def zookeeper_security(material: SecureMaterial):
    """zkcoord's ZooKeeper login in the secure sandbox."""
    from zkcoord.zk.auth import ZkSecurity

    return ZkSecurity(sasl_jaas_file=str(material.zookeeper_client_jaas), set_acl=True)


def environment(material: SecureMaterial) -> dict[str, str]:
    """What `zkcoord local env` exports for a secure sandbox: the client folder,
    and zkcoord's own logins (admin to Kafka and the daemons, kafka to ZooKeeper)."""
    return {
        "ZKCOORD_CLIENT_CONFIG_DIR": str(material.client_dir),
        "ZKCOORD_KAFKA_CLIENT_CONFIG": str(material.client_properties("admin")),
        "ZKCOORD_ZOOKEEPER_SASL_JAAS_FILE": str(material.zookeeper_client_jaas),
        "ZKCOORD_ZOOKEEPER_SET_ACL": "true",
    }
