"""What ``describe`` shows of a KIP-848 consumer group. No I/O.

This module owns the rules that turn a consumer group, from either source,
into members and notes; :mod:`zkcoord.inspect.views` builds the group's
view around them as it does for a classic group.

* **One shape for both sources**: the owner's ConsumerGroupDescribe answer
  (live, :mod:`zkcoord.inspect.live`) and the records stored in ZooKeeper
  (the group record and one record per member, read back as the daemon
  loads them: :func:`zkcoord.core.consumer.record.from_records`, then
  :func:`zkcoord.core.consumer.describe.describe_consumer_group`, the very
  function the owner answers with) are both a
  :class:`~zkcoord.core.consumer.describe.DescribedConsumerGroup`.
* **Topic names**: the owner's answer names every topic. Stored records
  name topics by id; the ids are named from Kafka's registrations in
  ZooKeeper (``/brokers/topics/<topic>`` of the topics the members
  subscribe to) and, with ``--bootstrap-servers``, from Kafka's metadata.
  An id neither names is left out of the assignments, as Kafka's describe
  leaves out a topic its metadata no longer has, and a note names it.
* **Assignor** of a stored group: the one most members name
  (``server_assignor``); when none names one it is the daemons' default,
  which ZooKeeper does not hold: unknown (``-``).
* **Member type**: ``consumer`` (the member speaks ConsumerGroupHeartbeat)
  or ``classic`` (JoinGroup/SyncGroup/Heartbeat inside a consumer group:
  an online upgrade or downgrade in progress; Kafka 4.x's tool shows it as
  ``UPGRADED false``).
* **Reconciled**: a member is at its target when its epoch is the target
  assignment's epoch and it owns exactly its target; the group's state
  (Assigning, Reconciling) says the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from zkcoord.core.consumer.config import ConsumerGroupConfig
from zkcoord.core.consumer.describe import (
    CLASSIC_MEMBER, DescribedConsumerGroup, DescribedMember, DescribedTopic, describe_consumer_group,
)
from zkcoord.core.consumer.record import MEMBERS_KEY, TARGET_KEY, from_records, target_topic_ids
from zkcoord.core.topics_image import TopicInfo, TopicsImage
from zkcoord.inspect.model import Assignment, MemberView

__all__ = ["stored_description", "unnamed_topic_ids", "members", "unreconciled", "notes", "assignment_of",
           "CLASSIC", "CONSUMER"]

CLASSIC, CONSUMER = "classic", "consumer"  # member types, as Kafka names the protocols
_SHOWN_IDS = 10  # member ids named in a note at most


def stored_description(group_id: str, record: Mapping, topic_ids: Mapping[str, str]) -> DescribedConsumerGroup:
    """The group its stored records hold (``record`` with its member records
    under ``members``), described as its owner would; ``topic_ids``: name ->
    topic id of the topics known. StateError if the records are not valid.

    >>> rec = {"v": 1, "t": "consumer", "ge": 3, "ae": 3, "members": [
    ...     {"v": 1, "id": "m1", "e": 3, "pe": 2, "s": 0, "rt": 30000, "c": "c1", "h": "/10.0.0.1",
    ...      "tn": ["orders"], "a": {"T1": [[0, 3], [1, 3]]}, "tg": {"T1": [0, 1]}, "te": 3}]}
    >>> d = stored_description("g", rec, {"orders": "T1"})
    >>> d.state, d.group_epoch, d.assignor_name, [t.name for t in d.members[0].assignment]
    ('Stable', 3, '', ['orders'])
    """
    group, _ = from_records(group_id, record)
    image = TopicsImage.of(TopicInfo(name, topic_id, 0) for name, topic_id in topic_ids.items())
    described = describe_consumer_group(group, image, ConsumerGroupConfig())
    if not group.assignor_counts:  # no member names one: the daemons' default, which ZooKeeper does not hold
        described = DescribedConsumerGroup(described.group_id, described.state, described.group_epoch,
                                           described.assignment_epoch, "", described.members)
    return described


def unnamed_topic_ids(record: Mapping, topic_ids: Mapping[str, str]) -> list[str]:
    """The topic ids the stored member records assign (owned, to revoke, or
    targeted) that ``topic_ids`` does not name, sorted."""
    named = set(topic_ids.values())
    held = {topic_id for member in record.get(MEMBERS_KEY, ()) for key in ("a", "pr", "tg")
            for topic_id in member.get(key, {})}
    if TARGET_KEY in record:
        held |= target_topic_ids(record[TARGET_KEY])
    return sorted(held - named)


def assignment_of(topics: Iterable[DescribedTopic]) -> Assignment:
    """Topics and partitions as inspection shows them: by name, sorted."""
    merged: dict[str, set[int]] = {}
    for topic in topics:
        merged.setdefault(topic.name, set()).update(topic.partitions)
    return tuple((name, tuple(sorted(ps))) for name, ps in sorted(merged.items()))


def _member(m: DescribedMember) -> MemberView:
    return MemberView(m.member_id, m.instance_id, m.client_id, m.client_host, assignment_of(m.assignment),
                      member_type=CLASSIC if m.member_type == CLASSIC_MEMBER else CONSUMER,
                      member_epoch=m.member_epoch, target_assignment=assignment_of(m.target_assignment),
                      rack_id=m.rack_id, subscribed_topic_names=tuple(m.subscribed_topic_names),
                      subscribed_topic_regex=m.subscribed_topic_regex or None)


def members(described: DescribedConsumerGroup) -> tuple[MemberView, ...]:
    """The members as inspection shows them, in the order the owner lists them."""
    return tuple(_member(m) for m in described.members)


def unreconciled(described: DescribedConsumerGroup) -> list[str]:
    """Ids of the members not at the target assignment yet (module docstring)."""
    return [m.member_id for m in described.members
            if m.member_epoch != described.assignment_epoch
            or assignment_of(m.assignment) != assignment_of(m.target_assignment)]


def _named(ids: list[str]) -> str:
    more = f" and {len(ids) - _SHOWN_IDS} more" if len(ids) > _SHOWN_IDS else ""
    return ", ".join(ids[:_SHOWN_IDS]) + more


def notes(described: DescribedConsumerGroup) -> list[str]:
    """What the state alone does not say: a target being computed, members
    still moving to theirs, classic members in the group."""
    found = []
    if described.group_epoch > described.assignment_epoch:
        found.append(f"group epoch {described.group_epoch} is ahead of the target assignment's "
                     f"({described.assignment_epoch}): the coordinator computes a new target assignment")
    behind = unreconciled(described)
    if behind:
        found.append(f"{len(behind)} member(s) not at the target assignment of epoch {described.assignment_epoch} "
                     f"yet: {_named(behind)}")
    classic = [m.member_id for m in described.members if m.member_type == CLASSIC_MEMBER]
    if classic and len(classic) < len(described.members):
        found.append(f"mixed group: {len(classic)} of {len(described.members)} member(s) use the classic protocol "
                     f"(JoinGroup/SyncGroup), the others the consumer protocol: {_named(classic)}")
    elif classic:
        found.append(f"every member ({len(classic)}) uses the classic protocol inside this consumer group")
    return found
