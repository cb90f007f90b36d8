"""The legacy consumers' range assignment, as Kafka 0.8.1 to 1.1.1's
``ZookeeperConsumerConnector`` computes it (``kafka.consumer.RangeAssignor``,
``partition.assignment.strategy=range``, the default).

Every legacy consumer of a group computes the whole group's answer from the
same three readings, and takes its own part; zkcoord computes the same
answer from the same readings for its members. The readings:

1. the registrations under ``/consumers/<group>/ids`` (every consumer's
   topic count: :mod:`zkcoord.core.handover.registration`);
2. for whitelists and blacklists, the topic names under ``/brokers/topics``
   the filter allows (``TopicFilter.isTopicAllowed``: the regex, cleaned as
   Kafka cleans it, must match the whole name; with
   ``exclude.internal.topics`` (default true) ``__consumer_offsets`` and
   ``__transaction_state`` are never allowed);
3. each subscribed topic's partitions: the keys of ``"partitions"`` in
   ``/brokers/topics/<topic>``, sorted as numbers (a topic that has no
   registration has no partitions).

The rule, per topic: the consumer *threads* subscribed to it (a consumer
with N streams for a topic has threads ``<consumer id>-0`` .. ``-(N-1)``),
sorted as Java sorts strings (``ConsumerThreadId.compare`` compares their
``toString``; so ``c-10`` comes before ``c-2``), share the sorted partitions
in consecutive ranges: P partitions over T threads give each thread ``P // T``
and the first ``P % T`` threads one more.

Kafka's own example (``RangeAssignor``'s comment): consumers C1 and C2 with
two streams each, five partitions:

>>> from zkcoord.core.handover.registration import LegacyRegistration
>>> regs = [LegacyRegistration.static("C1", {"t": 2}), LegacyRegistration.static("C2", {"t": 2})]
>>> result = range_assignment(regs, {"t": (0, 1, 2, 3, 4)})
>>> [(p, result[("t", p)]) for p in range(5)]
[(0, 'C1-0'), (1, 'C1-0'), (2, 'C1-1'), (3, 'C2-0'), (4, 'C2-1')]

Regular expressions: Kafka evaluates them with ``java.util.regex``
(``String.matches``); zkcoord with Python's ``re.fullmatch``. Over topic
names (``[a-zA-Z0-9._-]``, no line breaks) the two agree on the syntax they
share; what Python reads differently or not at all (``\\p{..}`` classes,
``\\Q..\\E``, class intersections ``&&``, ``\\z``, Java's ``(?<name>``) is
(and a ``{`` that is no repetition, which Java refuses and Python reads as
itself: after the clean-up turns commas into ``|``, only ``{n}`` is one) is
refused with a :class:`~zkcoord.errors.StateError` naming the consumer,
since zkcoord could not compute the answer the legacy consumers compute.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from zkcoord.core.handover.registration import LegacyRegistration, Pattern, thread_id
from zkcoord.errors import StateError

__all__ = ["INTERNAL_TOPICS", "TopicPartition", "java_sort_key", "clean_regex", "topic_allowed",
           "subscribed_threads", "threads_per_topic", "range_assignment", "assignment_of"]

TopicPartition = tuple[str, int]
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})  # Kafka 1.1's Topic.isInternal
# Read differently by Python, or refused by Java alone: \p{..}, \Q..\E, \z, class intersections, Java's
# named groups, and a '{' that is no repetition (Java: "Illegal repetition"; Python: a literal '{').
_JAVA_ONLY = re.compile(r"\\[pPQEz]|&&|\(\?<[A-Za-z]|(?<!\\)\{(?!\d+\})")


def java_sort_key(text: str) -> bytes:
    """Orders strings as ``String.compareTo`` (UTF-16 code units)."""
    return text.encode("utf-16-be", "surrogatepass")


def _java_trim(text: str) -> str:
    """``String.trim``: strips characters up to U+0020 at both ends."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


def clean_regex(raw: str) -> str:
    """``TopicFilter``'s clean-up of a configured regex: trimmed, ``,`` read
    as ``|``, spaces removed, quotes stripped at both ends."""
    regex = _java_trim(raw).replace(",", "|").replace(" ", "")
    return re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", regex))


@lru_cache(maxsize=1024)
def _compiled(regex: str) -> re.Pattern | str:
    """The compiled regex, or why zkcoord cannot evaluate it as Java does."""
    if _JAVA_ONLY.search(regex):
        return ("it uses Java regex syntax Python reads differently (\\p, \\Q..\\E, \\z, &&, (?<name>, "
                "a '{' that is no {n})")
    try:
        return re.compile(regex)
    except re.error as exc:
        return f"Python cannot compile it ({exc})"


def topic_allowed(registration: LegacyRegistration, topic: str, exclude_internal_topics: bool = True) -> bool:
    """``Whitelist`` / ``Blacklist.isTopicAllowed`` of the registration's filter."""
    wildcard = registration.wildcard
    if wildcard is None:
        return topic in registration.static_topics
    regex = clean_regex(wildcard.regex)
    compiled = _compiled(regex)
    if isinstance(compiled, str):
        raise StateError(f"consumer {registration.consumer_id!r} subscribes with the {wildcard.pattern.value} "
                         f"regex {regex!r}, which zkcoord cannot evaluate: {compiled}")
    if exclude_internal_topics and topic in INTERNAL_TOPICS:
        return False
    matched = compiled.fullmatch(topic) is not None
    return matched if wildcard.pattern is Pattern.WHITE_LIST else not matched


def subscribed_threads(registration: LegacyRegistration, all_topics: Iterable[str],
                       exclude_internal_topics: bool = True) -> dict[str, tuple[str, ...]]:
    """``getConsumerThreadIdsPerTopic``: topic -> this consumer's thread ids.
    ``all_topics``: the names under ``/brokers/topics`` (used by filters only)."""
    if registration.wildcard is None:
        topics = dict(registration.static_topics)
    else:
        streams = registration.wildcard.streams
        topics = {t: streams for t in all_topics if topic_allowed(registration, t, exclude_internal_topics)}
    cid = registration.consumer_id
    return {topic: tuple(thread_id(cid, i) for i in range(streams)) for topic, streams in topics.items()}


def threads_per_topic(registrations: Iterable[LegacyRegistration], all_topics: Iterable[str],
                      exclude_internal_topics: bool = True) -> dict[str, list[str]]:
    """``ZkUtils.getConsumersPerTopic``: topic -> every subscribed thread, in Java's order."""
    names = list(all_topics)
    found: dict[str, list[str]] = {}
    for registration in registrations:
        for topic, threads in subscribed_threads(registration, names, exclude_internal_topics).items():
            found.setdefault(topic, []).extend(threads)
    for threads in found.values():
        threads.sort(key=java_sort_key)
    return found


def range_assignment(registrations: Iterable[LegacyRegistration], topics: Mapping[str, Sequence[int]],
                     exclude_internal_topics: bool = True) -> dict[TopicPartition, str]:
    """The group's whole answer: (topic, partition) -> owning thread id.

    ``topics`` maps every topic under ``/brokers/topics`` to its partition
    numbers (any order). Partitions of subscribed topics are all present;
    a subscribed topic missing from ``topics`` has none.
    """
    result: dict[TopicPartition, str] = {}
    for topic, threads in threads_per_topic(registrations, topics, exclude_internal_topics).items():
        partitions = sorted(topics.get(topic, ()))
        per_thread, extra = divmod(len(partitions), len(threads))
        for position, thread in enumerate(threads):
            start = per_thread * position + min(position, extra)
            count = per_thread + (1 if position < extra else 0)
            for partition in partitions[start:start + count]:
                result[(topic, partition)] = thread
    return result


def assignment_of(result: Mapping[TopicPartition, str], consumer_id: str) -> dict[str, frozenset[TopicPartition]]:
    """One consumer's share of :func:`range_assignment`'s answer, by thread id."""
    prefix = consumer_id + "-"
    mine: dict[str, set[TopicPartition]] = {}
    for tp, thread in result.items():
        if thread.startswith(prefix) and thread[len(prefix):].isdigit():
            mine.setdefault(thread, set()).add(tp)
    return {thread: frozenset(tps) for thread, tps in mine.items()}
