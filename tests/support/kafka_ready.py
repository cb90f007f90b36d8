"""Waiting for a sandbox broker's group coordinator, and a Kafka-managed member.

A fresh broker creates ``__consumer_offsets`` on the first group request
and answers COORDINATOR_NOT_AVAILABLE until it is loaded. The session
fixtures call :func:`wait_group_coordinator` once, so no test depends on
running after another.
"""

from __future__ import annotations

import contextlib
import time

from kafka import KafkaAdminClient, KafkaConsumer
from kafka.errors import KafkaError


def wait_group_coordinator(bootstrap_servers: str, timeout_s: float = 120.0) -> None:
    """Return once the broker answers a group's offset fetch; raise the last
    Kafka error after ``timeout_s``."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=10000)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                admin.list_group_offsets("zkcoord-test-warm-up")
                return
            except KafkaError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        admin.close()


# kafka-python 3.0.12 loses a join whose JoinGroup or SyncGroup outlives the poll it was sent from
# (it then never fetches nor heartbeats; seen against the broker with poll(timeout_ms=5)): a poll
# of a few seconds outlasts any join of these tests, however loaded the machine.
JOIN_POLL_MS = 3000


def poll_until_assigned(consumer: KafkaConsumer, timeout_s: float = 60.0) -> None:
    """Poll a stock kafka-python consumer until it holds partitions (or ``timeout_s`` passed)."""
    deadline = time.monotonic() + timeout_s
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(timeout_ms=JOIN_POLL_MS)


@contextlib.contextmanager
def active_kafka_member(bootstrap_servers: str, topic: str, group: str):
    """A plain Kafka consumer that has joined ``group`` in Kafka's own
    coordinator and holds partitions of ``topic``; closed on exit."""
    consumer = KafkaConsumer(topic, group_id=group, bootstrap_servers=bootstrap_servers, enable_auto_commit=False)
    try:
        poll_until_assigned(consumer)
        assert consumer.assignment(), f"the consumer of {group!r} got no partitions of {topic!r}"
        yield consumer
    finally:
        consumer.close()
