"""Topic ids between the wire (and Kafka's clients) and the core.

The wire carries a topic id as 16 bytes (kafka-python decodes them to a
:class:`uuid.UUID`); the core keeps Kafka's text form (``Uuid.toString``:
URL-safe base64 without padding, as ZooKeeper's topic registrations hold
it). Converted here, wherever an adapter meets the core.
"""

from __future__ import annotations

import base64
from uuid import UUID

__all__ = ["topic_id_text", "topic_id_uuid"]


def topic_id_text(value: UUID) -> str:
    """>>> topic_id_text(UUID(int=1))
    'AAAAAAAAAAAAAAAAAAAAAQ'
    """
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def topic_id_uuid(text: str) -> UUID:
    """The wire form of a topic id in Kafka's text form; ValueError if it is not one.

    >>> topic_id_uuid("AAAAAAAAAAAAAAAAAAAAAQ") == UUID(int=1)
    True
    """
    raw = base64.urlsafe_b64decode(text + "==")
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a topic id (22 characters of base64)")
    return UUID(bytes=raw)
