"""Configuration files the sandbox writes for its servers.

Owns the text of ``zoo.cfg``, Kafka's ``server.properties`` and the two
logging configurations. Values are chosen for a 2-core, 24 GiB machine that
also runs the test suite: small heaps, few offsets-topic partitions, no
initial rebalance delay, and a ZooKeeper tick short enough for session-expiry
tests while still allowing Kafka's 18 s session.
"""

from __future__ import annotations

from pathlib import Path

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


def zoo_cfg(data_dir: Path, port: int) -> str:
    return "\n".join([
        "tickTime=500",
        "initLimit=10",
        "syncLimit=5",
        # Session timeouts from 1 s (fast expiry tests) to 60 s (Kafka asks 18 s).
        "minSessionTimeout=1000",
        "maxSessionTimeout=60000",
        f"dataDir={data_dir}",
        f"clientPort={port}",
        "clientPortAddress=127.0.0.1",
        "maxClientCnxns=0",
        "admin.enableServer=false",
        "4lw.commands.whitelist=*",
        "autopurge.purgeInterval=1",
        "",
    ])


def server_properties(broker_id: int, port: int, zookeeper: str, log_dir: Path, brokers: int) -> str:
    replication = min(brokers, 3)
    return "\n".join([
        f"broker.id={broker_id}",
        f"listeners=PLAINTEXT://127.0.0.1:{port}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
        f"zookeeper.connect={zookeeper}",
        # Shorter than the 18 s default: a killed broker's registration goes sooner.
        "zookeeper.session.timeout.ms=10000",
        f"log.dirs={log_dir}",
        "num.partitions=1",
        f"default.replication.factor={replication}",
        f"offsets.topic.replication.factor={replication}",
        "offsets.topic.num.partitions=10",
        f"transaction.state.log.replication.factor={replication}",
        "transaction.state.log.min.isr=1",
        "min.insync.replicas=1",
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
