"""What an OffsetFetch asks for, and its answer, without millions of tuples.

One OffsetFetch request of group_request_max_bytes (8 MiB) names about two
million partitions (4 bytes each). The daemon keeps them as the request gives
them, ``{topic: [partition, ...]}`` (:data:`Wanted`), instead of a tuple per
partition built on the event loop: the store reads only the partitions that
have a committed offset (:mod:`zkcoord.zk.offsets` lists a topic's directory
first when many partitions of it are asked for), and the answer, one entry
per partition asked for, is built by :meth:`FetchAnswer.response_topics` in a
worker thread (``server/apis``). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from zkcoord.core.errors import ErrorCode

__all__ = ["CORRUPT_OFFSET_ERROR", "FetchAnswer", "Wanted", "count", "pairs", "wanted_by_topic"]

TopicPartition = tuple[str, int]
#: ``{topic: partitions}`` in the order asked, duplicates kept (a request may repeat one).
Wanted = Mapping[str, Sequence[int]]

#: OffsetFetch's per-partition error for a legacy offset znode that holds no
#: offset (:mod:`zkcoord.core.legacy_values`). UNKNOWN_SERVER_ERROR is what a
#: Kafka broker answers when it fails on its own side (``Errors.forException``
#: of an unexpected exception), and clients treat it as fatal for that fetch:
#: the Java consumer's poll throws "Unexpected error in fetch offset response
#: for partition t-0: The server experienced an unexpected error ...", and
#: kafka-python raises it, so the application and its operator see it at once.
#: CORRUPT_MESSAGE would be wrong twice: it names a record batch that failed
#: its CRC, and it is retriable (CorruptRecordException), so clients would
#: retry forever a value that no retry can repair. The other partitions of the
#: group are answered as usual; the znode is logged once with its path.
CORRUPT_OFFSET_ERROR = ErrorCode.UNKNOWN_SERVER_ERROR


def wanted_by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """``[(topic, partition)]`` -> :data:`Wanted`.

    >>> wanted_by_topic([("a", 1), ("b", 0), ("a", 0)])
    {'a': [1, 0], 'b': [0]}
    """
    wanted: dict[str, list[int]] = {}
    for topic, partition in partitions:
        wanted.setdefault(topic, []).append(partition)
    return wanted


def pairs(wanted: Wanted) -> Iterator[TopicPartition]:
    """:data:`Wanted` -> ``(topic, partition)`` in order."""
    for topic, partitions in wanted.items():
        for partition in partitions:
            yield topic, partition


def count(wanted: Wanted | None) -> int:
    """How many partitions ``wanted`` names (0 for None)."""
    return 0 if wanted is None else sum(len(partitions) for partitions in wanted.values())


@dataclass(frozen=True)
class FetchAnswer:
    """One group's OffsetFetch answer: every partition asked for (all stored
    ones, sorted, when ``wanted`` is None), with its committed offset and
    metadata, -1 and "" when none, or :data:`CORRUPT_OFFSET_ERROR` when its
    stored value is not an offset."""

    wanted: Wanted | None
    stored: Mapping[TopicPartition, tuple[int, str]] = field(default_factory=dict)
    corrupt: Mapping[TopicPartition, str] = field(default_factory=dict)

    def _asked(self) -> Wanted:
        if self.wanted is not None:
            return self.wanted
        return wanted_by_topic(sorted(set(self.stored) | set(self.corrupt)))

    def __len__(self) -> int:
        if self.wanted is not None:
            return count(self.wanted)
        if not self.corrupt:  # no set of every partition (a fetch of all may answer 100,000)
            return len(self.stored)
        return len(set(self.stored) | set(self.corrupt))

    def rows(self) -> list[tuple[str, int, int, str, ErrorCode]]:
        """``[(topic, partition, offset, metadata, error)]``.

        >>> FetchAnswer({"t": [0, 1]}, {("t", 0): (7, "m")}, {("t", 1): "not a number"}).rows()
        [('t', 0, 7, 'm', <ErrorCode.NONE: 0>), ('t', 1, -1, '', <ErrorCode.UNKNOWN_SERVER_ERROR: -1>)]
        """
        return [(topic, p["partition_index"], p["committed_offset"], p["metadata"], ErrorCode(p["error_code"]))
                for topic, partitions in self._topic_entries() for p in partitions]

    def response_topics(self) -> list[dict]:
        """OffsetFetch's ``topics`` field (kafka-python field dicts). One
        entry per partition asked for: run it off the event loop when there
        are many."""
        return [{"name": topic, "partitions": partitions} for topic, partitions in self._topic_entries()]

    def _topic_entries(self) -> list[tuple[str, list[dict]]]:
        stored, corrupt = self.stored, self.corrupt
        none, bad = int(ErrorCode.NONE), int(CORRUPT_OFFSET_ERROR)
        entries = []
        for topic, partitions in self._asked().items():
            answered = []
            for partition in partitions:
                key = (topic, partition)
                if key in corrupt:
                    offset, metadata, code = -1, "", bad
                else:
                    offset, metadata = stored.get(key, (-1, ""))
                    code = none
                answered.append({"partition_index": partition, "committed_offset": offset,
                                 "committed_leader_epoch": -1, "metadata": metadata, "error_code": code})
            entries.append((topic, answered))
        return entries
