"""The classic-group model: config, members, Group (the states and their
transition table are :mod:`zkcoord.core.group_states`).

This module owns the *values* of the group state machine and the pure queries
on them that Kafka's ``GroupMetadata`` / ``MemberMetadata`` answer (protocol
selection, protocol support, member validation). It changes nothing: handlers
in :mod:`zkcoord.core.group` decide, :mod:`zkcoord.core.rebalance` builds the
next :class:`Group`.

Rules kept here:

* A :class:`Group` is an immutable value. Its fields split in two: the
  *persisted* part (what :mod:`zkcoord.core.group_record` writes to ZooKeeper)
  and the *in-memory* part (parked requests, deadlines, pending ids) that a
  daemon rebuilds after fail-over and never writes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from zkcoord.core.consumer.config import ConsumerGroupConfig
from zkcoord.core.errors import ErrorCode
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.group_states import GroupState
from zkcoord.core.topics_image import EMPTY_IMAGE, TopicsImage
from zkcoord.errors import ConfigError, StateError

__all__ = [
    "GroupConfig",
    "Member",
    "InitialDelay",
    "Group",
    "new_group",
    "NEW_MEMBER_JOIN_TIMEOUT_MS",
    "OFFSET_STORAGES",
    "ProtocolList",
    "Token",
    "select_protocol",
    "supports_protocols",
    "validate_current_member",
]

Token = Hashable
"""Opaque handle of a request the runtime is waiting to answer."""

ProtocolList = tuple[tuple[str, bytes], ...]
"""``((protocol name, metadata), ...)`` in the member's order of preference."""

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
"""Kafka's ``NewMemberJoinTimeoutMs``: a new member's parked JoinGroup is
dropped after this long (its client has most likely given up and retried)."""

OFFSET_STORAGES = ("zookeeper", "dual", "kafka")


@dataclass(frozen=True)
class GroupConfig:
    """What every group handler is given besides the group and the request:
    the broker-side limits of classic groups (Kafka's ``group.*`` settings),
    the consumer groups' settings (``group.consumer.*``), ``image``, the
    topics as the daemon knows them at the moment of the call (the server
    replaces it when topics change; KIP-848's handlers read topic ids and
    partition counts from it), and the embedded consumer protocol's codec."""

    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    max_group_size: int = 2**31 - 1
    consumer: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)
    image: TopicsImage = field(default=EMPTY_IMAGE, compare=False)
    # The embedded consumer protocol's codec (zkcoord.core.consumer.protocol), given by the server: what
    # converting a group between the classic and the consumer protocol decodes and encodes. None: no conversion.
    consumer_protocol: Any = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.min_session_timeout_ms < 0:
            raise ConfigError(
                f"min_session_timeout_ms={self.min_session_timeout_ms} is negative; "
                "use 0 or more (Kafka's default is 6000)"
            )
        if self.max_session_timeout_ms < self.min_session_timeout_ms:
            raise ConfigError(
                f"max_session_timeout_ms={self.max_session_timeout_ms} is below "
                f"min_session_timeout_ms={self.min_session_timeout_ms}; raise the max "
                "or lower the min"
            )
        if self.initial_rebalance_delay_ms < 0:
            raise ConfigError(
                f"initial_rebalance_delay_ms={self.initial_rebalance_delay_ms} is "
                "negative; use 0 to disable the delay"
            )
        if self.max_group_size < 1:
            raise ConfigError(
                f"max_group_size={self.max_group_size} must be at least 1 "
                "(as Kafka's group.max.size)"
            )


def freeze_protocols(protocols: Iterable[tuple[str, bytes]]) -> ProtocolList:
    return tuple((str(name), bytes(meta)) for name, meta in protocols)


@dataclass(frozen=True)
class Member:
    """One group member as Kafka's ``MemberMetadata`` holds it (persisted)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: ProtocolList
    assignment: bytes = b""

    def __post_init__(self) -> None:
        object.__setattr__(self, "protocols", freeze_protocols(self.protocols))
        object.__setattr__(self, "assignment", bytes(self.assignment))

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def protocol_names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.protocols)

    def metadata(self, protocol: str) -> bytes:
        """The metadata this member sent for ``protocol``."""
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise StateError(
            f"member {self.member_id!r} does not support protocol {protocol!r}; "
            "the group selected a protocol not all members support (bug)"
        )

    def matches(self, protocols: ProtocolList) -> bool:
        """Same protocols, in the same order, with the same metadata."""
        return self.protocols == freeze_protocols(protocols)

    def vote(self, candidates: frozenset[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise StateError(f"member {self.member_id!r} supports none of {sorted(candidates)}")


@dataclass(frozen=True)
class InitialDelay:
    """State of Kafka's ``InitialDelayedJoin``: the delay now running and the
    time left (of the rebalance timeout) for further extensions."""

    delay_ms: int
    remaining_ms: int


_NO_MAP: FrozenMap = FrozenMap()


_COUNTS = "counts_cache"  # Group.protocol_counts' cache

@dataclass(frozen=True)
class Group:
    """An immutable snapshot of one classic group.

    Persisted part: ``state``, ``protocol_type``, ``protocol_name``,
    ``generation_id``, ``leader_id``, ``members``, ``offset_storage``,
    ``generation_reserved`` (``static_members`` is derived from ``members``).

    ``generation_reserved`` is the last generation number this group's
    owners may hand out without writing first: a JoinGroup answer never
    carries a generation past the stored value, so a new owner that loads
    the record starts after it and never hands a number out twice (numbers
    wrap from 2^31 - 1 to 1, int32 as on the wire; see
    :func:`~zkcoord.core.rebalance.following_generation`), while a
    rebalance whose number is already reserved writes only its end (the
    leader's assignment), as Kafka does.

    In-memory part (rebuilt after fail-over, never written):

    * ``awaiting_join`` / ``awaiting_sync``: member id -> token of the parked
      JoinGroup / SyncGroup request that has not been answered yet;
    * ``pending_members``: member ids handed out with MEMBER_ID_REQUIRED ->
      the deadline by which they must rejoin;
    * ``pending_sync``: members of the new generation that have not sent
      SyncGroup yet;
    * ``new_members``: members added in this rebalance (they expire after
      ``NEW_MEMBER_JOIN_TIMEOUT_MS`` even while their join is parked);
    * ``session_deadlines``: member id -> deadline of its ``session:`` timer;
    * ``new_member_added``, ``join_deadline_ms``, ``initial_delay``: the join
      phase timer (Kafka's ``DelayedJoin`` / ``InitialDelayedJoin``);
    * ``sync_deadline_ms`` / ``sync_generation``: the pending-sync timer;
    * ``generation_floor``: set when a group is taken over, to the loaded
      ``generation_reserved``: generations up to it may have been handed out
      by the previous owner, so the next one is above it.
    * ``handover_shares``: None, or, while the group shares its partitions
      with legacy ZooKeeper consumers (issue 26, :mod:`zkcoord.core.handover`),
      member id -> the partitions the owner daemon holds for it: the
      assignment every SyncGroup hands out instead of the leader's.

    ``handover_hold`` (in memory): the owner daemon is about to hold more
    partitions for the members: the join phase does not end early (its
    timer still ends it), so that the SyncGroup hands the new shares out in
    this rebalance rather than in another one.

    ``handover_ids`` (persisted, ``"ho"``): None, or, while the group is in a
    handover, member id -> the legacy consumer id the owner daemon registered
    for it (a member that left stays until its registration and owner znodes
    are deleted): what the owner's znodes are recognised by, so that the next
    owner carries on where a killed one stopped.
    """

    group_id: str
    state: GroupState = GroupState.EMPTY
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: FrozenMap[str, Member] = _NO_MAP
    static_members: FrozenMap[str, str] = _NO_MAP
    offset_storage: str = "zookeeper"
    generation_reserved: int = 0
    awaiting_join: FrozenMap[str, Token] = _NO_MAP
    awaiting_sync: FrozenMap[str, Token] = _NO_MAP
    pending_members: FrozenMap[str, int] = _NO_MAP
    pending_sync: frozenset[str] = frozenset()
    new_members: frozenset[str] = frozenset()
    session_deadlines: FrozenMap[str, int] = _NO_MAP
    new_member_added: bool = False
    join_deadline_ms: int | None = None
    initial_delay: InitialDelay | None = None
    sync_deadline_ms: int | None = None
    sync_generation: int | None = None
    generation_floor: int = 0
    handover_shares: FrozenMap[str, frozenset[tuple[str, int]]] | None = None
    handover_ids: FrozenMap[str, str] | None = None
    handover_hold: bool = False
    # protocol_counts()'s cache: not compared, not persisted, never trusted from a constructor's caller
    counts_cache: Counter[str] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "counts_cache", None)
        for name in ("members", "static_members", "awaiting_join", "awaiting_sync",
                     "pending_members", "session_deadlines"):
            value = getattr(self, name)
            if not isinstance(value, FrozenMap):
                object.__setattr__(self, name, FrozenMap(value))
        for name in ("pending_sync", "new_members"):
            object.__setattr__(self, name, frozenset(getattr(self, name)))
        for name in ("handover_shares", "handover_ids"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, FrozenMap):
                object.__setattr__(self, name, FrozenMap(value))
        self._check_invariants()

    def _check_invariants(self) -> None:
        if self.offset_storage not in OFFSET_STORAGES:
            raise StateError(
                f"group {self.group_id!r}: offset_storage={self.offset_storage!r} is "
                f"not one of {', '.join(OFFSET_STORAGES)}"
            )
        # One pass over the members and C-speed set operations: a group is rebuilt at every join of a
        # rebalance, and for a group of thousands these checks were most of a JoinGroup's cost.
        pairs = [(m.group_instance_id, m.member_id) for m in self.members.values() if m.group_instance_id is not None]
        statics = dict(pairs)
        if len(statics) != len(pairs):
            raise StateError(f"group {self.group_id!r}: two members share an instance id")
        if statics != self.static_members:
            raise StateError(
                f"group {self.group_id!r}: static_members {dict(self.static_members)} "
                f"disagree with the members' instance ids {statics}"
            )
        if self.leader_id is not None and self.leader_id not in self.members:
            raise StateError(f"group {self.group_id!r}: leader {self.leader_id!r} is not a member")
        names = self.members.keys()
        for name in ("awaiting_join", "awaiting_sync", "session_deadlines"):
            stray = getattr(self, name).keys() - names
            if stray:
                raise StateError(f"group {self.group_id!r}: {name} names non-members {sorted(stray)}")

    def with_session_deadline(self, member_id: str, deadline_ms: int) -> Group:
        """This group with ``member_id``'s session deadline set: the heartbeat
        path. Only ``session_deadlines`` changes and ``member_id`` is checked
        to be a member, which keeps every invariant, so the O(members) checks
        of a full construction are skipped. Returns ``self`` if the deadline
        is already that."""
        if self.session_deadlines.get(member_id) == deadline_ms:
            return self
        if member_id not in self.members:
            raise StateError(f"group {self.group_id!r}: session deadline for non-member {member_id!r}")
        return self._replace_unchecked(session_deadlines=self.session_deadlines.set(member_id, deadline_ms))

    def with_synced_member(self, member_id: str, deadline_ms: int) -> Group:
        """This group after a SyncGroup of ``member_id`` in Stable: it no
        longer owes one (the sync expiration ends with the last who owed one)
        and its session deadline is ``deadline_ms``. Like
        :meth:`with_session_deadline`, it changes nothing the O(members)
        invariant checks look at, so they are skipped."""
        group = self.with_session_deadline(member_id, deadline_ms)
        changes = self._synced_changes(member_id)
        return group._replace_unchecked(**changes) if changes else group

    def with_rejoined_member(self, member: Member, token: Token) -> Group:
        """This group after a current member's JoinGroup while preparing a
        rebalance: ``member`` (same id and instance id as before) replaces
        its old entry in place, and ``token`` is its parked request, last in
        ``awaiting_join`` (as ``update_member`` leaves it). Skips the
        O(members) checks, as above."""
        old = self.members.get(member.member_id)
        if old is None or old.group_instance_id != member.group_instance_id:
            raise StateError(f"group {self.group_id!r}: rejoin of {member.member_id!r} that is not this member")
        awaiting = self.awaiting_join.thaw()
        awaiting.pop(member.member_id, None)
        awaiting[member.member_id] = token
        counts = self.counts_cache
        if counts is not None:
            counts = counts.copy()
            counts.subtract(name for name, _ in old.protocols)
            counts.update(name for name, _ in member.protocols)
        return self._replace_unchecked(members=self.members.set(member.member_id, member),
                                       awaiting_join=FrozenMap(awaiting))._with_counts(counts)

    def with_parked_sync(self, member_id: str, token: Token) -> Group:
        """This group after a follower's SyncGroup in CompletingRebalance:
        the request ``token`` is parked for ``member_id`` (a member) and it no
        longer owes a SyncGroup. Skips the O(members) checks, as above."""
        if member_id not in self.members:
            raise StateError(f"group {self.group_id!r}: SyncGroup parked for non-member {member_id!r}")
        changes = self._synced_changes(member_id)
        changes["awaiting_sync"] = self.awaiting_sync.set(member_id, token)
        return self._replace_unchecked(**changes)

    def _synced_changes(self, member_id: str) -> dict[str, object]:
        """Kafka's ``removePendingSyncMember`` as field changes."""
        pending = self.pending_sync
        changes: dict[str, object] = {}
        if member_id in pending:
            pending = changes["pending_sync"] = pending - {member_id}
        if not pending and (self.sync_deadline_ms is not None or self.sync_generation is not None):
            changes["sync_deadline_ms"] = changes["sync_generation"] = None
        return changes

    def _replace_unchecked(self, **changes: object) -> Group:
        """``dataclasses.replace`` without ``__post_init__``: neither the
        values are frozen nor the invariants checked. Private: only for callers
        that pass already-frozen values and keep the invariants themselves."""
        new = object.__new__(Group)
        fields = new.__dict__  # a frozen dataclass forbids setattr, not this
        fields.update(self.__dict__)
        fields.update(changes)
        if "members" in changes:
            fields[_COUNTS] = None  # counted again when asked, unless the caller sets them
        return new

    def protocol_counts(self) -> Counter[str]:
        """How many members list each protocol (Kafka's ``supportedProtocols``),
        counted once per group value and carried to the next by the handlers
        that change members (:class:`~zkcoord.core.rebalance.Draft`,
        :meth:`with_rejoined_member`), so a JoinGroup does not count a large
        group's members again. Not compared, not persisted."""
        counts = self.counts_cache
        if counts is None:
            counts = self.__dict__[_COUNTS] = _protocol_counts(self.members)
        return counts

    def _with_counts(self, counts: Counter[str] | None) -> Group:
        if counts is not None:
            self.__dict__[_COUNTS] = +counts  # a copy without the protocols nobody lists any more
        return self

    @property
    def size(self) -> int:
        return len(self.members)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    @property
    def rebalance_timeout_ms(self) -> int:
        """The largest rebalance timeout among members (0 when empty)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    @property
    def has_all_members_joined(self) -> bool:
        return len(self.members) == len(self.awaiting_join) and not self.pending_members


def new_group(group_id: str, offset_storage: str = "zookeeper") -> Group:
    """A group that has never had members: Empty, generation 0."""
    return Group(group_id=group_id, offset_storage=offset_storage)


class MembershipView(Protocol):
    """What the queries below read; both Group and the rebalance Draft have it."""

    state: GroupState
    protocol_type: str | None
    members: Mapping[str, Member]
    static_members: Mapping[str, str]

    def protocol_counts(self) -> Counter[str]: ...


def _protocol_counts(members: Mapping[str, Member]) -> Counter[str]:
    # Counted per listed entry, as Kafka's incSupportedProtocols does.
    return Counter(name for m in members.values() for name, _ in m.protocols)


def _candidate_protocols(members: Mapping[str, Member]) -> frozenset[str]:
    counts = _protocol_counts(members)
    return frozenset(name for name, n in counts.items() if n == len(members))


def select_protocol(members: Mapping[str, Member]) -> str:
    """Kafka's ``selectProtocol``: among protocols every member supports, each
    member votes for its most preferred; the most votes wins. Ties go to the
    protocol whose first vote came earliest in member order (Kafka breaks ties
    by hash-map order, i.e. arbitrarily).

    >>> a = Member("a", None, "c", "h", 1, 1, "consumer", (("rr", b""), ("range", b"")))
    >>> b = Member("b", None, "c", "h", 1, 1, "consumer", (("range", b""), ("rr", b"")))
    >>> c = Member("c", None, "c", "h", 1, 1, "consumer", (("range", b""),))
    >>> select_protocol({"a": a, "b": b, "c": c})
    'range'
    """
    if not members:
        raise StateError("cannot select a protocol for a group without members")
    candidates = _candidate_protocols(members)
    votes = Counter(m.vote(candidates) for m in members.values())
    best = max(votes.values())
    return next(name for name, n in votes.items() if n == best)


def supports_protocols(view: MembershipView, protocol_type: str, names: frozenset[str]) -> bool:
    """Kafka's ``supportsProtocols``: may a member with this protocol type and
    these protocol names join? An Empty group takes any non-empty proposal;
    otherwise the type must match and one protocol must be supported by all
    current members."""
    if view.state is GroupState.EMPTY:
        return bool(protocol_type) and bool(names)
    if view.protocol_type != protocol_type:
        return False
    counts = view.protocol_counts()
    return any(counts.get(name, 0) == len(view.members) for name in names)


def validate_current_member(
    view: MembershipView, member_id: str, group_instance_id: str | None
) -> ErrorCode | None:
    """Kafka's ``validateCurrentMember``: a given instance id must map to
    ``member_id`` (else FENCED_INSTANCE_ID, or UNKNOWN_MEMBER_ID if unmapped),
    and ``member_id`` must be a member (else UNKNOWN_MEMBER_ID)."""
    if group_instance_id is not None:
        current = view.static_members.get(group_instance_id)
        if current is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if current != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
    if member_id not in view.members:
        return ErrorCode.UNKNOWN_MEMBER_ID
    return None
