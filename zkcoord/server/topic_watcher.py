"""Watching the partition counts of the topics owned groups subscribe to.

Owns, per daemon, the map topic -> last known partition count and topic ->
groups interested in it. When a count changes from a known value, every
interested group gets ``handle_metadata_change`` (a rebalance, so the leader
assigns the new partitions), through the group's runtime.

Two sources, chosen once at start:

* ZooKeeper: ``/brokers/topics/<topic>`` is visible in the daemon's view of
  ZooKeeper (same ensemble and chroot as the brokers): a data watch per topic.
* Kafka's Metadata API, polled every ``refresh_ms``, when ZooKeeper has no
  broker metadata for us (zkcoord under a chroot of its own) and bootstrap
  servers are configured. With neither, partition changes are left to the
  clients (the group leader rejoins, as with Kafka's own coordinator).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from zkcoord.errors import ZkcoordError
from zkcoord.tasks import Background

log = logging.getLogger(__name__)

OnChange = Callable[[str], Awaitable[None]]  # group id -> apply handle_metadata_change


class TopicWatcher:
    def __init__(self, on_change: OnChange, registry=None, kafka_metadata=None, refresh_ms: int = 5_000):
        self._on_change = on_change
        self._registry = registry
        self._kafka = kafka_metadata
        self._refresh_s = refresh_ms / 1000
        self.source = "none"
        self._counts: dict[str, int | None] = {}
        self._cached_until: dict[str, float] = {}  # loop time until which an unwatched count is trusted
        self._groups: dict[str, set[str]] = {}  # topic -> group ids
        self._topics: dict[str, frozenset[str]] = {}  # group id -> topics
        self._watches: dict[str, object] = {}
        self._poller: asyncio.Task | None = None
        self._tasks = Background(log, "topic watcher")
        self._lookups: dict[tuple[str, ...], asyncio.Task] = {}  # reads of unwatched topics in flight

    async def start(self, zk_has_broker_metadata: bool) -> None:
        if zk_has_broker_metadata and self._registry is not None:
            self.source = "zookeeper"
        elif self._kafka is not None:
            self.source = "kafka"
            self._poller = asyncio.get_running_loop().create_task(self._poll())
        log.info("partition changes of subscribed topics come from: %s", self.source)

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
        for lookup in list(self._lookups.values()):
            lookup.cancel()
        for watch in self._watches.values():
            watch.stop()
        self._watches.clear()
        if self._kafka is not None:
            self._kafka.close()

    async def track(self, group_id: str, topics: frozenset[str]) -> None:
        """The group now subscribes to ``topics`` (replacing what it had)."""
        old = self._topics.get(group_id, frozenset())
        if topics == old:
            return
        self._topics[group_id] = topics
        for topic in old - topics:
            self._groups.get(topic, set()).discard(group_id)
        for topic in topics - old:
            self._groups.setdefault(topic, set()).add(group_id)
            if self.source == "zookeeper" and topic not in self._watches:
                try:
                    self._watches[topic] = await self._registry.watch(
                        topic, lambda count, t=topic: self._observed(t, count))
                except ZkcoordError as exc:
                    log.warning("cannot watch topic %s: %s", topic, exc)

    def untrack(self, group_id: str) -> None:
        for topic in self._topics.pop(group_id, frozenset()):
            self._groups.get(topic, set()).discard(group_id)

    async def partition_counts(self, topics: set[str], wait_s: float | None = None) -> dict[str, int | None]:
        """Partition counts of ``topics`` as far as this daemon can know them
        (topics it cannot learn about are left out: treated as existing).
        Watched topics answer from memory; others are read and cached for
        ``refresh_ms``. With ``wait_s``, a read that takes longer (Kafka down)
        is left to finish in the background and the last counts known are
        answered meanwhile, so a caller on a client's path never waits for
        Kafka's time-outs."""
        now = asyncio.get_running_loop().time()
        known = {t: self._counts[t] for t in topics
                 if t in self._counts and (t in self._watches or self._groups.get(t)
                                           or now < self._cached_until.get(t, 0.0))}
        unknown = sorted(set(topics) - set(known))
        if not unknown or self.source == "none":
            return known
        stale = {t: self._counts[t] for t in unknown if t in self._counts}
        lookup = self._lookups.get(tuple(unknown))
        if lookup is None:
            lookup = asyncio.get_running_loop().create_task(self._read_counts(unknown, now))
            self._lookups[tuple(unknown)] = lookup
            lookup.add_done_callback(lambda _t, key=tuple(unknown): self._lookups.pop(key, None))
        try:
            fresh = await (asyncio.wait_for(asyncio.shield(lookup), wait_s) if wait_s is not None else lookup)
        except TimeoutError:
            log.info("partition counts of %s: still asking (%s); using what is known", unknown, self.source)
            return {**known, **stale}
        except ZkcoordError as exc:
            log.warning("partition counts of %s unknown: %s", unknown, exc)
            return {**known, **stale}
        return {**known, **fresh}

    async def _read_counts(self, unknown: list[str], now: float) -> dict[str, int | None]:
        if self.source == "zookeeper":
            fresh = {t: await self._registry.partition_count(t) for t in unknown}
        else:
            fresh = await self._kafka.partition_counts(unknown)
        for topic, count in fresh.items():
            self._counts.setdefault(topic, count)
            if not self._groups.get(topic):
                self._counts[topic] = count
                self._cached_until[topic] = now + self._refresh_s
        return fresh

    def _observed(self, topic: str, count: int | None) -> None:
        """A count was read; a change from a known count starts rebalances."""
        known = topic in self._counts
        previous = self._counts.get(topic)
        self._counts[topic] = count
        if not known or previous == count:
            return
        log.info("topic %s: partition count %s -> %s; rebalancing its groups", topic, previous, count)
        for group_id in sorted(self._groups.get(topic, ())):
            self._tasks.spawn(self._on_change(group_id), f"rebalance group {group_id} after a partition change")

    async def _poll(self) -> None:
        while True:
            topics = [t for t, groups in self._groups.items() if groups]
            if topics:
                try:
                    counts = await self._kafka.partition_counts(topics)
                except ZkcoordError as exc:
                    log.warning("topic metadata not refreshed: %s", exc)
                else:
                    for topic, count in counts.items():
                        self._observed(topic, count)
            await asyncio.sleep(self._refresh_s)
