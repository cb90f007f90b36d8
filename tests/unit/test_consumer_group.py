"""KIP-848's consumer group, pure: joins, reconciliation (revoke before
assign), leaving, static members, fencing, time-outs, records.

Scenarios drive ``zkcoord.core.groups.decide`` and the consumer kind's
timers with a fake clock, as the runtime does, and check exact epochs,
assignments, states and what is written."""

from __future__ import annotations

from dataclasses import replace

import pytest

from zkcoord.core import groups
from zkcoord.core.consumer.config import ConsumerGroupConfig
from zkcoord.core.consumer.kind import CONSUMER
from zkcoord.core.consumer.messages import CONSUMER_HEARTBEAT, ConsumerHeartbeatRequest, rebalance_key, session_key
from zkcoord.core.consumer.model import ConsumerGroup, GroupState, MemberState
from zkcoord.core.consumer.record import (
    from_records, record_problem, target_problem, to_group_record, to_member_record, to_target_record,
)
from zkcoord.core.errors import ErrorCode
from zkcoord.core.membership import GroupConfig
from zkcoord.core.messages import Cancel, Schedule
from zkcoord.core.offset_commit import CommitRequest, decide_commit
from zkcoord.core.topics_image import TopicInfo, TopicsImage

E = ErrorCode
T = "AAAAAAAAAAAAAAAAAAAAAQ"  # topic "t"'s id
U = "AAAAAAAAAAAAAAAAAAAAAg"  # topic "u"'s id
IMAGE = TopicsImage.of([TopicInfo("t", T, 4), TopicInfo("u", U, 2)])
CONFIG = GroupConfig(consumer=ConsumerGroupConfig(assignment_interval_ms=0), image=IMAGE)


class Scene:
    """A group and a clock; each heartbeat is decided and applied as the runtime would."""

    def __init__(self, config: GroupConfig = CONFIG):
        self.config = config
        self.group = groups.new_group("g")
        self.now = 1_000_000
        self.token = 0
        self.written = 0
        self.timers: dict[str, int] = {}

    def beat(self, member_id: str, epoch: int, *, names=None, owned=None, instance=None, assignor=None,
             rebalance_timeout_ms=-1, regex=None, new_member_id=""):
        self.token += 1
        req = ConsumerHeartbeatRequest(self.token, "g", member_id, epoch, instance_id=instance,
                                       rebalance_timeout_ms=rebalance_timeout_ms, subscribed_topic_names=names,
                                       subscribed_topic_regex=regex, server_assignor=assignor, owned=owned,
                                       client_id="c", client_host="/127.0.0.1", new_member_id=new_member_id)
        outcome = groups.decide(self.group, req, self.now, self.config)
        self._apply(outcome)
        (reply,) = outcome.replies
        assert reply.kind == CONSUMER_HEARTBEAT
        return reply.payload, outcome

    def join(self, member_id: str, names=("t",), **kw):
        return self.beat(member_id, 0, names=tuple(names), owned=(), rebalance_timeout_ms=30_000, **kw)

    def fire(self, key: str):
        outcome = CONSUMER.handle_timer(self.group, key, self.now, self.config)
        self._apply(outcome)
        return outcome

    def _apply(self, outcome) -> None:
        if outcome.persist:
            self.written += 1
        self.group = outcome.group
        for op in outcome.timers:
            if isinstance(op, Schedule):
                self.timers[op.key] = op.deadline_ms
            else:
                self.timers.pop(op.key, None)

    def member(self, member_id: str):
        return self.group.members[member_id]


def partitions(assignment) -> dict[str, list[int]]:
    return {t: sorted(p) for t, p in (assignment or {}).items()}


def owned(member) -> tuple:
    return tuple((t, tuple(sorted(p))) for t, p in member.assigned.items())


def test_the_first_member_gets_every_partition_at_once():
    s = Scene()
    answer, outcome = s.join("a")
    assert (answer.error, answer.member_id, answer.member_epoch) == (E.NONE, "a", 2)
    assert partitions(answer.assignment) == {T: [0, 1, 2, 3]}
    assert answer.heartbeat_interval_ms == 5_000
    assert isinstance(s.group, ConsumerGroup) and outcome.persist
    assert (s.group.group_epoch, s.group.assignment_epoch, s.group.state) == (2, 2, GroupState.STABLE)
    assert s.timers[session_key("a")] == s.now + 45_000


def test_a_steady_heartbeat_changes_nothing_and_writes_nothing():
    s = Scene()
    s.join("a")
    group = s.group
    s.now += 5_000
    answer, outcome = s.beat("a", 2)
    assert (answer.error, answer.member_epoch, answer.assignment) == (E.NONE, 2, None)
    assert not outcome.persist and s.group is group
    assert outcome.timers == (Schedule(session_key("a"), s.now + 45_000),)


def test_a_second_member_waits_for_the_first_to_revoke_before_it_gets_a_partition():
    s = Scene()
    s.join("a")
    answer, _ = s.join("b")
    assert (answer.member_epoch, partitions(answer.assignment)) == (3, {})
    b = s.member("b")
    assert b.state is MemberState.UNRELEASED_PARTITIONS  # its target is held by a
    target_b = set(s.group.target("b")[T])
    assert len(target_b) == 2
    # a is told to revoke b's partitions; it stays at epoch 2 until it has
    answer, _ = s.beat("a", 2, owned=owned(s.member("a")))
    a = s.member("a")
    assert (answer.member_epoch, a.state) == (2, MemberState.UNREVOKED_PARTITIONS)
    assert set(a.pending_revocation[T]) == target_b and partitions(answer.assignment) == {T: sorted({0, 1, 2, 3} - target_b)}
    assert s.timers[rebalance_key("a")] == s.now + 30_000
    # b asks again: still held
    answer, _ = s.beat("b", 3, owned=())
    assert partitions(answer.assignment) == {} or answer.assignment is None
    # a reports them gone: epoch 3, stable
    kept = ((T, tuple(sorted({0, 1, 2, 3} - target_b))),)
    answer, _ = s.beat("a", 2, owned=kept)
    assert (answer.member_epoch, s.member("a").state) == (3, MemberState.STABLE)
    assert rebalance_key("a") not in s.timers
    # now b gets them, at epoch 3
    answer, _ = s.beat("b", 3, owned=())
    assert partitions(answer.assignment) == {T: sorted(target_b)}
    assert s.member("b").state is MemberState.STABLE and s.group.state is GroupState.STABLE


def test_a_heartbeat_that_reports_nothing_yet_does_not_free_what_the_member_may_still_take():
    """Kafka's Java consumer answered partitions of a topic it cannot name
    yet acknowledges them owning nothing, then takes them once its metadata
    names the topic, from that same answer. If a rebalance came in between,
    Kafka's coordinator frees them on the acknowledgment (it does not report
    them) and gives them to the newcomer: two owners (a CI run saw it).
    zkcoord asks the member to revoke them and frees them only on a later
    heartbeat, sent after it was asked."""
    s = Scene()
    s.join("a")  # answered all four at epoch 2 (the Java consumer cannot name t yet)
    s.join("b")  # the target moves on: half of a's four are b's
    target_b = sorted(s.group.target("b")[T])
    answer, _ = s.beat("a", 2, owned=())  # a's acknowledgment: it owns nothing yet
    a = s.member("a")
    assert (answer.member_epoch, a.state) == (2, MemberState.UNREVOKED_PARTITIONS)
    assert sorted(a.pending_revocation[T]) == target_b
    assert partitions(answer.assignment) == {T: sorted({0, 1, 2, 3} - set(target_b))}
    answer, _ = s.beat("b", 3, owned=())
    assert not partitions(answer.assignment)  # meanwhile a took all four, from epoch 2's answer
    s.beat("a", 2, owned=((T, (0, 1, 2, 3)),))
    answer, _ = s.beat("b", 3, owned=())
    assert not partitions(answer.assignment)
    kept = ((T, tuple(sorted({0, 1, 2, 3} - set(target_b)))),)
    answer, _ = s.beat("a", 2, owned=kept)  # revoked after it was asked: now they are free
    assert (answer.member_epoch, s.member("a").state) == (3, MemberState.STABLE)
    answer, _ = s.beat("b", 3, owned=())
    assert partitions(answer.assignment) == {T: target_b}


def test_a_member_that_never_takes_them_is_freed_by_its_next_report():
    """The same acknowledgment when the member never names the topic: asked to
    revoke, it acknowledges the new answer owning nothing, and moves on."""
    s = Scene()
    s.join("a")
    s.join("b")
    s.beat("a", 2, owned=())
    answer, _ = s.beat("a", 2, owned=())
    assert (answer.member_epoch, s.member("a").state) == (3, MemberState.STABLE)
    answer, _ = s.beat("b", 3, owned=())
    assert partitions(answer.assignment) == {T: sorted(s.group.target("b")[T])}


def test_a_static_members_replacement_owns_nothing_and_is_not_asked_to_revoke():
    s = Scene()
    s.join("s1", instance="i")  # all four
    s.beat("s1", 2, instance="i")
    s.beat("s1", -2, instance="i")  # leaves for a while; its partitions kept for it
    s.join("b")  # half of them are b's now: held by s1 until it gives them up
    answer, _ = s.join("s2", instance="i")  # a new process holding nothing: Kafka's rule, no revocation
    assert (answer.error, s.member("s2").state) == (E.NONE, MemberState.STABLE)
    assert answer.member_epoch == s.group.assignment_epoch
    answer, _ = s.beat("b", 3, owned=())
    assert partitions(answer.assignment) == {T: sorted(s.group.target("b")[T])}


def test_no_partition_is_held_by_two_members_at_any_step():
    s = Scene()
    for name in "abcd":
        s.join(name)
        for _ in range(3):
            for m in list(s.group.members):
                s.beat(m, s.member(m).member_epoch, owned=owned(s.member(m)))
                holders: dict = {}
                for member in s.group.members.values():
                    for topic, parts in list(member.assigned.items()) + list(member.pending_revocation.items()):
                        for p in parts:
                            assert (topic, p) not in holders, f"{topic}-{p} held by {holders[(topic, p)]} and " \
                                                              f"{member.member_id}"
                            holders[(topic, p)] = member.member_id
    assert s.group.state is GroupState.STABLE
    assert sorted(len(m.assigned.get(T, {})) for m in s.group.members.values()) == [1, 1, 1, 1]


def test_leaving_fences_the_member_and_moves_the_group_epoch_on():
    s = Scene()
    s.join("a")
    s.join("b")
    answer, outcome = s.beat("b", -1)
    assert (answer.error, answer.member_epoch) == (E.NONE, -1)
    assert "b" not in s.group.members and "b" not in s.group.targets and s.group.group_epoch == 4
    assert Cancel(session_key("b")) in outcome.timers and outcome.persist


def test_a_greater_or_unknown_epoch_is_fenced_and_an_unknown_member_refused():
    s = Scene()
    s.join("a")
    assert s.beat("a", 7)[0].error is E.FENCED_MEMBER_EPOCH
    assert s.beat("a", 1)[0].error is E.FENCED_MEMBER_EPOCH  # older, and not its previous epoch
    assert s.beat("zz", 2)[0].error is E.UNKNOWN_MEMBER_ID
    assert groups.decide(groups.new_group("h"), ConsumerHeartbeatRequest(1, "h", "m", 5), s.now,
                         CONFIG).replies[0].payload.error is E.GROUP_ID_NOT_FOUND


def test_a_static_member_keeps_its_partitions_across_a_restart():
    s = Scene()
    s.join("a1", instance="i1")
    before = s.member("a1").assigned
    answer, outcome = s.beat("a1", -2, instance="i1")
    assert (answer.member_epoch, s.member("a1").member_epoch) == (-2, -2)
    assert {t: set(p) for t, p in s.member("a1").assigned.items()} == {t: set(p) for t, p in before.items()}
    assert s.group.group_epoch == 2  # nothing moved: it is expected back
    # another process with the same instance id while a1 is away takes over, with its partitions
    answer, _ = s.join("a2", instance="i1")
    assert "a1" not in s.group.members and answer.member_epoch == 2
    assert partitions(answer.assignment) == {T: [0, 1, 2, 3]}


def test_a_static_member_still_present_keeps_its_instance_id():
    s = Scene()
    s.join("a1", instance="i1")
    answer, _ = s.join("a2", instance="i1")
    assert answer.error is E.UNRELEASED_INSTANCE_ID and "a1" in s.group.members


def test_a_missed_session_fences_the_member():
    s = Scene()
    s.join("a")
    s.join("b")
    s.now = s.timers[session_key("b")]
    outcome = s.fire(session_key("b"))
    assert "b" not in s.group.members and outcome.persist and s.group.group_epoch == 4


def test_a_member_that_does_not_revoke_in_time_is_fenced_only_at_the_epoch_it_was_told():
    s = Scene()
    s.join("a")
    s.join("b")
    s.beat("a", 2, owned=owned(s.member("a")))  # told to revoke
    assert s.member("a").state is MemberState.UNREVOKED_PARTITIONS
    s.now = s.timers[rebalance_key("a")]
    s.fire(rebalance_key("a"))
    assert "a" not in s.group.members


def test_a_new_target_waits_for_the_assignment_interval():
    s = Scene(replace(CONFIG, consumer=ConsumerGroupConfig(assignment_interval_ms=1_000)))
    s.join("a")
    s.now += 500
    answer, _ = s.join("b")
    assert s.group.group_epoch == 3 and s.group.assignment_epoch == 2 and s.group.state is GroupState.ASSIGNING
    assert answer.member_epoch == 2  # the last target's epoch, nothing for b yet
    s.now += 500
    s.beat("b", 2)
    assert s.group.assignment_epoch == 3 and len(s.group.target("b").get(T, ())) == 2


def test_a_subscription_change_revokes_the_topics_left_at_once():
    s = Scene()
    s.join("a", names=("t", "u"))
    assert set(s.member("a").assigned) == {T, U}
    answer, _ = s.beat("a", 2, names=("u",), owned=owned(s.member("a")))
    a = s.member("a")
    assert a.state is MemberState.UNREVOKED_PARTITIONS and set(a.pending_revocation) == {T}
    answer, _ = s.beat("a", 2, owned=((U, (0, 1)),))
    assert (s.member("a").state, set(s.member("a").assigned)) == (MemberState.STABLE, {U})


def test_an_unknown_assignor_name_is_refused_by_the_kind_and_the_preferred_one_used():
    s = Scene()
    s.join("a", assignor="range")
    s.join("b", assignor="range")
    assert partitions(s.group.target("a")) == {T: [0, 1]} and partitions(s.group.target("b")) == {T: [2, 3]}


def test_a_member_commits_at_its_epoch_and_at_an_older_one_only_what_it_held():
    s = Scene()
    s.join("a")

    def commit(member_id, epoch, version=9, parts=(0,)):
        req = CommitRequest(member_id, epoch, None, {("t", p): (5, "") for p in parts}, version)
        return decide_commit(s.group, req, True, s.config)

    assert commit("a", 2).error is E.NONE
    assert commit("a", 2, version=8).error is E.UNSUPPORTED_VERSION
    assert commit("a", 3).error is E.STALE_MEMBER_EPOCH
    assert commit("zz", 2).error is E.UNKNOWN_MEMBER_ID
    s.join("b")
    s.beat("a", 2, owned=owned(s.member("a")))
    a = s.member("a")
    kept = sorted(a.assigned[T])
    answer, _ = s.beat("a", 2, owned=((T, tuple(kept)),))
    assert s.member("a").member_epoch == 3
    decision = commit("a", 2, parts=(kept[0],))
    assert decision.error is E.NONE and decision.writes  # held since epoch 2
    assert decide_commit(s.group, CommitRequest("", -1, None, {("t", 0): (1, "")}, 9), True, s.config).error \
        is E.UNKNOWN_MEMBER_ID  # anonymous commits only while the group is empty


def test_records_round_trip_and_a_cut_target_write_is_found():
    s = Scene()
    s.join("a")
    s.join("b")
    writes = CONSUMER.writes(groups.new_group("g"), s.group)
    assert writes[0] == ("members", {}, False)  # the members' directory first
    assert [(k, existed) for k, _, existed in writes[-2:]] == [("target", False), ("", False)]  # created, state last
    records = {k: r for k, r, _ in writes}
    state, target = records[""], records["target"]
    members = [r for k, r, existed in writes if k.startswith("members/") and not existed]
    assert state["v"] == 3 and not any("tg" in m or "te" in m for m in members)  # the target is apart
    stored = {**state, "members": members, "target": target}
    assert record_problem(stored) is None
    loaded, cut = from_records("g", stored)
    assert not cut and loaded.members == s.group.members and loaded.targets == s.group.targets
    assert (loaded.group_epoch, loaded.assignment_epoch, loaded.state) == (3, 3, s.group.state)
    assert not loaded.targets_in_members
    loaded, cut = from_records("g", {**stored, "ae": 2})  # the target record written, the group record not
    assert cut
    outcome = CONSUMER.load(CONSUMER.from_record("g", {**stored, "ae": 2}), s.now, CONFIG)
    assert outcome.persist and outcome.group.group_epoch == 4
    assert {op.key for op in outcome.timers} >= {session_key("a"), session_key("b")}
    _, cut = from_records("g", {**state, "members": members})  # version 3 without its target record
    assert cut


def test_a_version_1_record_is_read_and_written_again_as_version_3():
    """An earlier zkcoord kept each member's target in its member record
    (``tg``, ``te``): such a group loads with the same targets, and its load
    writes every member record without them and creates the target record."""
    s = Scene()
    s.join("a")
    s.join("b")
    state = {**to_group_record(s.group), "v": 1}
    members = [to_member_record(m, s.group.target(mid), s.group.assignment_epoch)
               for mid, m in s.group.members.items()]
    assert all("te" in m for m in members) and any("tg" in m for m in members)
    assert record_problem({**state, "members": members}) is None
    stored = CONSUMER.from_record("g", {**state, "members": members})
    assert stored.targets == s.group.targets and stored.members == s.group.members and stored.targets_in_members
    outcome = CONSUMER.load(stored, s.now, CONFIG)
    assert outcome.persist and outcome.group.group_epoch == s.group.group_epoch  # no epoch moves
    writes = CONSUMER.writes(stored, outcome.group)
    assert [(k, existed) for k, _, existed in writes] == [("members/a", True), ("members/b", True),
                                                          ("target", False), ("", True)]
    records = {k: r for k, r, _ in writes}
    assert not any("tg" in records[k] or "te" in records[k] for k in ("members/a", "members/b"))
    assert records[""]["v"] == 3
    again, cut = from_records("g", {**records[""], "members": [records["members/a"], records["members/b"]],
                                    "target": records["target"]})
    assert not cut and again.targets == s.group.targets and not again.targets_in_members
    s_targets = s.group.targets
    s.beat("a", 3, owned=owned(s.member("a")))  # the next write after that one: a set of the target, if any
    assert ("target", False) not in [(k, e) for k, _, e in CONSUMER.writes(outcome.group, s.group)]
    # The rewrite cut before its group record (a large group's write in several multis; the owner died):
    # the member records without targets and the target record landed, the group record is still version 1.
    cut_upgrade = {**state, "members": [records["members/a"], records["members/b"]], "target": records["target"]}
    assert record_problem(cut_upgrade) is None
    loaded = CONSUMER.from_record("g", cut_upgrade)
    assert loaded.targets == s_targets and not loaded.targets_in_members  # the target record exists: set it


def test_the_target_record_keeps_each_members_partitions_in_order_and_says_what_is_wrong():
    from zkcoord.core.consumer.model import target_of

    group = s_group_with_targets({"a": {"T1": (5, 0, 1, 2, 3, 9)}, "b": {"T2": (7,), "T1": (4, 6)}, "c": {}})
    rec = to_target_record(group)
    assert rec["n"] == 2 and rec["ae"] == group.assignment_epoch and target_problem(rec) is None
    assert {m: dict(t) for m, t in from_records("g", {**to_group_record(group), "members": [],
                                                       "target": rec})[0].targets.items()} == {}  # no such members
    from zkcoord.core.consumer.record import _targets_from
    assert _targets_from(rec) == {"a": target_of({"T1": (5, 0, 1, 2, 3, 9)}),
                                  "b": target_of({"T2": (7,), "T1": (4, 6)})}
    assert list(_targets_from(rec)["b"]) == ["T2", "T1"]  # topics in their order too
    assert "not an object" in target_problem([])
    assert "version" in target_problem({**rec, "v": 9})
    assert "holds 2" in target_problem({**rec, "n": 3})
    assert "'ae'" in target_problem({**rec, "ae": "1"})


def s_group_with_targets(targets):
    from zkcoord.core.consumer.model import new_consumer_group, target_of

    group = new_consumer_group("g")
    for member_id, target in targets.items():
        group = group.with_target(member_id, target_of(target))
    return group


def test_only_changed_members_are_written():
    s = Scene()
    s.join("a")
    s.join("b")
    before = s.group
    s.beat("a", 2, owned=owned(s.member("a")))
    assert [(k, existed) for k, _, existed in CONSUMER.writes(before, s.group)] == [("members/a", True), ("", True)]


@pytest.mark.parametrize("regex, error", [("t.*", E.NONE), ("(?<=x)t", E.INVALID_REGULAR_EXPRESSION)])
def test_a_regex_subscription_is_resolved_after_the_heartbeat_that_sends_it(regex, error):
    s = Scene()
    answer, outcome = s.beat("a", 0, regex=regex, owned=(), rebalance_timeout_ms=30_000)
    assert answer.error is error
    if error is not E.NONE:
        return
    assert (answer.member_epoch, partitions(answer.assignment)) == (1, {}) and "consumer-regex" in s.timers
    s.fire("consumer-regex")
    assert set(s.group.resolved_regexes[regex].topics) == {"t"} and s.group.group_epoch == 2
    answer, _ = s.beat("a", 1, owned=())
    assert partitions(answer.assignment) == {T: [0, 1, 2, 3]}


def test_a_heartbeat_of_a_large_group_whose_target_is_due_is_decided_off_the_loop():
    """consumer_apis: a group of OFF_LOOP_RECORDS_MEMBERS members or more has its
    heartbeats decided in a worker thread (the assignor may run over every
    member and partition), except a settled group's steady heartbeats, which
    keep the fast path on the event loop."""
    from zkcoord.core.consumer.model import ConsumerMember, new_consumer_group
    from zkcoord.server.consumer_apis import _large, _target_due
    from zkcoord.server.group_runtime import OFF_LOOP_RECORDS_MEMBERS

    def group_of(members: int, group_epoch: int):
        group = new_consumer_group("g")
        for m in range(members):
            group = group.with_member(ConsumerMember(f"m{m}", member_epoch=1, previous_member_epoch=0,
                                                     rebalance_timeout_ms=30_000, client_id="c", client_host="/h"))
        return replace(group, group_epoch=group_epoch)

    small, large = OFF_LOOP_RECORDS_MEMBERS - 1, OFF_LOOP_RECORDS_MEMBERS
    assert [_large(group_of(n, 1)) for n in (small, large)] == [False, True]
    assert [_target_due(group_of(large, e)) for e in (1, 2)] == [False, True]  # settled; a join moved the epoch
    assert not _target_due(group_of(small, 2)) and not _large(groups.new_group("classic"))
