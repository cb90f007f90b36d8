"""The values of a consumer-protocol member's state machine
(:mod:`zkcoord.client.membership`): its states and Kafka's table of allowed
transitions, its settings, the heartbeat requests and answers it deals in,
and the work it hands the application. Pure data, no behaviour beyond
small queries.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = [
    "TopicId", "IdPartitions", "NamedPartitions", "ErrorCode", "MemberState", "ALLOWED_FROM", "NOT_IN_GROUP",
    "HEARTBEAT_NOW", "IllegalTransitionError", "MemberConfig", "LocalAssignment", "NO_ASSIGNMENT",
    "HeartbeatRequest", "HeartbeatResponse", "Send", "Wait", "LookUp", "Reconcile", "Release", "Failure",
    "LEAVE_EPOCH", "STATIC_LEAVE_EPOCH", "JOIN_EPOCH", "ERROR_NAMES",
]

LEAVE_EPOCH, STATIC_LEAVE_EPOCH, JOIN_EPOCH = -1, -2, 0
TopicId = str  # Kafka's text form (zkcoord.topic_ids)
IdPartitions = frozenset[tuple[TopicId, int]]
NamedPartitions = frozenset[tuple[str, int]]


class ErrorCode:
    """The error codes a ConsumerGroupHeartbeat answer may carry (Kafka's numbers)."""

    NONE = 0
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    UNKNOWN_MEMBER_ID = 25
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    GROUP_ID_NOT_FOUND = 69
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    INVALID_REGULAR_EXPRESSION = 128




class MemberState(Enum):
    UNSUBSCRIBED = "UNSUBSCRIBED"
    JOINING = "JOINING"
    RECONCILING = "RECONCILING"
    ACKNOWLEDGING = "ACKNOWLEDGING"
    STABLE = "STABLE"
    FENCED = "FENCED"
    PREPARE_LEAVING = "PREPARE_LEAVING"
    LEAVING = "LEAVING"
    FATAL = "FATAL"
    STALE = "STALE"


S = MemberState
# Kafka's MemberState.getPreviousValidStates: the states each state may be entered from.
ALLOWED_FROM: dict[MemberState, frozenset[MemberState]] = {
    S.STABLE: frozenset({S.JOINING, S.ACKNOWLEDGING, S.RECONCILING}),
    S.RECONCILING: frozenset({S.STABLE, S.JOINING, S.ACKNOWLEDGING, S.RECONCILING}),
    S.ACKNOWLEDGING: frozenset({S.RECONCILING}),
    S.FATAL: frozenset({S.JOINING, S.STABLE, S.RECONCILING, S.ACKNOWLEDGING, S.PREPARE_LEAVING, S.LEAVING,
                        S.UNSUBSCRIBED}),
    S.FENCED: frozenset({S.JOINING, S.STABLE, S.RECONCILING, S.ACKNOWLEDGING, S.PREPARE_LEAVING, S.LEAVING}),
    S.JOINING: frozenset({S.FENCED, S.UNSUBSCRIBED, S.STALE}),
    S.PREPARE_LEAVING: frozenset({S.JOINING, S.STABLE, S.RECONCILING, S.ACKNOWLEDGING, S.UNSUBSCRIBED}),
    S.LEAVING: frozenset({S.PREPARE_LEAVING}),
    S.UNSUBSCRIBED: frozenset({S.PREPARE_LEAVING, S.LEAVING, S.FENCED}),
    S.STALE: frozenset({S.LEAVING}),
}
NOT_IN_GROUP = frozenset({S.UNSUBSCRIBED, S.FENCED, S.FATAL, S.STALE})  # no heartbeats (shouldSkipHeartbeat)
HEARTBEAT_NOW = frozenset({S.JOINING, S.ACKNOWLEDGING, S.LEAVING})  # not waiting for the interval


class IllegalTransitionError(RuntimeError):
    """A transition Kafka's state table does not allow (a bug, never an input error)."""


@dataclass(frozen=True)
class MemberConfig:
    """What the member sends about itself, and its timing.
    ``rebalance_timeout_ms`` is Kafka's ``max.poll.interval.ms`` unless set
    apart; ``server_assignor`` is ``group.remote.assignor`` (None: the
    coordinator's default)."""

    group_id: str
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = 300_000
    server_assignor: str | None = None
    max_poll_interval_ms: int = 300_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000

    @property
    def leave_epoch(self) -> int:
        return STATIC_LEAVE_EPOCH if self.instance_id is not None else LEAVE_EPOCH


@dataclass(frozen=True)
class LocalAssignment:
    """An assignment as the member holds it: partitions by topic id, and a
    local epoch that moves on each time a different target arrives."""

    local_epoch: int
    partitions: IdPartitions = frozenset()

    @property
    def is_none(self) -> bool:
        return self.local_epoch < 0

    def updated_with(self, partitions: IdPartitions) -> LocalAssignment | None:
        """Kafka's ``LocalAssignment.updateWith``: the next target, None if unchanged."""
        if not self.is_none and partitions == self.partitions:
            return None
        return LocalAssignment(self.local_epoch + 1, frozenset(partitions))


NO_ASSIGNMENT = LocalAssignment(-1)


@dataclass(frozen=True)
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat's fields; None is "unchanged since last sent".
    ``ignore_response``: the leave sent after ``max_poll_interval_ms``,
    whose answer is only logged."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: tuple[tuple[TopicId, tuple[int, ...]], ...] | None = None
    ignore_response: bool = False


@dataclass(frozen=True)
class HeartbeatResponse:
    error_code: int
    error_message: str | None
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: IdPartitions | None = None


@dataclass(frozen=True)
class Send:
    """Send this heartbeat now (its fields are recorded as sent)."""

    request: HeartbeatRequest


@dataclass(frozen=True)
class Wait:
    """Nothing to send for ``ms`` (None: until woken by the application)."""

    ms: int | None


@dataclass(frozen=True)
class LookUp:
    """A heartbeat is due but the coordinator is not known: find it."""


@dataclass(frozen=True)
class Reconcile:
    """Work for the application thread: move to ``assigned``.
    Revoke ``revoked`` (after committing), then assign, then call
    ``on_assigned(added)``; report the outcome with
    :meth:`Membership.reconciled` or :meth:`Membership.reconcile_failed`."""

    local_epoch: int
    target: IdPartitions  # the resolvable part of the target, by topic id
    assigned: NamedPartitions
    revoked: NamedPartitions
    added: NamedPartitions


@dataclass(frozen=True)
class Release:
    """Work for the application thread: give up every partition held,
    through ``on_lost`` (``lost``) or ``on_revoked``; then
    :meth:`Membership.released`. ``reason``: fenced, fatal, stale, leaving
    (before the leave heartbeat) or left (out of the group already)."""

    lost: bool
    reason: str


@dataclass(frozen=True)
class Failure:
    """An error for the application (raised by ``poll()``); ``fatal``: the
    member is out of the group for good."""

    error_code: int
    message: str
    fatal: bool


ERROR_NAMES = {value: name for name, value in vars(ErrorCode).items() if name.isupper()}
