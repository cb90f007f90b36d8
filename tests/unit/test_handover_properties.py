"""Properties of the handover core over generated groups (hypothesis).

1. *Same answer*: :func:`range_assignment` equals what each legacy consumer
   computes for itself, written here the way Kafka 1.1.1's ``RangeAssignor``
   is written (per consumer: its topics, the sorted threads of each, its
   position among them), and gives every partition of a subscribed topic to
   exactly one subscribed thread.
2. *A mixed group in motion*: a model of ZooKeeper (``/ids``, ``/owners``,
   ``/offsets``) shared by legacy consumers that rebalance as 1.1.1's
   ``syncedRebalance`` does (stop fetchers and commit, release every owner
   znode, compute, claim all or undo) and by the owner daemon applying
   :func:`plan` one action at a time on behalf of its members; joins, clean
   leaves and kills of both kinds of member, members changing their
   subscription, the owner daemon failing over (its session's znodes stay
   until it expires; the members give everything up first, as
   docs/handover.md requires), in random order. After every
   step: no partition is consumed by two members, every member consumes
   only partitions whose owner znode names it, and no record is delivered
   twice (unless a member was killed before committing). At the end, with
   nothing more happening: the plan settles, every legacy consumer computed
   the daemon's target, the owner znodes are exactly the target, and every
   partition's delivered offsets have no gap.

The real Kafka 1.1.1 code is compared in
``tests/integration/test_handover_legacy_assignor.py``.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zkcoord.core.handover.decision import Member, Owner, View, plan
from zkcoord.core.handover.legacy_range import java_sort_key, range_assignment, subscribed_threads
from zkcoord.core.handover.registration import LegacyRegistration, Pattern, zkcoord_consumer_id

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TP = tuple[str, int]


# -- 1. the same answer ------------------------------------------------------------------------

def kafka_share(me: LegacyRegistration, everyone: list[LegacyRegistration], topics: dict[str, tuple[int, ...]]
                ) -> dict[TP, str]:
    """RangeAssignor.assign for consumer ``me``, structured as Kafka's code is."""
    my_threads = subscribed_threads(me, topics)  # ctx.myTopicThreadIds
    consumers_for_topic: dict[str, list[str]] = {}  # ZkUtils.getConsumersPerTopic
    for reg in everyone:
        for topic, threads in subscribed_threads(reg, topics).items():
            consumers_for_topic.setdefault(topic, []).extend(threads)
    mine = {}
    for topic in my_threads:
        cur_consumers = sorted(consumers_for_topic[topic], key=java_sort_key)
        cur_partitions = sorted(topics.get(topic, ()))
        n_per, n_extra = len(cur_partitions) // len(cur_consumers), len(cur_partitions) % len(cur_consumers)
        for thread in cur_consumers:
            position = cur_consumers.index(thread)
            start = n_per * position + min(position, n_extra)
            n_parts = n_per + (0 if position + 1 > n_extra else 1)
            for i in range(start, start + n_parts):
                if thread.startswith(me.consumer_id + "-") and thread in my_threads[topic]:
                    mine[(topic, cur_partitions[i])] = thread
    return mine


def random_registrations(rng: random.Random) -> tuple[list[LegacyRegistration], dict[str, tuple[int, ...]]]:
    names = ["a", "a-0", "a-1", "b", "g_zkcoord-0000000000001-0000000a", "Z", "é", "c-10"]
    topics = {t: tuple(rng.sample(range(12), rng.randint(0, 7))) for t in ("t", "u", "orders", "__consumer_offsets")
              if rng.random() < 0.9}
    regs = []
    for cid in rng.sample(names, rng.randint(1, len(names))):
        kind = rng.random()
        if kind < 0.15:
            regs.append(LegacyRegistration.filtered(cid, Pattern.WHITE_LIST, rng.choice(["t|u", ".*", "o.*"]),
                                                    rng.randint(1, 3)))
        elif kind < 0.25:
            regs.append(LegacyRegistration.filtered(cid, Pattern.BLACK_LIST, rng.choice(["t", "x"]), rng.randint(1, 2)))
        else:
            chosen = rng.sample(["t", "u", "orders", "missing"], rng.randint(1, 3))
            regs.append(LegacyRegistration.static(cid, {t: rng.choice([1, 1, 2, 3, 11]) for t in chosen}))
    return regs, topics


@SETTINGS
@given(st.integers(0, 2**32))
def test_the_group_answer_is_each_consumers_own_answer_put_together(seed):
    regs, topics = random_registrations(random.Random(seed))
    whole = range_assignment(regs, topics)
    together = {}
    for reg in regs:
        share = kafka_share(reg, regs, topics)
        assert not set(share) & set(together)
        together.update(share)
    assert whole == together
    subscribed = {(t, p) for reg in regs for t in subscribed_threads(reg, topics) for p in topics.get(t, ())}
    assert set(whole) == subscribed


# -- 2. a mixed group in motion ------------------------------------------------------------------



@dataclass
class LegacyConsumer:
    registration: LegacyRegistration
    fetching: dict[TP, int] = field(default_factory=dict)  # partition -> next offset
    released: bool = False  # between "release everything" and "claim"
    needs_rebalance: bool = True
    alive: bool = True
    target: dict[TP, str] | None = None  # the group answer of its last successful rebalance

    @property
    def cid(self) -> str:
        return self.registration.consumer_id


@dataclass
class OurMember:
    member: Member
    consuming: dict[TP, int] = field(default_factory=dict)
    revoking: set[TP] = field(default_factory=set)


class World:
    """ZooKeeper's znodes of one group, the consumers on both sides, and what they delivered."""

    def __init__(self, rng: random.Random, partitions: int):
        self.rng = rng
        self.topics = {"t": tuple(range(partitions))}
        self.ids: dict[str, tuple[LegacyRegistration, str]] = {}  # consumer id -> (registration, session)
        self.owners: dict[TP, tuple[str, str]] = {}  # -> (holder thread, session)
        self.committed: dict[TP, int] = {}
        self.legacy: dict[str, LegacyConsumer] = {}
        self.members: dict[str, OurMember] = {}
        self.quiesced: set[tuple[TP, str]] = set()  # (partition, consumer id)
        self.pending: list[tuple] = []  # the daemon's plan, action by action
        self.delivered: Counter = Counter()
        self.killed = False
        self.serial = 0
        self.session = "daemon-1"  # the owner daemon's ZooKeeper session
        self.dead_sessions: list[str] = []  # of owner daemons gone, until they expire

    # -- ZooKeeper
    def ids_changed(self) -> None:
        for consumer in self.legacy.values():
            consumer.needs_rebalance = True

    def create_owner(self, tp: TP, holder: str, session: str) -> bool:
        if tp in self.owners:
            return False
        self.owners[tp] = (holder, session)
        return True

    def expire(self, session: str) -> None:
        self.owners = {tp: o for tp, o in self.owners.items() if o[1] != session}
        before = len(self.ids)
        self.ids = {cid: r for cid, r in self.ids.items() if r[1] != session}
        if len(self.ids) != before:
            self.ids_changed()

    # -- legacy consumers (Kafka 1.1.1's syncedRebalance, auto-commit on)
    def legacy_step(self, c: LegacyConsumer) -> None:
        if not c.released:
            for tp, offset in c.fetching.items():  # closeFetchers: auto-commit before anything is released
                self.committed[tp] = offset
            c.fetching.clear()
            self.owners = {tp: o for tp, o in self.owners.items() if o[1] != f"L:{c.cid}"}
            c.released = True
            return
        regs = [r for r, _ in self.ids.values()]
        target = range_assignment(regs, self.topics)
        mine = {tp: t for tp, t in target.items() if t.rsplit("-", 1)[0] == c.cid}
        claimed = [tp for tp, t in sorted(mine.items()) if self.create_owner(tp, t, f"L:{c.cid}")]
        c.released = False
        if len(claimed) < len(mine):
            for tp in claimed:
                del self.owners[tp]
            return  # back off; still needs a rebalance
        c.fetching = {tp: self.committed.get(tp, 0) for tp in mine}
        c.needs_rebalance, c.target = False, target

    def add_legacy(self, registration: LegacyRegistration) -> None:
        c = LegacyConsumer(registration)
        self.legacy[c.cid] = c
        self.ids[c.cid] = (registration, f"L:{c.cid}")
        self.ids_changed()

    def legacy_leaves(self, c: LegacyConsumer) -> None:
        for tp, offset in c.fetching.items():  # shutdown commits (auto-commit), then closes the session
            self.committed[tp] = offset
        del self.legacy[c.cid]
        self.expire(f"L:{c.cid}")

    def legacy_killed(self, c: LegacyConsumer) -> None:
        c.alive, c.fetching, self.killed = False, {}, True

    # -- the daemon: plan, then carry the plan out one action at a time
    def view(self) -> View:
        return View({cid: r for cid, (r, _) in self.ids.items()}, self.topics,
                    {tp: Owner(h, s == self.session) for tp, (h, s) in self.owners.items()},
                    {cid: m.member for cid, m in self.members.items()},
                    frozenset(cid for cid, (_, s) in self.ids.items() if s == self.session), frozenset(self.quiesced))

    def daemon_plan(self):
        result = plan(self.view())
        self.pending = ([("unregister", c) for c in result.unregister] + [("register", c) for c in result.register]
                        + [("revoke", c, tps) for c, tps in result.revoke.items()]
                        + [("release", r) for r in result.release] + [("claim", c) for c in result.claim]
                        + [("assign", c, tps) for c, tps in result.assignment.items()])
        return result

    def daemon_act(self) -> None:
        action = self.pending.pop(0)
        kind = action[0]
        if kind == "unregister" and self.ids.get(action[1], (None, None))[1] == self.session:
            del self.ids[action[1]]
            self.ids_changed()
        elif kind == "register" and action[1] in self.members and action[1] not in self.ids:
            self.ids[action[1]] = (self.members[action[1]].member.registration(), self.session)
            self.ids_changed()
        elif kind == "revoke" and action[1] in self.members:
            self.members[action[1]].revoking |= set(action[2])
        elif kind == "release":
            release = action[1]
            if self.owners.get(release.partition) == (release.holder, self.session):  # only if still ours
                del self.owners[release.partition]
                self.quiesced.discard((release.partition, release.holder.rsplit("-", 1)[0]))
        elif kind == "claim":
            self.create_owner(action[1].partition, action[1].holder, self.session)
        elif kind == "assign" and action[1] in self.members:
            m = self.members[action[1]]
            threads = m.member.threads()
            for tp in action[2]:  # the runtime's rule: hand out only what the znode says is this member's
                if tp not in m.consuming and self.owners.get(tp, ("", ""))[1] == self.session \
                        and self.owners[tp][0] in threads:
                    m.consuming[tp] = self.committed.get(tp, 0)
                    m.revoking.discard(tp)
                    self.quiesced.discard((tp, action[1]))

    def failover(self) -> None:
        """The owner daemon dies; the next one loads the group. As docs/handover.md
        requires, the members give everything up (committed) before the old
        session can expire; they keep their consumer ids (the group record has them)."""
        for m in self.members.values():
            m.revoking = set(m.consuming)
            self.member_acks(m)
        self.dead_sessions.append(self.session)
        self.session = f"daemon-{int(self.session.rsplit('-', 1)[1]) + 1}"
        self.quiesced.clear()
        self.pending = []

    def member_acks(self, m: OurMember) -> None:
        for tp in m.revoking:
            if tp in m.consuming:
                self.committed[tp] = m.consuming.pop(tp)
            self.quiesced.add((tp, m.member.consumer_id))
        m.revoking.clear()

    def member_joins(self) -> None:
        self.serial += 1
        cid = zkcoord_consumer_id("g", self.serial, f"{self.rng.getrandbits(32):08x}")
        self.members[cid] = OurMember(Member(cid, {"t": self.rng.choice([1, 1, 2])}))

    def member_leaves(self, m: OurMember, clean: bool) -> None:
        if clean:
            for tp, offset in m.consuming.items():
                self.committed[tp] = offset
        else:
            self.killed = True
        del self.members[m.member.consumer_id]

    # -- consuming
    def consume(self, fetching: dict[TP, int]) -> None:
        if fetching:
            tp = self.rng.choice(sorted(fetching))
            self.delivered[(tp, fetching[tp])] += 1
            fetching[tp] += 1

    def check(self) -> None:
        consumers: Counter = Counter()
        for c in self.legacy.values():
            for tp in c.fetching:
                consumers[tp] += 1
                assert self.owners.get(tp, ("", ""))[1] == f"L:{c.cid}", (tp, c.cid, self.owners.get(tp))
        for m in self.members.values():
            for tp in m.consuming:
                consumers[tp] += 1
                holder, session = self.owners.get(tp, ("(no owner znode)", ""))
                assert session == self.session and holder.rsplit("-", 1)[0] == m.member.consumer_id, (tp, holder)
        assert all(n == 1 for n in consumers.values()), consumers
        if not self.killed:
            assert all(n == 1 for n in self.delivered.values()), [k for k, n in self.delivered.items() if n > 1]


def step(world: World, rng: random.Random, changes: bool) -> None:
    if changes and rng.random() < 0.08:  # a change of membership now and then, so the group gets to settle
        what = rng.choice(["join", "leave", "legacy_join", "legacy_leave", "kill", "expire", "resubscribe",
                           "failover"])
    else:
        what = rng.choice(["daemon", "daemon", "daemon", "consume", "consume", "ack", "legacy", "legacy"])
    live_legacy = [c for c in world.legacy.values() if c.alive]
    if what == "daemon":
        world.daemon_act() if world.pending else world.daemon_plan()
    elif what == "consume":
        sources = [c.fetching for c in live_legacy] + [m.consuming for m in world.members.values()]
        if sources:
            world.consume(rng.choice(sources))
    elif what == "ack" and world.members:
        world.member_acks(rng.choice(list(world.members.values())))
    elif what == "legacy":
        waiting = [c for c in live_legacy if c.needs_rebalance or c.released]
        if waiting:
            world.legacy_step(rng.choice(waiting))
    elif what == "join" and len(world.members) < 3:
        world.member_joins()
    elif what == "leave" and world.members:
        world.member_leaves(rng.choice(list(world.members.values())), clean=rng.random() < 0.8)
    elif what == "resubscribe" and world.members:  # the member asks for another number of streams
        m = rng.choice(list(world.members.values()))  # it keeps consuming until the plan revokes
        m.member = Member(m.member.consumer_id, {"t": 3 - m.member.topics["t"]})
    elif what == "legacy_join" and len(world.legacy) < 3:
        cid = f"g_host{rng.randint(0, 9)}-{rng.randint(1, 99)}"
        if cid not in world.legacy:
            world.add_legacy(LegacyRegistration.static(cid, {"t": rng.choice([1, 2])}))
    elif what == "legacy_leave" and live_legacy:
        world.legacy_leaves(rng.choice(live_legacy))
    elif what == "kill" and live_legacy and rng.random() < 0.3:
        world.legacy_killed(rng.choice(live_legacy))
    elif what == "expire":
        for c in [c for c in world.legacy.values() if not c.alive]:
            del world.legacy[c.cid]
            world.expire(f"L:{c.cid}")
        for session in world.dead_sessions:
            world.expire(session)
        world.dead_sessions.clear()
    elif what == "failover" and rng.random() < 0.5:
        world.failover()


def settle(world: World) -> None:
    """Nothing changes any more: everybody acts until nobody has anything to do."""
    for c in [c for c in world.legacy.values() if not c.alive]:
        del world.legacy[c.cid]
        world.expire(f"L:{c.cid}")
    for session in world.dead_sessions:
        world.expire(session)
    world.dead_sessions.clear()
    for _ in range(200):
        for c in list(world.legacy.values()):
            while c.needs_rebalance or c.released:
                world.legacy_step(c)
                if not c.released and c.needs_rebalance:
                    break  # a failed claim: back off, let the others act
        world.daemon_plan()
        while world.pending:
            world.daemon_act()
        for m in world.members.values():
            world.member_acks(m)
        world.check()
        result = plan(world.view())
        consuming = all(set(m.consuming) == result.assignment[cid] for cid, m in world.members.items())
        if result.settled and consuming and not any(c.needs_rebalance or c.released for c in world.legacy.values()):
            return
    raise AssertionError("the group did not settle")


@SETTINGS
@given(st.integers(0, 2**32), st.integers(1, 8), st.integers(20, 400))
def test_a_mixed_group_never_shares_a_partition_and_settles_on_one_answer(seed, partitions, steps):
    rng = random.Random(seed)
    world = World(rng, partitions)
    for _ in range(rng.randint(0, 3)):
        world.add_legacy(LegacyRegistration.static(f"g_legacy{len(world.legacy)}", {"t": rng.choice([1, 2])}))
    for _ in range(rng.randint(0, 2)):
        world.member_joins()
    for _ in range(steps):
        step(world, rng, changes=True)
        world.check()
    settle(world)
    result = plan(world.view())
    assert {tp: h for tp, (h, _) in world.owners.items()} == result.target
    assert result.disagreeing == {} and result.unowned == frozenset() and result.blocked == ()
    for c in world.legacy.values():
        assert c.target == result.target
        assert set(c.fetching) == {tp for tp, t in result.target.items() if t.rsplit("-", 1)[0] == c.cid}
    for cid, m in world.members.items():
        assert set(m.consuming) == result.assignment[cid]
        assert result.assignment[cid] == {tp for tp, t in result.target.items() if t in m.member.threads()}
    for _ in range(50):  # everybody consumes on: still one member per partition
        step(world, rng, changes=False)
        world.check()
    for tp in world.committed.keys() | {tp for tp, _ in world.delivered}:
        offsets = sorted({o for (p, o) in world.delivered if p == tp})
        assert offsets == list(range(len(offsets))), (tp, offsets)  # no record skipped
