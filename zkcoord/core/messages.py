"""What goes in and out of the group state machine.

This module owns the request values the runtime hands to the handlers, the
reply payloads the handlers hand back, the timer operations, and
:class:`Outcome`, the one return type of every handler.

Contract with the runtime (``zkcoord.server``):

1. Call a handler with the current :class:`~zkcoord.core.membership.Group`.
2. If ``outcome.persist`` is true, write ``to_record(outcome.group)`` to
   ZooKeeper (a fenced, versioned write). Only once it is accepted:
3. make ``outcome.group`` the current group, apply ``outcome.timers`` in order
   (``Schedule`` replaces any timer with the same key; ``Cancel`` of an absent
   key does nothing), and send each ``Reply`` to the request with that token.
4. If the write is refused, discard the Outcome entirely (the group stays as
   it was, so requests parked earlier stay parked) and answer only the
   request being handled, with NOT_COORDINATOR; if ownership is lost, call
   ``handle_unload`` to answer the parked ones.

Timer keys are plain strings: ``session:<member id>``, ``pending:<member
id>``, ``join`` and ``sync``. When a deadline passes the runtime calls
``handle_timer(group, key, now_ms, config)``; a timer that fires late or after
being superseded is harmless because handlers check the deadline they stored.
An expiry whose work grows with the group may return :class:`Offloaded`
instead: its computation runs off the event loop, and its Outcome is decided
afterwards against the group as it is then.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Union

from zkcoord.core.errors import ErrorCode
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.membership import Group, ProtocolList, freeze_protocols

__all__ = [
    "UNKNOWN_MEMBER_ID",
    "NO_GENERATION",
    "JOIN_KEY",
    "SYNC_KEY",
    "session_key",
    "pending_key",
    "JoinRequest",
    "SyncRequest",
    "HeartbeatRequest",
    "LeaveRequest",
    "JoinMember",
    "JoinResult",
    "SyncResult",
    "HeartbeatResult",
    "LeaveMemberResult",
    "LeaveResult",
    "DeleteResult",
    "Reply",
    "Schedule",
    "Cancel",
    "TimerOp",
    "Outcome",
    "Offloaded",
    "JOIN",
    "SYNC",
    "HEARTBEAT",
    "LEAVE",
    "DELETE",
]

UNKNOWN_MEMBER_ID = ""
"""The member id a client sends before it has one (Kafka's UNKNOWN_MEMBER_ID)."""

NO_GENERATION = -1

JOIN_KEY = "join"
SYNC_KEY = "sync"
_SESSION_PREFIX = "session:"
_PENDING_PREFIX = "pending:"

# Reply kinds: which API the payload answers.
JOIN = "join"
SYNC = "sync"
HEARTBEAT = "heartbeat"
LEAVE = "leave"
DELETE = "delete"


def session_key(member_id: str) -> str:
    """Timer key of a member's session (heartbeat) deadline."""
    return _SESSION_PREFIX + member_id


def pending_key(member_id: str) -> str:
    """Timer key of a member id handed out with MEMBER_ID_REQUIRED."""
    return _PENDING_PREFIX + member_id


def parse_member_key(key: str) -> tuple[str, str] | None:
    """``("session"|"pending", member_id)`` for a member timer key, else None."""
    for prefix in (_SESSION_PREFIX, _PENDING_PREFIX):
        if key.startswith(prefix):
            return prefix[:-1], key[len(prefix):]
    return None


@dataclass(frozen=True)
class JoinRequest:
    """A JoinGroup request.

    ``new_member_id`` is the id the coordinator hands out if this join needs
    one; the runtime generates it (``<client_id>-<uuid4>``, or
    ``<group_instance_id>-<uuid4>`` for static members as Kafka does) so the
    core stays deterministic; ``new_consumer_member_id`` is the one a KIP-848
    consumer group hands a classic member instead (Kafka's
    ``Uuid.randomUuid().toString()``). ``require_known_member_id`` is true for
    JoinGroup v4+; ``support_skipping_assignment`` for v9+.
    """

    token: Hashable
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: ProtocolList
    require_known_member_id: bool
    new_member_id: str
    reason: str | None = None
    support_skipping_assignment: bool = False
    new_consumer_member_id: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "protocols", freeze_protocols(self.protocols))


@dataclass(frozen=True)
class SyncRequest:
    """A SyncGroup request; only the leader sends ``assignments``."""

    token: Hashable
    member_id: str
    generation_id: int
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: Mapping[str, bytes] = FrozenMap()

    def __post_init__(self) -> None:
        frozen = FrozenMap((str(k), bytes(v)) for k, v in self.assignments.items())
        object.__setattr__(self, "assignments", frozen)


@dataclass(frozen=True)
class HeartbeatRequest:
    token: Hashable
    member_id: str
    generation_id: int
    group_instance_id: str | None = None


@dataclass(frozen=True)
class LeaveRequest:
    """A LeaveGroup request: ``members`` is ``((member_id, group_instance_id),
    ...)``; v3+ batches several, and an empty member id with an instance id
    removes that static member administratively."""

    token: Hashable
    members: tuple[tuple[str, str | None], ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", tuple((m, i) for m, i in self.members))


@dataclass(frozen=True)
class JoinMember:
    """One entry of the member list the leader receives."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinResult:
    error: ErrorCode
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str
    member_id: str
    skip_assignment: bool = False
    members: tuple[JoinMember, ...] = ()

    @classmethod
    def failed(cls, member_id: str, error: ErrorCode) -> JoinResult:
        """Kafka's ``JoinGroupResult(memberId, error)``."""
        return cls(error, NO_GENERATION, None, None, "", member_id)


@dataclass(frozen=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class HeartbeatResult:
    error: ErrorCode


@dataclass(frozen=True)
class LeaveMemberResult:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True)
class LeaveResult:
    error: ErrorCode
    members: tuple[LeaveMemberResult, ...] = ()


@dataclass(frozen=True)
class DeleteResult:
    error: ErrorCode


Payload = Union[JoinResult, SyncResult, HeartbeatResult, LeaveResult, DeleteResult]


@dataclass(frozen=True)
class Reply:
    """Answer ``payload`` to the request that carried ``token``."""

    token: Hashable
    kind: str
    payload: Payload


@dataclass(frozen=True)
class Schedule:
    """Arm (or re-arm) timer ``key`` to fire at ``deadline_ms``."""

    key: str
    deadline_ms: int


@dataclass(frozen=True)
class Cancel:
    """Disarm timer ``key`` if armed."""

    key: str


TimerOp = Union[Schedule, Cancel]


@dataclass(frozen=True)
class Outcome:
    """What a handler decided: the next group, whether its persisted part must
    be written first, the replies to send, and the timer changes."""

    group: Group
    persist: bool = False
    replies: tuple[Reply, ...] = ()
    timers: tuple[TimerOp, ...] = ()

    def reply_for(self, token: Hashable) -> Reply | None:
        """The reply addressed to ``token``, if any."""
        return next((r for r in self.replies if r.token == token), None)

    def timer(self, key: str) -> TimerOp | None:
        """The operation on timer ``key``, if any."""
        return next((t for t in self.timers if t.key == key), None)


@dataclass(frozen=True)
class Offloaded:
    """What a timer's expiry returns instead of an Outcome when its work
    grows with the group (a large consumer group's target assignment): the
    runtime runs ``compute()`` in a worker thread, without the group's lock
    (it reads only the immutable values it was made from), so the group's
    own requests and every other group's are answered meanwhile; then, under
    the lock, ``finish(group, result, now_ms)`` decides the Outcome against
    the group as it is by then. ``result`` is what ``compute`` returned, or
    the exception it raised: ``finish`` always runs (unless the group is no
    longer served here)."""

    compute: Callable[[], Any]
    finish: Callable[[Any, Any, int], Outcome]
