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

import pytest

from tests.integration.test_client_support import (
    ThreadDaemons, create_topic, eventually, produce,
)
from tests.support.daemons import DaemonFleet
from tests.support.ownership import AssignmentChange, double_owners
from tests.support.wire import coordinator_client, find_coordinator
from zkcoord.client import (
    CommitFailedError, Consumer, ConsumerConfig, ConsumerError, FencedInstanceError, OffsetAndMetadata,
    RebalanceListener, TopicPartition,
)
from zkcoord.schemas import ConsumerGroupDescribeRequest

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
    records: list = dataclasses.field(default_factory=list)
    changes: list = dataclasses.field(default_factory=list)  # AssignmentChange
    epochs: list = dataclasses.field(default_factory=list)  # (callback, member epoch)
    failed_commits: list = dataclasses.field(default_factory=list)

    def poll(self, timeout_ms: int = 100) -> list:
        records = self.consumer.poll(timeout_ms=timeout_ms)
        self.records.extend(records)
        if records:
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
    """Commits on revoke; stamps a revocation when it is done, an assignment when it starts."""

    def __init__(self, worker: Worker):
        self.worker = worker

    def _note(self, kind: str, partitions) -> None:
        self.worker.changes.append(AssignmentChange(self.worker.name, kind, tick(),
                                                    {(tp.topic, tp.partition) for tp in partitions}))
        self.worker.epochs.append((kind, self.worker.consumer.membership().generation_id))

    def on_revoked(self, partitions):
        if partitions:
            self.worker.commit()
        self._note("revoked", partitions)

    def on_assigned(self, partitions):
        self._note("assigned", partitions)

    def on_lost(self, partitions):
        self._note("lost", partitions)


def start_worker(name: str, cfg: ConsumerConfig, topics=(), pattern=None) -> Worker:
    consumer = Consumer(dataclasses.replace(cfg, client_id=name)).start()
    worker = Worker(name, consumer)
    if pattern is not None:
        consumer.subscribe(pattern=pattern, listener=Recording(worker))
    else:
        consumer.subscribe(list(topics), listener=Recording(worker))
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


def describe(addresses: str, group: str):
    """The group as its owner describes it (ConsumerGroupDescribe)."""
    async def ask():
        client = await coordinator_client(addresses, group)
        try:
            answer = await client.call(ConsumerGroupDescribeRequest(version=0, group_ids=[group],
                                                                    include_authorized_operations=False))
        finally:
            await client.close()
        return answer.groups[0]
    return asyncio.run(ask())


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
