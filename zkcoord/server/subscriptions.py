"""Which topics a consumer group subscribes to, read from its members' metadata.

Owns the decoding of the consumer protocol's subscription (the member
metadata a Kafka consumer sends in JoinGroup under protocol type
``"consumer"``) into topic names, with kafka-python's generated
``ConsumerProtocolSubscription``; no field is parsed by hand. The runtime
uses the result to know which topics to watch: a partition-count change of
one of them calls :func:`zkcoord.core.group.handle_metadata_change`.

Rules, as Kafka's ``GroupMetadata.computeSubscribedTopics``:

* Only a group of protocol type ``"consumer"`` has a subscription; any other
  protocol type (``"connect"``, ...) subscribes to nothing we could watch.
* Metadata is read as its int16 version followed by the **version 0**
  fields (topics, user data). Version 0 is a prefix of every later version
  (owned partitions v1, generation v2, rack v3), so versions this library
  does not know yet decode too, and trailing fields are ignored.
* A negative version, a null or truncated topic array, a null or non-UTF-8
  topic name: the metadata is malformed (:class:`~zkcoord.errors.StateError`
  from :func:`decode_topics`).

Where this differs from Kafka, for the purpose of watching topics:

* Each member's metadata for the group's selected protocol is read; a member
  that does not list that protocol (it rejoined with other protocols while
  a rebalance runs), or any member of a group that has not selected one yet,
  is read through its most preferred protocol: every consumer assignor's
  metadata carries the same topic list.
* A member whose metadata is malformed is skipped with a warning, instead
  of making the whole group's subscription unknown; the other members'
  topics are still watched.
"""

from __future__ import annotations

import io
import logging
import struct

from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from zkcoord.core.consumer.model import ConsumerGroup
from zkcoord.core.consumer.target import group_topic_names
from zkcoord.core.group import Group, Member
from zkcoord.errors import StateError

__all__ = ["CONSUMER_PROTOCOL_TYPE", "decode_topics", "subscribed_topics"]

log = logging.getLogger(__name__)

CONSUMER_PROTOCOL_TYPE = "consumer"
_PREFIX_VERSION = 0  # the fields every version starts with


def decode_topics(metadata: bytes) -> frozenset[str]:
    """The topics of one consumer-protocol subscription.

    >>> meta = ConsumerProtocolSubscription(version=1, topics=["a", "b"], user_data=None,
    ...                                     owned_partitions=[]).encode()
    >>> sorted(decode_topics(bytes(meta)))
    ['a', 'b']
    """
    buffer = io.BytesIO(bytes(metadata))
    try:
        version = ConsumerProtocolSubscription.parse_header(buffer)
        data = ConsumerProtocolSubscription.decode(buffer, version=_PREFIX_VERSION, header=False)
    except (struct.error, ValueError) as exc:  # truncated, bad lengths, bad UTF-8
        raise StateError(f"consumer-protocol subscription does not decode ({exc}); "
                         "the member sent metadata that is not a ConsumerProtocolSubscription") from exc
    if version < 0:
        raise StateError(f"consumer-protocol subscription has version {version}; versions start at 0")
    if data.topics is None or any(topic is None for topic in data.topics):
        raise StateError("consumer-protocol subscription has a null topic list or topic name")
    return frozenset(data.topics)


def _subscription_metadata(member: Member, protocol_name: str | None) -> bytes | None:
    for name, metadata in member.protocols:
        if name == protocol_name:
            return metadata
    return member.protocols[0][1] if member.protocols else None


def subscribed_topics(group) -> frozenset[str]:
    """Every topic some member of ``group`` subscribes to; empty for a group
    without members or whose protocol type is not ``"consumer"``. A KIP-848
    consumer group knows its members' subscriptions already (its classic
    members' were decoded when they joined)."""
    if isinstance(group, ConsumerGroup):
        return group_topic_names(group)
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return frozenset()
    topics: set[str] = set()
    decoded: dict[bytes, frozenset[str] | StateError] = {}  # members mostly send the same subscription
    for member in group.members.values():
        metadata = _subscription_metadata(member, group.protocol_name)
        if metadata is None:
            continue
        found = decoded.get(metadata)
        if found is None:
            try:
                found = decode_topics(metadata)
            except StateError as exc:
                found = exc
            decoded[metadata] = found
        if isinstance(found, StateError):
            log.warning("group %s: topics of member %s not watched: %s",
                        group.group_id, member.member_id, found)
        else:
            topics |= found
    return frozenset(topics)
