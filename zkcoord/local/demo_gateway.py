"""``make demo``'s gateway part: three different Kafka clients in one group.

Kafka's own Java console consumer (from the sandbox's Kafka 3.9 jars) and a
librdkafka consumer (confluent-kafka) use the daemons' gateways as their
bootstrap servers and change nothing else; zkcoord's own thin consumer uses
the daemons directly. All three join the same group, coordinated by zkcoord
with its state in ZooKeeper; each consumes the partitions it is assigned.
Then Kafka's own ``kafka-consumer-groups`` describes the group through the
gateway.

Run as ``python -m zkcoord.local.demo_gateway`` with ``ZKCOORD_GATEWAY_SERVERS``,
``ZKCOORD_COORDINATORS`` and ``ZKCOORD_BOOTSTRAP_SERVERS`` set (``eval
"$(zkcoord local env)"`` after ``zkcoord local up --daemons N``). Prints who
consumed what; exits 1 if a record was not consumed.

Its files live in the sandbox's state directory (``ZKCOORD_STATE_DIR`` or
the default, as ``zkcoord local up`` chose it), so ``zkcoord local down``
removes them: the tools' logging is the sandbox's ``tools-log4j.properties``,
the Java consumer's log ``logs/demo-java-console-consumer.log``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from zkcoord.client import Consumer, ConsumerConfig
from zkcoord.local import jars
from zkcoord.local.sandbox import Sandbox

PARTITIONS = 6
RECORDS = 120
WAIT_S = 90.0
GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
CONSUMER_LOG = "demo-java-console-consumer"  # <state dir>/logs/<this>.log


def java(main_class: str, *args: str, log4j: Path) -> list[str]:
    """A Kafka tool's command line, from the sandbox's jars, logging as ``log4j`` says."""
    return [jars.find_java(), "-Xmx256m", f"-Dlog4j.configuration=file:{log4j}", "-cp",
            jars.kafka_distribution().classpath, main_class, *args]


def sandbox_files() -> tuple[Path, Path]:
    """The tools' log4j configuration and the Java consumer's log, both in
    the running sandbox's state directory; SystemExit (a clear message, no
    traceback) when no sandbox is there."""
    sandbox = Sandbox()
    if sandbox.load() is None:
        raise SystemExit(f"no sandbox in {sandbox.state_dir}: run `zkcoord local up --daemons 2` and "
                         "`eval \"$(zkcoord local env)\"` first (ZKCOORD_STATE_DIR names another directory)")
    log = sandbox.log_file(CONSUMER_LOG)
    log.parent.mkdir(parents=True, exist_ok=True)
    return sandbox.write_tools_log4j(), log


class Seen:
    """Who consumed which record, from any thread."""

    def __init__(self) -> None:
        self.by_client: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def add(self, client: str, value: str) -> None:
        with self._lock:
            self.by_client.setdefault(client, set()).add(value)

    def all(self) -> set[str]:
        with self._lock:
            return set().union(*self.by_client.values()) if self.by_client else set()


class JavaConsumer:
    """Kafka's console consumer in a JVM of its own, bootstrapped from the gateways."""

    def __init__(self, gateways: str, topic: str, group: str, seen: Seen, log4j: Path, log: Path) -> None:
        self.log = log
        command = java(CONSOLE_CONSUMER, "--bootstrap-server", gateways, "--topic", topic, "--group", group,
                       "--from-beginning", "--consumer-property", "client.id=java-console",
                       "--consumer-property", "heartbeat.interval.ms=500", log4j=log4j)
        with open(self.log, "w") as stderr:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True)
        self.reader = threading.Thread(target=self._read, args=(seen,), daemon=True)
        self.reader.start()

    def _read(self, seen: Seen) -> None:
        for line in self.proc.stdout:
            seen.add("java-console (Kafka 3.9 Java client, via the gateway)", line.strip())

    def stop(self) -> None:
        self.proc.terminate()  # SIGTERM: it commits and leaves the group
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def librdkafka_consumer(gateways: str, topic: str, group: str, seen: Seen, stop: threading.Event) -> None:
    from confluent_kafka import Consumer as RdKafkaConsumer, libversion

    consumer = RdKafkaConsumer({"bootstrap.servers": gateways, "group.id": group, "client.id": "librdkafka",
                                "auto.offset.reset": "earliest", "heartbeat.interval.ms": 500})
    consumer.subscribe([topic])
    name = f"librdkafka {libversion()[0]} (confluent-kafka, via the gateway)"
    try:
        while not stop.is_set():
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                seen.add(name, message.value().decode())
    finally:
        consumer.close()


def zkcoord_consumer(coordinators: str, bootstrap: str, topic: str, group: str, seen: Seen,
                     stop: threading.Event) -> None:
    config = ConsumerConfig(coordinators=coordinators, bootstrap_servers=bootstrap, group_id=group,
                            client_id="zkcoord-consumer", auto_offset_reset="earliest",
                            heartbeat_interval_ms=500)
    with Consumer(config) as consumer:
        consumer.subscribe([topic])
        while not stop.is_set():
            for record in consumer.poll(timeout_ms=200):
                seen.add("zkcoord's consumer (direct to the daemons)", record.value.decode())


def wait_for_members(gateways: str, group: str, count: int) -> bool:
    """Poll DescribeGroups (kafka-python's admin client, through the gateway)
    until the group is Stable with ``count`` members."""
    admin = KafkaAdminClient(bootstrap_servers=gateways)
    try:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            described = admin.describe_groups([group]).get(group) or {}
            if described.get("group_state") == "Stable" and len(described.get("members") or []) == count:
                return True
            time.sleep(0.5)
        return False
    finally:
        admin.close()


def _required(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise SystemExit(f"{name} is not set: run `zkcoord local up --daemons 2` and "
                         "`eval \"$(zkcoord local env)\"` first")
    return value


def main() -> int:
    gateways, coordinators, bootstrap = (_required(name) for name in (
        "ZKCOORD_GATEWAY_SERVERS", "ZKCOORD_COORDINATORS", "ZKCOORD_BOOTSTRAP_SERVERS"))
    topic, group = f"demo-payments-{uuid.uuid4().hex[:6]}", f"demo-mixed-{uuid.uuid4().hex[:6]}"
    log4j, consumer_log = sandbox_files()
    admin = KafkaAdminClient(bootstrap_servers=gateways)  # kafka-python's admin client, through the gateway too
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])
    admin.close()
    print(f"topic {topic} ({PARTITIONS} partitions), group {group}, gateways {gateways}")
    seen, stop = Seen(), threading.Event()
    java_consumer = JavaConsumer(gateways, topic, group, seen, log4j, consumer_log)
    threads = [threading.Thread(target=librdkafka_consumer, args=(gateways, topic, group, seen, stop), daemon=True),
               threading.Thread(target=zkcoord_consumer, args=(coordinators, bootstrap, topic, group, seen, stop),
                                daemon=True)]
    for thread in threads:
        thread.start()
    if not wait_for_members(gateways, group, 3):  # the three joined before the records come: the split shows
        print("the three consumers did not all join within 90 s", file=sys.stderr)
    producer = KafkaProducer(bootstrap_servers=gateways, acks="all")
    for i in range(RECORDS):
        producer.send(topic, key=f"payment-{i}".encode(), value=f"payment-{i}".encode(), partition=i % PARTITIONS)
    producer.flush()
    producer.close()
    expected = {f"payment-{i}" for i in range(RECORDS)}
    deadline = time.monotonic() + WAIT_S
    while not seen.all() >= expected and time.monotonic() < deadline:
        time.sleep(0.2)
    ok = seen.all() >= expected
    print(f"consumed {len(seen.all() & expected)} of {RECORDS} records:")
    for client, values in sorted(seen.by_client.items()):
        print(f"  {client}: {len(values)}")
    print("kafka-consumer-groups --bootstrap-server <gateway> --describe --members (Kafka's own tool):")
    described = subprocess.run(java(GROUP_COMMAND, "--bootstrap-server", gateways, "--describe", "--group", group,
                                    "--members", log4j=log4j), capture_output=True, text=True, timeout=120)
    print(described.stdout.strip() or described.stderr.strip())
    stop.set()
    java_consumer.stop()
    for thread in threads:
        thread.join(30)
    print(f"group: {group}")
    if not ok:
        print(f"some records were not consumed; the Java consumer's log: {java_consumer.log}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
