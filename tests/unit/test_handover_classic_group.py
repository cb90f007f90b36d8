"""A classic group in handover (zkcoord.core.handover.classic_group): the
SyncGroup hands out the daemon's shares, a share that changes rebalances a
Stable group, the end of the handover gives the leader its say back, and
what a member may still be consuming at each point of a rebalance."""

from __future__ import annotations

from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription
from test_group_support import Harness, stable_harness

from zkcoord.core.group import GroupConfig, GroupState
from zkcoord.core.handover.classic_group import consuming, handle_shares, subscribed_topics
from zkcoord.server.consumer_protocol import CONSUMER_PROTOCOL

S = GroupState
CFG = GroupConfig(consumer_protocol=CONSUMER_PROTOCOL)


def subscription(topics=("t",), owned=()) -> bytes:
    return bytes(ConsumerProtocolSubscription(
        version=1, topics=list(topics), user_data=None,
        owned_partitions=[ConsumerProtocolSubscription.TopicPartition(topic="t", partitions=list(owned))]
        if owned else []).encode())


def assignment(*partitions: int) -> bytes:
    return CONSUMER_PROTOCOL.encode_assignment({"t": list(partitions)} if partitions else {}, 0)


def partitions_of(raw: bytes) -> list[int]:
    return sorted(CONSUMER_PROTOCOL.assignment(raw).partitions.get("t", ()))


def stable(n: int = 2, owned=()) -> Harness:
    """m1..mn Stable, m_i assigned partition i-1 by the leader."""
    h = stable_harness(n, config=CFG, protocols=(("range", subscription(owned=owned)),))
    for mid in list(h.group.members):
        i = int(mid[1:])
        member = h.group.members[mid]
        h.group = h.group._replace_unchecked(members=h.group.members.set(
            mid, type(member)(**{**member.__dict__, "assignment": assignment(i - 1)})))
    return h


def shares(h: Harness, **by_member: tuple[int, ...]):
    return h.apply(handle_shares(h.group, {m: frozenset(("t", p) for p in ps) for m, ps in by_member.items()},
                                 h.now, CFG))


def rejoin_all(h: Harness, owned=()) -> None:
    for mid in list(h.group.members):
        h.join(f"r-{mid}-{h.now}", mid, protocols=(("range", subscription(owned=owned)),))


def test_a_share_that_differs_from_the_assignment_rebalances_a_stable_group():
    h = stable()
    out = shares(h, m1=(0,), m2=(1,))  # what they have: nothing to do
    assert h.group.state is S.STABLE and out.replies == () and h.group.handover_shares is not None
    shares(h, m1=(0,), m2=())  # m2 gives partition 1 up
    assert h.group.state is S.PREPARING_REBALANCE


def test_the_sync_hands_out_the_shares_not_the_leaders_assignment():
    h = stable()
    shares(h, m1=(0, 2), m2=())
    rejoin_all(h)
    assert h.group.state is S.COMPLETING_REBALANCE
    h.sync("hs2", "m2")
    h.sync("hs1", "m1", assignments={"m1": assignment(0, 1, 2), "m2": assignment(3)})  # the leader's, ignored
    assert h.group.state is S.STABLE
    assert partitions_of(h.payload("hs1").assignment) == [0, 2] and partitions_of(h.payload("hs2").assignment) == []


def test_ending_the_handover_rebalances_so_the_leader_assigns_again():
    h = stable()
    shares(h, m1=(0,), m2=(1,))
    assert h.group.state is S.STABLE
    h.apply(handle_shares(h.group, None, h.now, CFG))
    assert h.group.handover_shares is None and h.group.state is S.PREPARING_REBALANCE
    rejoin_all(h)
    h.sync("hs2", "m2")
    h.sync("hs1", "m1", assignments={"m1": assignment(0, 1), "m2": assignment(2, 3)})
    assert partitions_of(h.payload("hs1").assignment) == [0, 1]


def test_no_handover_no_change():
    h = stable()
    before = h.group
    h.apply(handle_shares(h.group, None, h.now, CFG))
    assert h.group is before


def test_consuming_through_a_rebalance_eager_members():
    h = stable()
    tp = {("t", 0)}
    assert consuming(h.group, "m1", CFG) == tp  # Stable: its assignment
    shares(h, m1=(), m2=(1,))
    assert consuming(h.group, "m1", CFG) == tp  # preparing, not rejoined yet: still consuming
    h.join("r1", "m1", protocols=(("range", subscription()),))
    assert consuming(h.group, "m1", CFG) == frozenset()  # rejoined, an eager member owns nothing
    assert consuming(h.group, "m2", CFG) == {("t", 1)}
    h.join("r2", "m2", protocols=(("range", subscription()),))
    assert h.group.state is S.COMPLETING_REBALANCE
    assert consuming(h.group, "m2", CFG) == frozenset()


def test_consuming_a_cooperative_member_keeps_what_it_says_it_owns():
    h = stable(owned=(0,))
    assert consuming(h.group, "m1", CFG) == {("t", 0)}
    assert consuming(h.group, "m2", CFG) == {("t", 0), ("t", 1)}  # its assignment and what it said it owned
    shares(h, m1=(), m2=(1,))
    h.join("r1", "m1", protocols=(("range", subscription(owned=(0,))),))
    assert consuming(h.group, "m1", CFG) == {("t", 0)}  # rejoined still owning it: not given up yet


def test_an_assignment_that_does_not_decode_means_anything():
    h = stable()
    member = h.group.members["m1"]
    h.group = h.group._replace_unchecked(members=h.group.members.set(
        "m1", type(member)(**{**member.__dict__, "assignment": b"\xff\xff\x00"})))
    assert consuming(h.group, "m1", CFG) is None


def test_subscribed_topics():
    h = stable_harness(1, config=CFG, protocols=(("range", subscription(topics=("a", "b"))),))
    assert subscribed_topics(h.group, "m1", CFG) == {"a", "b"}
    h = stable_harness(1, config=CFG, protocols=(("range", b"not a subscription"),))
    assert subscribed_topics(h.group, "m1", CFG) is None
