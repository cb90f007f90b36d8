"""``make demo``'s worker pool: three zkcoord consumers share a 6-partition
topic on the sandbox; one stops and the other two take its partitions.

Run as ``python -m zkcoord.local.demo`` with ``ZKCOORD_COORDINATORS`` and
``ZKCOORD_BOOTSTRAP_SERVERS`` set (``eval "$(zkcoord local env)"``); with
``ZKCOORD_KAFKA_CLIENT_CONFIG`` (Kafka client properties) every client logs
in as that file says, to the brokers and the daemons.
Prints each member's assignment when it is applied (once per generation)
and what was consumed; exits 1 if a record was not consumed.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from zkcoord.client import Consumer, ConsumerConfig, RebalanceListener
from zkcoord.config import KAFKA_CLIENT_CONFIG_ENV
from zkcoord.kafka.client_security import KafkaClientSecurity

PARTITIONS = 6
RECORDS_PER_ROUND = 60
_PRINTING = threading.Lock()  # print() writes a line and its end apart: two threads could share a line


class Worker(threading.Thread):
    """One member of the pool: polls, notes who consumed each record, commits;
    prints its assignment each time one is applied (:class:`AssignmentReport`)."""

    def __init__(self, name: str, config: ConsumerConfig, topic: str, seen: dict, lock: threading.Lock):
        super().__init__(name=name, daemon=True)
        self.config, self.topic, self.seen, self.lock = config, topic, seen, lock
        self.stop_event = threading.Event()
        self.assignments: list[tuple[int, list[int]]] = []  # (generation, partitions), as printed

    def run(self) -> None:
        with Consumer(self.config) as consumer:
            self.subscribe(consumer)
            while not self.stop_event.is_set():
                self.step(consumer)

    def subscribe(self, consumer: Consumer) -> None:
        consumer.subscribe([self.topic], listener=AssignmentReport(self, consumer))

    def step(self, consumer: Consumer) -> None:
        """One round of the worker's loop: poll, note what was consumed, commit."""
        for record in consumer.poll(timeout_ms=200):
            with self.lock:
                self.seen.setdefault((record.partition, record.offset), self.name)
        consumer.commit()

    def assigned(self, generation: int, partitions: list[int]) -> None:
        self.assignments.append((generation, partitions))
        with _PRINTING:  # the members of a generation are told at once, each on a thread of its own
            print(f"  {self.name}: generation {generation}: partitions {partitions}", flush=True)


class AssignmentReport(RebalanceListener):
    """Tells a :class:`Worker` of each assignment once it is applied.

    ``on_assigned`` runs after the SyncGroup answer has been applied, so the
    generation read there is the one the assignment belongs to. Reading the
    generation and the assignment after a ``poll()`` instead can catch a
    member between its JoinGroup answer (the new generation) and its
    SyncGroup answer (its partitions), and report ``partitions []`` for a
    generation that gives it partitions a moment later."""

    def __init__(self, worker: Worker, consumer: Consumer):
        self.worker, self.consumer = worker, consumer

    def on_assigned(self, partitions) -> None:
        # The whole assignment, not only ``partitions``: under cooperative-sticky that is what was gained.
        owned = sorted(tp.partition for tp in self.consumer.assignment())
        self.worker.assigned(self.consumer.membership().generation_id, owned)


def security():
    """The Kafka login of ``ZKCOORD_KAFKA_CLIENT_CONFIG`` (None: PLAINTEXT)."""
    path = os.environ.get(KAFKA_CLIENT_CONFIG_ENV)
    return KafkaClientSecurity.from_file(path) if path else None


def kafka_options() -> dict:
    """kafka-python keyword arguments of :func:`security`."""
    found = security()
    return {} if found is None else dict(found.kafka_python_options())


def produce(bootstrap: str, topic: str, start: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **kafka_options())
    for i in range(start, start + RECORDS_PER_ROUND):
        producer.send(topic, key=f"order-{i}".encode(), value=f"{i}".encode(), partition=i % PARTITIONS)
    producer.flush()
    producer.close()


def wait_consumed(seen: dict, lock: threading.Lock, count: int, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with lock:
            if len(seen) >= count:
                return True
        time.sleep(0.2)
    return False


def worker_config(coordinators: str, bootstrap: str, group: str) -> ConsumerConfig:
    return ConsumerConfig(coordinators=coordinators, bootstrap_servers=bootstrap, group_id=group,
                          enable_auto_commit=False, auto_offset_reset="earliest",
                          session_timeout_ms=10000, heartbeat_interval_ms=500, security=security())


def main() -> int:
    coordinators = os.environ["ZKCOORD_COORDINATORS"]
    bootstrap = os.environ["ZKCOORD_BOOTSTRAP_SERVERS"]
    topic, group = f"demo-orders-{uuid.uuid4().hex[:6]}", f"demo-workers-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **kafka_options())
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])
    admin.close()
    print(f"topic {topic} ({PARTITIONS} partitions), group {group}, coordinators {coordinators}")
    config = worker_config(coordinators, bootstrap, group)
    seen: dict = {}
    lock = threading.Lock()
    workers = [Worker(f"worker-{i}", config, topic, seen, lock) for i in (1, 2, 3)]
    print("three workers join:")
    for worker in workers:
        worker.start()
    produce(bootstrap, topic, 0)
    ok = wait_consumed(seen, lock, RECORDS_PER_ROUND)
    time.sleep(2)
    print("worker-3 stops (LeaveGroup); its partitions move to the others:")
    workers[2].stop_event.set()
    workers[2].join(30)
    produce(bootstrap, topic, RECORDS_PER_ROUND)
    ok = wait_consumed(seen, lock, 2 * RECORDS_PER_ROUND) and ok
    time.sleep(2)
    # The first to leave may hand the other one a last generation before it stops too: said, not hidden.
    print("worker-1 and worker-2 stop:")
    for worker in workers[:2]:
        worker.stop_event.set()
    for worker in workers[:2]:
        worker.join(30)
    by_worker: dict[str, int] = {}
    for name in seen.values():
        by_worker[name] = by_worker.get(name, 0) + 1
    print(f"consumed {len(seen)} of {2 * RECORDS_PER_ROUND} records: "
          + ", ".join(f"{n} {c}" for n, c in sorted(by_worker.items())))
    print(f"group: {group}")
    return 0 if ok else 1


def seed_topic(topic: str, partitions: int, records_per_partition: int) -> int:
    """``demo seed-topic T P N``: a topic with P partitions and N records in
    each, for the migration part of the demo; a topic that exists gets N
    more records in each of its first P partitions."""
    bootstrap = os.environ["ZKCOORD_BOOTSTRAP_SERVERS"]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **kafka_options())
    try:
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
        made = "created"
    except TopicAlreadyExistsError:
        made = "existed"
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **kafka_options())
    for partition in range(partitions):
        for i in range(records_per_partition):
            producer.send(topic, key=f"invoice-{partition}-{i}".encode(), value=b"{}", partition=partition)
    producer.flush()
    producer.close()
    print(f"topic {topic}: {partitions} partitions x {records_per_partition} records"
          + (" more" if made == "existed" else ""))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["seed-topic"]:
        sys.exit(seed_topic(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    sys.exit(main())
