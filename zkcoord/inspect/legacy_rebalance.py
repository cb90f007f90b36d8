"""The legacy rebalance of a group, as ``describe`` and ``groups`` show it (issue 26). No I/O.

A group's ``<root>/<group>/ids`` holds the registrations of its legacy
consumers (Kafka 0.8.1-1.1's ``ZookeeperConsumerConnector``) and, during a
handover (docs/handover.md), those the owner daemon writes for zkcoord's
members. The rules:

* **Kind**: a consumer id in the form zkcoord gives its members
  (:func:`~zkcoord.core.handover.registration.is_zkcoord_consumer_id`) is a
  ``zkcoord`` member's, any other a ``legacy`` consumer's. The form is for
  display only: which session holds the znode is what makes it zkcoord's.
* **Mixed** (:func:`handover`): at least one legacy registration, and the
  group is zkcoord's too: a zkcoord member is registered, or zkcoord's
  record of the group has members.
* **Owned**: the owner znodes (``owners/<topic>/<p>``, a thread id
  ``<consumer id>-<stream>``) naming a thread of a registered consumer are
  that consumer's; any other owner znode is listed on its own
  (``other_owners``: a consumer whose registration is gone, or a name that
  is no thread id).
* **Unowned**: the partitions of the subscribed topics (what the legacy
  consumers compute from the registrations and ``/brokers/topics``) that no
  owner znode holds: nobody consumes them.
* An unreadable registration is listed with why (``problem``), as are the
  registrations whose filter zkcoord refuses; no legacy consumer of the
  group can rebalance while one is there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from zkcoord.core.handover.registration import LegacyRegistration, is_zkcoord_consumer_id, split_thread_id
from zkcoord.inspect.model import Assignment, LegacyConsumer, LegacyRebalance
from zkcoord.zk.handover import Reading

__all__ = ["LEGACY", "ZKCOORD", "MIXED", "kind", "legacy_count", "handover", "section"]

LEGACY, ZKCOORD = "legacy", "zkcoord"  # the kinds of registration
MIXED = "mixed"  # the handover state of a group with both kinds of consumer


def kind(consumer_id: str) -> str:
    """``zkcoord`` for a zkcoord member's consumer id, else ``legacy``.

    >>> kind("g_zkcoord-1795315596682-0a1b2c3d"), kind("g_web-1-1700000000000-abcd1234")
    ('zkcoord', 'legacy')
    """
    return ZKCOORD if is_zkcoord_consumer_id(consumer_id) else LEGACY


def legacy_count(consumer_ids: Iterable[str]) -> int:
    """How many of ``consumer_ids`` are legacy consumers'."""
    return sum(kind(c) == LEGACY for c in consumer_ids)


def handover(consumer_ids: Iterable[str], zkcoord_members: int) -> str | None:
    """``mixed`` when legacy consumers are registered and the group is zkcoord's
    too (a zkcoord member registered, or ``zkcoord_members`` in its record), else None.

    >>> handover(["g_a-1-abcd1234", "g_zkcoord-1795315596682-0a1b2c3d"], 0), handover(["g_a-1-abcd1234"], 2)
    ('mixed', 'mixed')
    >>> handover(["g_a-1-abcd1234"], 0), handover(["g_zkcoord-1795315596682-0a1b2c3d"], 2)
    (None, None)
    """
    ids = list(consumer_ids)
    legacy = legacy_count(ids)
    return MIXED if legacy and (legacy < len(ids) or zkcoord_members > 0) else None


def _assignment(partitions: Iterable[tuple[str, int]]) -> Assignment:
    topics: dict[str, set[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, set()).add(partition)
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted(topics.items()))


def _consumer(consumer_id: str, registration: LegacyRegistration | None, problem: str | None,
              owned: Iterable[tuple[str, int]], member: str | None) -> LegacyConsumer:
    if registration is None:
        return LegacyConsumer(consumer_id, kind(consumer_id), None, None, _assignment(owned), problem, member)
    wildcard = registration.wildcard
    subscription = ((wildcard.regex, wildcard.streams),) if wildcard is not None else \
        tuple(sorted(registration.static_topics.items()))
    return LegacyConsumer(consumer_id, kind(consumer_id), registration.pattern_text, subscription,
                          _assignment(owned), problem, member)


def section(reading: Reading, ids_dir: str, zkcoord_members: int,
            handover_ids: Mapping[str, str] | None = None) -> LegacyRebalance:
    """``describe``'s section of a group's legacy rebalance, from one read of it
    (:meth:`zkcoord.zk.handover.LegacyRebalanceZk.read`); ``zkcoord_members``: the
    members zkcoord's record (or its owner) has in the group; ``handover_ids``:
    the record's member id -> the legacy consumer id its owner registered."""
    member_of = {cid: mid for mid, cid in (handover_ids or {}).items()}
    registered = set(reading.registrations) | set(reading.problems)
    ids = sorted(registered)
    owned: dict[str, list[tuple[str, int]]] = {}
    others: dict[str, list[tuple[str, int]]] = {}
    for tp, owner in sorted(reading.owners.items()):
        thread = split_thread_id(owner.holder)
        if thread is not None and thread[0] in registered:
            owned.setdefault(thread[0], []).append(tp)
        else:
            others.setdefault(owner.holder, []).append(tp)
    consumers = tuple(_consumer(c, reading.registrations.get(c), reading.problems.get(c), owned.get(c, ()),
                                member_of.get(c)) for c in ids)
    unowned = _assignment((t, p) for t, ps in reading.topics.items() for p in ps if (t, p) not in reading.owners)
    return LegacyRebalance(ids_dir, consumers, handover(ids, zkcoord_members), unowned,
                           tuple((thread, _assignment(tps)) for thread, tps in sorted(others.items())))
