"""Online upgrade and downgrade, pure: a classic group converted when a
consumer-protocol member joins, its classic members reconciled through
JoinGroup / SyncGroup / Heartbeat, and converted back when the last
consumer-protocol member leaves; each migration policy."""

from __future__ import annotations

from dataclasses import replace

from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from zkcoord.core import groups
from zkcoord.core.classic import CLASSIC
from zkcoord.core.consumer.config import ConsumerGroupConfig
from zkcoord.core.consumer.messages import ConsumerHeartbeatRequest
from zkcoord.core.consumer.model import ConsumerGroup, MemberState
from zkcoord.core.errors import ErrorCode
from zkcoord.core.membership import Group, GroupConfig
from zkcoord.core.messages import HeartbeatRequest, JoinRequest, LeaveRequest, SyncRequest
from zkcoord.core.topics_image import TopicInfo, TopicsImage
from zkcoord.server.consumer_protocol import CONSUMER_PROTOCOL

E = ErrorCode
T = "AAAAAAAAAAAAAAAAAAAAAQ"
IMAGE = TopicsImage.of([TopicInfo("t", T, 4)])
CONFIG = GroupConfig(min_session_timeout_ms=0, initial_rebalance_delay_ms=0, image=IMAGE,
                     consumer=ConsumerGroupConfig(assignment_interval_ms=0), consumer_protocol=CONSUMER_PROTOCOL)


def subscription(owned=()) -> bytes:
    return bytes(ConsumerProtocolSubscription(
        version=1, topics=["t"], user_data=None, generation_id=-1, rack_id=None,
        owned_partitions=[ConsumerProtocolSubscription.TopicPartition(topic="t", partitions=list(owned))]
        if owned else []).encode())


class Scene:
    def __init__(self, config=CONFIG):
        self.config = config
        self.group = groups.new_group("g")
        self.now = 1_000_000
        self.token = 0

    def decide(self, req):
        outcome = groups.decide(self.group, req, self.now, self.config)
        self.group = outcome.group
        return outcome

    def next_token(self):
        self.token += 1
        return self.token

    def classic_join(self, member_id: str, owned=(), new_id=""):
        req = JoinRequest(self.next_token(), "g", member_id, None, "c", "/h", 10_000, 30_000, "consumer",
                          (("range", subscription(owned)),), False, new_id or member_id)
        return self.decide(req)

    def classic_sync(self, member_id: str, generation: int, assignments=None):
        return self.decide(SyncRequest(self.next_token(), member_id, generation, assignments=assignments or {}))

    def classic_heartbeat(self, member_id: str, generation: int):
        return self.decide(HeartbeatRequest(self.next_token(), member_id, generation)).replies[0].payload

    def consumer_beat(self, member_id: str, epoch: int, **kw):
        req = ConsumerHeartbeatRequest(self.next_token(), "g", member_id, epoch, client_id="c", client_host="/h", **kw)
        return self.decide(req).replies[0].payload

    def fire_classic(self, key: str):
        self.group = CLASSIC.handle_timer(self.group, key, self.now, self.config).group

    def stable_classic_group(self) -> None:
        """Members c1 (partitions 0, 1) and c2 (2, 3) in a Stable classic group, generation 1."""
        self.classic_join("", new_id="c1")
        self.classic_join("", new_id="c2")
        while self.group.state.value == "PreparingRebalance":  # the initial delay (0 ms) ends, maybe twice
            self.fire_classic("join")
        assignment = {m: CONSUMER_PROTOCOL.encode_assignment({"t": p}, 1) for m, p in (("c1", [0, 1]), ("c2", [2, 3]))}
        self.classic_sync("c2", 1)
        self.classic_sync("c1", 1, assignment)
        assert isinstance(self.group, Group) and self.group.state.value == "Stable"


def decoded(sync_result) -> list[int]:
    return sorted(CONSUMER_PROTOCOL.assignment(sync_result.assignment).partitions.get("t", ()))


def test_a_consumer_protocol_member_upgrades_a_running_classic_group_member_by_member():
    s = Scene()
    s.stable_classic_group()
    answer = s.consumer_beat("n", 0, subscribed_topic_names=("t",), owned=(), rebalance_timeout_ms=30_000)
    assert answer.error is E.NONE and isinstance(s.group, ConsumerGroup)
    g = s.group
    assert {m: m_.uses_classic_protocol for m, m_ in g.members.items()} == {"c1": True, "c2": True, "n": False}
    assert {t: sorted(p) for t, p in g.members["c1"].assigned.items()} == {T: [0, 1]}  # kept across the upgrade
    assert g.group_epoch == 2 and answer.member_epoch == 2 and not answer.assignment  # everything still held
    # the classic members learn of it from their heartbeats, and rejoin
    assert s.classic_heartbeat("c1", 1).error is E.REBALANCE_IN_PROGRESS
    joined = s.classic_join("c1", owned=[0, 1]).replies[-1].payload
    assert (joined.error, joined.protocol_type, joined.protocol_name) == (E.NONE, "consumer", "range")
    synced = s.classic_sync("c1", joined.generation_id).replies[0].payload
    assert synced.error is E.NONE
    kept = decoded(synced)
    c1 = s.group.members["c1"]
    assert len(kept) + len(c1.pending_revocation.get(T, {})) == 2
    # after c1 reports its revocation in its next join, the new member gets what c1 gave up
    for member_id in ("c1", "c2"):
        for _ in range(2):
            held = sorted(s.group.members[member_id].assigned.get(T, {}))
            result = s.classic_join(member_id, owned=held).replies[-1].payload
            s.classic_sync(member_id, result.generation_id)
    answer = s.consumer_beat("n", answer.member_epoch, owned=())
    holders = {}
    for m in s.group.members.values():
        for p in m.assigned.get(T, {}):
            assert p not in holders
            holders[p] = m.member_id
    assert "n" in holders.values()


def test_the_last_consumer_protocol_member_leaving_downgrades_the_group():
    s = Scene()
    s.stable_classic_group()
    answer = s.consumer_beat("n", 0, subscribed_topic_names=("t",), owned=(), rebalance_timeout_ms=30_000)
    outcome = s.decide(ConsumerHeartbeatRequest(s.next_token(), "g", "n", -1))
    assert outcome.persist and isinstance(s.group, Group)
    assert s.group.state.value == "PreparingRebalance" and set(s.group.members) == {"c1", "c2"}
    assert s.group.generation_id >= answer.member_epoch


def test_no_upgrade_when_the_policy_forbids_it_and_no_classic_join_when_migration_is_disabled():
    for policy in ("downgrade", "disabled"):
        s = Scene(replace(CONFIG, consumer=ConsumerGroupConfig(assignment_interval_ms=0, migration_policy=policy)))
        s.stable_classic_group()
        answer = s.consumer_beat("n", 0, subscribed_topic_names=("t",), owned=(), rebalance_timeout_ms=30_000)
        assert answer.error is E.GROUP_ID_NOT_FOUND and "online upgrade is disabled" in answer.message
        assert isinstance(s.group, Group)
    s = Scene(replace(CONFIG, consumer=ConsumerGroupConfig(migration_policy="disabled")))
    s.consumer_beat("n", 0, subscribed_topic_names=("t",), owned=(), rebalance_timeout_ms=30_000)
    joined = s.classic_join("", new_id="c1").replies[0].payload
    assert joined.error is E.INCONSISTENT_GROUP_PROTOCOL


def test_a_classic_leave_of_a_consumer_group_member_fences_it():
    s = Scene()
    s.stable_classic_group()
    s.consumer_beat("n", 0, subscribed_topic_names=("t",), owned=(), rebalance_timeout_ms=30_000)
    outcome = s.decide(LeaveRequest(s.next_token(), (("c1", None), ("ghost", None))))
    assert [(r.member_id, r.error) for r in outcome.replies[-1].payload.members] == [
        ("c1", E.NONE), ("ghost", E.UNKNOWN_MEMBER_ID)]
    assert "c1" not in s.group.members and isinstance(s.group, ConsumerGroup)


def test_a_classic_member_is_told_to_rejoin_while_it_has_partitions_to_revoke():
    s = Scene()
    s.stable_classic_group()
    s.consumer_beat("n", 0, subscribed_topic_names=("t",), owned=(), rebalance_timeout_ms=30_000)
    s.classic_join("c1", owned=[0, 1])
    c1 = s.group.members["c1"]
    if c1.state is MemberState.UNREVOKED_PARTITIONS:
        assert s.classic_heartbeat("c1", c1.member_epoch).error is E.REBALANCE_IN_PROGRESS
    assert s.classic_heartbeat("c1", 99).error is E.ILLEGAL_GENERATION


def test_a_classic_member_that_joins_owning_nothing_is_not_asked_to_revoke():
    """An eager classic member gives everything up before it rejoins: its
    JoinGroup's owned list is the truth, so it moves to the target at once
    (Kafka's rule; a consumer-protocol member is asked first, zkcoord's
    stricter rule in zkcoord/core/consumer/reconcile.py)."""
    s = Scene()
    s.stable_classic_group()
    s.consumer_beat("n", 0, subscribed_topic_names=("t",), owned=(), rebalance_timeout_ms=30_000)
    giving = [m for m in ("c1", "c2") if set(s.group.members[m].assigned[T]) - set(s.group.target(m).get(T, ()))]
    assert giving  # some of n's partitions are a classic member's
    s.classic_join(giving[0], owned=[])
    member = s.group.members[giving[0]]
    assert member.state is MemberState.STABLE and not member.pending_revocation
    assert member.member_epoch == s.group.assignment_epoch
    assert sorted(member.assigned.get(T, {})) == sorted(s.group.target(giving[0]).get(T, ()))
