"""What goes in and out of the consumer group's handlers.

The request values the server builds from ConsumerGroupHeartbeat (API 68)
and the payloads the handlers reply with; the timer keys of a consumer
group. Replies and timers travel in the same :class:`~zkcoord.core.messages.Outcome`
as the classic group's (:mod:`zkcoord.core.messages` has the contract).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from zkcoord.core.consumer.model import Target
from zkcoord.core.errors import ErrorCode

__all__ = [
    "CONSUMER_HEARTBEAT", "ConsumerHeartbeatRequest", "ConsumerHeartbeatResult",
    "session_key", "rebalance_key", "join_key", "sync_key", "REGEX_KEY", "ASSIGN_KEY", "parse_key",
]

CONSUMER_HEARTBEAT = "consumer-heartbeat"  # the reply kind

_SESSION, _REBALANCE = "consumer-session:", "consumer-rebalance:"
_JOIN, _SYNC = "consumer-join:", "consumer-sync:"  # a classic member's: rejoin and SyncGroup in time
REGEX_KEY = "consumer-regex"  # resolve the group's regular expressions (Kafka does it off the request)
ASSIGN_KEY = "consumer-assign"  # compute a large group's target assignment off the event loop (.target)


def session_key(member_id: str) -> str:
    return _SESSION + member_id


def rebalance_key(member_id: str) -> str:
    return _REBALANCE + member_id


def join_key(member_id: str) -> str:
    return _JOIN + member_id


def sync_key(member_id: str) -> str:
    return _SYNC + member_id


def parse_key(key: str) -> tuple[str, str] | None:
    """``("session" | "rebalance" | "join" | "sync", member id)`` of a member timer key, else None."""
    for prefix, kind in ((_SESSION, "session"), (_REBALANCE, "rebalance"), (_JOIN, "join"), (_SYNC, "sync")):
        if key.startswith(prefix):
            return kind, key[len(prefix):]
    return None


@dataclass(frozen=True)
class ConsumerHeartbeatRequest:
    """A ConsumerGroupHeartbeat. ``None`` fields were not sent ("unchanged
    since the last heartbeat"). ``owned``: the member's TopicPartitions
    ``((topic id, (partitions...)), ...)``. ``new_member_id``: the id the
    coordinator hands out when the request has none (v0; v1 clients make
    their own)."""

    token: Hashable
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    client_id: str = ""
    client_host: str = ""
    new_member_id: str = ""

    @property
    def is_full(self) -> bool:
        """Kafka's "full request": what a member sends after an error or a
        reconnection, every field set; it gets its assignment back."""
        return (self.rebalance_timeout_ms != -1
                and (self.subscribed_topic_names is not None or self.subscribed_topic_regex is not None)
                and self.owned is not None)


@dataclass(frozen=True)
class ConsumerHeartbeatResult:
    """The answer. ``assignment`` None: unchanged, not sent."""

    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Target | None = None

    @classmethod
    def failed(cls, error: ErrorCode, message: str | None = None) -> ConsumerHeartbeatResult:
        return cls(error, message)
