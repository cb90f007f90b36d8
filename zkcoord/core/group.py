"""The classic group coordinator as pure handlers: the module the runtime calls.

This module owns the request handlers of a classic (JoinGroup / SyncGroup)
consumer group, written to behave as Kafka 3.9's ZooKeeper-mode Scala
``GroupCoordinator`` does, error codes and decisions included. It is also the
public face of the core: it re-exports the model (:mod:`.membership`), the
messages (:mod:`.messages`), the timer handler (:mod:`.group_timers`) and the
record codec (:mod:`.group_record`), so the runtime imports one module.

Every handler takes the current immutable :class:`Group` (plus the request,
``now_ms`` and the :class:`GroupConfig`) and returns an :class:`Outcome`; see
:mod:`.messages` for how the runtime applies it. Handlers never read a clock,
never do I/O, and never mutate their input.

Checks that need the runtime, not the group, stay in the runtime: group id
validity (:func:`zkcoord.core.errors.validate_group_id`), NOT_COORDINATOR and
COORDINATOR_LOAD_IN_PROGRESS (while loading Kafka answers SyncGroup with
REBALANCE_IN_PROGRESS and Heartbeat with NONE). A group that does not exist
yet is passed as ``new_group(group_id)``: every handler then answers exactly
as Kafka does for a missing group, and returns it unchanged unless a member
was added.

Where this differs from Kafka, on purpose:

* Ties are broken by member order (protocol votes, the next leader when the
  leader goes), not by hash-map order, so outcomes are reproducible.
* A parked JoinGroup/SyncGroup superseded by a newer one from the same member
  is answered REBALANCE_IN_PROGRESS, and a removed member's parked SyncGroup
  UNKNOWN_MEMBER_ID; Kafka leaves both unanswered. No token is ever leaked.
* A static member that replaces its member id inherits the pending-SyncGroup
  obligation of the old id (Kafka's leftover old id forces a rebalance).
* Generation numbers are reserved in the stored record in blocks (``gr``),
  so a generation number is never handed out twice across fail-overs while
  a rebalance writes only its end (Kafka can reuse a number after a
  coordinator fail-over); see :func:`~zkcoord.core.rebalance.reserve_generation`
  and :func:`load_group`.
* New member ids come from the request (``JoinRequest.new_member_id``).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from zkcoord.core.errors import ErrorCode
from zkcoord.core.group_record import from_record, load_group, to_record
from zkcoord.core.group_timers import expire_member_by, handle_timer
from zkcoord.core.group_states import BEHAVIOUR, GroupState, VALID_PREVIOUS
from zkcoord.core.handover.classic_group import share_assignments
from zkcoord.core.phases import GroupPhase
from zkcoord.core.membership import (
    Group,
    GroupConfig,
    Member,
    new_group,
    select_protocol,
    supports_protocols,
    validate_current_member,
)
from zkcoord.core.messages import (
    DELETE,
    HEARTBEAT,
    JOIN,
    LEAVE,
    SYNC,
    JOIN_KEY,
    SYNC_KEY,
    UNKNOWN_MEMBER_ID,
    Cancel,
    DeleteResult,
    HeartbeatRequest,
    HeartbeatResult,
    JoinMember,
    JoinRequest,
    JoinResult,
    LeaveMemberResult,
    LeaveRequest,
    LeaveResult,
    Outcome,
    Reply,
    Schedule,
    SyncRequest,
    SyncResult,
    TimerOp,
    pending_key,
    session_key,
)
from zkcoord.core.rebalance import (
    Draft,
    add_member_and_rebalance,
    join_result,
    maybe_prepare_rebalance,
    prepare_rebalance,
    remove_member,
    remove_member_and_update_group,
    remove_pending_member_and_update_group,
    remove_pending_sync_member,
    remove_sync_expiration,
    replace_static_member,
    restart_session,
    schedule_session,
    set_and_propagate_assignment,
    try_complete_join,
    update_member,
)
from zkcoord.errors import StateError

__all__ = [
    "GroupState", "VALID_PREVIOUS", "GroupConfig", "Member", "Group", "new_group",
    "JoinRequest", "SyncRequest", "HeartbeatRequest", "LeaveRequest",
    "JoinMember", "JoinResult", "SyncResult", "HeartbeatResult", "LeaveMemberResult",
    "LeaveResult", "DeleteResult", "Reply", "Schedule", "Cancel", "Outcome",
    "MemberDescription", "GroupDescription",
    "handle_join", "handle_sync", "handle_heartbeat", "handle_leave", "handle_timer",
    "handle_delete", "handle_unload", "handle_metadata_change", "validate_offset_commit", "touch_member",
    "expire_member_by",
    "describe", "describe_missing", "to_record", "from_record", "load_group",
]

S = GroupState
E = ErrorCode


# -- JoinGroup -----------------------------------------------------------------

def handle_join(group: Group, req: JoinRequest, now_ms: int, config: GroupConfig) -> Outcome:
    """JoinGroup (Kafka's ``handleJoinGroup``).

    The reply is usually *parked*: it is sent when the join phase ends, in the
    Outcome of whichever call ends it. Immediate answers: errors,
    MEMBER_ID_REQUIRED, a follower rejoining a Stable/CompletingRebalance group
    with unchanged metadata, and a static member replacing itself in a Stable
    group.

    Persist: only if this call ends the join phase (a new generation, see
    ``complete_join``) or a static member replaced its member id in a Stable
    group without a rebalance (the new member id must survive fail-over). A
    join parked while PreparingRebalance persists nothing.
    """
    if group.state is S.PREPARING_REBALANCE:
        rejoined = _rejoin_while_preparing(group, req, config)
        if rejoined is not None:
            return rejoined
    w = Draft.of(group, now_ms, config)
    if not config.min_session_timeout_ms <= req.session_timeout_ms <= config.max_session_timeout_ms:
        w.reply(req.token, JOIN, JoinResult.failed(req.member_id, E.INVALID_SESSION_TIMEOUT))
        return w.outcome()
    if not _accept_joining_member(w, req.member_id):
        # Kafka drops the refused member so the group shrinks back under the limit.
        remove_member(w, req.member_id)
        w.reply(req.token, JOIN, JoinResult.failed(UNKNOWN_MEMBER_ID, E.GROUP_MAX_SIZE_REACHED))
    elif req.member_id == UNKNOWN_MEMBER_ID:
        _join_new_member(w, req)
    else:
        _join_current_member(w, req)
    try_complete_join(w)
    return w.outcome()


def _rejoin_while_preparing(group: Group, req: JoinRequest, config: GroupConfig) -> Outcome | None:
    """handle_join without a Draft for the common JoinGroup of a rebalance: a
    current member rejoins while the group prepares and is not the last one
    awaited. Same outcome as the Draft path (the member is updated, its join
    parked, a join it had parked already answered REBALANCE_IN_PROGRESS);
    None for anything else, which takes the Draft path."""
    mid = req.member_id
    member = group.members.get(mid)
    if (member is None or mid in group.pending_members
            or not config.min_session_timeout_ms <= req.session_timeout_ms <= config.max_session_timeout_ms
            or (mid not in group.awaiting_join and len(group.awaiting_join) >= config.max_group_size)
            or validate_current_member(group, mid, req.group_instance_id) is not None
            or not supports_protocols(group, req.protocol_type, _protocol_names(req))):
        return None
    awaited = len(group.awaiting_join) + (mid not in group.awaiting_join)
    if group.initial_delay is None and awaited == len(group.members) and not group.pending_members:
        return None  # the last one: complete_join, on the Draft path
    replies: tuple[Reply, ...] = ()
    old = group.awaiting_join.get(mid)
    if old is not None and old != req.token:
        replies = (Reply(old, JOIN, JoinResult.failed(mid, E.REBALANCE_IN_PROGRESS)),)
    updated = Member(**{**member.__dict__, "protocols": req.protocols,
                        "rebalance_timeout_ms": req.rebalance_timeout_ms,
                        "session_timeout_ms": req.session_timeout_ms})
    if old == req.token and updated == member:
        return Outcome(group, False, (), ())  # the same join again: nothing changes
    return Outcome(group.with_rejoined_member(updated, req.token), False, replies, ())


def _accept_joining_member(w: Draft, member_id: str) -> bool:
    """Kafka's ``acceptJoiningMember``: while preparing, the number of members
    that have rejoined counts against ``max_group_size`` (so the last ones to
    rejoin of an oversized group are refused); otherwise the group size."""
    if w.state in (S.EMPTY, S.DEAD):
        return True
    if w.state is S.PREPARING_REBALANCE:
        rejoined = member_id in w.members and member_id in w.awaiting_join
        return rejoined or len(w.awaiting_join) < w.config.max_group_size
    return member_id in w.members or len(w.members) < w.config.max_group_size


def _protocol_names(req: JoinRequest) -> frozenset[str]:
    return frozenset(name for name, _ in req.protocols)


def _member_from(req: JoinRequest, member_id: str) -> Member:
    return Member(
        member_id=member_id, group_instance_id=req.group_instance_id,
        client_id=req.client_id, client_host=req.client_host,
        session_timeout_ms=req.session_timeout_ms, rebalance_timeout_ms=req.rebalance_timeout_ms,
        protocol_type=req.protocol_type, protocols=req.protocols,
    )


def _join_new_member(w: Draft, req: JoinRequest) -> None:
    """Kafka's ``doNewMemberJoinGroup`` (static and dynamic)."""
    if w.state is S.DEAD:
        w.reply(req.token, JOIN, JoinResult.failed(UNKNOWN_MEMBER_ID, E.COORDINATOR_NOT_AVAILABLE))
        return
    if not supports_protocols(w, req.protocol_type, _protocol_names(req)):
        w.reply(req.token, JOIN, JoinResult.failed(UNKNOWN_MEMBER_ID, E.INCONSISTENT_GROUP_PROTOCOL))
        return
    new_id = req.new_member_id
    if not new_id or new_id in w.members or new_id in w.pending_members:
        raise StateError(
            f"group {w.base.group_id!r}: new_member_id {new_id!r} is empty or already "
            "used; the runtime must pass a fresh '<client_id>-<uuid4>'"
        )
    if req.group_instance_id is not None:
        old_id = w.static_members.get(req.group_instance_id)
        if old_id is not None:
            _update_static_member_and_rebalance(w, req, old_id, new_id)
        else:
            add_member_and_rebalance(w, _member_from(req, new_id), req.token)
    elif req.require_known_member_id:
        deadline = w.now_ms + req.session_timeout_ms
        w.pending_members[new_id] = deadline
        w.schedule(pending_key(new_id), deadline)
        w.reply(req.token, JOIN, JoinResult.failed(new_id, E.MEMBER_ID_REQUIRED))
    else:
        add_member_and_rebalance(w, _member_from(req, new_id), req.token)


def _update_static_member_and_rebalance(w: Draft, req: JoinRequest, old_id: str, new_id: str) -> None:
    """Kafka's ``updateStaticMemberAndRebalance``: a restarted static member
    takes over its instance under a new member id. In a Stable group whose
    selected protocol would not change it gets the current generation at once
    (no rebalance; the leader is told to skip assignment when the client
    supports it, JoinGroup v9+); otherwise a rebalance runs."""
    current_leader = w.leader_id
    instance_id = req.group_instance_id
    assert instance_id is not None
    replace_static_member(w, instance_id, old_id, new_id)
    schedule_session(w, new_id)
    update_member(w, new_id, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, req.token)
    if w.state is S.STABLE:
        if select_protocol(w.members) == w.protocol_name:
            w.persist = True
            token = w.awaiting_join.pop(new_id)
            if req.support_skipping_assignment:
                is_leader = w.is_leader(new_id)
                result = join_result(w, new_id, skip_assignment=is_leader)
            else:
                # Old clients: report the old leader id so a returning leader
                # does not compute an assignment a Stable group would ignore.
                result = join_result(w, new_id, leader_id=current_leader, with_members=False)
            w.reply(token, JOIN, result)
        else:
            maybe_prepare_rebalance(w)
    elif w.state is S.COMPLETING_REBALANCE:
        # The leader may already be assigning for the old member id.
        prepare_rebalance(w)


def _join_current_member(w: Draft, req: JoinRequest) -> None:
    """Kafka's ``doCurrentMemberJoinGroup``."""
    mid = req.member_id
    if w.state is S.DEAD:
        w.reply(req.token, JOIN, JoinResult.failed(mid, E.COORDINATOR_NOT_AVAILABLE))
    elif not supports_protocols(w, req.protocol_type, _protocol_names(req)):
        w.reply(req.token, JOIN, JoinResult.failed(mid, E.INCONSISTENT_GROUP_PROTOCOL))
    elif mid in w.pending_members:
        if req.group_instance_id is not None:
            # Kafka throws IllegalStateException here, which reaches the
            # client as UNKNOWN_SERVER_ERROR: pending ids are never static.
            w.reply(req.token, JOIN, JoinResult.failed(mid, E.UNKNOWN_SERVER_ERROR))
        else:
            add_member_and_rebalance(w, _member_from(req, mid), req.token)
    else:
        error = validate_current_member(w, mid, req.group_instance_id)
        if error is not None:
            w.reply(req.token, JOIN, JoinResult.failed(mid, error))
        else:
            _rejoin(w, req)


def _rejoin(w: Draft, req: JoinRequest) -> None:
    mid = req.member_id
    member = w.members[mid]
    if w.state is S.PREPARING_REBALANCE:
        _update_member_and_rebalance(w, req)
    elif w.state is S.COMPLETING_REBALANCE:
        if member.matches(req.protocols):
            # It probably lost the JoinGroup response: resend it.
            w.reply(req.token, JOIN, join_result(w, mid))
        else:
            _update_member_and_rebalance(w, req)
    elif w.state is S.STABLE:
        if w.is_leader(mid) or not member.matches(req.protocols):
            # A leader's join is how a client asks for a rebalance.
            _update_member_and_rebalance(w, req)
        else:
            w.reply(req.token, JOIN, join_result(w, mid, with_members=False))
    else:
        w.reply(req.token, JOIN, JoinResult.failed(mid, E.UNKNOWN_MEMBER_ID))


def _update_member_and_rebalance(w: Draft, req: JoinRequest) -> None:
    update_member(w, req.member_id, req.protocols, req.rebalance_timeout_ms,
                  req.session_timeout_ms, req.token)
    maybe_prepare_rebalance(w)


# -- SyncGroup -----------------------------------------------------------------

def handle_sync(group: Group, req: SyncRequest, now_ms: int, config: GroupConfig) -> Outcome:
    """SyncGroup (Kafka's ``handleSyncGroup``).

    In CompletingRebalance every SyncGroup is parked; the leader's carries the
    assignment (members it leaves out get an empty one), which answers all
    parked SyncGroups and makes the group Stable.

    Persist: only for the leader's SyncGroup in CompletingRebalance (the
    assignment is the second and last write of a rebalance). Followers'
    SyncGroups and SyncGroups in Stable persist nothing.

    A follower's SyncGroup (parked in CompletingRebalance, answered from
    the stored assignment in Stable) changes only what concerns that member,
    so those paths work on the frozen group, as Heartbeat does: their cost
    does not grow with the group.
    """
    if group.state is S.STABLE:
        return _sync_in_stable(group, req, now_ms)
    if group.state is S.COMPLETING_REBALANCE and req.member_id != group.leader_id:
        return _park_follower_sync(group, req)
    w = Draft.of(group, now_ms, config)
    error = _validate_sync(w, req)
    mid = req.member_id
    if error is not None:
        w.reply(req.token, SYNC, SyncResult(error))
    elif w.state is S.EMPTY:
        w.reply(req.token, SYNC, SyncResult(E.UNKNOWN_MEMBER_ID))
    elif w.state is S.PREPARING_REBALANCE:
        w.reply(req.token, SYNC, SyncResult(E.REBALANCE_IN_PROGRESS))
    elif w.state is S.COMPLETING_REBALANCE:
        old = w.awaiting_sync.get(mid)
        if old is not None and old != req.token:
            # Kafka overwrites the parked callback; we answer it instead.
            w.reply(old, SYNC, SyncResult(E.REBALANCE_IN_PROGRESS))
        w.awaiting_sync[mid] = req.token
        remove_pending_sync_member(w, mid)
        if w.is_leader(mid):
            if w.handover_shares is not None:  # shared with legacy consumers: the daemon's shares
                assignment = share_assignments(w, config)
            else:
                assignment = {m: req.assignments.get(m, b"") for m in w.members}
            set_and_propagate_assignment(w, assignment)
            w.transition(S.STABLE)
            w.persist = True
    else:  # Stable: hand out the stored assignment again.
        remove_pending_sync_member(w, mid)
        w.reply(req.token, SYNC, SyncResult(
            E.NONE, w.protocol_type, w.protocol_name, w.members[mid].assignment))
        schedule_session(w, mid)
    return w.outcome()


def _sync_in_stable(group: Group, req: SyncRequest, now_ms: int) -> Outcome:
    """handle_sync in Stable without a Draft: hand out the stored assignment
    again, as the Draft path does (same group, replies and timers)."""
    error = _validate_sync(group, req)
    if error is not None:
        return Outcome(group, False, (Reply(req.token, SYNC, SyncResult(error)),), ())
    mid = req.member_id
    member = group.members[mid]
    deadline = now_ms + member.session_timeout_ms
    timers: tuple[TimerOp, ...] = (Schedule(session_key(mid), deadline),)
    if group.sync_deadline_ms is not None and not (group.pending_sync - {mid}):
        timers = (Cancel(SYNC_KEY),) + timers
    reply = Reply(req.token, SYNC, SyncResult(E.NONE, group.protocol_type, group.protocol_name, member.assignment))
    return Outcome(group.with_synced_member(mid, deadline), False, (reply,), timers)


def _park_follower_sync(group: Group, req: SyncRequest) -> Outcome:
    """handle_sync of a follower in CompletingRebalance without a Draft: park
    it until the leader's assignment (same group, replies and timers as the
    Draft path)."""
    error = _validate_sync(group, req)
    if error is not None:
        return Outcome(group, False, (Reply(req.token, SYNC, SyncResult(error)),), ())
    mid = req.member_id
    replies: tuple[Reply, ...] = ()
    old = group.awaiting_sync.get(mid)
    if old is not None and old != req.token:
        # Kafka overwrites the parked callback; we answer it instead.
        replies = (Reply(old, SYNC, SyncResult(E.REBALANCE_IN_PROGRESS)),)
    timers: tuple[TimerOp, ...] = ()
    if group.sync_deadline_ms is not None and not (group.pending_sync - {mid}):
        timers = (Cancel(SYNC_KEY),)
    return Outcome(group.with_parked_sync(mid, req.token), False, replies, timers)


def _validate_sync(w: Draft | Group, req: SyncRequest) -> ErrorCode | None:
    if w.state is S.DEAD:
        return E.COORDINATOR_NOT_AVAILABLE
    error = validate_current_member(w, req.member_id, req.group_instance_id)
    if error is not None:
        return error
    if req.generation_id != w.generation_id:
        return E.ILLEGAL_GENERATION
    if req.protocol_type is not None and req.protocol_type != w.protocol_type:
        return E.INCONSISTENT_GROUP_PROTOCOL
    if req.protocol_name is not None and req.protocol_name != w.protocol_name:
        return E.INCONSISTENT_GROUP_PROTOCOL
    return None


# -- Heartbeat, LeaveGroup -----------------------------------------------------

def handle_heartbeat(group: Group, req: HeartbeatRequest, now_ms: int, config: GroupConfig) -> Outcome:
    """Heartbeat (Kafka's ``handleHeartbeat``): restart the member's session.
    PreparingRebalance answers REBALANCE_IN_PROGRESS, which is how members
    learn they must rejoin. Persist: never (liveness is in-memory only).

    The hottest path of the coordinator: the only change is the member's
    session deadline, so it works on the frozen group (no Draft) and costs
    the same whatever the group's size."""
    timers: tuple[TimerOp, ...] = ()
    rules = BEHAVIOUR[group.state]
    if rules.phase is GroupPhase.DEAD:
        error: ErrorCode = rules.heartbeat
    else:
        error = validate_current_member(group, req.member_id, req.group_instance_id) or E.NONE
        if error is E.NONE and req.generation_id != group.generation_id:
            error = E.ILLEGAL_GENERATION
        elif error is E.NONE:
            if rules.heartbeat_restarts_session:
                group, timers = restart_session(group, req.member_id, now_ms)
            error = rules.heartbeat
    return Outcome(group, False, (Reply(req.token, HEARTBEAT, HeartbeatResult(error)),), timers)


def handle_leave(group: Group, req: LeaveRequest, now_ms: int, config: GroupConfig) -> Outcome:
    """LeaveGroup (Kafka's ``handleLeaveGroup``), one result per member.

    A member with an empty member id and an instance id is the static member
    of that instance (administrative removal). A pending MEMBER_ID_REQUIRED
    id simply disappears. Other members are validated like a heartbeat and
    removed, which starts a rebalance.

    Persist: only if the removals end the join phase (the group becomes Empty
    with a bumped generation, or the remaining members form a new generation).
    """
    w = Draft.of(group, now_ms, config)
    if w.state is S.DEAD:
        w.reply(req.token, LEAVE, LeaveResult(E.COORDINATOR_NOT_AVAILABLE))
        return w.outcome()
    results = [_leave_one(w, mid, iid) for mid, iid in req.members]
    w.reply(req.token, LEAVE, LeaveResult(E.NONE, tuple(results)))
    return w.outcome()


def _leave_one(w: Draft, member_id: str, instance_id: str | None) -> LeaveMemberResult:
    if member_id == UNKNOWN_MEMBER_ID:
        current = w.static_members.get(instance_id) if instance_id is not None else None
        if current is None:
            return LeaveMemberResult(member_id, instance_id, E.UNKNOWN_MEMBER_ID)
        remove_member_and_update_group(w, current)
        return LeaveMemberResult(member_id, instance_id, E.NONE)
    if member_id in w.pending_members:
        remove_pending_member_and_update_group(w, member_id)
        return LeaveMemberResult(member_id, instance_id, E.NONE)
    error = validate_current_member(w, member_id, instance_id)
    if error is None:
        remove_member_and_update_group(w, member_id)
    return LeaveMemberResult(member_id, instance_id, error or E.NONE)


# -- topic metadata --------------------------------------------------------------

def handle_metadata_change(group: Group, now_ms: int, config: GroupConfig) -> Outcome:
    """A topic the group subscribes to changed its partition count (the
    runtime watches them; Kafka's old ZooKeeper consumer did the same).

    Kafka's own coordinator leaves this to the group leader, whose JoinGroup
    in a Stable group forces a rebalance "for changes affecting assignment
    which do not affect the member metadata (such as topic metadata changes
    for the consumer)". This handler starts exactly that rebalance: a Stable
    or CompletingRebalance group goes to PreparingRebalance (parked
    SyncGroups are answered REBALANCE_IN_PROGRESS and assignments cleared,
    the join timer runs for the rebalance timeout), and members learn it
    from their next heartbeat. Any other state: nothing changes (a rebalance
    already running assigns from fresh metadata; Empty and Dead groups have
    nobody to tell). Persist: never, as for any start of a join phase.
    """
    if group.state not in (S.STABLE, S.COMPLETING_REBALANCE):
        return Outcome(group)
    w = Draft.of(group, now_ms, config)
    prepare_rebalance(w)
    return w.outcome()


# -- offsets -------------------------------------------------------------------

def validate_offset_commit(
    group: Group | None, member_id: str, generation_id: int,
    group_instance_id: str | None, *, transactional: bool = False,
) -> ErrorCode:
    """May this OffsetCommit (or TxnOffsetCommit) be stored? Kafka's
    ``validateOffsetCommit`` plus the state check of ``doCommitOffsets``.

    * no group (``None``): allowed for generation < 0 (a standalone consumer;
      the runtime creates the group), else ILLEGAL_GENERATION;
    * Dead: COORDINATOR_NOT_AVAILABLE;
    * generation < 0 on an Empty group: allowed (admin client, standalone);
    * otherwise, if any of generation >= 0, a member id or an instance id is
      given: the member must be current (UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID)
      and the generation must match (ILLEGAL_GENERATION);
    * an anonymous commit on a non-Empty group: UNKNOWN_MEMBER_ID (allowed
      for transactional commits);
    * a valid member commit during CompletingRebalance: REBALANCE_IN_PROGRESS
      (not for transactional commits, as in Kafka).
    """
    if group is None:
        return E.NONE if generation_id < 0 else E.ILLEGAL_GENERATION
    rules = BEHAVIOUR[group.state]
    if rules.phase is GroupPhase.DEAD:
        return rules.member_commit
    empty = rules.phase is GroupPhase.EMPTY
    if generation_id < 0 and empty:
        return E.NONE
    if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
        error = validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
    elif not transactional and not empty:
        return E.UNKNOWN_MEMBER_ID
    return E.NONE if transactional else rules.member_commit


def touch_member(group: Group, member_id: str, now_ms: int) -> Outcome:
    """Kafka counts an accepted OffsetCommit from a member of a Stable or
    PreparingRebalance group as a heartbeat: call this after
    :func:`validate_offset_commit` said NONE. Persist: never. Like a
    heartbeat, it only restarts the session (no Draft)."""
    if BEHAVIOUR[group.state].commit_is_heartbeat and member_id in group.members:
        group, timers = restart_session(group, member_id, now_ms)
        return Outcome(group, timers=timers)
    return Outcome(group)


# -- DeleteGroups, unload ------------------------------------------------------

def handle_delete(group: Group, token: Hashable = None, *, exists: bool = True) -> Outcome:
    """DeleteGroups for one group (Kafka's ``handleDeleteGroups``): only an
    Empty group can go (-> Dead); a group that does not exist (pass
    ``new_group(group_id)`` with ``exists=False``) or is already Dead is
    GROUP_ID_NOT_FOUND; any other state NON_EMPTY_GROUP.

    Persist: True when the group became Dead; the runtime then deletes the
    group's record (and its offsets) instead of writing it.
    """
    w = Draft.of(group, 0)
    if not exists or w.state is S.DEAD:
        error = E.GROUP_ID_NOT_FOUND
    elif w.state is S.EMPTY:
        w.transition(S.DEAD)
        for mid in list(w.pending_members):
            remove_member(w, mid)
        w.persist = True
        error = E.NONE
    else:
        error = E.NON_EMPTY_GROUP
    w.reply(token, DELETE, DeleteResult(error))
    return w.outcome()


def handle_unload(group: Group) -> Outcome:
    """This daemon lost ownership of the group (Kafka's ``onGroupUnloaded``):
    the group goes Dead, parked JoinGroups (PreparingRebalance) and SyncGroups
    (CompletingRebalance / Stable) are answered NOT_COORDINATOR so clients
    find the new owner, and every timer is cancelled. Persist: never."""
    w = Draft.of(group, 0)
    previous = w.state
    w.transition(S.DEAD)
    if previous is S.PREPARING_REBALANCE:
        for mid, token in list(w.awaiting_join.items()):
            w.reply(token, JOIN, JoinResult.failed(mid, E.NOT_COORDINATOR))
    if previous in (S.STABLE, S.COMPLETING_REBALANCE):
        for mid, token in list(w.awaiting_sync.items()):
            w.reply(token, SYNC, SyncResult(E.NOT_COORDINATOR))
    w.awaiting_join.clear()
    w.awaiting_sync.clear()
    remove_sync_expiration(w)
    for mid in list(w.session_deadlines):
        w.cancel(session_key(mid))
    w.session_deadlines.clear()
    for mid in list(w.pending_members):
        remove_member(w, mid)
    if w.join_deadline_ms is not None:
        w.cancel(JOIN_KEY)
    w.join_deadline_ms, w.initial_delay, w.new_members = None, None, set()
    return w.outcome()


# -- DescribeGroups ------------------------------------------------------------

@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    """DescribeGroups answer; ``state`` is Kafka's printed state name."""

    group_id: str
    error: ErrorCode
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]


def describe(group: Group) -> GroupDescription:
    """Kafka's ``GroupMetadata.summary``: only a Stable group shows its
    protocol and each member's metadata and assignment."""
    stable = BEHAVIOUR[group.state].shows_assignment and group.protocol_name is not None
    members = tuple(
        MemberDescription(
            m.member_id, m.group_instance_id, m.client_id, m.client_host,
            m.metadata(group.protocol_name) if stable else b"",  # type: ignore[arg-type]
            m.assignment if stable else b"",
        )
        for m in group.members.values()
    )
    return GroupDescription(
        group.group_id, E.NONE, group.state.value, group.protocol_type or "",
        (group.protocol_name or "") if stable else "", members,
    )


def describe_missing(group_id: str) -> GroupDescription:
    """What Kafka answers for a group it does not know: state Dead."""
    return GroupDescription(group_id, E.NONE, S.DEAD.value, "", "", ())
