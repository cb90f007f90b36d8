"""Configuration files the sandbox writes for its servers.

Owns the text of ``zoo.cfg``, Kafka's ``server.properties``, the servers'
logging configurations, the one of Kafka's tools run by hand and, for a ZooKeeper that takes SASL logins
(:func:`zoo_cfg` with ``sasl``), its JAAS ``Server`` section and a client's
``Client`` section (:func:`zookeeper_server_jaas`,
:func:`zookeeper_client_jaas`: Passwords, as they hold passwords). Values are chosen for a 2-core, 24 GiB machine that
also runs the test suite: small heaps, few offsets-topic partitions, no
initial rebalance delay, and a ZooKeeper tick short enough for session-expiry
tests while still allowing Kafka's 18 s session.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from zkcoord.local import ensemble
from zkcoord.password import Password

OFFSETS_TOPIC_PARTITIONS = 10  # a group's coordinator: the leader of partition abs(hashCode(group)) % 10

# JVM heaps: ZooKeeper is tiny; each broker gets enough for the benchmarks.
ZOOKEEPER_HEAP = ("-Xms64m", "-Xmx768m")  # an 8 MiB OffsetCommit makes 460,000 znodes; 256m ran out
KAFKA_HEAP = ("-Xms256m", "-Xmx768m")
JVM_COMMON = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true")

LOGBACK_XML = """<configuration>
  <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{ISO8601} %-5level [%thread] %logger{36} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="OUT"/></root>
</configuration>
"""

LOG4J_PROPERTIES = """log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.zookeeper=WARN
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.log.LogCleaner=WARN
log4j.logger.org.apache.kafka.storage=WARN
log4j.logger.kafka.log=WARN
"""

# Kafka's own tools (console consumer, kafka-acls, kafka-topics, ...) run by hand or by the demo: what
# Kafka's shell scripts give them (config/tools-log4j.properties): warnings and errors, on stderr. Without
# a configuration reload4j prints nothing at all, an authorization error included.
TOOLS_LOG4J_PROPERTIES = """log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.stderr.Target=System.err
"""

# ZooKeeper 3.8: SASL logins are checked by this provider against the JAAS file's Server section (the JVM's
# -Djava.security.auth.login.config); an ``auth`` ACL then names the session's ``sasl:<user>``.
SASL_AUTH_PROVIDER = "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"


def zoo_cfg(data_dir: Path, port: int, *, sasl: bool = False, require_auth: bool = False,
            peers: Sequence[ensemble.Peer] = (), max_client_cnxns: int = 0) -> str:
    """``sasl``: take SASL logins (:func:`zoo_cfg_sasl_lines`); ``require_auth``:
    and close the session of a client that sends a request without one.
    ``peers``: the members of an ensemble, this server among them (its own
    ``myid`` file in ``data_dir`` says which); none: a standalone server.

    An ensemble's followers get more ticks to connect and sync (10 s) and to
    answer the leader (5 s) than a standalone server's defaults: six JVMs
    share two cores here, and a follower missing ``syncLimit`` drops out of
    the quorum. A killed leader is noticed at once all the same (its
    sockets close). ``max_client_cnxns``: connections taken from one client
    address (0, the sandbox's: no limit; ZooKeeper's own default is 60)."""
    limits = ["initLimit=20", "syncLimit=10"] if peers else ["initLimit=10", "syncLimit=5"]
    return "\n".join([
        "tickTime=500",
        *limits,
        # Session timeouts from 1 s (fast expiry tests) to 60 s (Kafka asks 18 s).
        "minSessionTimeout=1000",
        "maxSessionTimeout=60000",
        f"dataDir={data_dir}",
        f"clientPort={port}",
        "clientPortAddress=127.0.0.1",
        f"maxClientCnxns={max_client_cnxns}",
        "admin.enableServer=false",
        "4lw.commands.whitelist=*",
        "autopurge.purgeInterval=1",
        *(zoo_cfg_sasl_lines(require_auth) if sasl else ()),
        *ensemble.server_lines(peers),
        "",
    ])


def zoo_cfg_sasl_lines(require_auth: bool = False) -> list[str]:
    """The zoo.cfg lines of a ZooKeeper 3.8 that takes SASL logins. The JVM
    also needs ``-Djava.security.auth.login.config=<file with a Server
    section>`` (:func:`zookeeper_server_jaas`). Without ``require_auth``
    clients that do not log in are still served (their rights are what the
    znodes' ACLs give ``world:anyone``)."""
    lines = [f"authProvider.1={SASL_AUTH_PROVIDER}"]
    if require_auth:  # ZooKeeper 3.7+: a session must log in with SASL before any request
        lines += ["enforce.auth.enabled=true", "enforce.auth.schemes=sasl"]
    return lines


def _jaas_quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def zookeeper_server_jaas(users: Mapping[str, Password | str]) -> Password:
    """The JAAS file text of a ZooKeeper server checking SASL DIGEST-MD5 logins
    of ``users`` (name -> password): its ``Server`` section."""
    if not users:
        raise ValueError("a ZooKeeper Server section needs at least one user")
    entries = "\n".join(f"  user_{name}={_jaas_quoted(Password(password).value)}" for name, password in users.items())
    return Password(f"Server {{\n  {DIGEST_LOGIN_MODULE} required\n{entries};\n}};\n")


def zookeeper_client_jaas(username: str, password: Password | str, section: str = "Client") -> Password:
    """The JAAS file text of a ZooKeeper client logging in as ``username``
    (what zkcoord's ``zookeeper_sasl_jaas_file`` reads, as Kafka's does)."""
    return Password(f"{section} {{\n  {DIGEST_LOGIN_MODULE} required\n  username={_jaas_quoted(username)}\n"
                    f"  password={_jaas_quoted(Password(password).value)};\n}};\n")


def replication(brokers: int) -> tuple[int, int]:
    """(replication factor, min.insync.replicas) of the sandbox's topics
    (``__consumer_offsets``, the transaction state, topics created on first
    use) for ``brokers`` brokers: every broker holds a replica, up to 3, and
    a write is acknowledged once all but one of them have it, so one broker
    may be lost (killed, restarted) without losing an acknowledged record or
    commit nor refusing writes.

    >>> [replication(n) for n in (1, 2, 3, 5)]
    [(1, 1), (2, 1), (3, 2), (3, 2)]"""
    factor = min(brokers, 3)
    return factor, max(1, factor - 1)


def server_properties(broker_id: int, port: int, zookeeper: str, log_dir: Path, brokers: int) -> str:
    """``zookeeper``: the connect string of every ZooKeeper server of the sandbox."""
    factor, min_isr = replication(brokers)
    return "\n".join([
        f"broker.id={broker_id}",
        f"listeners=PLAINTEXT://127.0.0.1:{port}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
        f"zookeeper.connect={zookeeper}",
        # Shorter than the 18 s default: a killed broker's registration goes sooner.
        "zookeeper.session.timeout.ms=10000",
        f"log.dirs={log_dir}",
        "num.partitions=1",
        f"default.replication.factor={factor}",
        f"offsets.topic.replication.factor={factor}",
        f"offsets.topic.num.partitions={OFFSETS_TOPIC_PARTITIONS}",
        f"transaction.state.log.replication.factor={factor}",
        f"transaction.state.log.min.isr={min_isr}",
        f"min.insync.replicas={min_isr}",
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=true",
        "delete.topic.enable=true",
        "num.network.threads=2",
        "num.io.threads=4",
        "num.recovery.threads.per.data.dir=1",
        "log.segment.bytes=67108864",
        "controlled.shutdown.enable=true",
        "",
    ])


# -- the Kafka 4.x KRaft node (zkcoord.local.kraft) ---------------------------------
KAFKA4_HEAP = ("-Xms128m", "-Xmx512m")  # one node, test-sized groups: its own logs show ~150 MiB in use

# Kafka 4.x logs with log4j2 (-Dlog4j2.configurationFile); the same levels as the 3.9 brokers'.
KAFKA4_LOG4J2_XML = """<Configuration status="warn">
  <Appenders>
    <Console name="OUT" target="SYSTEM_OUT"><PatternLayout pattern="[%d] %p %m (%c)%n"/></Console>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="OUT"/></Root>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="state.change.logger" level="WARN"/>
    <Logger name="kafka.log.LogCleaner" level="WARN"/>
    <Logger name="org.apache.kafka.storage" level="WARN"/>
    <Logger name="kafka.log" level="WARN"/>
  </Loggers>
</Configuration>
"""

# Kafka 4.x's tools run by hand or by the tests (ZKCOORD_TOOLS_LOG4J2): warnings and errors, on
# stderr, as its config/tools-log4j2.yaml gives them.
TOOLS_LOG4J2_XML = """<Configuration status="warn">
  <Appenders>
    <Console name="STDERR" target="SYSTEM_ERR"><PatternLayout pattern="[%d] %p %m (%c)%n"/></Console>
  </Appenders>
  <Loggers>
    <Root level="WARN"><AppenderRef ref="STDERR"/></Root>
  </Loggers>
</Configuration>
"""


def kraft_server_properties(node_id: int, port: int, controller_port: int, log_dir: Path,
                            settings: Mapping[str, str] | None = None) -> str:
    """A one-node Kafka 4.x cluster: broker and controller in one process
    (KRaft, a dynamic quorum bootstrapped by ``StorageTool format
    --standalone``), PLAINTEXT on loopback. The sandbox's values of the 3.9
    brokers where they apply; Kafka's own defaults for everything about
    groups (KIP-848's consumer protocol is on), then ``settings`` (later keys
    win in java.util.Properties)."""
    lines = [
        "process.roles=broker,controller",
        f"node.id={node_id}",
        f"controller.quorum.bootstrap.servers=127.0.0.1:{controller_port}",
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        f"log.dirs={log_dir}",
        "num.partitions=1",
        "default.replication.factor=1",
        "offsets.topic.replication.factor=1",
        "offsets.topic.num.partitions=10",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        "min.insync.replicas=1",
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=true",
        "delete.topic.enable=true",
        "num.network.threads=2",
        "num.io.threads=4",
        "num.recovery.threads.per.data.dir=1",
        "log.segment.bytes=67108864",
    ]
    lines += [f"{key}={properties_escape(value)}" for key, value in (settings or {}).items()]
    return "\n".join([*lines, ""])


def properties_escape(value: str) -> str:
    """``value`` as java.util.Properties reads it back: backslashes doubled,
    a leading space kept."""
    escaped = value.replace("\\", "\\\\")
    return "\\" + escaped if escaped.startswith(" ") else escaped
