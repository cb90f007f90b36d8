"""What the cluster's topics look like, as one immutable value.

KIP-848's coordinator works on topic ids: members report the partitions
they own by topic id, the server-side assignors assign by topic id, and a
topic deleted and created again under the same name is another topic. This
module owns :class:`TopicsImage`, the snapshot of the topics the daemon
knows (name, id, partition count), which the server builds from Kafka's
topic registrations (``/brokers/topics/<topic>`` holds the topic id since
Kafka 2.8) and hands to the core with each request that needs it, the way
Kafka's coordinator reads its metadata image. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from zkcoord.core.frozenmap import FrozenMap

__all__ = ["TopicInfo", "TopicsImage", "EMPTY_IMAGE", "ZERO_UUID"]

ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's Uuid.ZERO_UUID: no topic id
# Topic ids are kept in Kafka's own text form (Uuid.toString: URL-safe base64 of the 16 bytes, no padding),
# as ZooKeeper's /brokers/topics/<topic> holds them; the wire's 16 bytes are converted at the server's edge.


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: str
    partitions: int


@dataclass(frozen=True)
class TopicsImage:
    """Topics by name and by id. ``version`` grows with every change the
    server sees; ``added_version`` is the version at which topics last
    appeared (KIP-848's regular expressions are resolved again when they
    were last resolved on an older image than that)."""

    by_name: Mapping[str, TopicInfo] = field(default_factory=FrozenMap)
    by_id: Mapping[str, TopicInfo] = field(default_factory=FrozenMap)
    version: int = 0
    added_version: int = 0

    @classmethod
    def of(cls, topics: Iterable[TopicInfo], version: int = 0, added_version: int = 0) -> TopicsImage:
        """An image of ``topics`` (a topic without an id is left out: the
        consumer protocol cannot name it).

        >>> t = TopicInfo("orders", "AAAAAAAAAAAAAAAAAAAABw", 3)
        >>> image = TopicsImage.of([t, TopicInfo("old", ZERO_UUID, 1)])
        >>> image.id_of("orders"), image.partitions_of("AAAAAAAAAAAAAAAAAAAABw"), image.id_of("old")
        ('AAAAAAAAAAAAAAAAAAAABw', 3, None)
        """
        topics = [t for t in topics if t.topic_id != ZERO_UUID and t.partitions >= 0]
        return cls(FrozenMap((t.name, t) for t in topics), FrozenMap((t.topic_id, t) for t in topics), version,
                   added_version)

    def updated(self, topics: Iterable[TopicInfo]) -> TopicsImage:
        """The next image: ``topics`` as they are now; the version moves on when
        anything changed, and ``added_version`` too when a topic appeared."""
        nxt = TopicsImage.of(topics, self.version, self.added_version)
        if nxt.by_name == self.by_name:
            return self
        added = any(name not in self.by_name or self.by_name[name].topic_id != t.topic_id
                    for name, t in nxt.by_name.items())
        version = self.version + 1
        return TopicsImage(nxt.by_name, nxt.by_id, version, version if added else self.added_version)

    def changed(self, topics: Mapping[str, TopicInfo | None]) -> TopicsImage:
        """The next image with only ``topics`` changed (None: the topic is
        gone); the versions move as with :meth:`updated`.

        >>> a = TopicInfo("a", "AAAAAAAAAAAAAAAAAAAAAQ", 1)
        >>> image = TopicsImage.of([a]).changed({"a": TopicInfo("a", a.topic_id, 4)})
        >>> image.partitions_of(a.topic_id), image.version, image.added_version
        (4, 1, 0)
        >>> image.changed({"a": None}).id_of("a"), image.changed({"b": None}) is image
        (None, True)
        """
        by_name, by_id, added = self.by_name.thaw(), self.by_id.thaw(), False
        for name, info in topics.items():
            old = by_name.pop(name, None)
            if old is not None:
                by_id.pop(old.topic_id, None)
            if info is not None and info.topic_id != ZERO_UUID and info.partitions >= 0:
                by_name[name] = info
                by_id[info.topic_id] = info
                added |= old is None or old.topic_id != info.topic_id
        if by_name == self.by_name:
            return self
        version = self.version + 1
        return TopicsImage(FrozenMap(by_name), FrozenMap(by_id), version, version if added else self.added_version)

    def id_of(self, name: str) -> str | None:
        found = self.by_name.get(name)
        return None if found is None else found.topic_id

    def name_of(self, topic_id: str) -> str | None:
        found = self.by_id.get(topic_id)
        return None if found is None else found.name

    def partitions_of(self, topic_id: str) -> int:
        """The topic's partition count; -1 for a topic the image does not have
        (Kafka's SubscribedTopicDescriber answers -1 too)."""
        found = self.by_id.get(topic_id)
        return -1 if found is None else found.partitions

    def ids_of(self, names: Iterable[str]) -> frozenset[str]:
        """The ids of those of ``names`` that exist (Kafka's ``TopicIds``)."""
        ids = set()
        for name in names:
            found = self.by_name.get(name)
            if found is not None:
                ids.add(found.topic_id)
        return frozenset(ids)


EMPTY_IMAGE = TopicsImage()
