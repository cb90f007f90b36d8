"""The group-type seam: which kind of group a group is, and what any kind answers.

This module owns the one place where the kind of a group is decided, and
the contract every kind keeps (:class:`GroupKind`). The runtime
(:mod:`zkcoord.server.group_runtime`) and the server hold "a group" and ask
its kind; they never compare a kind's states themselves. The kinds are the
classic group (:mod:`.classic`) and KIP-848's consumer group
(:mod:`.consumer`).

Rules:

1. A group is an immutable value of one kind. :func:`kind_of` names its kind
   by the value's class; a stored record names its kind under ``"t"``
   (absent: classic, what every record written before a second kind holds),
   and :func:`from_record` reads it with that kind.
2. A request is a core value (``JoinRequest``, ``HeartbeatRequest``, ...).
   :func:`decide` hands it to the kind's handler for its type. A kind that
   has none refuses it (:func:`refused`): every kind has a handler for
   every request a client can send it, so a refusal is a bug.
3. Every group value, whatever its kind, has ``group_id``,
   ``offset_storage`` and ``size`` (its members).
4. Every kind's handlers return an ``Outcome`` (:mod:`.messages`), and the
   runtime applies any Outcome the same way: write the kind's record if
   ``persist``, then apply the group, the timers and the replies. Timer keys
   are the kind's own; the runtime hands them back unread
   (``GroupKind.handle_timer``).

How a group changes kind: a handler of one kind returns an Outcome whose
group is a value of the other kind (Kafka's ``ConsumerGroup.fromClassicGroup``
and ``ClassicGroup.fromConsumerGroup``: the new kind's value built from the
old one's members and assignments), with ``persist`` set, and timers that
cancel the old kind's keys and arm the new kind's. The runtime writes the
new kind's record in place of the old (the record names its kind, rule 1)
and from then on asks the new kind. A group shared with legacy ZooKeeper
consumers is a kind too: its handlers see those consumers as members it
does not assign to.

What a new kind must implement: :class:`GroupKind`, registered in
:data:`_KINDS` (by value class) and :data:`_BY_NAME` (by record name).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, Protocol

from zkcoord.core.classic import CLASSIC, ClassicKind
from zkcoord.core.consumer.kind import CONSUMER
from zkcoord.core.errors import ErrorCode
from zkcoord.core.membership import GroupConfig
from zkcoord.core.messages import Offloaded, Outcome
from zkcoord.core.phases import GroupPhase
from zkcoord.errors import StateError

__all__ = ["GroupKind", "GroupPhase", "kind_of", "kind_named", "new_group", "from_record", "decide", "record_problem",
           "KIND_KEY", "KINDS"]

KIND_KEY = "t"  # the record key naming a group's kind; absent: classic


class GroupKind(Protocol):
    """What the runtime and the server ask of every kind of group."""

    name: str  # Kafka's group type name ("classic", "consumer")
    value_type: type  # the class of this kind's group values
    state_names: tuple[str, ...]  # every state name a group of this kind shows (metrics list each)
    # Whether the coordinator assigns from the daemon's topics image (a changed topic in it calls
    # handle_metadata_change); else from its clients' metadata (a changed partition count calls it).
    assigns_from_image: bool
    handlers: Mapping[type, Any]  # request class -> handler(group, request, now_ms, config) -> Outcome

    def new(self, group_id: str, offset_storage: str = "zookeeper") -> Any: ...
    def from_record(self, group_id: str, record: Mapping[str, Any]) -> Any: ...
    def to_record(self, group: Any) -> dict[str, Any] | None: ...  # None: nothing is stored any more
    def writes(self, before: Any, after: Any) -> list[tuple[str, dict | None, bool]]: ...
    # ^ what an outcome changes in ZooKeeper: (key, record or None to delete, existed), "" the state znode, last
    def delete_writes(self, group: Any) -> list[tuple[str, dict | None, bool]]: ...  # every record of it goes
    def load(self, group: Any, now_ms: int, config: GroupConfig) -> Outcome: ...  # taken over by this daemon

    def handle_timer(self, group: Any, key: str, now_ms: int, config: GroupConfig) -> Outcome | Offloaded: ...
    def handle_unload(self, group: Any) -> Outcome: ...  # this daemon stops serving it: answer what is parked
    def handle_delete(self, group: Any, token: Hashable, exists: bool) -> Outcome: ...
    def handle_metadata_change(self, group: Any, now_ms: int, config: GroupConfig) -> Outcome: ...
    def expire_member_by(self, group: Any, member_id: str, deadline_ms: int) -> Outcome: ...
    def validate_offset_commit(self, group: Any | None, request: Any, config: GroupConfig) -> Any: ...
    # OffsetFetch v9+ naming a member (member id, member epoch; None / -1: none named): its error
    def validate_offset_fetch(self, group: Any, member_id: str | None, member_epoch: int) -> ErrorCode: ...
    # ^ an OffsetCommit (CommitRequest): NONE, an error for all of it, or a check (topic, partition) -> error
    def touch_member(self, group: Any, member_id: str, now_ms: int) -> Outcome: ...  # an accepted commit
    def with_offset_storage(self, group: Any, mode: str) -> Any: ...

    def phase(self, group: Any) -> GroupPhase: ...
    def changed(self, before: Any, after: Any) -> bool: ...  # state or epoch moved (same kind)
    def state_name(self, group: Any) -> str: ...
    def epoch(self, group: Any) -> int: ...  # generation (classic) or group epoch
    def answers_at_once(self, group: Any, request: object) -> bool: ...  # the transport's fast path
    def holds_nothing(self, group: Any) -> bool: ...  # may be removed with its znodes
    def describe(self, group: Any) -> Any: ...
    def listing(self, group: Any) -> tuple[str, str]: ...  # (state name, protocol type)
    def summary(self, group: Any) -> str: ...
    def expiry_note(self, key: str, before: Any, after: Any) -> str | None: ...


KINDS: tuple[GroupKind, ...] = (CLASSIC, CONSUMER)
_KINDS: dict[type, GroupKind] = {kind.value_type: kind for kind in KINDS}
_BY_NAME: dict[str, GroupKind] = {kind.name: kind for kind in KINDS}


def kind_of(group: Any) -> GroupKind:
    """The kind of a group value."""
    kind = _KINDS.get(type(group))
    if kind is None:
        raise StateError(f"{type(group).__name__} is no kind of group; register its kind in zkcoord.core.groups")
    return kind


def kind_named(name: str) -> GroupKind | None:
    return _BY_NAME.get(name)


def new_group(group_id: str, offset_storage: str = "zookeeper") -> Any:
    """A group that has never had members. Kafka creates a group as the kind
    of the first request that names it; a classic group that is Empty takes
    any kind's first member (its kind converts it, rule 4)."""
    return CLASSIC.new(group_id, offset_storage)


def from_record(group_id: str, record: Mapping[str, Any]) -> Any:
    """The group a stored record holds, read by the kind it names (rule 1)."""
    name = record.get(KIND_KEY, ClassicKind.name)
    kind = _BY_NAME.get(name) if isinstance(name, str) else None
    if kind is None:
        raise StateError(f"group {group_id!r}: its record names group type {name!r}, which this zkcoord does not "
                         f"know (known: {', '.join(sorted(_BY_NAME))}); a newer zkcoord wrote it: upgrade this one")
    return kind.from_record(group_id, record)


def record_problem(record: object) -> str | None:
    """What is wrong with a stored group record (of the kind it names), or None."""
    if isinstance(record, Mapping):
        name = record.get(KIND_KEY, ClassicKind.name)
        if name == CONSUMER.name:
            from zkcoord.core.consumer.record import record_problem as consumer_problem

            return consumer_problem(record)
        if name != ClassicKind.name:
            return (f"group type {name!r} is not one this zkcoord knows (known: {', '.join(sorted(_BY_NAME))}); a "
                    "newer zkcoord wrote it?")
    from zkcoord.core.group_record import record_problem as classic_problem

    return classic_problem(record)


def decide(group: Any, request: Any, now_ms: int, config: GroupConfig) -> Outcome:
    """The group's answer to ``request`` (rule 2)."""
    kind = kind_of(group)
    handler = kind.handlers.get(type(request))
    if handler is None:
        return refused(group, request)
    return handler(group, request, now_ms, config)


def refused(group: Any, request: Any) -> Outcome:
    """A request no handler of the group's kind takes: Kafka's answer to a
    request meant for another group type (GROUP_ID_NOT_FOUND). Filled in by
    the first kind whose requests another kind refuses."""
    raise StateError(f"group {getattr(group, 'group_id', '?')!r} of type {kind_of(group).name} has no handler "
                     f"for {type(request).__name__} (a bug: the server routed a request to the wrong kind)")
