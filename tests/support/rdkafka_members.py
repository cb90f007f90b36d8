"""librdkafka consumers (confluent-kafka) as group members, reporting what
their own rebalance callbacks say, on the monotonic clock.

Owns :class:`RdkafkaMember`: one ``confluent_kafka.Consumer`` polled by a
thread of its own (every librdkafka call of a member, its close too, is on
that thread, where librdkafka runs the callbacks). Its ``on_assign``,
``on_revoke`` and ``on_lost`` callbacks become
:class:`tests.support.ownership.AssignmentChange` s timed with
``time.monotonic_ns()``, the clock of the Java members of
:mod:`tests.support.consumer_host`: an assignment at the callback's start
(the member may fetch from then on), a revocation at its end (librdkafka
gives the partitions up once it returns). It commits synchronously after
each batch, records every consumed offset and every acknowledged commit.
Optionally (the handover benchmark) it subscribes to several topics, times
its callbacks on another clock (``clock``, e.g. wall-clock milliseconds, the
legacy driver's) and writes every record it consumed to a record log
(:mod:`zkcoord.local.record_log`), flushed before each commit.

Also :func:`produce`: records with acknowledged offsets, by librdkafka.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from tests.support.ownership import AssignmentChange
from zkcoord.local.record_log import RecordLogWriter

TopicPartition = tuple[str, int]
CLOSE_TIMEOUT_S = 60.0


class RdkafkaMember:
    """A librdkafka member of ``group`` on ``topic`` (or a list of topics);
    ``properties`` are librdkafka settings over the defaults here (e.g.
    ``group.protocol``); ``record_log`` gets a line per record consumed;
    ``clock`` times callbacks and commits (default ``time.monotonic_ns``)."""

    client = "librdkafka"  # in messages (tests.support.zkcoord_client_members runs another client)

    def __init__(self, label: str, bootstrap_servers: str, topic: str | list[str], group: str,
                 properties: Mapping[str, object] | None = None, record_log: RecordLogWriter | None = None,
                 clock=time.monotonic_ns):
        self.label, self.topic, self.group = label, topic, group
        self.topics = [topic] if isinstance(topic, str) else list(topic)
        self.record_log, self.clock = record_log, clock
        self.config = {"bootstrap.servers": bootstrap_servers, "group.id": group, "client.id": label,
                       "auto.offset.reset": "earliest", "enable.auto.commit": False, **(properties or {})}
        self._lock = threading.Lock()
        self._changes: list[AssignmentChange] = []
        self._consumed: dict[TopicPartition, set[int]] = {}
        self._commits: list[tuple[int, dict[TopicPartition, int]]] = []
        self._errors: list[str] = []
        self._stop = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"rdkafka-{label}", daemon=True)

    # -- life
    def start(self) -> RdkafkaMember:
        self._thread.start()
        return self

    def __enter__(self) -> RdkafkaMember:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Stop polling and close the consumer (it leaves its group, its
        revocation callback runs); AssertionError if that takes longer than
        ``timeout_s``."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                raise AssertionError(f"{self.client} member {self.label} did not close within {timeout_s:g} s")

    def _run(self) -> None:
        from confluent_kafka import Consumer, KafkaException

        consumer = Consumer(self.config, logger=None)
        try:
            consumer.subscribe(self.topics, on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost)
            while not self._stop.is_set():
                messages = consumer.consume(num_messages=500, timeout=0.2)
                positions: dict[TopicPartition, int] = {}
                with self._lock:
                    for m in messages:
                        if m.error():
                            self._errors.append(str(m.error()))
                            continue
                        tp = (m.topic(), m.partition())
                        self._consumed.setdefault(tp, set()).add(m.offset())
                        if self.record_log is not None:
                            self.record_log.write(m.topic(), m.partition(), m.offset(), self.label)
                        positions[tp] = max(positions.get(tp, -1), m.offset() + 1)
                if positions:
                    if self.record_log is not None:
                        self.record_log.flush()  # a committed record is in the log
                    self._commit(consumer, positions, KafkaException)
        except Exception as exc:  # reported through errors(); the test sees it
            with self._lock:
                self._errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            consumer.close()
            if self.record_log is not None:
                self.record_log.flush()
            self._closed.set()

    def _commit(self, consumer, positions: dict[TopicPartition, int], kafka_exception) -> None:
        from confluent_kafka import TopicPartition as RdTP

        try:
            answer = consumer.commit(offsets=[RdTP(t, p, o) for (t, p), o in positions.items()], asynchronous=False)
        except kafka_exception as exc:  # e.g. during a rebalance: the next batch's commit covers it
            with self._lock:
                self._errors.append(f"commit: {exc}")
            return
        done = {(tp.topic, tp.partition): tp.offset for tp in answer if tp.error is None}
        with self._lock:
            self._commits.append((self.clock(), done))

    # -- callbacks (on the member's thread)
    def _note(self, kind: str, partitions, ts: int) -> None:
        with self._lock:
            self._changes.append(AssignmentChange(self.label, kind, ts, {(p.topic, p.partition) for p in partitions}))

    def _assigned(self, consumer, partitions) -> None:
        self._note("assigned", partitions, self.clock())

    def _revoked(self, consumer, partitions) -> None:
        self._note("revoked", partitions, self.clock())

    def _lost(self, consumer, partitions) -> None:
        self._note("lost", partitions, self.clock())

    # -- what it saw
    def changes(self) -> list[AssignmentChange]:
        with self._lock:
            return list(self._changes)

    def assignment(self) -> frozenset[TopicPartition]:
        held: set[TopicPartition] = set()
        for change in self.changes():
            held = held | change.partitions if change.kind == "assigned" else held - change.partitions
        return frozenset(held)

    def consumed_offsets(self) -> dict[TopicPartition, set[int]]:
        with self._lock:
            return {tp: set(offsets) for tp, offsets in self._consumed.items()}

    def commits(self) -> list[tuple[int, dict[TopicPartition, int]]]:
        with self._lock:
            return list(self._commits)

    def errors(self) -> list[str]:
        with self._lock:
            return list(self._errors)

    def alive(self) -> bool:
        return self._thread.is_alive()


def produce(bootstrap_servers: str, topic: str, count: int, partitions: int,
            tag: str = "r") -> dict[TopicPartition, list[int]]:
    """``count`` records round-robin over ``partitions`` with ``acks=all``;
    the acknowledged offsets per partition. AssertionError unless every
    record was acknowledged."""
    from confluent_kafka import Producer

    acked: dict[TopicPartition, list[int]] = {}
    failed: list[str] = []

    def delivered(error, message) -> None:
        if error is not None:
            failed.append(str(error))
        else:
            acked.setdefault((message.topic(), message.partition()), []).append(message.offset())

    producer = Producer({"bootstrap.servers": bootstrap_servers, "acks": "all", "linger.ms": 5}, logger=None)
    for i in range(count):
        producer.produce(topic, value=f"{tag}-{i}".encode(), key=f"{tag}-{i}".encode(), partition=i % partitions,
                         on_delivery=delivered)
        producer.poll(0)
    left = producer.flush(60)
    if failed or left or sum(map(len, acked.values())) != count:
        raise AssertionError(f"{sum(map(len, acked.values()))} of {count} records acknowledged on {topic!r} "
                             f"({left} unsent, failures: {failed[:3]})")
    return acked
