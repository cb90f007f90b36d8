"""Consumer-protocol members (zkcoord.client.membership) against zkcoord's
own coordinator core, both pure, under random interleavings (hypothesis):
members join, poll, heartbeat, lose requests and answers, stop polling,
close, and have their sessions expired by the coordinator.

After every step: no partition is held by two members the coordinator
still counts (a member it removed may hold partitions until it learns, as
its ``on_lost`` says), and a member holds nothing the coordinator does not
attribute to it. At the end, with everyone polling and heartbeating again,
the group settles: every member stable at the group's epoch, the
partitions split among them exactly, each holding what it acknowledged.

Every request a member sends is also checked against Kafka's own request
validation (``heartbeat_request_problem``, the daemon's)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from zkcoord.client.membership import (
    HeartbeatRequest, HeartbeatResponse, MemberConfig, MemberState, Membership, Reconcile, Release, Send,
)
from zkcoord.core import groups
from zkcoord.core.consumer.config import ConsumerGroupConfig
from zkcoord.core.consumer.kind import CONSUMER
from zkcoord.core.consumer.messages import ConsumerHeartbeatRequest, session_key
from zkcoord.core.consumer.model import ConsumerGroup
from zkcoord.core.membership import GroupConfig
from zkcoord.core.topics_image import TopicInfo, TopicsImage
from zkcoord.server.consumer_apis import heartbeat_request_problem

T = "AAAAAAAAAAAAAAAAAAAAAQ"
PARTITIONS = 6
IMAGE = TopicsImage.of([TopicInfo("t", T, PARTITIONS)])
NAMES = {T: "t"}
INTERVAL_MS = 1_000
CORE = GroupConfig(consumer=ConsumerGroupConfig(assignment_interval_ms=0, heartbeat_interval_ms=INTERVAL_MS),
                   image=IMAGE)
SLOTS = 4


class Coordinator:
    """The core's consumer group in memory, decided and applied as the runtime does."""

    def __init__(self) -> None:
        self.group = groups.new_group("g")
        self.token = 0

    def heartbeat(self, request: HeartbeatRequest, now_ms: int) -> HeartbeatResponse:
        problem = heartbeat_request_problem(_wire(request), 1, CORE.consumer.assignors)
        assert problem is None, f"{request}: {problem}"
        self.token += 1
        core = ConsumerHeartbeatRequest(
            self.token, request.group_id, request.member_id, request.member_epoch, request.instance_id,
            request.rack_id, request.rebalance_timeout_ms, request.subscribed_topic_names,
            request.subscribed_topic_regex, request.server_assignor, request.owned, "c", "/127.0.0.1")
        outcome = groups.decide(self.group, core, now_ms, CORE)
        self.group = outcome.group
        (reply,) = outcome.replies
        result = reply.payload
        assignment = None if result.assignment is None else frozenset(
            (t, p) for t, ps in result.assignment.items() for p in ps)
        return HeartbeatResponse(int(result.error), result.message, result.member_epoch,
                                 result.heartbeat_interval_ms, assignment)

    def expire(self, member_id: str, now_ms: int) -> None:
        self.group = CONSUMER.handle_timer(self.group, session_key(member_id), now_ms, CORE).group

    def members(self) -> dict:
        return dict(self.group.members) if isinstance(self.group, ConsumerGroup) else {}


def _wire(request: HeartbeatRequest) -> SimpleNamespace:
    owned = None if request.owned is None else [SimpleNamespace(topic_id=t, partitions=list(ps))
                                                for t, ps in request.owned]
    return SimpleNamespace(group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
                           instance_id=request.instance_id, rack_id=request.rack_id,
                           rebalance_timeout_ms=request.rebalance_timeout_ms,
                           subscribed_topic_names=request.subscribed_topic_names,
                           subscribed_topic_regex=request.subscribed_topic_regex,
                           server_assignor=request.server_assignor, topic_partitions=owned)


@dataclass
class Client:
    """One consumer: its membership and what its application holds."""

    machine: Membership
    held: set = field(default_factory=set)
    closing: bool = False
    reconciling: Reconcile | None = None  # revoked, not assigned yet (its callbacks are running)

    @property
    def member_id(self) -> str:
        return self.machine.config.member_id


class Members(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 1_000_000
        self.coordinator = Coordinator()
        self.clients: dict[int, Client] = {}
        self.started = 0
        self.start(0)

    # -- what members do --------------------------------------------------------------------
    @rule(slot=st.integers(0, SLOTS - 1))
    def start(self, slot):
        if slot in self.clients:
            return
        self.started += 1
        machine = Membership(MemberConfig(group_id="g", member_id=f"m{self.started}", rebalance_timeout_ms=60_000,
                                          max_poll_interval_ms=30_000))
        machine.subscribe(topics=("t",))
        machine.on_poll(self.now)
        self.clients[slot] = Client(machine)

    @rule(slot=st.integers(0, SLOTS - 1), finish=st.booleans())
    def poll(self, slot, finish):
        """A poll(); unless ``finish``, it stops inside a reconciliation,
        after revoking and before assigning (heartbeats go on meanwhile)."""
        client = self.clients.get(slot)
        if client is None or client.closing:
            return
        self._poll(client, finish)

    @rule(slot=st.integers(0, SLOTS - 1))
    def reconciliation_ends(self, slot):
        client = self.clients.get(slot)
        if client is not None and client.reconciling is not None:
            self._assign(client)

    @rule(slot=st.integers(0, SLOTS - 1), fate=st.sampled_from(["answered", "answer-lost", "request-lost"]))
    def heartbeat(self, slot, fate):
        client = self.clients.get(slot)
        if client is None:
            return
        step = client.machine.poll_heartbeat(self.now, coordinator_known=True)
        if not isinstance(step, Send):
            return
        request = step.request
        response = None if fate == "request-lost" else self.coordinator.heartbeat(request, self.now)
        if fate == "answered":
            client.machine.on_response(request, response, self.now)
        else:
            client.machine.on_failure(request, self.now, retriable=True, message=fate)
        self._forget_if_gone(slot)

    @rule(slot=st.integers(0, SLOTS - 1))
    def close(self, slot):
        client = self.clients.get(slot)
        if client is None or client.closing:
            return
        if client.reconciling is not None:
            self._assign(client)  # close() comes after the poll() that reconciles
        client.closing = True
        work = client.machine.leave()
        if work is not None:
            client.held.clear()
            client.machine.released(work)
        self._forget_if_gone(slot)

    @rule(fates=st.lists(st.sampled_from(["answered"] * 4 + ["answer-lost", "request-lost"]), min_size=SLOTS,
                         max_size=SLOTS),
          polls=st.lists(st.sampled_from(["no", "poll", "midway"]), min_size=SLOTS, max_size=SLOTS))
    def everyone(self, fates, polls):
        """Each member polls (or not, or stops inside a reconciliation) and heartbeats if one is due."""
        for slot, (fate, how) in enumerate(zip(fates, polls)):
            if how != "no":
                self.poll(slot, finish=how == "poll")
            self.heartbeat(slot, fate)

    @rule(ms=st.integers(1, 4_000))
    def advance(self, ms):
        self.now += ms

    @rule(slot=st.integers(0, SLOTS - 1))
    def session_expires(self, slot):
        client = self.clients.get(slot)
        if client is not None and client.member_id in self.coordinator.members():
            self.coordinator.expire(client.member_id, self.now)

    def _poll(self, client: Client, finish: bool = True) -> None:
        machine = client.machine
        if client.reconciling is not None:
            self._assign(client)
        machine.on_poll(self.now)
        while (work := machine.next_work(NAMES.get, frozenset(client.held))) is not None:
            if isinstance(work, Reconcile):
                assert work.revoked <= client.held and not (work.added & client.held)
                client.held -= work.revoked  # on_revoked
                client.reconciling = work
                if not finish:
                    return
                self._assign(client)
            else:
                assert isinstance(work, Release)
                client.held.clear()
                machine.released(work)

    @staticmethod
    def _assign(client: Client) -> None:
        """The new assignment and on_assigned: the reconciliation is done."""
        work, client.reconciling = client.reconciling, None
        client.held = set(work.assigned)
        client.machine.reconciled(work)

    def _forget_if_gone(self, slot: int) -> None:
        client = self.clients[slot]
        if client.closing and not client.machine.leave_in_progress and client.machine.state is MemberState.UNSUBSCRIBED:
            del self.clients[slot]

    # -- what must hold --------------------------------------------------------------------
    @invariant()
    def no_partition_held_twice_by_members_the_coordinator_counts(self):
        members = self.coordinator.members()
        owner: dict = {}
        for client in self.clients.values():
            member = members.get(client.member_id)
            if member is None:
                continue  # removed: it loses what it holds when it learns
            attributed = {(NAMES[t], p) for part in (member.assigned, member.pending_revocation)
                          for t, ps in part.items() for p in ps}
            assert client.held <= attributed, (client.member_id, client.held, attributed)
            for tp in client.held:
                assert tp not in owner, f"{tp} held by {owner[tp]} and {client.member_id}"
                owner[tp] = client.member_id

    def teardown(self):
        """Then everyone polls and heartbeats at the interval for a while: the group converges."""
        for _ in range(30):
            alive = {c.member_id for c in self.clients.values()}
            for member_id in set(self.coordinator.members()) - alive:
                self.coordinator.expire(member_id, self.now)  # gone without a word: its session runs out
            for slot in list(self.clients):
                client = self.clients[slot]
                if not client.closing:
                    self._poll(client)
                for _ in range(3):
                    self.heartbeat(slot, "answered")
                    if slot not in self.clients:
                        break
            self.now += INTERVAL_MS
            self.no_partition_held_twice_by_members_the_coordinator_counts()
        active = [c for c in self.clients.values() if not c.closing]
        assert not [c for c in self.clients.values() if c.closing], "a closing member never left"
        if not active:
            return
        epoch = self.coordinator.group.group_epoch
        for client in active:
            m = client.machine
            assert (m.state, m.member_epoch) == (MemberState.STABLE, epoch), (client.member_id, m.state)
            assert client.held == {(NAMES[t], p) for t, p in m.current.partitions}
        held = [tp for c in active for tp in c.held]
        assert sorted(held) == sorted(("t", p) for p in range(PARTITIONS))
        assert set(self.coordinator.members()) == {c.member_id for c in active}


TestMembersAgainstTheCoordinator = Members.TestCase
TestMembersAgainstTheCoordinator.settings = settings(max_examples=150, stateful_step_count=60, deadline=None,
                                                     suppress_health_check=[HealthCheck.too_slow])


# -- examples hypothesis found: a member asked to revoke what a lost answer gave it ----------------
# zkcoord's stricter revocation rule (zkcoord.core.consumer.reconcile) waited for the member to report
# partitions it had never heard of: the answer taking them back changed nothing it held, so it never
# reported again, and the group never settled (until the member's rebalance time-out).

def _replay(*steps) -> Members:
    machine = Members()
    for name, kwargs in steps:
        getattr(machine, name)(**kwargs)
        machine.no_partition_held_twice_by_members_the_coordinator_counts()
    machine.teardown()
    return machine


def test_a_member_whose_answer_was_lost_is_not_waited_for_by_the_epoch_it_never_heard_of():
    # m1's answer giving it all six at epoch 4 is lost; m2 comes back; m1's full heartbeat at epoch 2 owns
    # three: the three given at epoch 4 are freed at once, as Kafka frees them.
    everyone = ["answered"] * 4
    machine = _replay(("start", {"slot": 1}),
                      ("everyone", {"fates": ["answered", "answer-lost", "answered", "answered"], "polls": ["no"] * 4}),
                      ("advance", {"ms": 99}),
                      ("everyone", {"fates": everyone, "polls": ["poll", "no", "no", "no"]}),
                      ("advance", {"ms": 1}),
                      ("session_expires", {"slot": 1}),
                      ("everyone", {"fates": ["answer-lost", *everyone[1:]], "polls": ["poll", "no", "no", "no"]}))
    assert sorted(len(c.held) for c in machine.clients.values()) == [3, 3]


def test_a_member_whose_answer_was_lost_in_the_same_epoch_is_not_waited_for():
    # m3, waiting for a partition to be released at epoch 4, loses the answer that gives it partition 5 (still
    # epoch 4); m1 expires, the target moves: m3's full heartbeat owns nothing, and partition 5 is freed.
    everyone = ["answered"] * 4
    machine = _replay(("start", {"slot": 1}),
                      ("everyone", {"fates": everyone, "polls": ["no"] * 4}),
                      ("advance", {"ms": 1000}),
                      ("start", {"slot": 2}),
                      ("everyone", {"fates": everyone, "polls": ["no"] * 4}),
                      ("everyone", {"fates": everyone, "polls": ["poll", "no", "no", "no"]}),
                      ("everyone", {"fates": ["answered", "answered", "answer-lost", "answered"],
                                    "polls": ["no", "no", "poll", "no"]}),
                      ("session_expires", {"slot": 0}))
    assert sorted(len(c.held) for c in machine.clients.values()) == [2, 2, 2]


# -- the three races the member closes (each was a double owner before) -----------------------------
class Scene:
    """Two members and the coordinator, stepped by hand."""

    def __init__(self) -> None:
        self.now = 1_000_000
        self.coordinator = Coordinator()
        self.a = self.member("a")
        self.b = self.member("b")

    def member(self, member_id: str) -> Client:
        machine = Membership(MemberConfig(group_id="g", member_id=member_id, rebalance_timeout_ms=60_000))
        machine.subscribe(topics=("t",))
        machine.on_poll(self.now)
        return Client(machine)

    def send(self, client: Client) -> HeartbeatRequest:
        step = client.machine.poll_heartbeat(self.now, coordinator_known=True)
        assert isinstance(step, Send), step
        return step.request

    def beat(self, client: Client, request: HeartbeatRequest | None = None) -> None:
        request = request or self.send(client)
        client.machine.on_response(request, self.coordinator.heartbeat(request, self.now), self.now)

    def coordinator_moved(self, client: Client) -> None:
        """A heartbeat answered NOT_COORDINATOR (a fail-over): the next one is full."""
        request = self.send(client)
        assert client.machine.on_response(request, HeartbeatResponse(16, None, -1, 0), self.now) is True

    def later(self) -> None:
        self.now += INTERVAL_MS

    def begin(self, client: Client) -> Reconcile | None:
        work = client.machine.next_work(NAMES.get, frozenset(client.held))
        if isinstance(work, Reconcile):
            client.held -= work.revoked
            client.reconciling = work
        return work

    def held_twice(self) -> set:
        return self.a.held & self.b.held


def test_partitions_being_taken_are_reported_as_owned():
    s = Scene()
    s.beat(s.a)  # a's target: all six
    assert s.begin(s.a) is not None  # a's callbacks run...
    s.beat(s.b)  # b joins: half of a's target is now b's
    s.later()
    s.coordinator_moved(s.a)  # ...while a's coordinator moves: its next heartbeat is full
    s.later()
    during = s.send(s.a)
    assert during.owned == ((T, tuple(range(PARTITIONS))),)  # the six it is taking, not nothing
    s.beat(s.a, during)
    s.later()
    s.beat(s.b)  # b gets none of them: a still owns them all
    Members._assign(s.a)
    if s.begin(s.b) is not None:
        Members._assign(s.b)
    assert len(s.a.held) == PARTITIONS and s.held_twice() == set()


def test_no_reconciliation_starts_with_a_heartbeat_in_flight():
    s = Scene()
    s.beat(s.a)  # a's target: all six
    s.beat(s.b)  # b joins
    s.later()
    s.coordinator_moved(s.a)
    s.later()
    in_flight = s.send(s.a)  # full: owns nothing yet, so the coordinator frees b's half
    assert in_flight.owned == ()
    assert s.begin(s.a) is None  # so a does not take the old target now
    s.beat(s.a, in_flight)
    assert len(s.a.machine.target.partitions) == PARTITIONS // 2
    s.begin(s.a)
    Members._assign(s.a)
    s.later()
    s.beat(s.b)
    s.begin(s.b)
    Members._assign(s.b)
    assert s.held_twice() == set() and len(s.a.held) == len(s.b.held) == PARTITIONS // 2


def test_a_target_is_not_reconciled_after_an_unanswered_heartbeat():
    s = Scene()
    s.beat(s.a)  # a's target: all six, not reconciled yet
    s.beat(s.b)
    s.later()
    s.coordinator_moved(s.a)
    s.later()
    lost = s.send(s.a)
    assert lost.owned == ()
    s.coordinator.heartbeat(lost, s.now)  # the coordinator moved a on (and freed b's half)...
    s.a.machine.on_failure(lost, s.now, retriable=True, message="answer lost")  # ...but a never heard
    s.later()
    s.beat(s.b)
    assert len(s.b.machine.target.partitions) == PARTITIONS // 2
    assert s.begin(s.a) is None  # the old target (all six) would overlap b's
    s.beat(s.a)  # full request, full answer
    s.begin(s.a)
    Members._assign(s.a)
    s.begin(s.b)
    Members._assign(s.b)
    assert s.held_twice() == set() and len(s.a.held) == len(s.b.held) == PARTITIONS // 2
