"""The handover decision: what the owner daemon of a mixed group (legacy
ZooKeeper consumers and zkcoord members) must do next, as data.

The daemon takes part in the legacy consumers' rebalance on behalf of its
members. Each member stands for one legacy consumer id, registered under
``/consumers/<group>/ids`` like any legacy consumer
(:mod:`zkcoord.core.handover.registration`), so every legacy consumer counts
it in :func:`~zkcoord.core.handover.legacy_range.range_assignment` and leaves
its ranges alone; the daemon computes the same answer and holds the owner
znodes ``/consumers/<group>/owners/<topic>/<partition>`` of those ranges for
its members (ephemeral, in its own session, holding the member's thread id,
as a legacy consumer writes them).

:func:`plan` reads one consistent picture (:class:`View`) and returns a
:class:`Plan`. The daemon carries it out (registrations first, then
revocations and releases, then claims), reads again and plans again until
the plan is settled. Nothing here does I/O.

The rules, per partition ``p`` whose target thread (the range answer) is
``T`` and whose owner znode names ``H`` (or is absent)::

    situation                                 decision
    ----------------------------------------  -------------------------------------------------
    H ours, H == T                            keep; the member consumes p
    H ours, H != T, the member H names gone   release now (nobody consumes it; its offset is
                                              what the member last committed)
    H ours, H != T, that member live and      revoke: the member stops consuming p and commits
    not quiesced on p                         its offset to ZooKeeper; keep the znode
    H ours, H != T, that member quiesced      release (and claim in the same plan if T is ours
    on p                                      too)
    absent, T ours                            claim for T
    H not ours, T ours                        wait: the holder releases it in its own rebalance
    absent or not ours, T not ours            nothing (a legacy consumer's business)

"Ours" is decided by the znode's session (its ``ephemeralOwner`` is the
daemon's session id), never by the name it holds: a name can be read back
wrong, a session cannot. From this follow the invariants the tests check:

1. *At most one owner*: zkcoord claims only absent znodes, legacy consumers
   claim only absent znodes (``createEphemeralPathExpectConflict``), and a
   member consumes only partitions whose znode the daemon holds for its
   thread. So no partition is consumed by two members, legacy or not.
2. *No gap, no double delivery*: a znode of ours is released only once its
   member stopped consuming and committed (``quiesced``), or once the
   member is gone; a legacy consumer with auto-commit commits before it
   releases (``closeFetchersForQueues``). The next owner starts from the
   committed offset, read after its claim.
3. *Same answer*: the target is computed from the registrations as read,
   zkcoord's own included, exactly as each legacy consumer computes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field

from zkcoord.core.handover.legacy_range import TopicPartition, range_assignment
from zkcoord.core.handover.registration import LegacyRegistration, split_thread_id, thread_id
from zkcoord.errors import UsageError

__all__ = ["Owner", "Member", "View", "Release", "Claim", "Plan", "plan"]


@dataclass(frozen=True)
class Owner:
    """An owner znode as read: the name it holds, and whether the daemon's
    session holds it."""

    holder: str
    ours: bool


@dataclass(frozen=True)
class Member:
    """A zkcoord member taking part: the legacy consumer id it stands for,
    its topics and the streams it asks for on each (1 for one consumer; more
    to take the share of a legacy consumer with that many streams)."""

    consumer_id: str
    topics: Mapping[str, int]
    member_id: str = ""  # zkcoord's member id, for the runtime; not used in decisions

    def __post_init__(self) -> None:
        if not isinstance(self.consumer_id, str) or not self.consumer_id:
            raise UsageError(f"a member needs a consumer id, got {self.consumer_id!r}")
        if not self.topics:
            raise UsageError(f"member {self.consumer_id!r} subscribes to no topic")
        LegacyRegistration.static(self.consumer_id, self.topics)  # validates the stream counts

    def registration(self) -> LegacyRegistration:
        return LegacyRegistration.static(self.consumer_id, self.topics)

    def registration_as(self, stored: LegacyRegistration) -> LegacyRegistration:
        """Our registration with ``stored``'s version and timestamp: equal to
        ``stored`` when the znode says what this member subscribes to."""
        return LegacyRegistration(self.consumer_id, dict(self.topics), None, "static", stored.version,
                                  stored.timestamp)

    def threads(self) -> frozenset[str]:
        return frozenset(thread_id(self.consumer_id, i) for i in range(max(self.topics.values())))


@dataclass(frozen=True)
class View:
    """One reading of the group, with what the daemon knows of its members.

    ``registrations``: every znode under ``/ids`` (parsed), zkcoord's too.
    ``ours``: the consumer ids under ``/ids`` whose znode the daemon's session holds.
    ``topics``: every topic under ``/brokers/topics`` -> its partition numbers.
    ``owners``: every owner znode of the group's topics.
    ``members``: the daemon's live members taking part, by consumer id.
    ``quiesced``: (partition, consumer id) pairs: that member was asked to
    give the partition up and has: it stopped consuming it and its offset is
    committed to ZooKeeper. Kept per member, so that a member's late answer
    about a partition that has moved on cannot release it from under the
    member consuming it now.
    """

    registrations: Mapping[str, LegacyRegistration]
    topics: Mapping[str, tuple[int, ...]]
    owners: Mapping[TopicPartition, Owner] = field(default_factory=dict)
    members: Mapping[str, Member] = field(default_factory=dict)
    ours: Set[str] = frozenset()
    quiesced: Set[tuple[TopicPartition, str]] = frozenset()
    exclude_internal_topics: bool = True


@dataclass(frozen=True, order=True)
class Release:
    """Delete our owner znode of ``partition`` (only if still ours)."""

    partition: TopicPartition
    holder: str


@dataclass(frozen=True, order=True)
class Claim:
    """Create the owner znode of ``partition`` for thread ``holder``
    (ephemeral; NodeExists means someone else has it: wait and try again)."""

    partition: TopicPartition
    holder: str


@dataclass(frozen=True)
class Plan:
    """What to do next, in this order: unregister, register, revoke (ask
    members), release, claim. ``assignment``: per member (consumer id), the
    partitions it may consume now; ``revoke``: what it must stop consuming
    and commit; ``waiting``: partitions of our ranges another holder still
    has (legacy, or a member of ours not yet quiesced). ``disagreeing``:
    partitions outside our ranges whose holder (not ours) is not the target
    thread: normal while legacy consumers rebalance; if it lasts after they
    settled, they do not compute the range answer (``partition.assignment.
    strategy=roundrobin``, which no znode shows) and the handover must stop.
    ``blocked``: members whose consumer id another session has registered
    (a previous owner daemon's): they get nothing until it is gone (or the
    runtime gives them a new id). ``unowned``: partitions of legacy threads'
    ranges with no owner znode: normal during their rebalance; for longer
    than a back-off, they gave up (:func:`~zkcoord.core.handover.retries.
    needs_nudge`)."""

    target: Mapping[TopicPartition, str]
    register: tuple[str, ...] = ()
    unregister: tuple[str, ...] = ()
    revoke: Mapping[str, frozenset[TopicPartition]] = field(default_factory=dict)
    release: tuple[Release, ...] = ()
    claim: tuple[Claim, ...] = ()
    waiting: Mapping[TopicPartition, str] = field(default_factory=dict)
    assignment: Mapping[str, frozenset[TopicPartition]] = field(default_factory=dict)
    disagreeing: Mapping[TopicPartition, str] = field(default_factory=dict)
    blocked: tuple[str, ...] = ()
    unowned: frozenset[TopicPartition] = frozenset()

    @property
    def settled(self) -> bool:
        """Nothing left to do: every range of ours is held and consumed."""
        return not (self.register or self.unregister or self.revoke or self.release or self.claim
                    or self.waiting or self.blocked)


def _thread_members(members: Mapping[str, Member]) -> dict[str, str]:
    """thread id -> consumer id of every live member's threads."""
    return {t: cid for cid, m in members.items() for t in m.threads()}


def _member_of(holder: str, members: Mapping[str, Member]) -> str | None:
    """The live member whose consumer id an owner znode names (whatever the
    stream: a member that now asks for fewer streams still consumes what its
    old threads hold until it gives it up)."""
    split = split_thread_id(holder)
    return split[0] if split is not None and split[0] in members else None


def _registrations(view: View) -> tuple[set[str], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(stale, register, unregister, blocked): a stale registration is ours
    but no longer says what its member subscribes to; it is deleted and
    created again (legacy consumers watch the children of ``ids``, not their
    data). A member is blocked while another session holds its consumer id
    (a previous owner daemon's, until that session ends)."""
    blocked = tuple(sorted(cid for cid in view.members if cid in view.registrations and cid not in view.ours))
    stale = {cid for cid, m in view.members.items() if cid in view.registrations and cid in view.ours
             and view.registrations[cid] != m.registration_as(view.registrations[cid])}
    register = tuple(sorted(cid for cid in view.members if cid not in view.registrations or cid in stale))
    unregister = tuple(sorted(cid for cid in view.ours
                              if cid in view.registrations and (cid not in view.members or cid in stale)))
    return stale, register, unregister, blocked


def plan(view: View) -> Plan:
    """The next step of the handover for ``view`` (module docstring)."""
    for cid, member in view.members.items():
        if member.consumer_id != cid:
            raise UsageError(f"member keyed {cid!r} stands for consumer {member.consumer_id!r}")
    stale, register, unregister, blocked = _registrations(view)
    target = range_assignment(view.registrations.values(), view.topics, view.exclude_internal_topics)
    live_threads = _thread_members(view.members)
    # Our ranges count only for members registered (by our session) as they are now: a member whose
    # registration is missing or being replaced gets nothing until the legacy consumers see it as it is.
    current = {cid for cid in view.members if cid in view.ours and cid not in stale}
    ours_target = {tp: t for tp, t in target.items() if live_threads.get(t) in current}

    revoke: dict[str, set[TopicPartition]] = {}
    release: list[Release] = []
    assignment: dict[str, set[TopicPartition]] = {cid: set() for cid in view.members}
    for tp, owner in view.owners.items():
        if not owner.ours:
            continue
        wanted = ours_target.get(tp)
        if wanted is not None and owner.holder == wanted:
            assignment[live_threads[wanted]].add(tp)
            continue
        holder_member = _member_of(owner.holder, view.members)
        if holder_member is None or (tp, holder_member) in view.quiesced:
            release.append(Release(tp, owner.holder))
        else:
            revoke.setdefault(holder_member, set()).add(tp)

    releasing = {r.partition for r in release}
    claim: list[Claim] = []
    waiting: dict[TopicPartition, str] = {}
    for tp, wanted in ours_target.items():
        owner = view.owners.get(tp)
        if owner is None or tp in releasing:
            claim.append(Claim(tp, wanted))
        elif owner.holder != wanted or not owner.ours:
            waiting[tp] = owner.holder
    disagreeing = {tp: o.holder for tp, o in view.owners.items()
                   if not o.ours and tp not in ours_target and target.get(tp) != o.holder}
    unowned = frozenset(tp for tp in target if tp not in ours_target and tp not in view.owners
                        and live_threads.get(target[tp]) is None)
    return Plan(target, register, unregister, {cid: frozenset(tps) for cid, tps in revoke.items()},
                tuple(sorted(release)), tuple(sorted(claim)), waiting,
                {cid: frozenset(tps) for cid, tps in assignment.items()}, disagreeing, blocked, unowned)
