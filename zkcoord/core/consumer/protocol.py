"""The classic protocol's embedded consumer protocol, as the core sees it.

A classic member's JoinGroup metadata is a ``ConsumerProtocolSubscription``
and its SyncGroup assignment a ``ConsumerProtocolAssignment`` (Kafka's
``ConsumerProtocol``). Converting a group between the two protocols, and
serving classic members inside a consumer group, needs them decoded and
encoded. The bytes are the wire codec's business (kafka-python's generated
classes), which the core may not import; so the core declares here what it
needs (:class:`ConsumerProtocolCodec`) and the server hands an
implementation in the handlers' config (``GroupConfig.consumer_protocol``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Subscription", "Assignment", "ConsumerProtocolCodec", "MalformedProtocolError"]


class MalformedProtocolError(ValueError):
    """The bytes are not the embedded consumer protocol (the codec raises it)."""


@dataclass(frozen=True)
class Subscription:
    """A decoded ``ConsumerProtocolSubscription``: its version, topics, the
    partitions the member owns (by topic name) and its rack."""

    version: int
    topics: tuple[str, ...]
    owned: tuple[tuple[str, tuple[int, ...]], ...] = ()
    rack_id: str | None = None


@dataclass(frozen=True)
class Assignment:
    """A decoded ``ConsumerProtocolAssignment``: partitions by topic name,
    and the user data a client-side assignor put in (None: none)."""

    partitions: Mapping[str, tuple[int, ...]]
    user_data: bytes | None = None


class ConsumerProtocolCodec(Protocol):
    def subscription(self, metadata: bytes) -> Subscription: ...
    def assignment(self, data: bytes) -> Assignment: ...
    def encode_assignment(self, partitions: Mapping[str, Iterable[int]], version: int) -> bytes: ...
