"""Helpers for the thin-consumer tests (no tests here): daemons in a thread
of their own (processes come from ``tests/support/daemons.py``), topics and records on the real brokers, a
consumer harness that records what each member was assigned, consumed and
committed, and waiting for an outcome without asserting on time."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import socket
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic

from zkcoord.client import Consumer, ConsumerError, ConsumerConfig, OffsetAndMetadata, RebalanceListener, TopicPartition
from zkcoord.config import DaemonConfig
from zkcoord.server.daemon import Daemon

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 60.0


def eventually(predicate, what: str, timeout_s: float = WAIT_S, step=None, interval_s: float = 0.05):
    """Call ``step()`` (e.g. polling consumers) until ``predicate()`` holds."""
    deadline = time.monotonic() + timeout_s
    while True:
        if step is not None:
            step()
        if predicate():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout_s} s: {what}")
        if step is None:
            time.sleep(interval_s)


# -- daemons -------------------------------------------------------------------------
class ThreadDaemons:
    """In-process daemons on an asyncio loop in a background thread (the
    consumer under test is synchronous)."""

    def __init__(self, zk_hosts: str, count: int = 2, **settings):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="daemons", daemon=True)
        self.daemons = [Daemon(DaemonConfig(zookeeper=zk_hosts, listen="127.0.0.1:0", node_id=i + 1,
                                            group_initial_rebalance_delay_ms=0, zk_session_timeout_ms=6000,
                                            **settings)) for i in range(count)]
        self.running = []

    def __enter__(self) -> "ThreadDaemons":
        self.thread.start()
        for daemon in self.daemons:
            self.running.append(self._run(daemon.start()))
        return self

    def __exit__(self, *exc) -> None:
        for daemon in self.daemons:
            try:
                self._run(daemon.stop())
            except Exception:  # already stopped by the test
                pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def stop(self, node_id: int) -> None:
        """Stop one daemon gracefully (it releases its groups)."""
        self._run(self.daemons[node_id - 1].stop())

    @property
    def addresses(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in (r.advertised for r in self.running))


def free_port() -> int:
    """A loopback port nothing listens on (for an address that must not answer)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- topics and records ---------------------------------------------------------------
def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_partitions({topic: NewPartitions(total)})
    finally:
        admin.close()


def produce(bootstrap: str, topic: str, partitions, per_partition: int, tag: str = "r") -> set[tuple[int, str]]:
    """``per_partition`` records into each partition; returns {(partition, key)}."""
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    keys = set()
    try:
        for p in partitions:
            for i in range(per_partition):
                key = f"{tag}-{p}-{i}"
                producer.send(topic, key=key.encode(), value=f"value of {key}".encode(), partition=p)
                keys.add((p, key))
        producer.flush()
    finally:
        producer.close()
    return keys


def read_group(zk, group: str):
    """The group as the daemon stored it (a ``zkcoord.core.group.Group``)."""
    from zkcoord.core.group import from_record

    data, _ = zk.get(f"/coordinators/{group}/state")
    return from_record(group, json.loads(data))


def read_group_state(zk, group: str):
    """(state name, generation, member ids) of the group as the daemon stored it."""
    stored = read_group(zk, group)
    return stored.state.value, stored.generation_id, sorted(stored.members)


def describe_consumer_group(addresses: str, group: str):
    """A KIP-848 group as its owner describes it (ConsumerGroupDescribe's group)."""
    from tests.support.wire import coordinator_client
    from zkcoord.schemas import ConsumerGroupDescribeRequest

    async def ask():
        client = await coordinator_client(addresses, group)
        try:
            answer = await client.call(ConsumerGroupDescribeRequest(version=0, group_ids=[group],
                                                                    include_authorized_operations=False))
        finally:
            await client.close()
        return answer.groups[0]

    return asyncio.run(ask())


# -- the consumer harness -----------------------------------------------------------------
@dataclass
class Member:
    """One consumer and what it saw: records, assignments, commits."""

    name: str
    consumer: Consumer
    records: list = field(default_factory=list)
    assigned: list = field(default_factory=list)  # (generation, member id, frozenset)
    revoked: list = field(default_factory=list)
    lost: list = field(default_factory=list)
    commits: list = field(default_factory=list)  # (generation, member id, {tp: offset})
    failed_commits: list = field(default_factory=list)
    commit_in_listener: bool = True

    def poll(self, timeout_ms: int = 100) -> list:
        records = self.consumer.poll(timeout_ms=timeout_ms)
        self.records.extend(records)
        if records:
            self.commit_consumed()
        return records

    def commit_consumed(self) -> None:
        """Commit the positions of what was consumed, tagged with who committed."""
        membership = self.consumer.membership()
        positions = {tp: self.consumer.position(tp) for tp in self.consumer.assignment()}
        tag = f"{membership.member_id}@{membership.generation_id}"
        try:
            self.consumer.commit({tp: OffsetAndMetadata(o, tag, -1) for tp, o in positions.items() if o is not None})
        except ConsumerError as exc:  # CommitFailedError, or a timeout during fail-over
            self.failed_commits.append((membership.generation_id, membership.member_id, positions, exc))
            return
        self.commits.append((membership.generation_id, membership.member_id, positions))

    def keys(self) -> list[tuple[int, str]]:
        return [(r.partition, r.key.decode()) for r in self.records]


class RecordingListener(RebalanceListener):
    def __init__(self, member: Member):
        self.member = member

    def on_revoked(self, partitions):
        m = self.member.consumer.membership()
        self.member.revoked.append((m.generation_id, m.member_id, partitions))
        if self.member.commit_in_listener and partitions:
            self.member.commit_consumed()

    def on_assigned(self, partitions):
        m = self.member.consumer.membership()
        self.member.assigned.append((m.generation_id, m.member_id, partitions))

    def on_lost(self, partitions):
        m = self.member.consumer.membership()
        self.member.lost.append((m.generation_id, m.member_id, partitions))


def config(coordinators: str, bootstrap: str, group: str, **overrides) -> ConsumerConfig:
    settings = dict(coordinators=coordinators, bootstrap_servers=bootstrap, group_id=group,
                    session_timeout_ms=10_000, heartbeat_interval_ms=500, max_poll_interval_ms=30_000,
                    enable_auto_commit=False, auto_offset_reset="earliest", metadata_max_age_ms=2_000,
                    request_timeout_ms=10_000, reconnect_backoff_max_ms=500)
    settings.update(overrides)
    return ConsumerConfig(**settings)


def start_member(name: str, cfg: ConsumerConfig, topics, listener_cls=RecordingListener, pattern=None) -> Member:
    consumer = Consumer(dataclasses.replace(cfg, client_id=name)).start()
    member = Member(name, consumer)
    if pattern is not None:
        consumer.subscribe(pattern=pattern, listener=listener_cls(member))
    else:
        consumer.subscribe(topics, listener=listener_cls(member))
    return member


@contextlib.contextmanager
def polling_in_background(member, timeout_ms: int, before_join=None):
    """``member`` polls with ``timeout_ms`` on a thread of its own while the
    block runs; yields the list its errors go to. On exit the polling stops,
    ``before_join()`` (if given) runs, e.g. to end a long poll, and the
    thread is joined."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def polls() -> None:
        try:
            while not stop.is_set():
                member.poll(timeout_ms=timeout_ms)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    poller = threading.Thread(target=polls, name=f"{member.name}-member-poll", daemon=True)
    poller.start()
    try:
        yield errors
    finally:
        stop.set()
        if before_join is not None:
            before_join()
        poller.join(90)


def poll_all(members, timeout_ms: int = 100):
    def step():
        for member in members:
            member.poll(timeout_ms)
    return step


def stable_split(members, partitions: set[TopicPartition]) -> bool:
    """Every member stable in one generation, the partitions split among them."""
    memberships = [m.consumer.membership() for m in members]
    if any(ms.state != "stable" for ms in memberships) or len({ms.generation_id for ms in memberships}) != 1:
        return False
    owned = [m.consumer.assignment() for m in members]
    return sum(len(o) for o in owned) == len(partitions) and frozenset().union(*owned) == partitions


def assignments_by_generation(members) -> dict[int, dict[str, frozenset]]:
    """{generation: {member id: partitions}} from every on_assigned seen."""
    found: dict[int, dict[str, frozenset]] = defaultdict(dict)
    for member in members:
        for generation, member_id, partitions in member.assigned:
            found[generation][member_id] = partitions
    return dict(found)


def commits_by_generation(members) -> dict[int, dict[TopicPartition, set[str]]]:
    """{generation: {partition: member ids that committed it}}."""
    found: dict[int, dict[TopicPartition, set[str]]] = defaultdict(lambda: defaultdict(set))
    for member in members:
        for generation, member_id, positions in member.commits:
            for tp in positions:
                found[generation][tp].add(member_id)
    return found


def assert_one_owner_per_generation(members) -> None:
    """No partition assigned to, or committed by, two members of one generation."""
    for generation, owned in assignments_by_generation(members).items():
        seen = [tp for parts in owned.values() for tp in parts]
        assert len(seen) == len(set(seen)), f"generation {generation}: a partition has two owners: {owned}"
    for generation, committed in commits_by_generation(members).items():
        twice = {tp: who for tp, who in committed.items() if len(who) > 1}
        assert not twice, f"generation {generation}: committed by two members: {twice}"
