"""Timer expiry: what happens when a deadline of a group passes.

This module owns :func:`handle_timer`, the handler the runtime calls when a
timer it armed from an ``Outcome`` fires. The four kinds of timer mirror
Kafka's delayed operations:

========================  ===================================================
key                       Kafka counterpart and effect on expiry
========================  ===================================================
``join``                  ``DelayedJoin`` / ``InitialDelayedJoin``: end the
                          join phase (dynamic members that did not rejoin are
                          dropped), or extend the initial delay once more.
``sync``                  ``DelayedSync``: members of the new generation that
                          never sent SyncGroup are removed; rebalance.
``session:<member id>``   ``DelayedHeartbeat``: the member missed its session;
                          it is removed unless a JoinGroup/SyncGroup of it is
                          parked (then the rebalance owns its liveness).
``pending:<member id>``   pending ``DelayedHeartbeat``: an id handed out with
                          MEMBER_ID_REQUIRED was never used; forget it.
========================  ===================================================

Every expiry first checks the deadline the group stored for that key: a timer
that was cancelled, re-armed or belongs to an older generation changes
nothing, so the runtime may fire timers late, twice, or after a fail-over.

:func:`expire_member_by` brings a member's ``session:`` deadline forward (the
daemon's opt-in ``member_disconnect_grace_ms``, not Kafka's behaviour); the
expiry itself is then the ordinary one above.
"""

from __future__ import annotations

from zkcoord.core.group_states import GroupState
from zkcoord.core.membership import Group, GroupConfig, InitialDelay
from zkcoord.core.messages import JOIN_KEY, SYNC_KEY, Outcome, Schedule, parse_member_key, session_key
from zkcoord.core.rebalance import (
    Draft,
    complete_join,
    has_satisfied_heartbeat,
    prepare_rebalance,
    remove_member,
    remove_member_and_update_group,
    remove_pending_member_and_update_group,
)

__all__ = ["handle_timer", "expire_member_by"]

S = GroupState


def handle_timer(group: Group, key: str, now_ms: int, config: GroupConfig) -> Outcome:
    """Timer ``key`` fired at ``now_ms``.

    Persist: only when the expiry ends the join phase (a new generation, or
    the group became Empty with a bumped generation), exactly as for
    requests. Session, pending-id and sync expiries that start a rebalance
    persist nothing by themselves.
    """
    if group.state is S.DEAD:
        return Outcome(group)
    w = Draft.of(group, now_ms, config)
    if key == JOIN_KEY:
        _expire_join(w)
    elif key == SYNC_KEY:
        _expire_sync(w)
    else:
        parsed = parse_member_key(key)
        if parsed is not None and parsed[0] == "session":
            _expire_session(w, parsed[1])
        elif parsed is not None:
            _expire_pending(w, parsed[1])
    return w.outcome()


def expire_member_by(group: Group, member_id: str, deadline_ms: int) -> Outcome:
    """The member's session ends by ``deadline_ms`` at the latest: its
    deadline becomes ``min(current, deadline_ms)`` and its ``session:`` timer
    is re-armed for it, so when it passes :func:`handle_timer` removes the
    member exactly as a missed session does (same rebalance, same writes).

    For a dynamic member whose connection closed: a heartbeat or commit
    before the deadline restarts the session as usual (the member came back
    on a new connection). Static members (``group.instance.id``) and
    unknown ids are left alone: static membership exists to survive
    restarts. A member with no session deadline (excused while its
    JoinGroup/SyncGroup is parked) gets one; if it is still parked when it
    passes, it stays excused, as in Kafka. Persist: never.
    """
    member = group.members.get(member_id)
    if member is None or member.group_instance_id is not None or group.state is S.DEAD:
        return Outcome(group)
    current = group.session_deadlines.get(member_id)
    if current is not None and current <= deadline_ms:
        return Outcome(group)
    return Outcome(group.with_session_deadline(member_id, deadline_ms),
                   timers=(Schedule(session_key(member_id), deadline_ms),))


def _expire_join(w: Draft) -> None:
    """``DelayedJoin.onComplete`` / ``InitialDelayedJoin.onComplete``.

    The initial delay (a group leaving Empty) is extended while members keep
    arriving in a brand-new group: each extension lasts
    ``min(initial_rebalance_delay_ms, remaining)`` and the whole never runs
    past the rebalance timeout, with Kafka's exact arithmetic."""
    if w.state is not S.PREPARING_REBALANCE or w.join_deadline_ms is None:
        return
    if w.now_ms < w.join_deadline_ms:
        return
    delay = w.initial_delay
    if delay is not None and w.new_member_added and delay.remaining_ms != 0:
        w.new_member_added = False
        next_delay = min(w.config.initial_rebalance_delay_ms, delay.remaining_ms)
        w.initial_delay = InitialDelay(next_delay, max(delay.remaining_ms - delay.delay_ms, 0))
        w.join_deadline_ms = w.now_ms + next_delay
        w.schedule(JOIN_KEY, w.join_deadline_ms)
        return
    complete_join(w)


def _expire_sync(w: Draft) -> None:
    """``DelayedSync.onExpiration`` (Kafka's ``onExpirePendingSync``)."""
    if w.sync_deadline_ms is None or w.now_ms < w.sync_deadline_ms:
        return
    generation = w.sync_generation
    w.sync_deadline_ms = None
    w.sync_generation = None
    if generation != w.generation_id:
        return
    if w.state not in (S.COMPLETING_REBALANCE, S.STABLE) or not w.pending_sync:
        return
    late = [mid for mid in w.members if mid in w.pending_sync]
    late += sorted(w.pending_sync - set(late))
    for mid in late:
        remove_member(w, mid)
    prepare_rebalance(w)


def _expire_session(w: Draft, member_id: str) -> None:
    """Kafka's ``onExpireHeartbeat`` for a member."""
    deadline = w.session_deadlines.get(member_id)
    if member_id not in w.members or deadline is None or w.now_ms < deadline:
        return
    if has_satisfied_heartbeat(w, member_id):
        # Parked in a rebalance: the join / sync completion re-arms it.
        del w.session_deadlines[member_id]
        return
    remove_member_and_update_group(w, member_id)


def _expire_pending(w: Draft, member_id: str) -> None:
    """Kafka's ``onExpireHeartbeat`` for a pending (MEMBER_ID_REQUIRED) id."""
    deadline = w.pending_members.get(member_id)
    if deadline is None or w.now_ms < deadline:
        return
    remove_pending_member_and_update_group(w, member_id)
