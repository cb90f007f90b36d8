"""Kafka's own znodes (ZooKeeper mode): partition counts of topics, and
whether a broker is registered.

This module owns reading ``/brokers/topics/<topic>``, which Kafka writes as
``{"version":2,"partitions":{"0":[1,2],"1":[2,3]},...}``: the number of keys
of ``"partitions"`` is the partition count; and waiting for a broker's
``/brokers/ids/<id>`` to go (:func:`wait_broker_unregistered`, for the
sandbox's restarts). Nothing here writes.

Rules:

1. ``None`` means the topic does not exist (no znode).
2. A registration that is not such JSON is a StateError naming the znode
   for :meth:`TopicRegistry.partition_count`; a watch logs it and keeps the
   last good count.
3. :meth:`TopicRegistry.watch` uses kazoo's ``DataWatch`` (which survives
   reconnects and session loss). Its callback runs on the event loop
   thread, first with the current count, then on every change of the count.
   ``DataWatch`` reads synchronously when created, so it is created on a
   worker thread, never on the loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import DataWatch

from zkcoord.errors import ServiceUnavailableError, StateError
from zkcoord.zk import aio, paths
from zkcoord.zk.connection import ZkConnection, wait_znode_gone

__all__ = ["TopicRegistry", "TopicWatch", "parse_partition_count", "parse_partition_ids", "parse_topic",
           "wait_broker_unregistered"]

log = logging.getLogger(__name__)
_PARSE_SLICE_BYTES = 64 * 1024  # registrations parsed between two yields to the event loop


def parse_partition_count(topic: str, data: bytes) -> int:
    """The partition count in a ``/brokers/topics/<topic>`` znode's data."""
    return _parsed(topic, data)[1]


def _parsed(topic: str, data: bytes) -> tuple[dict, int]:
    """(the registration, its partition count); StateError as :func:`parse_partition_count`."""
    path = paths.broker_topic(topic)
    try:
        registration = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise StateError(f"topic registration {path} is not valid JSON ({exc})") from None
    partitions = registration.get("partitions") if isinstance(registration, dict) else None
    if not isinstance(partitions, dict) or not all(isinstance(k, str) and k.isdigit() for k in partitions):
        raise StateError(f"topic registration {path} has no \"partitions\" object keyed by partition number")
    return registration, len(partitions)


def parse_partition_ids(topic: str, data: bytes) -> tuple[int, ...]:
    """The partition numbers of a registration, sorted (the keys of
    ``"partitions"``, read as numbers, as legacy consumers read them).
    StateError as :func:`parse_partition_count`."""
    parse_partition_count(topic, data)
    return tuple(sorted({int(k) for k in json.loads(data.decode())["partitions"]}))


def parse_topic(topic: str, data: bytes) -> tuple[str, int] | None:
    """(topic id, partition count) of a registration; None when it has no id
    (a topic created before Kafka 2.8 and not touched since: the consumer
    protocol cannot name it). StateError as :func:`parse_partition_count`."""
    registration, count = _parsed(topic, data)
    topic_id = registration.get("topic_id")
    return (topic_id, count) if isinstance(topic_id, str) and topic_id else None


class TopicWatch:
    """A running watch; :meth:`stop` ends it (kazoo drops it on the next event)."""

    def __init__(self, topic: str, callback: Callable[[int | None], None]) -> None:
        self.topic = topic
        self._callback = callback
        self._stopped = False
        self._delivered = False
        self.last: int | None = None

    def stop(self) -> None:
        self._stopped = True

    @property
    def stopped(self) -> bool:
        return self._stopped

    def _deliver(self, count: int | None) -> None:  # on the loop thread
        if self._stopped or (self._delivered and count == self.last):
            return
        self._delivered, self.last = True, count
        try:
            self._callback(count)
        except Exception:
            log.exception("partition-count callback for topic %r failed", self.topic)


class TopicRegistry:
    def __init__(self, conn: ZkConnection) -> None:
        self._conn = conn

    async def kafka_registers_topics(self) -> bool:
        """Whether Kafka keeps its topics in this ZooKeeper (``/brokers/topics``
        exists: a ZooKeeper-mode cluster); if not, topics come from Kafka's metadata."""
        async def inner() -> bool:
            return await aio.call(self._conn.client.exists_async, paths.BROKER_TOPICS) is not None
        return await self._conn.retry(f"look for {paths.BROKER_TOPICS}", inner)

    async def all_topics(self, on_change: Callable[[], None] | None = None) -> dict[str, tuple[str, int]]:
        """Every topic Kafka registers: name -> (topic id, partition count),
        read in multiReads; ``on_change`` (a one-shot watch, on the loop) when
        topics are created or deleted. Registrations without an id or that
        do not parse are left out (logged)."""
        return await self._conn.retry("list the topics", self._inner_all, on_change)

    async def _inner_all(self, on_change) -> dict[str, tuple[str, int]]:
        from zkcoord.zk.multi_read import GET_DATA, read_many

        loop = asyncio.get_running_loop()
        watch = (lambda event: aio.post(loop, on_change)) if on_change is not None else None
        try:
            names = await aio.call(self._conn.client.get_children_async, paths.BROKER_TOPICS, watch)
        except NoNodeError:
            return {}
        names = sorted(names)
        outcomes = await read_many(self._conn, [(GET_DATA, paths.broker_topic(n)) for n in names])
        topics = {}
        parsed_bytes = 0
        for name, outcome in zip(names, outcomes):
            if isinstance(outcome, NoNodeError):
                continue
            if parsed_bytes > _PARSE_SLICE_BYTES:  # a cluster of 100,000 partitions registers megabytes
                parsed_bytes = 0
                await asyncio.sleep(0)
            if isinstance(outcome, BaseException):
                raise outcome
            parsed_bytes += len(outcome)
            try:
                parsed = parse_topic(name, bytes(outcome))
            except StateError as exc:
                log.warning("%s; the topic is left out of the consumer groups' view", exc)
                continue
            if parsed is not None:
                topics[name] = parsed
        return topics

    async def partition_count(self, topic: str) -> int | None:
        """The topic's partition count, None if it does not exist."""
        paths.broker_topic(topic)  # validates
        return await self._conn.retry(f"read the registration of topic {topic!r}", self._inner_count, topic)

    async def _inner_count(self, topic: str) -> int | None:
        try:
            data, _ = await aio.call(self._conn.client.get_async, paths.broker_topic(topic))
        except NoNodeError:
            return None
        return parse_partition_count(topic, data)

    async def watch(self, topic: str, callback: Callable[[int | None], None]) -> TopicWatch:
        """Call ``callback(count | None)`` on the loop now and whenever the
        topic's partition count changes; returns the handle to stop it."""
        path = paths.broker_topic(topic)
        loop = asyncio.get_running_loop()
        handle = TopicWatch(topic, callback)

        def changed(data: bytes | None, stat) -> bool | None:  # a kazoo thread
            if handle.stopped:
                return False  # tells DataWatch to stop
            if data is None or stat is None:
                count = None
            else:
                try:
                    count = parse_partition_count(topic, data)
                except StateError as exc:
                    log.warning("%s; keeping the last partition count of %r", exc, topic)
                    return None
            aio.post(loop, handle._deliver, count)
            return None

        timeout_s = self._conn.request_timeout_ms / 1000
        try:
            await asyncio.wait_for(asyncio.to_thread(DataWatch, self._conn.client, path, changed), timeout_s)
        except TimeoutError:
            handle.stop()  # the DataWatch may still come up later: keep it silent
            raise ServiceUnavailableError(f"ZooKeeper at {self._conn.hosts} did not let us watch {path} "
                                          f"within {timeout_s:g} s") from None
        return handle


def wait_broker_unregistered(hosts: str, broker_id: int, timeout_s: float = 60.0, security=None) -> bool:
    """Block until broker ``broker_id``'s registration is gone from the
    ZooKeeper at ``hosts`` (a broker killed with -9 leaves it until its session
    times out, and a new broker with that id cannot register meanwhile);
    whether it went within ``timeout_s``. ServiceUnavailableError if ZooKeeper
    cannot be reached. ``security``: the ZooKeeper login (ZkSecurity)."""
    return wait_znode_gone(hosts, paths.broker_registration(broker_id), timeout_s, security)
