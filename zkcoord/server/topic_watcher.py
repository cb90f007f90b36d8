"""What the daemon knows of the cluster's topics.

Owns, per daemon, two views of the topics:

* the **topics image** (:class:`~zkcoord.core.topics_image.TopicsImage`:
  every topic's name, id and partition count), which KIP-848's consumer
  groups assign from, handed to the manager (``on_image``) whenever it
  changes;
* the map topic -> last known partition count and topic -> groups
  interested in it. When a count changes from a known value, every
  interested group gets ``handle_metadata_change`` through its runtime (a
  classic group rebalances so its leader assigns the new partitions; a
  consumer group refreshes its metadata at the next heartbeat).

Two sources, chosen once at start:

* ZooKeeper: ``/brokers/topics/<topic>`` is visible in the daemon's view of
  ZooKeeper (same ensemble and chroot as the brokers). Every registration is
  read at start and whenever the list of topics changes (a child watch, and
  a full read every ``ZK_RESYNC_S`` in case a watch was lost with a
  session); the topics groups subscribe to have a data watch each, whose
  counts also update the image.
* Kafka's Metadata API, every topic polled every ``refresh_ms``, when
  ZooKeeper has no broker metadata for us (zkcoord under a chroot of its
  own, or a KRaft cluster) and bootstrap servers are configured.

With neither, the image stays empty (consumer groups cannot be served) and
partition changes are left to the clients (the group leader rejoins, as with
Kafka's own coordinator).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from zkcoord.core.topics_image import EMPTY_IMAGE, TopicInfo, TopicsImage
from zkcoord.errors import ZkcoordError
from zkcoord.tasks import Background

log = logging.getLogger(__name__)

OnChange = Callable[[str], Awaitable[None]]  # group id -> apply handle_metadata_change
OnImage = Callable[[TopicsImage, list[str]], None]  # the image, the groups tracking a changed topic
ZK_RESYNC_S = 60.0  # every registration read again, ZooKeeper source


class TopicWatcher:
    def __init__(self, on_change: OnChange, registry=None, kafka_metadata=None, refresh_ms: int = 5_000,
                 on_image: OnImage | None = None):
        self._on_change = on_change
        self._on_image = on_image
        self.image: TopicsImage = EMPTY_IMAGE
        self._listing: asyncio.Task | None = None  # a read of every registration (ZooKeeper source)
        self._list_again = False
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
        """Choose the source and read the topics once (a failure is logged:
        the image fills in at the next read)."""
        if zk_has_broker_metadata and self._registry is not None:
            self.source = "zookeeper"
            await self._list_zk()
            self._poller = asyncio.get_running_loop().create_task(self._resync_zk())
        elif self._kafka is not None:
            self.source = "kafka"
            await self._poll_once()
            self._poller = asyncio.get_running_loop().create_task(self._poll())
        log.info("topics and their partition changes come from: %s (%d topics known)",
                 self.source, len(self.image.by_name))

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
        if self._listing is not None:
            self._listing.cancel()
        for lookup in list(self._lookups.values()):
            lookup.cancel()
        for watch in self._watches.values():
            watch.stop()
        self._watches.clear()
        if self._kafka is not None:
            self._kafka.close()

    async def track(self, group_id: str, topics: frozenset[str]) -> frozenset[str]:
        """The group now subscribes to ``topics`` (replacing what it had); the
        topics it did not track before. A change of those in the image before
        now named no group: the caller asks the group to look again."""
        old = self._topics.get(group_id, frozenset())
        if topics == old:
            return frozenset()
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
        return topics - old

    def untrack(self, group_id: str) -> None:
        for topic in self._topics.pop(group_id, frozenset()):
            self._groups.get(topic, set()).discard(group_id)

    def partition_counts_now(self, topics: set[str]) -> dict[str, int | None] | None:
        """:meth:`partition_counts` when it needs no wait (every topic known
        from memory, or nothing can be learnt); None when it would ask."""
        now = asyncio.get_running_loop().time()
        counts, cached_until, watches, groups = self._counts, self._cached_until, self._watches, self._groups
        known = {}
        for t in topics:
            if t in counts and (t in watches or groups.get(t) or now < cached_until.get(t, 0.0)):
                known[t] = counts[t]
            elif self.source != "none":
                return None
        return known

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

    # -- the topics image ---------------------------------------------------------
    async def _set_image(self, topics: dict[str, tuple[str, int]]) -> None:
        """Every topic as just read: the next image (built off the loop: it
        grows with the cluster), with the counts the data watches delivered
        meanwhile kept, as they are newer than the read."""
        base = self.image
        image = await asyncio.to_thread(base.updated, [TopicInfo(n, i, c) for n, (i, c) in topics.items()])
        watched = {t: self._counts[t] for t in self._watches if t in self._counts}
        fresher = {t: (None if c is None or t not in image.by_name else TopicInfo(t, image.by_name[t].topic_id, c))
                   for t, c in watched.items()}
        self._publish(image.changed({t: i for t, i in fresher.items() if i != image.by_name.get(t)}))

    def _publish(self, image: TopicsImage) -> None:
        """A new image: to the manager, with the groups tracking a topic that
        appeared, went or changed (their ids, sorted)."""
        if image is self.image:
            return
        old, self.image = self.image, image
        if self._on_image is None:
            return
        names = {n for n, t in image.by_name.items() if old.by_name.get(n) != t}
        names.update(n for n in old.by_name if n not in image.by_name)
        groups = sorted({g for n in names for g in self._groups.get(n, ())})
        self._on_image(image, groups)

    def _image_count(self, topic: str, count: int | None) -> None:
        """A watched or polled count into the image; a topic the image does not
        have yet (created since the last read) is read in full."""
        info = self.image.by_name.get(topic)
        if count is None:
            self._publish(self.image.changed({topic: None}))
        elif info is not None:
            self._publish(self.image.changed({topic: TopicInfo(topic, info.topic_id, count)}))
        elif self.source == "zookeeper":
            self._listing_changed()

    def _listing_changed(self) -> None:
        """The list of topics changed (a child watch, on the loop): read every
        registration again, one read at a time."""
        if self._listing is not None and not self._listing.done():
            self._list_again = True
            return
        self._listing = asyncio.get_running_loop().create_task(self._list_zk())

    async def _list_zk(self) -> None:
        while True:
            self._list_again = False
            try:
                topics = await self._registry.all_topics(on_change=self._listing_changed)
            except ZkcoordError as exc:
                log.warning("topics not read from ZooKeeper: %s", exc)
                return  # the periodic read tries again
            await self._set_image(topics)
            if not self._list_again:
                return

    async def _resync_zk(self) -> None:
        while True:
            await asyncio.sleep(ZK_RESYNC_S)
            self._listing_changed()

    def _observed(self, topic: str, count: int | None) -> None:
        """A count was read; a change from a known count starts rebalances."""
        known = topic in self._counts
        previous = self._counts.get(topic)
        self._counts[topic] = count
        imaged = self.image.by_name.get(topic)
        if (None if imaged is None else imaged.partitions) != count:
            self._image_count(topic, count)
        if not known or previous == count:
            return
        log.info("topic %s: partition count %s -> %s; rebalancing its groups", topic, previous, count)
        for group_id in sorted(self._groups.get(topic, ())):
            self._tasks.spawn(self._on_change(group_id), f"rebalance group {group_id} after a partition change")

    async def _poll_once(self) -> None:
        try:
            topics = await self._kafka.all_topics()
        except ZkcoordError as exc:
            log.warning("topic metadata not refreshed: %s", exc)
            return
        await self._set_image(topics)
        for topic in [t for t, groups in self._groups.items() if groups]:
            found = topics.get(topic)
            self._observed(topic, None if found is None else found[1])

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            await self._poll_once()
