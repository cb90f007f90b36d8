"""The thin consumer as a member of KIP-848 consumer groups
(``group_protocol="consumer"``) on real daemons, ZooKeeper and Kafka.

Members split topics and consume every record exactly once across joins,
leaves (commit on revoke), a member that dies (its session runs out), a
static member leaving and coming back, a member that stops polling, a
mixed group (a classic zkcoord consumer beside consumer-protocol ones:
online upgrade and downgrade) and the fail-over of the group's owner daemon.
After each, no partition had two owners at once, as the members' own
callbacks tell it (:func:`tests.support.ownership.double_owners`: a
revocation ends when ``on_revoked`` returned, an assignment begins when
``on_assigned`` is called; callbacks are stamped from one counter, in the
order they happened). Which daemon owns a group is never assumed; every
wait is for an outcome, with a deadline."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
import time

import pytest

from tests.integration.test_client_support import (
    ThreadDaemons, create_topic, describe_consumer_group as describe, eventually, produce,
)
from tests.support.daemons import DaemonFleet
from tests.support.ownership import AssignmentChange, double_owners
from tests.support.wire import find_coordinator
from zkcoord.client import (
    CommitFailedError, Consumer, ConsumerConfig, ConsumerError, FencedInstanceError, OffsetAndMetadata,
    RebalanceListener, TopicPartition,
)

pytestmark = pytest.mark.integration

# Daemon settings: targets computed at once, topics seen soon, short sessions where a test needs them.
DAEMON = dict(group_consumer_assignment_interval_ms=0, topic_metadata_refresh_ms=200,
              group_consumer_heartbeat_interval_ms=500)
_clock = itertools.count(1)
_clock_lock = threading.Lock()


def tick() -> int:
    """The next stamp of one counter shared by every member of the test process."""
    with _clock_lock:
        return next(_clock)


def protocol_config(coordinators: str, bootstrap: str, group: str, **overrides) -> ConsumerConfig:
    settings = dict(coordinators=coordinators, bootstrap_servers=bootstrap, group_id=group,
                    group_protocol="consumer", max_poll_interval_ms=30_000, enable_auto_commit=False,
                    auto_offset_reset="earliest", metadata_max_age_ms=2_000, request_timeout_ms=10_000,
                    reconnect_backoff_max_ms=500)
    settings.update(overrides)
    return ConsumerConfig(**settings)


@dataclasses.dataclass
class Worker:
    """One consumer: what it consumed, its callbacks (stamped), its commits."""

    name: str
    consumer: Consumer
    manual_commit: bool = True  # False: auto commit only (on revoke too)
    records: list = dataclasses.field(default_factory=list)
    changes: list = dataclasses.field(default_factory=list)  # AssignmentChange
    epochs: list = dataclasses.field(default_factory=list)  # (callback, member epoch)
    failed_commits: list = dataclasses.field(default_factory=list)

    def poll(self, timeout_ms: int = 100) -> list:
        records = self.consumer.poll(timeout_ms=timeout_ms)
        self.records.extend(records)
        if records and self.manual_commit:
            self.commit()
        return records

    def commit(self) -> None:
        positions = {tp: self.consumer.position(tp) for tp in self.consumer.assignment()}
        try:
            self.consumer.commit({tp: OffsetAndMetadata(o, self.name, -1) for tp, o in positions.items()
                                  if o is not None})
        except ConsumerError as exc:
            self.failed_commits.append(exc)

    def keys(self) -> list[tuple[int, str]]:
        return [(r.partition, r.key.decode()) for r in self.records]

    def owned(self) -> frozenset:
        return frozenset(self.consumer.assignment())


class Recording(RebalanceListener):
    """Commits on revoke; stamps a revocation when it is done, an assignment
    when it starts (``clock``: :func:`tick`, or milliseconds of the wall
    clock beside other processes' callbacks)."""

    def __init__(self, worker: Worker, clock=tick):
        self.worker = worker
        self.clock = clock

    def _note(self, kind: str, partitions) -> None:
        self.worker.changes.append(AssignmentChange(self.worker.name, kind, self.clock(),
                                                    {(tp.topic, tp.partition) for tp in partitions}))
        self.worker.epochs.append((kind, self.worker.consumer.membership().generation_id))

    def on_revoked(self, partitions):
        if partitions and self.worker.manual_commit:
            self.worker.commit()
        self._note("revoked", partitions)

    def on_assigned(self, partitions):
        self._note("assigned", partitions)

    def on_lost(self, partitions):
        self._note("lost", partitions)


def start_worker(name: str, cfg: ConsumerConfig, topics=(), pattern=None, clock=tick) -> Worker:
    consumer = Consumer(dataclasses.replace(cfg, client_id=name)).start()
    worker = Worker(name, consumer, manual_commit=not cfg.enable_auto_commit)
    if pattern is not None:
        consumer.subscribe(pattern=pattern, listener=Recording(worker, clock))
    else:
        consumer.subscribe(list(topics), listener=Recording(worker, clock))
    return worker


def polling(workers):
    def step():
        for worker in workers:
            worker.poll(100)
    return step


def split(workers, partitions) -> bool:
    """Every worker stable, the partitions split among them exactly."""
    if any(w.consumer.membership().state != "stable" for w in workers):
        return False
    owned = [w.owned() for w in workers]
    return sum(len(o) for o in owned) == len(partitions) and frozenset().union(*owned) == frozenset(partitions)


def no_double_owner(workers) -> None:
    overlaps = double_owners([c for w in workers for c in w.changes])
    assert not overlaps, "\n".join(str(o) for o in overlaps)


def consumed(workers) -> list:
    return sorted(k for w in workers for k in w.keys())


def committed(worker: Worker, partitions) -> dict:
    return {tp: o.offset for tp, o in worker.consumer.committed(list(partitions)).items()}


# -- tests -------------------------------------------------------------------------------------------
def test_members_split_a_topic_through_a_join_and_a_leave(services, zk_hosts, unique_name):
    topic, group = unique_name("t"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 6)
    partitions = frozenset(TopicPartition(topic, p) for p in range(6))
    with ThreadDaemons(zk_hosts, 2, bootstrap_servers=bootstrap, **DAEMON) as daemons:
        cfg = protocol_config(daemons.addresses, bootstrap, group)
        workers = [start_worker(f"w{i}", cfg, [topic]) for i in range(2)]
        everyone = list(workers)
        try:
            produced = produce(bootstrap, topic, range(6), 10, tag="a")
            eventually(lambda: split(workers, partitions) and len(consumed(everyone)) >= len(produced),
                       "2 members consumed batch a", step=polling(workers))

            workers.append(start_worker("w2", cfg, [topic]))
            everyone.append(workers[-1])
            produced |= produce(bootstrap, topic, range(6), 10, tag="b")
            eventually(lambda: split(workers, partitions) and all(len(w.owned()) == 2 for w in workers)
                       and len(consumed(everyone)) >= len(produced), "3 members after a join consumed batch b",
                       step=polling(workers))

            leaving = workers.pop(0)
            leaving.consumer.close()  # on_revoked commits, then the leave heartbeat (epoch -1)
            produced |= produce(bootstrap, topic, range(6), 10, tag="c")
            eventually(lambda: split(workers, partitions) and len(consumed(everyone)) >= len(produced),
                       "2 members after a leave consumed batch c", step=polling(workers))

            assert consumed(everyone) == sorted(produced)  # every record, each once
            no_double_owner(everyone)
            assert not [f for w in everyone for f in w.failed_commits]
            assert committed(workers[0], partitions) == {tp: 30 for tp in partitions}
            described = describe(daemons.addresses, group)
            assert (described.error_code, described.group_state) == (0, "Stable")
            assert sorted(m.member_id for m in described.members) == sorted(
                w.consumer.membership().member_id for w in workers)
            assert {m.member_epoch for m in described.members} == {described.group_epoch}
            assert [(kind, epoch) for kind, epoch in leaving.epochs][-1][0] == "revoked"
        finally:
            for w in workers:
                w.consumer.close()


def test_auto_commit_before_each_reconciliation_and_on_close(services, zk_hosts, unique_name):
    """No commit by the application: auto commit before every reconciliation
    (Kafka's commit before revoking) and on close hands every record over once."""
    topic, group = unique_name("t"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 6)
    partitions = frozenset(TopicPartition(topic, p) for p in range(6))
    with ThreadDaemons(zk_hosts, 1, bootstrap_servers=bootstrap, **DAEMON) as daemons:
        cfg = protocol_config(daemons.addresses, bootstrap, group, enable_auto_commit=True,
                              auto_commit_interval_ms=60_000)  # only the rebalance and close commits count
        workers = [start_worker(f"w{i}", cfg, [topic]) for i in range(2)]
        everyone = list(workers)
        try:
            produced = produce(bootstrap, topic, range(6), 10, tag="a")
            eventually(lambda: split(workers, partitions) and len(consumed(everyone)) >= len(produced),
                       "2 members consumed batch a", step=polling(workers))
            workers.append(start_worker("w2", cfg, [topic]))
            everyone.append(workers[-1])
            produced |= produce(bootstrap, topic, range(6), 10, tag="b")
            eventually(lambda: split(workers, partitions) and all(len(w.owned()) == 2 for w in workers)
                       and len(consumed(everyone)) >= len(produced), "3 members consumed batch b",
                       step=polling(workers))
            leaving = workers.pop(0)
            leaving.consumer.close()  # auto commit, on_revoked, leave
            produced |= produce(bootstrap, topic, range(6), 10, tag="c")
            eventually(lambda: split(workers, partitions) and len(consumed(everyone)) >= len(produced),
                       "2 members after a leave consumed batch c", step=polling(workers))
            assert consumed(everyone) == sorted(produced)
            no_double_owner(everyone)
        finally:
            for w in workers:
                w.consumer.close()
        reader = Consumer(cfg).start()  # partitions by hand: reads the group's offsets without joining
        try:
            reader.assign(partitions)
            assert {tp: o.offset for tp, o in reader.committed(list(partitions)).items()} == {tp: 30 for tp in partitions}
        finally:
            reader.close()


def crash(worker: Worker) -> None:
    """The member dies without a word: no more heartbeats, polls or leave
    (its connections close, as a killed process's would)."""
    kafka = worker.consumer._kafka
    coordinator = kafka._coordinator
    coordinator._member_closed = True
    coordinator._member_wakeup.notify()
    worker.changes.append(AssignmentChange(worker.name, "revoked", tick(),
                                           {(tp.topic, tp.partition) for tp in worker.owned()}))
    kafka._client.close()
    worker.consumer._closed = True


def settled(workers, partitions, produced, everyone=None) -> bool:
    """Split, everything produced consumed (by ``everyone``, default the
    ``workers``) and committed by its owner."""
    if not split(workers, partitions) or len(consumed(everyone or workers)) < len(produced):
        return False
    ends = workers[0].consumer.end_offsets(partitions)
    return all(committed(w, w.owned()) == {tp: ends[tp] for tp in w.owned()} for w in workers)


def test_a_member_that_dies_loses_its_partitions_when_its_session_runs_out(services, zk_hosts, unique_name):
    topic, group = unique_name("t"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 6)
    partitions = frozenset(TopicPartition(topic, p) for p in range(6))
    with ThreadDaemons(zk_hosts, 1, bootstrap_servers=bootstrap, group_consumer_session_timeout_ms=4_000,
                       **DAEMON) as daemons:
        cfg = protocol_config(daemons.addresses, bootstrap, group)
        workers = [start_worker(f"w{i}", cfg, [topic]) for i in range(3)]
        everyone = list(workers)
        try:
            produced = produce(bootstrap, topic, range(6), 10, tag="a")
            eventually(lambda: settled(workers, partitions, produced) and all(len(w.owned()) == 2 for w in workers),
                       "3 members split the topic, consumed and committed batch a", step=polling(workers))
            dead = workers.pop(0)
            held = dead.owned()
            crash(dead)
            produced |= produce(bootstrap, topic, range(6), 10, tag="b")
            eventually(lambda: split(workers, partitions) and len(consumed(everyone)) >= len(produced),
                       "the 2 survivors took the dead member's partitions and consumed batch b",
                       step=polling(workers))
            assert consumed(everyone) == sorted(produced)
            no_double_owner(everyone)
            assert not any(c.kind == "lost" for w in workers for c in w.changes)  # the survivors kept theirs
            taken = {tp for w in workers for c in w.changes if c.kind == "assigned" and c.ts_ms > 0
                     for tp in c.partitions}
            assert {(tp.topic, tp.partition) for tp in held} <= taken
            assert len(describe(daemons.addresses, group).members) == 2
        finally:
            for w in workers:
                w.consumer.close()


def test_a_static_member_leaves_and_comes_back_to_its_partitions(services, zk_hosts, unique_name):
    topic = unique_name("t")
    create_topic(services.bootstrap_servers, topic, 4)
    with ThreadDaemons(zk_hosts, 1, bootstrap_servers=services.bootstrap_servers, **DAEMON) as daemons:
        static_member_scenario(daemons.addresses, services.bootstrap_servers, topic, unique_name("g"),
                               unique_name("i"))


def test_a_static_member_leaves_and_comes_back_on_kafka_too(kafka4, unique_name):
    """The same steps against Kafka 4.4's own coordinator."""
    topic = unique_name("t")
    create_topic(kafka4, topic, 4)
    static_member_scenario(kafka4, kafka4, topic, unique_name("g"), unique_name("i"))


def static_member_scenario(coordinators: str, bootstrap: str, topic: str, group: str, instance: str) -> None:
    """A static and a dynamic member split a topic; the static one closes
    (epoch -2: its partitions wait for it, nobody else moves), a new consumer
    with its instance id gets them back; every record once."""
    partitions = frozenset(TopicPartition(topic, p) for p in range(4))
    cfg = protocol_config(coordinators, bootstrap, group)
    static = start_worker("static", dataclasses.replace(cfg, group_instance_id=instance), [topic])
    dynamic = start_worker("dynamic", cfg, [topic])
    workers = [static, dynamic]
    everyone = list(workers)
    try:
        produced = produce(bootstrap, topic, range(4), 5, tag="a")
        eventually(lambda: settled(workers, partitions, produced) and all(len(w.owned()) == 2 for w in workers),
                   "static and dynamic split the topic and consumed batch a", step=polling(workers))
        kept, theirs, callbacks = static.owned(), dynamic.owned(), len(dynamic.changes)
        static.consumer.close()  # epoch -2: the coordinator keeps its partitions for it
        assert static.changes[-1].kind == "revoked" and static.changes[-1].partitions == {
            (tp.topic, tp.partition) for tp in kept}
        parked = describe(coordinators, group)
        assert {(m.instance_id, m.member_epoch) for m in parked.members if m.instance_id} == {(instance, -2)}

        produced |= produce(bootstrap, topic, range(4), 5, tag="b")
        mine = {(p, k) for p, k in produced if k.startswith("b-") and TopicPartition(topic, p) in theirs}
        eventually(lambda: mine <= set(dynamic.keys()), "the dynamic member consumed its own batch b",
                   step=polling([dynamic]))
        assert dynamic.owned() == theirs and len(dynamic.changes) == callbacks  # no rebalance meanwhile

        back = start_worker("static-again", dataclasses.replace(cfg, group_instance_id=instance), [topic])
        workers = [back, dynamic]
        everyone.append(back)
        eventually(lambda: settled(workers, partitions, produced, everyone),
                   "the static member back consumed batch b", step=polling(workers))
        assert back.owned() == kept and dynamic.owned() == theirs
        assert len(dynamic.changes) == callbacks
        assert consumed(everyone) == sorted(produced)
        no_double_owner(everyone)
    finally:
        for w in workers:
            w.consumer.close()


def test_a_member_that_stops_polling_leaves_and_rejoins_at_its_next_poll(services, zk_hosts, unique_name):
    topic, group = unique_name("t"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 4)
    partitions = frozenset(TopicPartition(topic, p) for p in range(4))
    with ThreadDaemons(zk_hosts, 1, bootstrap_servers=bootstrap, **DAEMON) as daemons:
        cfg = protocol_config(daemons.addresses, bootstrap, group)
        slow = start_worker("slow", dataclasses.replace(cfg, max_poll_interval_ms=3_000), [topic])
        busy = start_worker("busy", cfg, [topic])
        workers = [slow, busy]
        try:
            produced = produce(bootstrap, topic, range(4), 5, tag="a")
            eventually(lambda: settled(workers, partitions, produced) and all(len(w.owned()) == 2 for w in workers),
                       "both split the topic and consumed batch a", step=polling(workers))
            slow_id = slow.consumer.membership().member_id
            # slow stops polling: after max_poll_interval_ms its heartbeat task leaves for it.
            eventually(lambda: busy.owned() == partitions, "busy took every partition", step=polling([busy]))
            assert slow_id not in {m.member_id for m in describe(daemons.addresses, group).members}
            produced |= produce(bootstrap, topic, range(4), 5, tag="b")
            eventually(lambda: len(consumed(workers)) >= len(produced), "busy consumed batch b",
                       step=polling([busy]))
            eventually(lambda: split(workers, partitions) and len(slow.owned()) == 2, "slow back in the group",
                       step=polling(workers))
            kinds = [c.kind for c in slow.changes]
            assert "lost" in kinds and kinds[kinds.index("lost") + 1:].count("assigned") >= 1
            assert slow.consumer.membership().member_id == slow_id  # same member id, new epoch
            assert consumed(workers) == sorted(produced)
            no_double_owner(workers)
        finally:
            for w in workers:
                w.consumer.close()


def test_mixed_group_upgrades_and_downgrades_online(services, zk_hosts, zk, unique_name):
    from tests.integration.test_client_support import config as classic_config, read_group_state

    topic, group = unique_name("t"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 4)
    partitions = frozenset(TopicPartition(topic, p) for p in range(4))
    with ThreadDaemons(zk_hosts, 2, bootstrap_servers=bootstrap, **DAEMON) as daemons:
        classic = start_worker("classic", classic_config(daemons.addresses, bootstrap, group), [topic])
        workers = [classic]
        everyone = list(workers)
        try:
            produced = produce(bootstrap, topic, range(4), 5, tag="a")
            eventually(lambda: settled(workers, partitions, produced), "the classic member consumed batch a",
                       step=polling(workers))
            assert read_group_state(zk, group)[0] == "Stable"  # a classic group

            modern = start_worker("modern", protocol_config(daemons.addresses, bootstrap, group), [topic])
            workers.append(modern)
            everyone.append(modern)
            eventually(lambda: split(workers, partitions) and len(modern.owned()) == 2,
                       "upgraded: the classic and the consumer-protocol member split the topic",
                       step=polling(workers))
            described = describe(daemons.addresses, group)
            assert (described.error_code, described.group_state) == (0, "Stable")
            assert sorted(m.member_id for m in described.members) == sorted(
                w.consumer.membership().member_id for w in workers)
            produced |= produce(bootstrap, topic, range(4), 5, tag="b")
            eventually(lambda: settled(workers, partitions, produced, everyone), "both consumed batch b",
                       step=polling(workers))
            assert {p for p, _ in modern.keys()} == {tp.partition for tp in modern.owned()}  # it consumed its half

            modern.consumer.close()  # the last consumer-protocol member leaves: downgraded to classic
            workers.remove(modern)
            produced |= produce(bootstrap, topic, range(4), 5, tag="c")
            eventually(lambda: settled(workers, partitions, produced, everyone), "downgraded: the classic member alone",
                       step=polling(workers))
            state, _, members = read_group_state(zk, group)
            assert (state, members) == ("Stable", [classic.consumer.membership().member_id])
            assert consumed(everyone) == sorted(produced)
            no_double_owner(everyone)
        finally:
            for w in workers:
                w.consumer.close()


def test_subscription_by_regular_expression(services, zk_hosts, unique_name):
    prefix, group = unique_name("rx"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, f"{prefix}-a", 2)
    create_topic(bootstrap, f"{prefix}-b", 2)
    create_topic(bootstrap, f"{prefix}x-not", 2)
    with ThreadDaemons(zk_hosts, 1, bootstrap_servers=bootstrap, **DAEMON) as daemons:
        cfg = protocol_config(daemons.addresses, bootstrap, group)
        pattern = f"{prefix}-[a-z]+"  # RE2J: matched against whole topic names by the coordinator
        workers = [start_worker(f"w{i}", cfg, pattern=pattern) for i in range(2)]
        try:
            partitions = {TopicPartition(f"{prefix}-{t}", p) for t in "ab" for p in range(2)}
            produced = set()
            for t in "ab":
                produced |= {(p, k) for p, k in produce(bootstrap, f"{prefix}-{t}", range(2), 3, tag=t)}
            eventually(lambda: split(workers, partitions) and len(consumed(workers)) >= len(produced),
                       "two members split the matching topics", step=polling(workers))
            create_topic(bootstrap, f"{prefix}-c", 2)
            partitions |= {TopicPartition(f"{prefix}-c", p) for p in range(2)}
            eventually(lambda: split(workers, partitions), "a new matching topic is assigned too",
                       step=polling(workers))
            assert consumed(workers) == sorted(produced)
            assert workers[0].consumer.subscription() | workers[1].consumer.subscription() == {
                f"{prefix}-a", f"{prefix}-b", f"{prefix}-c"}
            no_double_owner(workers)
        finally:
            for w in workers:
                w.consumer.close()


def test_fatal_answers_are_raised_by_poll_naming_the_setting(services, zk_hosts, unique_name):
    topic = unique_name("t")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 1)
    with ThreadDaemons(zk_hosts, 1, bootstrap_servers=bootstrap, **DAEMON) as daemons:
        cfg = protocol_config(daemons.addresses, bootstrap, unique_name("g"), group_remote_assignor="fair")
        worker = start_worker("w", cfg, [topic])
        try:
            with pytest.raises(ConsumerError, match="group_remote_assignor") as raised:
                eventually(lambda: False, "never", step=polling([worker]))
            assert "UnsupportedAssignorError" in str(raised.value)
            with pytest.raises(ConsumerError, match="group_remote_assignor"):  # and at every later poll
                worker.poll(0)
        finally:
            worker.consumer.close()

        instance, group = unique_name("i"), unique_name("g")
        cfg = protocol_config(daemons.addresses, bootstrap, group, group_instance_id=instance)
        first = start_worker("first", cfg, [topic])
        second = start_worker("second", cfg, [topic])
        try:
            eventually(lambda: first.owned() == {TopicPartition(topic, 0)}, "first joined", step=polling([first]))
            with pytest.raises(FencedInstanceError, match="still held"):
                eventually(lambda: False, "never", step=polling([second]))
        finally:
            first.consumer.close()
            second.consumer.close()

    with ThreadDaemons(zk_hosts, 1, bootstrap_servers=bootstrap, group_coordinator_rebalance_protocols="classic",
                       **DAEMON) as daemons:
        worker = start_worker("w", protocol_config(daemons.addresses, bootstrap, unique_name("g")), [topic])
        try:
            with pytest.raises(ConsumerError, match="use group_protocol=classic") as raised:
                eventually(lambda: False, "never", step=polling([worker]))
            # It does not advertise the API (main's classic_only), so nothing was sent: Kafka's consumer checks first.
            assert "does not advertise ConsumerGroupHeartbeat v1" in str(raised.value)
        finally:
            worker.consumer.close()


@pytest.fixture
def fleet(zk_hosts, zk, tmp_path, services):
    with DaemonFleet(zk_hosts, zk, tmp_path / "logs", options={
            "zk_session_timeout_ms": 4_000, "bootstrap_servers": services.bootstrap_servers, **DAEMON}) as fleet:
        try:
            yield fleet
        finally:
            for daemon in fleet.daemons.values():
                print(f"---- daemon {daemon.node_id} (pid {daemon.pid}), {daemon.log_path}:\n{daemon.log(40)}")


def test_the_owner_daemon_dies_and_the_group_goes_on(services, fleet, unique_name):
    topic, group = unique_name("t"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 6)
    partitions = frozenset(TopicPartition(topic, p) for p in range(6))
    daemons = fleet.start_many(1, 2)
    addresses = ",".join(f"{h}:{p}" for h, p in (d.address for d in daemons))
    cfg = protocol_config(addresses, bootstrap, group)
    workers = [start_worker(f"w{i}", cfg, [topic]) for i in range(2)]
    everyone = list(workers)
    try:
        produced = produce(bootstrap, topic, range(6), 10, tag="a")
        eventually(lambda: settled(workers, partitions, produced) and all(len(w.owned()) == 3 for w in workers),
                   "2 members split the topic and consumed batch a", step=polling(workers))
        owner_address = asyncio.run(find_coordinator(addresses, group))
        owner = next(d for d in daemons if d.address == owner_address)
        owner.kill()
        produced |= produce(bootstrap, topic, range(6), 10, tag="b")
        workers.append(start_worker("w2", cfg, [topic]))  # partitions move on the new owner
        everyone.append(workers[-1])
        eventually(lambda: settled(workers, partitions, produced, everyone)
                   and all(len(w.owned()) == 2 for w in workers),
                   "3 members on the surviving daemon consumed batch b", step=polling(workers))
        produced |= produce(bootstrap, topic, range(6), 10, tag="c")
        eventually(lambda: settled(workers, partitions, produced, everyone), "the 3 members consumed batch c",
                   step=polling(workers))
        assert {p for p, k in workers[-1].keys() if k.startswith("c-")} == {tp.partition for tp in workers[-1].owned()}
        survivor = next(d for d in daemons if d is not owner)
        assert asyncio.run(find_coordinator(addresses, group)) == survivor.address
        assert consumed(everyone) == sorted(produced)
        no_double_owner(everyone)
        assert not any(c.kind == "lost" for w in everyone for c in w.changes)  # nobody was fenced
    finally:
        for w in workers:
            w.consumer.close()


def test_against_kafkas_own_coordinator_beside_its_java_consumer(kafka4, unique_name):
    """The same client with Kafka 4.4's own group coordinator (the 4.x node
    answers the FindCoordinator the consumer sends to its "daemons") and
    Kafka's VerifiableConsumer in the same group: they split the topic, a
    zkcoord member leaves (commit on revoke), every record is consumed once,
    and the callbacks of all three show no partition with two owners."""
    from tests.support.java4_tools import VerifiableConsumerProcess

    topic, group = unique_name("t"), unique_name("g")
    create_topic(kafka4, topic, 6)
    partitions = frozenset(TopicPartition(topic, p) for p in range(6))
    wall_ms = lambda: int(time.time() * 1000)  # noqa: E731 - the Java consumer's stamps are wall-clock ms
    cfg = protocol_config(kafka4, kafka4, group, group_remote_assignor="uniform")
    workers = [start_worker(f"w{i}", cfg, [topic], clock=wall_ms) for i in range(2)]
    everyone = list(workers)
    with VerifiableConsumerProcess(kafka4, topic, group, label="java", assignor="uniform") as java:
        try:
            def three_way():
                held = [w.owned() for w in workers] + [frozenset(TopicPartition(*tp) for tp in java.assignment())]
                return all(len(h) == 2 for h in held) and frozenset().union(*held) == partitions and all(
                    w.consumer.membership().state == "stable" for w in workers)

            eventually(three_way, "two zkcoord members and Kafka's own split the topic", step=polling(workers),
                       timeout_s=120)
            produced = produce(kafka4, topic, range(6), 10, tag="a")

            def offsets() -> list[tuple[int, int]]:
                ours = [(r.partition, r.offset) for w in everyone for r in w.records]
                theirs = [(p, o) for (_, p), seen in java.consumed_offsets().items() for o in seen]
                return sorted(ours + theirs)

            eventually(lambda: len(offsets()) >= len(produced), "batch a consumed", step=polling(workers),
                       timeout_s=120)
            leaving = workers.pop(0)
            leaving.consumer.close()
            produced |= produce(kafka4, topic, range(6), 10, tag="b")
            eventually(lambda: len(offsets()) >= len(produced), "batch b consumed after a zkcoord member left",
                       step=polling(workers), timeout_s=120)
            assert offsets() == sorted((p, o) for p in range(6) for o in range(20))  # each record once
            assert double_owners([c for w in everyone for c in w.changes] + java.changes()) == []
            assert not [f for w in everyone for f in w.failed_commits]
        finally:
            for w in workers:
                w.consumer.close()


def test_through_a_sasl_ssl_daemon_with_acls(tmp_path, services, zk_hosts, unique_name):
    """Heartbeats, commits and offset fetches go on the daemon connection's
    login (SCRAM over TLS, ``coordinator_security``): alice's member, allowed
    by Kafka's ACLs, consumes; bob's is refused the group at its first poll
    (a fatal GROUP_AUTHORIZATION_FAILED: AuthorizationError naming his login)."""
    from tests.integration.test_daemon_security import kafka_acls, kafka_configs
    from zkcoord.config import DaemonConfig
    from zkcoord.errors import AuthorizationError
    from zkcoord.kafka.client_security import KafkaClientSecurity
    from zkcoord.local.certs import make_local_ca
    from zkcoord.server.daemon import Daemon

    topic, group = unique_name("t"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 2)
    ca = make_local_ca(tmp_path / "ca")
    passwords = {"alice": "alice-Kl-4Rw", "bob": "bob-Kl-8Vn"}
    logins = {}
    for user, password in passwords.items():
        kafka_configs(zk_hosts, user, password)
        path = tmp_path / f"{user}.properties"
        path.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                        f'username="{user}" password="{password}";\nssl.truststore.location={ca.ca_certificate_pem}\n')
        logins[user] = KafkaClientSecurity.from_file(str(path))
    for resource in (("--group", group), ("--topic", topic)):
        kafka_acls(zk_hosts, "--add", "--allow-principal", "User:alice", "--operation", "Read", *resource)
    daemons = ThreadDaemons(zk_hosts, count=0)
    daemons.daemons = [Daemon(DaemonConfig(
        zookeeper=zk_hosts, listen="SASL_SSL://127.0.0.1:0", node_id=1, zk_session_timeout_ms=6000,
        bootstrap_servers=bootstrap, ssl_keystore_location=str(ca.server_keystore_pem),
        ssl_key_password=ca.key_password, sasl_enabled_mechanisms="SCRAM-SHA-512",
        authorizer_class_name="kafka.security.authorizer.AclAuthorizer", super_users="User:admin", **DAEMON))]
    with daemons:
        cfg = protocol_config(daemons.addresses, bootstrap, group, coordinator_security=logins["alice"])
        alice = start_worker("alice", cfg, [topic])
        bob = start_worker("bob", dataclasses.replace(cfg, coordinator_security=logins["bob"]), [topic])
        try:
            produced = produce(bootstrap, topic, range(2), 5)
            eventually(lambda: len(consumed([alice])) >= len(produced), "alice consumed everything",
                       step=polling([alice]))
            assert consumed([alice]) == sorted(produced) and alice.owned() == {TopicPartition(topic, p) for p in (0, 1)}
            assert committed(alice, alice.owned()) == {TopicPartition(topic, p): 5 for p in (0, 1)}
            with pytest.raises(AuthorizationError) as denied:
                eventually(lambda: False, "bob's poll is refused", timeout_s=30, step=polling([bob]))
            assert "GroupAuthorizationFailedError" in str(denied.value)
            assert "daemons: SASL_SSL, SCRAM-SHA-512 as bob" in str(denied.value)
        finally:
            alice.consumer.close()
            bob.consumer.close(autocommit=False)
