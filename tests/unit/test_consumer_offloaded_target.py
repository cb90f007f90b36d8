"""A large consumer group's target assignment, computed off the event loop
(:mod:`zkcoord.core.consumer.target`): the heartbeat that needs it is
answered from the last target and arms ``ASSIGN_KEY``; its expiry hands the
runtime the computation (:class:`~zkcoord.core.messages.Offloaded`), and
``finish`` writes the result into the group as it is by then.

Pure: the scenes run ``compute`` themselves, where the runtime would run it
in a worker thread, so what changes between the snapshot and the finish is
exact."""

from __future__ import annotations

from dataclasses import replace

from zkcoord.core.consumer.config import ConsumerGroupConfig
from zkcoord.core.consumer.kind import CONSUMER
from zkcoord.core.consumer.messages import ASSIGN_KEY
from zkcoord.core.consumer.model import GroupState
from zkcoord.core.messages import Offloaded, Schedule
from zkcoord.core.topics_image import TopicInfo, TopicsImage
from zkcoord.errors import GroupRequestError
from tests.unit.test_consumer_group import CONFIG, T, Scene, owned, partitions

OFFLOAD = replace(CONFIG, consumer=ConsumerGroupConfig(assignment_interval_ms=0, offload_min_size=0))


def offloaded(s: Scene) -> Offloaded:
    """The ASSIGN_KEY expiry's computation (the timer must be armed)."""
    assert s.timers.pop(ASSIGN_KEY) <= s.now
    work = CONSUMER.handle_timer(s.group, ASSIGN_KEY, s.now, s.config)
    assert isinstance(work, Offloaded)
    return work


def beat(s: Scene, member_id: str):
    """A heartbeat of the member at its epoch, owning what it was given."""
    member = s.member(member_id)
    return s.beat(member_id, member.member_epoch, owned=owned(member))


def land(s: Scene, work: Offloaded, result=None):
    """``finish`` with what ``compute`` gives (or ``result``), applied as the runtime applies it."""
    outcome = work.finish(s.group, work.compute() if result is None else result, s.now)
    s._apply(outcome)
    return outcome


def test_the_heartbeat_that_needs_a_target_is_answered_from_the_last_one_and_arms_the_timer():
    s = Scene(OFFLOAD)
    answer, outcome = s.join("a")
    assert (s.group.group_epoch, s.group.assignment_epoch, s.group.state) == (2, 1, GroupState.ASSIGNING)
    assert s.group.target_pending and answer.member_epoch == 1 and partitions(answer.assignment) == {}
    assert Schedule(ASSIGN_KEY, s.now) in outcome.timers
    # another heartbeat meanwhile: the last target again, and the timer is not armed twice
    _, again = s.beat("a", 1)
    assert ASSIGN_KEY not in {op.key for op in again.timers}
    outcome = land(s, offloaded(s))
    assert outcome.persist and not s.group.target_pending
    assert (s.group.assignment_epoch, partitions(s.group.target("a"))) == (2, {T: [0, 1, 2, 3]})
    answer, _ = s.beat("a", 1)
    assert (answer.member_epoch, partitions(answer.assignment)) == (2, {T: [0, 1, 2, 3]})
    assert s.group.state is GroupState.STABLE


def test_offloaded_targets_are_those_computed_in_the_heartbeat():
    """The same joins, leaves and subscription changes, each landed before
    the next: the same targets and epochs as the inline computation."""
    inline, off = Scene(CONFIG), Scene(OFFLOAD)
    steps = [("join", "a", ("t",)), ("join", "b", ("t", "u")), ("join", "c", ("u",)), ("leave", "b", None),
             ("join", "d", ("t", "u")), ("join", "b", ("t",))]
    for op, member, names in steps:
        for s in (inline, off):
            if op == "join":
                s.join(member, names=names)
            else:
                s.beat(member, -1)
        if ASSIGN_KEY in off.timers:  # a leave computes no target (the next heartbeat does)
            land(off, offloaded(off))
        assert dict(off.group.targets) == dict(inline.group.targets)
        assert off.group.assignment_epoch == inline.group.assignment_epoch
    assert off.group.assignment_epoch == off.group.group_epoch


def test_a_member_gone_before_the_target_lands_gets_nothing_and_the_target_is_computed_again():
    s = Scene(OFFLOAD)
    s.join("a")
    land(s, offloaded(s))
    beat(s, "a")
    assert s.member("a").member_epoch == 2
    s.join("b")
    work = offloaded(s)  # the snapshot: a and b, group epoch 3
    s.beat("b", -1)  # b leaves before the computation lands: group epoch 4
    assert s.group.group_epoch == 4 and s.group.target_pending
    land(s, work)
    assert "b" not in s.group.targets and "b" not in s.group.members
    assert s.group.assignment_epoch == 3 and s.group.state is GroupState.ASSIGNING
    assert len(s.group.target("a")[T]) == 2  # a's share with b: the other half is free until the next target
    _, outcome = beat(s, "a")
    assert Schedule(ASSIGN_KEY, s.now) in outcome.timers  # computed again: the group epoch is ahead
    land(s, offloaded(s))
    assert (s.group.assignment_epoch, partitions(s.group.target("a"))) == (4, {T: [0, 1, 2, 3]})


def test_a_static_members_target_goes_to_the_member_that_took_its_instance_id_meanwhile():
    s = Scene(OFFLOAD)
    s.join("a", instance="i-a")
    land(s, offloaded(s))
    beat(s, "a")
    s.join("b")
    work = offloaded(s)  # a loses half its partitions to b in this computation
    s.beat("a", -2)  # a static member leaves for a while ...
    s.join("a2", instance="i-a")  # ... and comes back under a new member id
    assert "a" not in s.group.members and s.group.static_members["i-a"] == "a2"
    land(s, work)
    a2, b = set(s.group.target("a2")[T]), set(s.group.target("b")[T])
    assert len(a2) == len(b) == 2 and not a2 & b  # never a partition in two targets
    assert "a" not in s.group.targets


def test_a_failed_computation_keeps_the_target_and_is_tried_again_after_the_interval():
    config = replace(OFFLOAD, consumer=ConsumerGroupConfig(assignment_interval_ms=1_000, offload_min_size=0))
    s = Scene(config)
    s.join("a")
    work = offloaded(s)
    before = s.group.targets
    outcome = land(s, work, GroupRequestError(0, "the assignor cannot assign"))
    assert not s.group.target_pending and s.group.targets is before and s.group.assignment_epoch == 1
    assert outcome.persist and s.group.assignment_timestamp_ms == s.now
    _, outcome = s.beat("a", 1)
    assert ASSIGN_KEY not in {op.key for op in outcome.timers}  # within the interval
    s.now += 1_000
    _, outcome = s.beat("a", 1)
    assert Schedule(ASSIGN_KEY, s.now) in outcome.timers


def test_a_target_made_stale_or_no_longer_pending_changes_nothing():
    s = Scene(OFFLOAD)
    s.join("a")
    work = offloaded(s)
    computed = work.compute()
    land(s, work, computed)
    group = s.group
    outcome = work.finish(group, computed, s.now)  # landed twice: the second finds nothing pending
    assert outcome.group is group and not outcome.persist
    # the expiry of a timer whose target is no longer needed clears the mark, computing nothing
    marked = replace(group, target_pending=True)
    outcome = CONSUMER.handle_timer(marked, ASSIGN_KEY, s.now, s.config)
    assert not isinstance(outcome, Offloaded) and not outcome.group.target_pending and not outcome.persist


def test_only_a_large_group_is_computed_off_the_loop():
    """Subscribed partitions plus 8 per member from ``offload_min_size`` (2,000
    by default); below it, and with the offload off, in the heartbeat."""
    for partitions_, offload, pending in ((1_991, True, False), (1_992, True, True), (1_992, False, False)):
        image = TopicsImage.of([TopicInfo("t", T, partitions_)])
        s = Scene(replace(CONFIG, image=image, consumer=ConsumerGroupConfig(assignment_interval_ms=0,
                                                                           assignor_offload=offload)))
        answer, _ = s.join("a")
        assert s.group.target_pending is pending, (partitions_, offload)
        assert (answer.member_epoch == 2) is not pending
