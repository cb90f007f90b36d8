"""What a consumer group does when one of its timers fires.

==============================  =================================================
key                             on expiry
==============================  =================================================
``consumer-session:<member>``   the member sent no heartbeat within the session
                                time-out: fenced (Kafka's session timer)
``consumer-rebalance:<member>`` the member did not revoke its partitions within
                                its rebalance time-out, still at the epoch the
                                timer was armed for: fenced
``consumer-regex``              the group's regular expressions are resolved;
                                changed topics move the group epoch on
``consumer-assign``             a large group's target assignment is computed
                                off the event loop (:func:`.target.assign_later`)
``consumer-join:<member>``      a classic member told to rejoin did not within
                                its rebalance time-out: fenced
``consumer-sync:<member>``      a classic member did not send its SyncGroup
                                within its rebalance time-out: fenced
==============================  =================================================

A timer the runtime re-armed before its expiry ran is not delivered (the
runtime's rule), so an expiry here is always current; the rebalance
time-out still checks the member's epoch, as Kafka's does.
"""

from __future__ import annotations

from dataclasses import replace

from zkcoord.core.consumer import regexes
from zkcoord.core.consumer.heartbeat import INT32_MAX_MS, fence_members
from zkcoord.core.consumer.messages import ASSIGN_KEY, REGEX_KEY, parse_key
from zkcoord.core.consumer.model import ConsumerGroup
from zkcoord.core.consumer.target import assign_later, metadata_hash
from zkcoord.core.messages import Offloaded, Outcome

__all__ = ["handle_consumer_timer", "expiry_note"]


def handle_consumer_timer(group: ConsumerGroup, key: str, now_ms: int, config) -> Outcome | Offloaded:
    if group.dead:
        return Outcome(group)
    if key == REGEX_KEY:
        return _resolve(group, now_ms, config)
    if key == ASSIGN_KEY:
        return assign_later(group, now_ms, config)
    parsed = parse_key(key)
    if parsed is None:
        return Outcome(group)
    kind, member_id = parsed
    member = group.members.get(member_id)
    if member is None:
        return Outcome(group)
    if kind == "rebalance" and group.rebalance_epochs.get(member_id) != member.member_epoch:
        return Outcome(group)  # it moved on from the epoch the time-out watched
    return fence_members(group, [member], None, None, now_ms, config)


def _resolve(group: ConsumerGroup, now_ms: int, config) -> Outcome:
    resolved, bump = regexes.resolve(group, config.image, now_ms)
    new_hash = metadata_hash(resolved, config.image)
    if new_hash != group.metadata_hash:
        bump = True
    if bump:
        epoch = group.group_epoch + 1
        resolved = replace(resolved, group_epoch=epoch, metadata_hash=new_hash,
                           metadata_refresh_deadline_ms=now_ms + INT32_MAX_MS, metadata_refresh_epoch=epoch)
    persist = bump or resolved.resolved_regexes != group.resolved_regexes
    return Outcome(resolved, persist)


def expiry_note(key: str, before: ConsumerGroup, after: ConsumerGroup) -> str | None:
    parsed = parse_key(key)
    if parsed is None or len(after.members) >= len(before.members):
        return None
    kind, member_id = parsed
    why = {"session": "its session expired",
           "rebalance": "it did not revoke its partitions within its rebalance time-out",
           "join": "the classic member failed to join within the rebalance timeout",
           "sync": "the member failed to sync within timeout"}[kind]
    return f"member {member_id} fenced from the group because {why}; group epoch {after.group_epoch}"
