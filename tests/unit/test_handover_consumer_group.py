"""A KIP-848 consumer group in handover (zkcoord.core.handover.consumer_group):
the daemon's shares are the target (a changed share moves the group epoch on,
members reconcile toward it revoking first, a partition goes to a member only
once no other member owns it), members absent from the shares get nothing,
the end of the handover gives the assignor its say back, what a member may
still be consuming at each step, classic-protocol members inside the group,
and the shares going with the group when it changes type or a static member
is replaced."""

from __future__ import annotations

from dataclasses import replace

from test_consumer_group import CONFIG, IMAGE, T, U, Scene, owned, partitions
from test_consumer_group_migration import CONFIG as MIGRATION_CONFIG
from test_consumer_group_migration import Scene as MigrationScene
from test_consumer_group_migration import decoded

from zkcoord.core import groups
from zkcoord.core.consumer.kind import CONSUMER
from zkcoord.core.consumer.model import ConsumerGroup, GroupState, MemberState
from zkcoord.core.consumer.record import from_records, record_problem
from zkcoord.core.errors import ErrorCode
from zkcoord.core.handover import classic_group
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.handover.consumer_group import consuming, handle_ids, handle_shares, subscribed_topics
from zkcoord.core.membership import Group
from zkcoord.core.topics_image import TopicInfo, TopicsImage

E = ErrorCode


def tps(*partitions_of_t: int, topic: str = "t") -> frozenset[tuple[str, int]]:
    return frozenset((topic, p) for p in partitions_of_t)


def shares(s: Scene, **by_member: tuple[int, ...]):
    """The daemon hands the group these shares of topic t."""
    outcome = handle_shares(s.group, {m: tps(*ps) for m, ps in by_member.items()}, s.now, s.config)
    s._apply(outcome)
    return outcome


def targets(group: ConsumerGroup) -> dict[str, dict[str, list[int]]]:
    return {m: partitions(target) for m, target in group.targets.items()}


def epochs(group: ConsumerGroup) -> tuple[int, int]:
    return group.group_epoch, group.assignment_epoch


def two_members() -> Scene:
    """a (partitions 0, 1) and b (2, 3), Stable at epoch 3, no handover."""
    s = Scene()
    s.join("a")
    s.join("b")
    s.beat("a", 2, owned=owned(s.member("a")))  # a revokes 2 and 3 ...
    s.beat("a", 2, owned=owned(s.member("a")))  # ... and says so
    s.beat("b", 3, owned=())
    assert s.group.state is GroupState.STABLE and targets(s.group) == {"a": {T: [0, 1]}, "b": {T: [2, 3]}}
    return s


def test_shares_that_are_the_targets_change_nothing_stored():
    s = two_members()
    before = s.group
    outcome = shares(s, a=(0, 1), b=(2, 3))
    assert not outcome.persist and s.group.handover_shares == {"a": tps(0, 1), "b": tps(2, 3)}
    assert s.group.members is before.members and s.group.targets is before.targets and epochs(s.group) == (3, 3)
    again = s.group
    assert not shares(s, a=(0, 1), b=(2, 3)).persist and s.group is again  # the same shares: the same group


def test_a_changed_share_is_the_target_at_a_new_epoch_revoked_first():
    s = two_members()
    before = s.group
    outcome = shares(s, a=(0,), b=(2, 3))  # the daemon takes partition 1 from a
    assert outcome.persist and outcome.replies == () and outcome.timers == ()
    assert epochs(s.group) == (4, 4) and targets(s.group) == {"a": {T: [0]}, "b": {T: [2, 3]}}
    assert [k for k, _, _ in CONSUMER.writes(before, s.group)] == ["target", ""]  # the target, the epochs
    assert consuming(s.group, "a", CONFIG) == tps(0, 1)  # it has not heard yet
    answer, _ = s.beat("a", 3, owned=((T, (0, 1)),))
    a = s.member("a")
    assert (answer.member_epoch, partitions(answer.assignment), a.state) == (3, {T: [0]},
                                                                            MemberState.UNREVOKED_PARTITIONS)
    assert consuming(s.group, "a", CONFIG) == tps(0, 1)  # still revoking 1
    answer, _ = s.beat("a", 3, owned=((T, (0,)),))
    assert (answer.member_epoch, s.member("a").state) == (4, MemberState.STABLE)
    assert consuming(s.group, "a", CONFIG) == tps(0)
    answer, _ = s.beat("b", 3, owned=((T, (2, 3)),))
    assert (answer.member_epoch, answer.assignment) == (4, None) and s.group.state is GroupState.STABLE


def test_a_partition_goes_to_its_new_member_only_once_the_old_one_revoked_it():
    s = two_members()
    shares(s, a=(0,), b=(1, 2, 3))  # (the daemon never does this in one step; the group is safe anyway)
    answer, _ = s.beat("b", 3, owned=((T, (2, 3)),))
    assert (answer.member_epoch, s.member("b").state) == (4, MemberState.UNRELEASED_PARTITIONS)
    assert answer.assignment is None and consuming(s.group, "b", CONFIG) == tps(2, 3)  # 1 is still a's
    s.beat("a", 3, owned=((T, (0, 1)),))
    answer, _ = s.beat("b", 4, owned=((T, (2, 3)),))
    assert answer.assignment is None  # a is revoking it
    s.beat("a", 3, owned=((T, (0,)),))
    answer, _ = s.beat("b", 4, owned=((T, (2, 3)),))
    assert partitions(answer.assignment) == {T: [1, 2, 3]} and s.member("b").state is MemberState.STABLE
    assert consuming(s.group, "b", CONFIG) == tps(1, 2, 3) and s.group.state is GroupState.STABLE


def test_a_member_absent_from_the_shares_gets_nothing_and_a_join_asks_no_assignor():
    s = two_members()
    shares(s, a=(0, 1), b=(2,))
    s.beat("b", 3, owned=((T, (2, 3)),))  # b is told to revoke 3 ...
    s.beat("b", 3, owned=((T, (2,)),))  # ... and has: 3 is free
    assert dict(s.group.partition_epochs) == {(T, 0): 3, (T, 1): 3, (T, 2): 4}  # a has not heartbeated since
    answer, _ = s.join("c")
    assert (answer.member_epoch, partitions(answer.assignment)) == (5, {})  # 3 is free, but in no share
    assert targets(s.group) == {"a": {T: [0, 1]}, "b": {T: [2]}, "c": {}} and epochs(s.group) == (5, 5)
    assert consuming(s.group, "c", CONFIG) == frozenset()
    shares(s, a=(0, 1), b=(2,), c=(3,))
    answer, _ = s.beat("c", 5, owned=())
    assert (answer.member_epoch, partitions(answer.assignment)) == (6, {T: [3]}) and epochs(s.group) == (6, 6)


def test_a_member_leaving_keeps_the_others_on_their_shares():
    s = two_members()
    shares(s, a=(0,), b=(2, 3))
    s.beat("a", 3, owned=((T, (0,)),))  # told to give 1 up (it already has: zkcoord asks anyway)
    s.beat("a", 3, owned=((T, (0,)),))  # gone after it was asked: a moves on
    assert s.member("a").member_epoch == 4
    answer, _ = s.beat("b", -1)  # leaves
    assert answer.error is E.NONE and list(s.group.members) == ["a"] and epochs(s.group) == (5, 4)
    answer, _ = s.beat("a", 4, owned=((T, (0,)),))
    assert (answer.member_epoch, answer.assignment) == (5, None)  # its share, not every partition
    assert targets(s.group) == {"a": {T: [0]}} and epochs(s.group) == (5, 5)


def test_ending_the_handover_gives_the_assignor_its_say_back():
    s = two_members()
    shares(s, a=(0,), b=(1,))
    outcome = handle_shares(s.group, None, s.now, CONFIG)
    s._apply(outcome)
    assert outcome.persist and s.group.handover_shares is None and epochs(s.group) == (5, 4)
    answer, _ = s.beat("a", 3, owned=((T, (0, 1)),))
    assert targets(s.group) == {"a": {T: [0, 2]}, "b": {T: [1, 3]}}  # the uniform assignor's, from the shares
    assert (answer.member_epoch, partitions(answer.assignment)) == (3, {T: [0]})  # 1 is revoked first


def test_no_handover_no_change():
    s = two_members()
    before = s.group
    outcome = handle_shares(s.group, None, s.now, CONFIG)
    assert outcome.group is before and not outcome.persist
    empty = groups.new_group("g")
    assert handle_shares(empty, {}, s.now, CONFIG).group is empty  # not a consumer group: another module's


def test_the_end_of_a_handover_of_an_empty_group_writes_nothing():
    s = Scene()
    s._apply(handle_shares(ConsumerGroup("g"), {}, s.now, CONFIG))
    outcome = handle_shares(s.group, None, s.now, CONFIG)
    assert not outcome.persist and outcome.group.handover_shares is None and epochs(outcome.group) == (1, 1)


def test_shares_of_unknown_members_and_topics_are_left_out_of_the_target():
    s = two_members()
    outcome = handle_shares(s.group, {"a": tps(0) | {("gone", 0)}, "nobody": tps(1), "b": tps(2, 3)}, s.now, CONFIG)
    s._apply(outcome)
    assert s.group.handover_shares == {"a": tps(0) | {("gone", 0)}, "b": tps(2, 3)}
    assert targets(s.group) == {"a": {T: [0]}, "b": {T: [2, 3]}}


def test_a_share_of_two_topics():
    s = Scene()
    s.join("a", names=("t", "u"))
    s.beat("a", 2, owned=owned(s.member("a")))
    handle = handle_shares(s.group, {"a": tps(1) | tps(0, topic="u")}, s.now, CONFIG)
    s._apply(handle)
    assert targets(s.group) == {"a": {T: [1], U: [0]}}
    s.beat("a", 2, owned=owned(s.member("a")))
    s.beat("a", 2, owned=((T, (1,)), (U, (0,))))
    assert consuming(s.group, "a", CONFIG) == tps(1) | tps(0, topic="u")


def test_consuming_names_nothing_for_a_stranger_and_anything_for_an_unknown_topic_id():
    s = two_members()
    assert consuming(s.group, "nobody", CONFIG) == frozenset()
    without_t = CONFIG.__class__(**{**CONFIG.__dict__, "image": TopicsImage.of([TopicInfo("u", U, 2)])})
    assert consuming(s.group, "a", without_t) is None


def test_subscribed_topics():
    s = Scene()
    s.join("a", names=("t", "u"))
    assert subscribed_topics(s.group, "a", CONFIG) == {"t", "u"}
    assert subscribed_topics(s.group, "nobody", CONFIG) is None
    s.beat("b", 0, regex="u|t", owned=(), rebalance_timeout_ms=30_000)
    s.fire("consumer-regex")
    assert subscribed_topics(s.group, "b", CONFIG) == {"t", "u"}


def test_a_steady_heartbeat_in_a_handover_writes_nothing():
    s = two_members()
    shares(s, a=(0, 1), b=(2, 3))
    group = s.group
    answer, outcome = s.beat("a", 3)
    assert not outcome.persist and s.group is group and answer.assignment is None


def stored(group: ConsumerGroup) -> dict:
    """The group's records as a new owner loads them."""
    written = {k: r for k, r, _ in CONSUMER.writes(groups.new_group("g"), group)}
    return {**written[""], "target": written["target"],
            "members": [r for k, r in written.items() if k.startswith("members/")]}


def test_the_records_keep_the_targets_not_the_shares():
    """Without recorded ids (a handover of before they were recorded) the
    targets are the last shares until the driver sets new ones; it starts
    with none at all: every member gives everything up."""
    s = two_members()
    shares(s, a=(0,), b=(2, 3))
    loaded, cut = from_records("g", stored(s.group))
    assert not cut and loaded.handover_shares is None and loaded.handover_ids is None
    assert targets(loaded) == targets(s.group)
    outcome = handle_shares(loaded, {}, s.now, CONFIG)
    assert outcome.persist and targets(outcome.group) == {"a": {}, "b": {}} and epochs(outcome.group) == (5, 5)


def test_the_legacy_consumer_ids_are_stored_and_a_new_owner_carries_the_handover_on():
    s = two_members()
    before = s.group
    outcome = handle_ids(s.group, {"a": "g_zkcoord-1-a", "b": "g_zkcoord-2-b"}, s.now, CONFIG)
    s._apply(outcome)
    assert outcome.persist and [k for k, _, _ in CONSUMER.writes(before, s.group)] == [""]  # the group record
    assert not handle_ids(s.group, {"a": "g_zkcoord-1-a", "b": "g_zkcoord-2-b"}, s.now, CONFIG).persist
    shares(s, a=(0,), b=(2, 3))
    s.beat("a", 3, owned=((T, (0, 1)),))  # a is revoking 1 when its owner dies
    record = stored(s.group)
    assert record["ho"] == {"a": "g_zkcoord-1-a", "b": "g_zkcoord-2-b"}
    loaded = CONSUMER.load(CONSUMER.from_record("g", record), s.now, CONFIG).group
    assert loaded.handover_ids == {"a": "g_zkcoord-1-a", "b": "g_zkcoord-2-b"}
    assert loaded.handover_shares == {"a": tps(0), "b": tps(2, 3)}  # what each was given, until the driver runs
    assert consuming(loaded, "a", CONFIG) == tps(0, 1)
    assert not CONSUMER.holds_nothing(replace(loaded, members=FrozenMap(), reconciled_members=0))  # kept
    ended = handle_ids(loaded, None, s.now, CONFIG)
    assert ended.persist and "ho" not in stored(ended.group)


def test_a_record_with_unreadable_ids_is_refused_with_a_reason():
    s = two_members()
    for bad in ([1], {"a": ""}, {"a": 3}):
        assert record_problem({**stored(s.group), "ho": bad}) == (
            f"handover ids 'ho' is {bad!r}, not an object of member id -> legacy consumer id")


def test_the_first_consumer_protocol_member_of_a_group_in_handover_gets_nothing():
    """The driver records the ids and clears the shares of the (Empty,
    classic) group it found; the join that makes it a consumer group keeps them."""
    s = Scene()
    s.group = classic_group.handle_ids(s.group, {"gone": "g_zkcoord-1-x"}, s.now, CONFIG).group
    s.group = classic_group.handle_shares(s.group, {}, s.now, CONFIG).group
    answer, _ = s.join("a")
    assert isinstance(s.group, ConsumerGroup) and s.group.handover_shares == {}
    assert s.group.handover_ids == {"gone": "g_zkcoord-1-x"}  # a member gone whose znodes may still be there
    assert (answer.member_epoch, partitions(answer.assignment), targets(s.group)) == (2, {}, {"a": {}})
    shares(s, a=(2,))
    answer, _ = s.beat("a", 2, owned=())
    assert (answer.member_epoch, partitions(answer.assignment)) == (3, {T: [2]})


def test_a_static_member_replaced_under_a_new_id_starts_from_nothing():
    s = Scene()
    s.join("s1", instance="i")
    shares(s, s1=(0, 1))
    s.beat("s1", 2, owned=owned(s.member("s1")))
    s.beat("s1", 2, owned=((T, (0, 1)),))
    assert s.member("s1").member_epoch == 3 and consuming(s.group, "s1", CONFIG) == tps(0, 1)
    s.beat("s1", -2, instance="i")  # leaves for a while: its partitions kept for it
    assert consuming(s.group, "s1", CONFIG) == tps(0, 1)
    answer, _ = s.join("s2", instance="i")
    assert answer.error is E.NONE and list(s.group.members) == ["s2"]
    assert partitions(answer.assignment) == {} and targets(s.group) == {"s2": {}}
    assert consuming(s.group, "s2", CONFIG) == frozenset() and dict(s.group.partition_epochs) == {}


def test_classic_members_inside_the_consumer_group_follow_their_shares():
    """An online upgrade in a handover: the classic group's shares go with it;
    a classic member hears of a new share from its heartbeat, rejoins, and is
    consuming what it reports owning until it reports it gone."""
    s = MigrationScene()
    s.stable_classic_group()  # c1 (0, 1), c2 (2, 3)
    s.group = classic_group.handle_ids(s.group, {"c1": "g_zkcoord-1-a", "c2": "g_zkcoord-2-b"}, s.now,
                                       MIGRATION_CONFIG).group
    s.group = classic_group.handle_shares(s.group, {"c1": tps(0, 1), "c2": tps(2, 3)}, s.now, MIGRATION_CONFIG).group
    assert s.group.state.value == "Stable"
    joined = s.consumer_beat("n", 0, subscribed_topic_names=("t",), owned=(), rebalance_timeout_ms=30_000)
    group = s.group
    assert isinstance(group, ConsumerGroup) and group.handover_shares == {"c1": tps(0, 1), "c2": tps(2, 3)}
    assert group.handover_ids == {"c1": "g_zkcoord-1-a", "c2": "g_zkcoord-2-b"}
    assert targets(group) == {"c1": {T: [0, 1]}, "c2": {T: [2, 3]}, "n": {}} and epochs(group) == (2, 2)
    assert (joined.member_epoch, partitions(joined.assignment)) == (2, {})
    outcome = handle_shares(group, {"c1": tps(0), "c2": tps(2, 3), "n": ()}, s.now, MIGRATION_CONFIG)
    s.group = outcome.group
    assert outcome.persist and epochs(s.group) == (3, 3)
    assert s.classic_heartbeat("c1", 1).error is E.REBALANCE_IN_PROGRESS
    rejoined = s.classic_join("c1", owned=[0, 1]).replies[-1].payload
    assert (rejoined.error, rejoined.generation_id, s.group.members["c1"].state) == (
        E.NONE, 1, MemberState.UNREVOKED_PARTITIONS)
    assert consuming(s.group, "c1", MIGRATION_CONFIG) == tps(0, 1)
    assert decoded(s.classic_sync("c1", 1).replies[0].payload) == [0]
    rejoined = s.classic_join("c1", owned=[0]).replies[-1].payload
    assert (rejoined.generation_id, s.group.members["c1"].state) == (3, MemberState.STABLE)
    assert consuming(s.group, "c1", MIGRATION_CONFIG) == tps(0)
    s.group = handle_shares(s.group, {"c1": tps(0), "c2": tps(2, 3), "n": tps(1)}, s.now, MIGRATION_CONFIG).group
    answer = s.consumer_beat("n", 2, owned=())
    assert (answer.member_epoch, partitions(answer.assignment)) == (4, {T: [1]})


def test_the_shares_go_with_a_downgrade():
    s = MigrationScene()
    s.stable_classic_group()
    s.group = classic_group.handle_shares(s.group, {"c1": tps(0, 1), "c2": tps(2, 3)}, s.now, MIGRATION_CONFIG).group
    s.consumer_beat("n", 0, subscribed_topic_names=("t",), owned=(), rebalance_timeout_ms=30_000)
    s.group = handle_shares(s.group, {"c1": tps(0, 1), "c2": tps(2, 3), "n": ()}, s.now, MIGRATION_CONFIG).group
    s.group = handle_ids(s.group, {"c1": "g_zkcoord-1-a", "c2": "g_zkcoord-2-b", "n": "g_zkcoord-3-c"}, s.now,
                         MIGRATION_CONFIG).group
    answer = s.consumer_beat("n", -1)  # the last consumer-protocol member leaves: a classic group again
    assert answer.error is E.NONE and isinstance(s.group, Group)
    assert s.group.handover_shares == {"c1": tps(0, 1), "c2": tps(2, 3)}
    assert s.group.handover_ids == {"c1": "g_zkcoord-1-a", "c2": "g_zkcoord-2-b", "n": "g_zkcoord-3-c"}
    assert s.group.state.value == "PreparingRebalance"


def test_an_upgrade_in_the_middle_of_a_share_change_takes_the_shares_as_the_target():
    s = MigrationScene()
    s.stable_classic_group()
    s.group = classic_group.handle_shares(s.group, {"c1": tps(0), "c2": tps(2, 3)}, s.now, MIGRATION_CONFIG).group
    assert s.group.state.value == "PreparingRebalance"  # c1 still has 0 and 1 from the leader
    joined = s.consumer_beat("n", 0, subscribed_topic_names=("t",), owned=(), rebalance_timeout_ms=30_000)
    assert isinstance(s.group, ConsumerGroup) and (joined.member_epoch, partitions(joined.assignment)) == (3, {})
    assert targets(s.group) == {"c1": {T: [0]}, "c2": {T: [2, 3]}, "n": {}} and epochs(s.group) == (3, 3)
    assert consuming(s.group, "c1", MIGRATION_CONFIG) == tps(0, 1)  # until it rejoins without 1


def test_an_empty_consumer_group_taken_by_a_classic_join_keeps_the_shares():
    s = MigrationScene()
    s.consumer_beat("n", 0, subscribed_topic_names=("t",), owned=(), rebalance_timeout_ms=30_000)
    s.group = handle_shares(s.group, {"n": tps(0)}, s.now, MIGRATION_CONFIG).group
    s.group = handle_ids(s.group, {"n": "g_zkcoord-1-n"}, s.now, MIGRATION_CONFIG).group
    s.consumer_beat("n", -1)
    assert isinstance(s.group, ConsumerGroup) and s.group.state is GroupState.EMPTY
    s.classic_join("", new_id="c1")
    assert isinstance(s.group, Group) and s.group.handover_shares == {}  # c1 has no share: nothing
    assert s.group.handover_ids == {"n": "g_zkcoord-1-n"}


def test_a_hold_changes_nothing_in_a_consumer_group():
    """The driver's hold (more partitions about to be held) makes a classic
    group's join phase wait; a consumer group has none: the same outcome."""
    s = two_members()
    held = handle_shares(s.group, {"a": tps(0), "b": tps(2, 3)}, s.now, CONFIG, hold=True)
    plain = handle_shares(s.group, {"a": tps(0), "b": tps(2, 3)}, s.now, CONFIG)
    assert held == plain and held.persist
