"""zkcoord's own consumer (``zkcoord.client.Consumer``, the thin consumer) as
a group member, reporting what its rebalance listener says: the same
bookkeeping and the same reports as :class:`tests.support.rdkafka_members.RdkafkaMember`,
so a benchmark or test can run either client and compute the same figures.

Owns :class:`ZkcoordClientMember`: one thin consumer polled by a thread of
its own (its start, polls, commits and close all on that thread). It asks
the zkcoord daemons ``coordinators`` for its group's coordinator and
fetches from the brokers ``bootstrap_servers``, as ``zkcoord consume`` does
(the README's "The consumer"); it hears of a rebalance through the daemon's
rebalance notice (:mod:`zkcoord.client.notice`) where the daemon offers it.
Its listener's ``on_assigned``, ``on_revoked`` and ``on_lost`` become
:class:`tests.support.ownership.AssignmentChange` s timed with ``clock`` at
the callback's start (they run on the consumer's listener thread while the
``poll()`` that triggered them waits). Like the librdkafka member it
commits synchronously after each batch, records every consumed offset and
acknowledged commit, and writes every record to ``record_log`` (flushed
before each commit).

Settings: :func:`member_config`, the thin consumer's defaults (3 s
heartbeats, 45 s sessions, range, as librdkafka's and Kafka's defaults are)
but auto commit off and ``earliest`` (the librdkafka member's), with
``settings`` over them by :class:`zkcoord.client.ConsumerConfig` field name
(``heartbeat_interval_ms``) or Kafka's (``heartbeat.interval.ms``), values
as text.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping

from tests.support.rdkafka_members import RdkafkaMember
from zkcoord.client import Consumer, ConsumerConfig, ConsumerError, RebalanceListener, TopicPartition
from zkcoord.local.record_log import RecordLogWriter

POLL_TIMEOUT_MS = 200
SETTINGS = frozenset(f.name for f in dataclasses.fields(ConsumerConfig)) - {
    "coordinators", "bootstrap_servers", "group_id", "client_id", "security", "coordinator_security"}


def setting_name(key: str) -> str:
    """A :class:`ConsumerConfig` field from its name or Kafka's dotted one;
    ValueError naming the key and the settings known otherwise."""
    name = key.strip().replace(".", "_")
    if name not in SETTINGS:
        raise ValueError(f"{key!r} is not a setting of zkcoord's consumer (zkcoord.client.ConsumerConfig); "
                         f"known: {', '.join(sorted(SETTINGS))}")
    return name


def member_config(label: str, coordinators: str, bootstrap_servers: str, group: str,
                  settings: Mapping[str, object] | None = None) -> ConsumerConfig:
    """The member's :class:`ConsumerConfig` (see the module docstring);
    ValueError for an unknown setting, ConfigError for a bad value."""
    fields = {f.name: f for f in dataclasses.fields(ConsumerConfig)}
    chosen: dict[str, object] = {"enable_auto_commit": False, "auto_offset_reset": "earliest"}
    for key, value in (settings or {}).items():
        name = setting_name(key)
        if fields[name].type == "int" and isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                raise ValueError(f"{key}={value!r}: a whole number is expected") from None
        chosen[name] = value
    return ConsumerConfig(coordinators=coordinators, bootstrap_servers=bootstrap_servers, group_id=group,
                          client_id=label, **chosen)


class _Listener(RebalanceListener):
    def __init__(self, member: ZkcoordClientMember):
        self.member = member

    def on_assigned(self, partitions) -> None:
        self.member._note("assigned", partitions, self.member.clock())

    def on_revoked(self, partitions) -> None:
        self.member._note("revoked", partitions, self.member.clock())

    def on_lost(self, partitions) -> None:
        self.member._note("lost", partitions, self.member.clock())


class ZkcoordClientMember(RdkafkaMember):
    """A thin-consumer member of ``group`` on ``topic`` (or a list of
    topics), coordinated by the daemons ``coordinators``; ``settings`` over
    :func:`member_config`'s; ``record_log`` and ``clock`` as for
    :class:`RdkafkaMember`, whose reports (``changes()``, ``assignment()``,
    ``consumed_offsets()``, ``commits()``, ``errors()``) and life
    (``start()``, ``close()``, a context manager) it shares."""

    client = "zkcoord client"

    def __init__(self, label: str, coordinators: str, bootstrap_servers: str, topic: str | list[str], group: str,
                 settings: Mapping[str, object] | None = None, record_log: RecordLogWriter | None = None,
                 clock=time.monotonic_ns):
        super().__init__(label, bootstrap_servers, topic, group, record_log=record_log, clock=clock)
        self.config = member_config(label, coordinators, bootstrap_servers, group, settings)
        self._thread.name = f"zkcoord-client-{label}"

    def _run(self) -> None:
        consumer = None
        try:
            consumer = Consumer(self.config).start()
            consumer.subscribe(self.topics, listener=_Listener(self))
            while not self._stop.is_set():
                records = consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
                positions: dict[tuple[str, int], int] = {}
                with self._lock:
                    for r in records:
                        tp = (r.topic, r.partition)
                        self._consumed.setdefault(tp, set()).add(r.offset)
                        if self.record_log is not None:
                            self.record_log.write(r.topic, r.partition, r.offset, self.label)
                        positions[tp] = max(positions.get(tp, -1), r.offset + 1)
                if positions:
                    if self.record_log is not None:
                        self.record_log.flush()  # a committed record is in the log
                    self._commit(consumer, positions, ConsumerError)
        except Exception as exc:  # reported through errors(); the benchmark or test sees it
            with self._lock:
                self._errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            try:
                if consumer is not None:
                    consumer.close(autocommit=False)
            except Exception as exc:
                with self._lock:
                    self._errors.append(f"close: {type(exc).__name__}: {exc}")
            if self.record_log is not None:
                self.record_log.flush()
            self._closed.set()

    def _commit(self, consumer: Consumer, positions: dict[tuple[str, int], int], commit_error) -> None:
        try:
            consumer.commit({TopicPartition(t, p): o for (t, p), o in positions.items()})
        except commit_error as exc:  # e.g. a rebalance began: the next batch's commit, or the next owner, covers it
            with self._lock:
                self._errors.append(f"commit: {exc}")
            return
        with self._lock:
            self._commits.append((self.clock(), dict(positions)))
