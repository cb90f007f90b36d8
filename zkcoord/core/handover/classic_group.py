"""A classic group in handover: its members get what the daemon holds for them.

While a classic consumer group shares its partitions with legacy ZooKeeper
consumers (``docs/handover.md``), the owner daemon, not the group's leader,
decides what each member consumes: exactly the partitions whose owner
znode the daemon holds for that member's thread. This module is the classic
group's side of that, pure:

* :func:`handle_shares` sets the group's ``handover_shares`` (member id ->
  partitions) and starts a rebalance when a Stable member's assignment is
  not its share (a partition to give up, or one newly held): the members
  rejoin (an eager consumer stops consuming everything and, with
  auto-commit, commits first), and the SyncGroup that ends the rebalance
  hands out the shares (:func:`share_assignments`) instead of the leader's
  assignment. ``None`` ends the handover: a Stable group rebalances and its
  leader assigns every partition again (the shares covered only what the
  legacy range answer gave zkcoord's members).
* :func:`handle_ids` records, persisted, the legacy consumer id the daemon
  registers for each member (the group record's ``"ho"``).
* :func:`consuming` is what a member may still be consuming, as far as the
  group can tell: the daemon releases a partition's owner znode only once
  its member is no longer consuming it (the decision's ``quiesced``).

Rule for :func:`consuming`, with ``owned`` the partitions the member's last
JoinGroup says it still owns (a cooperative consumer keeps some across a
rebalance; an eager one owns none when it rejoins) and ``assigned`` its last
SyncGroup assignment:

===================================================  ===================
member                                               consuming
===================================================  ===================
rejoined in this rebalance (its JoinGroup is parked  ``owned``
while preparing; a dynamic member once the join
phase completed: it was dropped otherwise)
otherwise (Stable; a static member that may not      ``assigned`` ∪ ``owned``
have rejoined; not yet rejoined while preparing)
an assignment that does not decode                   None: anything
===================================================  ===================

Assignments are written as ``ConsumerProtocolAssignment`` version 0, which
every client reads.
"""

from __future__ import annotations

from collections.abc import Mapping

from zkcoord.core.consumer.protocol import MalformedProtocolError
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.group_states import GroupState
from zkcoord.core.handover.legacy_range import TopicPartition
from zkcoord.core.membership import Group, GroupConfig, Member
from zkcoord.core.messages import Outcome
from zkcoord.core.rebalance import Draft, prepare_rebalance, try_complete_join

__all__ = ["CONSUMER_PROTOCOL_TYPE", "handle_shares", "handle_ids", "share_assignments", "consuming",
           "subscribed_topics", "assigned"]

S = GroupState
CONSUMER_PROTOCOL_TYPE = "consumer"
Shares = Mapping[str, frozenset[TopicPartition]]


def _partitions(by_topic: Mapping[str, tuple[int, ...]] | tuple) -> frozenset[TopicPartition]:
    items = by_topic.items() if isinstance(by_topic, Mapping) else by_topic
    return frozenset((topic, p) for topic, parts in items for p in parts)


def _metadata(group: Group, member: Member) -> bytes:
    """The member's metadata for the group's protocol (its first before one is chosen)."""
    if group.protocol_name is not None and group.protocol_name in member.protocol_names():
        return member.metadata(group.protocol_name)
    return member.protocols[0][1] if member.protocols else b""


def subscribed_topics(group: Group, member_id: str, config: GroupConfig) -> frozenset[str] | None:
    """The topics a member subscribes to; None when its metadata does not decode."""
    try:
        return frozenset(config.consumer_protocol.subscription(_metadata(group, group.members[member_id])).topics)
    except MalformedProtocolError:
        return None


def assigned(member: Member, config: GroupConfig) -> frozenset[TopicPartition] | None:
    """The partitions of the member's last assignment; None if it does not decode."""
    if not member.assignment:
        return frozenset()
    try:
        return _partitions(config.consumer_protocol.assignment(member.assignment).partitions)
    except MalformedProtocolError:
        return None


def consuming(group: Group, member_id: str, config: GroupConfig) -> frozenset[TopicPartition] | None:
    """What ``member_id`` may be consuming now (module docstring); None: anything."""
    member = group.members[member_id]
    try:
        owned = _partitions(config.consumer_protocol.subscription(_metadata(group, member)).owned)
    except MalformedProtocolError:
        return None
    rejoined = ((group.state is S.PREPARING_REBALANCE and member_id in group.awaiting_join)
                or (group.state is S.COMPLETING_REBALANCE and not member.is_static))
    if rejoined:
        return owned
    given = assigned(member, config)
    return None if given is None else given | owned


def share_assignments(group: Group | Draft, config: GroupConfig) -> dict[str, bytes]:
    """Every member's assignment bytes: its share (nothing if it has none)."""
    shares = group.handover_shares or FrozenMap()
    out: dict[str, bytes] = {}
    for member_id in group.members:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(shares.get(member_id, frozenset())):
            by_topic.setdefault(topic, []).append(partition)
        out[member_id] = config.consumer_protocol.encode_assignment(by_topic, 0)
    return out


def handle_shares(group: Group, shares: Shares | None, now_ms: int, config: GroupConfig,
                  hold: bool = False) -> Outcome:
    """Set the group's handover shares (None: the handover is over) and
    rebalance a Stable group whose members' assignments differ from them.

    ``hold``: the daemon is about to hold more partitions for the members
    (claims under way, holders releasing): a Stable group rebalances now
    (its members hear of it at their next heartbeat while the claims go on)
    and the join phase waits for the hold to be lifted (or its timer), so
    that one rebalance hands the new shares out. Lifting it ends a join
    phase every member has rejoined.

    Persist: only what a rebalance it starts persists (a generation block)."""
    if group.state is S.DEAD:
        return Outcome(group, False, (), ())
    frozen = None if shares is None else FrozenMap(
        {mid: frozenset(parts) for mid, parts in shares.items() if mid in group.members})
    w = Draft.of(group, now_ms, config)
    w.handover_shares = frozen
    w.handover_hold = hold and frozen is not None
    if w.state is S.STABLE and (
            (frozen is None and group.handover_shares is not None)  # the leader assigns every partition again
            or (frozen is not None and (w.handover_hold or any(
                assigned(m, config) != frozen.get(mid, frozenset()) for mid, m in w.members.items())))):
        prepare_rebalance(w)
    else:
        try_complete_join(w)  # the hold lifted, or the newcomers are registered: end a join everyone rejoined
    return w.outcome()


def handle_ids(group: Group, ids: Mapping[str, str] | None, now_ms: int, config: GroupConfig) -> Outcome:
    """Record the legacy consumer ids the owner daemon registers for the
    members (None: the handover is over). Persist: when they changed, before
    any znode is written for a new id, so the next owner knows them all."""
    if group.state is S.DEAD:
        return Outcome(group, False, (), ())
    frozen = None if ids is None else FrozenMap(ids)
    if frozen == group.handover_ids:
        return Outcome(group, False, (), ())
    w = Draft.of(group, now_ms, config)
    w.handover_ids = frozen
    w.persist = True
    return w.outcome()
