"""ConsumerGroupDescribe (API 69) of a consumer group, as values.

Kafka 4.4's ``ConsumerGroup.asDescribedGroup``: the group's epochs, state
and preferred assignor, and per member its metadata, its current assignment
(assigned and pending revocation together) and its target, each topic named
from the topics image. A topic the image no longer has is left out of both
assignments, as Kafka leaves out topics its metadata image lacks. Pure: the
server turns these values into the wire's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from zkcoord.core.consumer.config import ConsumerGroupConfig
from zkcoord.core.consumer.model import ConsumerGroup, ConsumerMember
from zkcoord.core.consumer.target import preferred_assignor
from zkcoord.core.topics_image import TopicsImage

__all__ = ["DescribedTopic", "DescribedMember", "DescribedConsumerGroup", "describe_consumer_group",
           "CLASSIC_MEMBER", "CONSUMER_MEMBER", "not_found_message", "not_consumer_message"]

CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1  # ConsumerGroupDescribe v1's MemberType


@dataclass(frozen=True)
class DescribedTopic:
    topic_id: str
    name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True)
class DescribedMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str  # "" without one, as Kafka shows it
    assignment: tuple[DescribedTopic, ...]
    target_assignment: tuple[DescribedTopic, ...]
    member_type: int


@dataclass(frozen=True)
class DescribedConsumerGroup:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: tuple[DescribedMember, ...]

    def topic_names(self) -> set[str]:
        """Every topic named in an assignment or a target (the topics a
        describing client must be allowed to describe)."""
        return {t.name for m in self.members for t in (*m.assignment, *m.target_assignment)}


def not_found_message(group_id: str) -> str:
    return f"Group {group_id} not found."


def not_consumer_message(group_id: str) -> str:
    return f"Group {group_id} is not a consumer group."


def _topics(partitions: Iterable[tuple[str, Iterable[int]]], image: TopicsImage) -> tuple[DescribedTopic, ...]:
    merged: dict[str, set[int]] = {}
    for topic_id, parts in partitions:
        merged.setdefault(topic_id, set()).update(parts)
    described = []
    for topic_id, parts in merged.items():
        name = image.name_of(topic_id)
        if name is not None:
            described.append(DescribedTopic(topic_id, name, tuple(sorted(parts))))
    return tuple(described)


def _member(member: ConsumerMember, target: Mapping[str, tuple[int, ...]], image: TopicsImage) -> DescribedMember:
    current = [*((t, p.keys()) for t, p in member.assigned.items()),
               *((t, p.keys()) for t, p in member.pending_revocation.items())]
    return DescribedMember(
        member_id=member.member_id, instance_id=member.instance_id, rack_id=member.rack_id,
        member_epoch=member.member_epoch, client_id=member.client_id, client_host=member.client_host,
        subscribed_topic_names=tuple(member.subscribed_topic_names),
        subscribed_topic_regex=member.subscribed_topic_regex,
        assignment=_topics(current, image), target_assignment=_topics(target.items(), image),
        member_type=CLASSIC_MEMBER if member.uses_classic_protocol else CONSUMER_MEMBER)


def describe_consumer_group(group: ConsumerGroup, image: TopicsImage,
                            config: ConsumerGroupConfig) -> DescribedConsumerGroup:
    """The group as ConsumerGroupDescribe shows it.

    >>> from zkcoord.core.consumer.model import new_consumer_group
    >>> d = describe_consumer_group(new_consumer_group("g"), TopicsImage(), ConsumerGroupConfig())
    >>> d.state, d.group_epoch, d.assignor_name, d.members
    ('Empty', 1, 'uniform', ())
    """
    return DescribedConsumerGroup(
        group_id=group.group_id, state=group.state.value, group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch, assignor_name=preferred_assignor(group, config),
        members=tuple(_member(m, group.target(m.member_id), image) for m in group.members.values()))
