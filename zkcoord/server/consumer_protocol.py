"""The embedded consumer protocol's codec (the core's
:class:`~zkcoord.core.consumer.protocol.ConsumerProtocolCodec`), on
kafka-python's generated ``ConsumerProtocolSubscription`` and
``ConsumerProtocolAssignment``.

As Kafka's ``ConsumerProtocol``: a version above the newest this library
knows is read as the newest (later versions only add fields at the end);
a negative version, or bytes that do not decode, are malformed.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable, Mapping

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from zkcoord.core.consumer.protocol import Assignment, MalformedProtocolError, Subscription

__all__ = ["KafkaConsumerProtocol", "CONSUMER_PROTOCOL"]

_SUBSCRIPTION_MAX = ConsumerProtocolSubscription._valid_versions[1]
_ASSIGNMENT_MAX = ConsumerProtocolAssignment._valid_versions[1]


def _decode(cls, data: bytes, newest: int):
    buffer = io.BytesIO(bytes(data))
    try:
        version = cls.parse_header(buffer)
        if version < 0:
            raise MalformedProtocolError(f"{cls.__name__} of version {version}")
        return version, cls.decode(buffer, version=min(version, newest), header=False)
    except (struct.error, ValueError, TypeError, IndexError) as exc:
        if isinstance(exc, MalformedProtocolError):
            raise
        raise MalformedProtocolError(f"{cls.__name__} does not decode: {exc}") from None


class KafkaConsumerProtocol:
    def subscription(self, metadata: bytes) -> Subscription:
        version, data = _decode(ConsumerProtocolSubscription, metadata, _SUBSCRIPTION_MAX)
        if data.topics is None or any(t is None for t in data.topics):
            raise MalformedProtocolError("ConsumerProtocolSubscription with a null topic")
        owned = tuple((p.topic, tuple(p.partitions or ())) for p in (data.owned_partitions or ())) \
            if version >= 1 else ()
        rack = data.rack_id if version >= 3 else None
        return Subscription(version, tuple(data.topics), owned, rack)

    def assignment(self, data: bytes) -> Assignment:
        _, decoded = _decode(ConsumerProtocolAssignment, data, _ASSIGNMENT_MAX)
        partitions: dict[str, tuple[int, ...]] = {}
        for tp in decoded.assigned_partitions or ():
            partitions[tp.topic] = partitions.get(tp.topic, ()) + tuple(tp.partitions or ())
        user_data = bytes(decoded.user_data) if decoded.user_data is not None else None
        return Assignment(partitions, user_data)

    def encode_assignment(self, partitions: Mapping[str, Iterable[int]], version: int) -> bytes:
        version = max(0, min(version, _ASSIGNMENT_MAX))
        assignment = ConsumerProtocolAssignment(version=version, user_data=None, assigned_partitions=[
            ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=list(p)) for t, p in partitions.items()])
        return bytes(assignment.encode())


CONSUMER_PROTOCOL = KafkaConsumerProtocol()
