"""The rebalance machinery shared by all handlers: Draft and its operations.

A handler starts a :class:`Draft` (a private, mutable working copy of one
immutable :class:`~zkcoord.core.membership.Group`), applies the operations
below in the order Kafka's ``GroupCoordinator`` does, and ends with
:meth:`Draft.outcome`, which freezes the next Group and collects the replies,
timer operations and the persist flag. Nothing outside a handler call ever
sees a Draft, so the core stays pure.

This module owns the coordinator's internal steps: adding, removing and
replacing members, preparing a rebalance (with the initial delay), completing
the join phase into a new generation, propagating the leader's assignment,
and session / pending-sync bookkeeping. Each function names the Kafka method
it mirrors.

Persist rule: a rebalance writes its end (the leader's assignment, set by
``group.py``'s SyncGroup handler) and, only when the group runs out of
reserved generation numbers, a reservation of the next
:data:`GENERATION_BLOCK` numbers when it starts (:func:`prepare_rebalance`;
:func:`complete_join` as a backstop). :func:`complete_join` also writes a
group that it leaves Empty, as Kafka does. So a rebalance costs at most two
writes, and usually one, and the write at the start is off the critical path
(the old members are still to notice the rebalance at their next heartbeat).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field

from zkcoord.core.errors import ErrorCode
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.group_states import GroupState, can_rebalance, check_transition
from zkcoord.core.membership import (
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    Group,
    GroupConfig,
    InitialDelay,
    Member,
    ProtocolList,
    select_protocol,
)
from zkcoord.core.messages import (
    JOIN,
    JOIN_KEY,
    SYNC,
    SYNC_KEY,
    Cancel,
    JoinMember,
    JoinResult,
    Outcome,
    Reply,
    Schedule,
    SyncResult,
    TimerOp,
    pending_key,
    session_key,
)

S = GroupState

#: Generation numbers reserved by one write (see :func:`reserve_generation`).
#: After a fail-over the numbers jump by up to this much; Kafka clients only
#: compare generations for equality.
GENERATION_BLOCK = 100
#: Kafka's generation id is an int32 (``GroupMetadata.generationId``, written
#: as INT32 in JoinGroup, SyncGroup, Heartbeat, OffsetCommit ...).
MAX_GENERATION = 2**31 - 1
#: Where generations start again after :data:`MAX_GENERATION` (see
#: :func:`next_generation`). Not 0: generation 0 is a new group's, which the
#: initial rebalance delay treats specially.
WRAP_GENERATION = 1


@dataclass
class Draft:
    """Mutable working copy of a Group inside one handler call."""

    base: Group
    now_ms: int
    config: GroupConfig
    state: GroupState
    protocol_type: str | None
    protocol_name: str | None
    generation_id: int
    leader_id: str | None
    members: dict[str, Member]
    static_members: dict[str, str]
    awaiting_join: dict[str, Hashable]
    awaiting_sync: dict[str, Hashable]
    pending_members: dict[str, int]
    pending_sync: set[str]
    new_members: set[str]
    session_deadlines: dict[str, int]
    new_member_added: bool
    join_deadline_ms: int | None
    initial_delay: InitialDelay | None
    sync_deadline_ms: int | None
    sync_generation: int | None
    generation_reserved: int
    generation_floor: int
    handover_shares: FrozenMap[str, frozenset[tuple[str, int]]] | None
    handover_ids: FrozenMap[str, str] | None
    handover_hold: bool
    replies: list[Reply] = field(default_factory=list)
    timers: dict[str, TimerOp] = field(default_factory=dict)
    persist: bool = False
    counts: Counter[str] | None = None  # protocol_counts() as members change; None: not asked yet

    def protocol_counts(self) -> Counter[str]:
        """How many members list each protocol, kept up to date by the
        membership changes below (:meth:`Group.protocol_counts`)."""
        if self.counts is None:
            self.counts = Counter(name for m in self.members.values() for name, _ in m.protocols)
        return self.counts

    def _count(self, member: Member, sign: int) -> None:
        if self.counts is not None:
            for name, _ in member.protocols:
                self.counts[name] += sign

    @classmethod
    def of(cls, group: Group, now_ms: int, config: GroupConfig | None = None) -> Draft:
        """Start a draft; ``config`` only matters to handlers that rebalance."""
        return cls(
            config=config if config is not None else GroupConfig(),
            base=group, now_ms=now_ms, state=group.state,
            protocol_type=group.protocol_type, protocol_name=group.protocol_name,
            generation_id=group.generation_id, leader_id=group.leader_id,
            members=group.members.thaw(), static_members=group.static_members.thaw(),
            awaiting_join=group.awaiting_join.thaw(), awaiting_sync=group.awaiting_sync.thaw(),
            pending_members=group.pending_members.thaw(), pending_sync=set(group.pending_sync),
            new_members=set(group.new_members), session_deadlines=group.session_deadlines.thaw(),
            new_member_added=group.new_member_added, join_deadline_ms=group.join_deadline_ms,
            initial_delay=group.initial_delay, sync_deadline_ms=group.sync_deadline_ms,
            sync_generation=group.sync_generation, generation_reserved=group.generation_reserved,
            generation_floor=group.generation_floor, handover_shares=group.handover_shares,
            handover_ids=group.handover_ids, handover_hold=group.handover_hold,
            counts=Counter(group.counts_cache) if group.counts_cache is not None else None,
        )

    def freeze(self) -> Group:
        return self._freeze()._with_counts(self.counts)

    def _freeze(self) -> Group:
        return Group(
            group_id=self.base.group_id, state=self.state, protocol_type=self.protocol_type,
            protocol_name=self.protocol_name, generation_id=self.generation_id,
            leader_id=self.leader_id, members=self.members, static_members=self.static_members,
            offset_storage=self.base.offset_storage, awaiting_join=self.awaiting_join,
            awaiting_sync=self.awaiting_sync, pending_members=self.pending_members,
            pending_sync=self.pending_sync, new_members=self.new_members,
            session_deadlines=self.session_deadlines, new_member_added=self.new_member_added,
            join_deadline_ms=self.join_deadline_ms, initial_delay=self.initial_delay,
            sync_deadline_ms=self.sync_deadline_ms, sync_generation=self.sync_generation,
            generation_reserved=self.generation_reserved, generation_floor=self.generation_floor,
            handover_shares=self.handover_shares, handover_ids=self.handover_ids,
            handover_hold=self.handover_hold,
        )

    def outcome(self) -> Outcome:
        """The Outcome; its group is ``base`` itself when nothing changed (a
        draft that changed nothing is not rebuilt nor checked again)."""
        if self._unchanged():
            group = self.base
        else:
            group = self.freeze()
            if group == self.base:
                group = self.base
        return Outcome(group, self.persist, tuple(self.replies), tuple(self.timers.values()))

    def _unchanged(self) -> bool:
        """Does the draft equal its base, field by field (as ``Group.__eq__``)?"""
        b = self.base
        return (
            self.state is b.state and self.generation_id == b.generation_id
            and self.leader_id == b.leader_id and self.protocol_type == b.protocol_type
            and self.protocol_name == b.protocol_name
            and self.new_member_added == b.new_member_added
            and self.join_deadline_ms == b.join_deadline_ms and self.initial_delay == b.initial_delay
            and self.sync_deadline_ms == b.sync_deadline_ms and self.sync_generation == b.sync_generation
            and self.generation_reserved == b.generation_reserved and self.generation_floor == b.generation_floor
            and b.session_deadlines == self.session_deadlines and b.members == self.members
            and b.static_members == self.static_members and b.awaiting_join == self.awaiting_join
            and b.awaiting_sync == self.awaiting_sync and b.pending_members == self.pending_members
            and self.pending_sync == b.pending_sync and self.new_members == b.new_members
            and self.handover_shares == b.handover_shares and self.handover_ids == b.handover_ids
            and self.handover_hold == b.handover_hold
        )

    # -- effects -----------------------------------------------------------
    def reply(self, token: Hashable, kind: str, payload: object) -> None:
        self.replies.append(Reply(token, kind, payload))  # type: ignore[arg-type]

    def schedule(self, key: str, deadline_ms: int) -> None:
        self.timers.pop(key, None)
        self.timers[key] = Schedule(key, deadline_ms)

    def cancel(self, key: str) -> None:
        self.timers.pop(key, None)
        self.timers[key] = Cancel(key)

    def transition(self, target: GroupState) -> None:
        check_transition(self.base.group_id, self.state, target)
        self.state = target

    # -- queries -----------------------------------------------------------
    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == len(self.awaiting_join) and not self.pending_members

    def set_assignment(self, member_id: str, assignment: bytes) -> None:
        member = self.members[member_id]
        if member.assignment != assignment:
            self.members[member_id] = _replace_member(member, assignment=assignment)


def _replace_member(member: Member, **changes: object) -> Member:
    fields = dict(member.__dict__)
    fields.update(changes)
    return Member(**fields)  # type: ignore[arg-type]


# -- sessions ------------------------------------------------------------------

def schedule_session(w: Draft, member_id: str, timeout_ms: int | None = None) -> None:
    """Kafka's ``completeAndScheduleNextExpiration``: the member proved it is
    alive; its session now ends ``timeout_ms`` (default: its session timeout)
    from now."""
    if timeout_ms is None:
        timeout_ms = w.members[member_id].session_timeout_ms
    deadline = w.now_ms + timeout_ms
    w.session_deadlines[member_id] = deadline
    w.schedule(session_key(member_id), deadline)


def restart_session(group: Group, member_id: str, now_ms: int) -> tuple[Group, tuple[TimerOp, ...]]:
    """:func:`schedule_session` on a frozen group, without a Draft: the next
    group and the timer operation. For handlers whose only change is the
    session of a current member (heartbeats, commits), so that their cost
    does not grow with the group."""
    deadline = now_ms + group.members[member_id].session_timeout_ms
    return group.with_session_deadline(member_id, deadline), (Schedule(session_key(member_id), deadline),)


def has_satisfied_heartbeat(w: Draft, member_id: str) -> bool:
    """Kafka's ``MemberMetadata.hasSatisfiedHeartbeat`` at session expiry: new
    members expire even while parked; members with a parked JoinGroup or
    SyncGroup are excused; anyone else missed its heartbeat."""
    if member_id in w.new_members:
        return False
    return member_id in w.awaiting_join or member_id in w.awaiting_sync


# -- membership changes --------------------------------------------------------

def add_member(w: Draft, member: Member, token: Hashable | None) -> None:
    """Kafka's ``GroupMetadata.add``."""
    if member.group_instance_id is not None:
        w.static_members[member.group_instance_id] = member.member_id
    if not w.members:
        w.protocol_type = member.protocol_type
    if w.leader_id is None:
        w.leader_id = member.member_id
    old = w.members.get(member.member_id)
    if old is not None:
        w._count(old, -1)
    w.members[member.member_id] = member
    w._count(member, 1)
    if token is not None:
        w.awaiting_join[member.member_id] = token
    if w.pending_members.pop(member.member_id, None) is not None:
        w.cancel(pending_key(member.member_id))


def remove_member(w: Draft, member_id: str) -> None:
    """Kafka's ``GroupMetadata.remove`` (member or pending id), plus: its
    session timer is cancelled and any request it still has parked is
    answered UNKNOWN_MEMBER_ID so no token is left waiting."""
    member = w.members.pop(member_id, None)
    if member is not None:
        w._count(member, -1)
        if member.group_instance_id is not None:
            w.static_members.pop(member.group_instance_id, None)
        join_token = w.awaiting_join.pop(member_id, None)
        if join_token is not None:
            w.reply(join_token, JOIN, JoinResult.failed("", ErrorCode.UNKNOWN_MEMBER_ID))
        sync_token = w.awaiting_sync.pop(member_id, None)
        if sync_token is not None:
            w.reply(sync_token, SYNC, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        w.new_members.discard(member_id)
        w.session_deadlines.pop(member_id, None)
        w.cancel(session_key(member_id))
    if w.is_leader(member_id):
        w.leader_id = next(iter(w.members), None)
    if w.pending_members.pop(member_id, None) is not None:
        w.cancel(pending_key(member_id))
    w.pending_sync.discard(member_id)


def update_member(
    w: Draft, member_id: str, protocols: ProtocolList, rebalance_timeout_ms: int,
    session_timeout_ms: int, token: Hashable | None,
) -> None:
    """Kafka's ``GroupMetadata.updateMember``. A JoinGroup that replaces one
    still parked for the same member answers the old one REBALANCE_IN_PROGRESS
    (Kafka silently drops it; the client has already given up on it)."""
    old = w.members[member_id]
    w.members[member_id] = new = _replace_member(
        old, protocols=protocols, rebalance_timeout_ms=rebalance_timeout_ms, session_timeout_ms=session_timeout_ms,
    )
    w._count(old, -1)
    w._count(new, 1)
    old = w.awaiting_join.pop(member_id, None)
    if old is not None and old != token:
        w.reply(old, JOIN, JoinResult.failed(member_id, ErrorCode.REBALANCE_IN_PROGRESS))
    if token is not None:
        w.awaiting_join[member_id] = token


def replace_static_member(w: Draft, instance_id: str, old_id: str, new_id: str) -> None:
    """Kafka's ``replaceStaticMember``: the instance keeps its place, metadata
    and assignment under ``new_id``; requests parked by ``old_id`` are fenced.
    Unlike Kafka, a pending SyncGroup obligation moves to ``new_id`` (Kafka
    leaves ``old_id`` in the set, so the sync timeout later forces a needless
    rebalance)."""
    join_token = w.awaiting_join.pop(old_id, None)
    if join_token is not None:
        w.reply(join_token, JOIN, JoinResult.failed(old_id, ErrorCode.FENCED_INSTANCE_ID))
    sync_token = w.awaiting_sync.pop(old_id, None)
    if sync_token is not None:
        w.reply(sync_token, SYNC, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
    w.members = {
        (new_id if mid == old_id else mid): (_replace_member(m, member_id=new_id) if mid == old_id else m)
        for mid, m in w.members.items()
    }
    if w.is_leader(old_id):
        w.leader_id = new_id
    w.static_members[instance_id] = new_id
    if old_id in w.new_members:
        w.new_members.discard(old_id)
        w.new_members.add(new_id)
    if old_id in w.pending_sync:
        w.pending_sync.discard(old_id)
        w.pending_sync.add(new_id)
    w.session_deadlines.pop(old_id, None)
    w.cancel(session_key(old_id))


def add_member_and_rebalance(
    w: Draft, member: Member, token: Hashable,
) -> None:
    """Kafka's ``addMemberAndRebalance``: a new member joins, its parked join
    expires after ``NEW_MEMBER_JOIN_TIMEOUT_MS``, and a rebalance starts if
    one is not running. A member added during the initial delay of a brand-new
    group (generation 0) lets that delay be extended."""
    w.new_members.add(member.member_id)
    if w.state is S.PREPARING_REBALANCE and w.generation_id == 0:
        w.new_member_added = True
    add_member(w, member, token)
    schedule_session(w, member.member_id, NEW_MEMBER_JOIN_TIMEOUT_MS)
    maybe_prepare_rebalance(w)


def remove_member_and_update_group(w: Draft, member_id: str) -> None:
    """Kafka's ``removeMemberAndUpdateGroup``: a parked join is answered
    UNKNOWN_MEMBER_ID, the member goes, and the group rebalances (Stable,
    CompletingRebalance) or re-checks the join phase (PreparingRebalance)."""
    remove_member(w, member_id)
    if w.state in (S.STABLE, S.COMPLETING_REBALANCE):
        maybe_prepare_rebalance(w)
    elif w.state is S.PREPARING_REBALANCE:
        try_complete_join(w)


def remove_pending_member_and_update_group(w: Draft, member_id: str) -> None:
    """Kafka's ``removePendingMemberAndUpdateGroup``."""
    remove_member(w, member_id)
    if w.state is S.PREPARING_REBALANCE:
        try_complete_join(w)


# -- the join phase ------------------------------------------------------------

def maybe_prepare_rebalance(w: Draft) -> None:
    if can_rebalance(w.state):
        prepare_rebalance(w)


def following_generation(generation: int) -> int:
    """The generation after ``generation``, wrapping from int32's maximum.

    Kafka's ``initNextGeneration`` does ``generationId += 1`` on a Java int,
    which would overflow to a negative number, and a negative generation is
    what clients send when they have none (-1). zkcoord wraps instead to
    :data:`WRAP_GENERATION`: the only members that can hold a generation are
    those of the current block (the current generation and the numbers
    reserved with it, all near the top), so 1 cannot be confused with a live
    member's generation; they get ILLEGAL_GENERATION and rejoin, as at any
    new generation. Clients compare generations only for equality.

    >>> following_generation(7), following_generation(MAX_GENERATION)
    (8, 1)
    """
    return WRAP_GENERATION if generation >= MAX_GENERATION else generation + 1


def next_generation(w: Draft) -> int:
    """The number the next generation gets: after the current one, or after
    every number the previous owner may have handed out (``generation_floor``,
    the loaded reservation), wrapping at int32 (:func:`following_generation`)."""
    return following_generation(w.generation_floor or w.generation_id)


def generation_reserved(generation: int, reserved: int) -> bool:
    """Is ``generation`` inside the block that ends at ``reserved``?

    A block is the :data:`GENERATION_BLOCK` numbers ending at ``reserved``
    (shorter at the int32 top, never past it). Comparing with the block, not
    with ``reserved`` alone, keeps a wrapped generation (1, far below a
    reservation near 2^31 - 1) from counting as reserved.

    >>> generation_reserved(5, 103), generation_reserved(104, 103), generation_reserved(1, MAX_GENERATION)
    (True, False, False)
    """
    return reserved - GENERATION_BLOCK < generation <= reserved


def reserve_generation(w: Draft, generation: int) -> None:
    """Make sure ``generation`` is covered by the stored reservation; if it
    is not, reserve it and the :data:`GENERATION_BLOCK` - 1 after it (up to
    :data:`MAX_GENERATION`: a block never passes int32; the next one wraps).

    Persist: only when a new block is reserved."""
    if not generation_reserved(generation, w.generation_reserved):
        w.generation_reserved = min(generation + GENERATION_BLOCK - 1, MAX_GENERATION)
        w.persist = True


def prepare_rebalance(w: Draft) -> None:
    """Kafka's ``prepareRebalance``: fail parked SyncGroups with
    REBALANCE_IN_PROGRESS, drop the pending-sync timer, arm the join timer
    (the initial delay when coming from Empty, else the group's rebalance
    timeout) and enter PreparingRebalance.

    Persist: only if the coming generation's number is not reserved yet
    (:func:`reserve_generation`), so that the write is done while the members
    rejoin rather than when the join phase ends."""
    if w.state is S.COMPLETING_REBALANCE:
        reset_and_propagate_assignment_error(w, ErrorCode.REBALANCE_IN_PROGRESS)
    remove_sync_expiration(w)
    if w.state is S.EMPTY:
        delay = w.config.initial_rebalance_delay_ms
        w.initial_delay = InitialDelay(delay, max(w.rebalance_timeout_ms - delay, 0))
        w.join_deadline_ms = w.now_ms + delay
    else:
        w.initial_delay = None
        w.join_deadline_ms = w.now_ms + w.rebalance_timeout_ms
    w.transition(S.PREPARING_REBALANCE)
    w.schedule(JOIN_KEY, w.join_deadline_ms)
    reserve_generation(w, next_generation(w))
    try_complete_join(w)


def try_complete_join(w: Draft) -> None:
    """Kafka's ``tryCompleteJoin``: end the join phase as soon as every known
    member has rejoined and no MEMBER_ID_REQUIRED id is outstanding. During
    the initial delay nothing ends it early (``InitialDelayedJoin``), nor while
    a handover holds it (``handover_hold``: more partitions are about to be
    held for the members) or has not given a member its legacy consumer id
    yet (``handover_ids``); the join timer still ends it."""
    if w.state is not S.PREPARING_REBALANCE or w.initial_delay is not None or w.handover_hold:
        return
    if w.handover_ids is not None and any(mid not in w.handover_ids for mid in w.members):
        return  # in a handover, a newcomer gets its range only once the daemon registered it
    if w.has_all_members_joined():
        complete_join(w)


def _maybe_elect_new_joined_leader(w: Draft) -> bool:
    """Kafka's ``maybeElectNewJoinedLeader``."""
    if w.leader_id is None:
        return False
    if w.leader_id in w.awaiting_join:
        return True
    joined = next((mid for mid in w.members if mid in w.awaiting_join), None)
    if joined is None:
        return False
    w.leader_id = joined
    return True


def complete_join(w: Draft) -> None:
    """Kafka's ``onCompleteJoin``: drop dynamic members that did not rejoin,
    then either wait another rebalance timeout (nobody rejoined but static
    members remain) or start the next generation.

    Persist: when the group ends up Empty (with a bumped generation, as
    Kafka writes it), or when the new generation's number was not reserved
    yet. A new generation with members is otherwise written with its
    assignment, at the leader's SyncGroup: if this owner dies before then, the
    next one loads the last assignment and, knowing the reservation, starts
    its own generations above every number handed out here.
    The leader's JoinGroup answer is released first: the leader's assignment
    is what the rest of the rebalance waits for."""
    w.cancel(JOIN_KEY)
    w.join_deadline_ms = None
    w.initial_delay = None
    for mid in [m for m, mem in w.members.items() if m not in w.awaiting_join and not mem.is_static]:
        remove_member(w, mid)
    if not _maybe_elect_new_joined_leader(w) and w.members:
        w.join_deadline_ms = w.now_ms + w.rebalance_timeout_ms
        w.schedule(JOIN_KEY, w.join_deadline_ms)
        return
    _init_next_generation(w)
    if w.state is S.EMPTY:
        w.persist = True
        return
    order = list(w.members)
    if w.leader_id in w.members:
        order.remove(w.leader_id)
        order.insert(0, w.leader_id)
    for mid in order:
        token = w.awaiting_join.pop(mid, None)
        if token is not None:
            w.reply(token, JOIN, join_result(w, mid))
        schedule_session(w, mid)
        w.new_members.discard(mid)
        w.pending_sync.add(mid)
    w.sync_generation = w.generation_id
    w.sync_deadline_ms = w.now_ms + w.rebalance_timeout_ms
    w.schedule(SYNC_KEY, w.sync_deadline_ms)


def _init_next_generation(w: Draft) -> None:
    """Kafka's ``initNextGeneration``, numbered by :func:`next_generation`
    and covered by the reservation."""
    w.generation_id = next_generation(w)
    w.generation_floor = 0
    reserve_generation(w, w.generation_id)
    if w.members:
        w.protocol_name = select_protocol(w.members)
        w.transition(S.COMPLETING_REBALANCE)
    else:
        w.protocol_name = None
        w.transition(S.EMPTY)
    w.pending_sync.clear()


def current_member_metadata(w: Draft) -> tuple[JoinMember, ...]:
    """The member list the leader gets (metadata of the selected protocol)."""
    assert w.protocol_name is not None
    return tuple(
        JoinMember(m.member_id, m.group_instance_id, m.metadata(w.protocol_name))
        for m in w.members.values()
    )


def join_result(w: Draft, member_id: str, leader_id: str | None = None,
                skip_assignment: bool = False, with_members: bool | None = None) -> JoinResult:
    """A successful JoinGroup answer for the current generation; the leader
    (unless told otherwise) also gets the member list."""
    if with_members is None:
        with_members = w.is_leader(member_id)
    return JoinResult(
        error=ErrorCode.NONE, generation_id=w.generation_id,
        protocol_type=w.protocol_type, protocol_name=w.protocol_name,
        leader_id=(w.leader_id if leader_id is None else leader_id) or "",
        member_id=member_id, skip_assignment=skip_assignment,
        members=current_member_metadata(w) if with_members else (),
    )


# -- the sync phase ------------------------------------------------------------

def remove_sync_expiration(w: Draft) -> None:
    """Kafka's ``removeSyncExpiration``: forget who still owes a SyncGroup."""
    w.pending_sync.clear()
    _complete_sync_expiration(w)


def remove_pending_sync_member(w: Draft, member_id: str) -> None:
    w.pending_sync.discard(member_id)
    if not w.pending_sync:
        _complete_sync_expiration(w)


def _complete_sync_expiration(w: Draft) -> None:
    if w.sync_deadline_ms is not None:
        w.cancel(SYNC_KEY)
    w.sync_deadline_ms = None
    w.sync_generation = None


def propagate_assignment(w: Draft, error: ErrorCode) -> None:
    """Kafka's ``propagateAssignment``: answer every parked SyncGroup and
    restart the session of each member answered."""
    ok = error is ErrorCode.NONE
    for mid, member in w.members.items():
        token = w.awaiting_sync.pop(mid, None)
        if token is None:
            continue
        w.reply(token, SYNC, SyncResult(
            error, w.protocol_type if ok else None, w.protocol_name if ok else None,
            member.assignment,
        ))
        schedule_session(w, mid)


def reset_and_propagate_assignment_error(w: Draft, error: ErrorCode) -> None:
    for mid in w.members:
        w.set_assignment(mid, b"")
    propagate_assignment(w, error)


def set_and_propagate_assignment(w: Draft, assignment: dict[str, bytes]) -> None:
    for mid in w.members:
        w.set_assignment(mid, assignment[mid])
    propagate_assignment(w, ErrorCode.NONE)
