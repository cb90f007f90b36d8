"""Harness of the KIP-848 differential test (``tests/integration/
test_consumer_differential.py``): one request sequence against Kafka 4.4's
coordinator and against a zkcoord daemon, each kept as a transcript of views
that can be compared (:mod:`tests.support.differential`'s approach, extended).

What it adds to :class:`~tests.support.differential.Run`:

* **Topics by name.** Both clusters hold the same topics, with the same
  names, partition counts *and topic ids* (:class:`Side`: made
  on Kafka 4.4, then registered in the 3.9 cluster's ZooKeeper under the id
  Kafka 4.4 gave, as Kafka's own ``AdminZkClient`` writes a topic), because
  Kafka's assignors iterate topic ids in ``HashMap`` order: with different
  ids the two coordinators may deal the same partitions differently, and
  the test would compare luck. A view still never holds an id: every
  assignment is turned into ``((topic name, (partitions...)), ...)``
  through the answering cluster's own metadata (Kafka 4.4's, or the 3.9
  broker's for zkcoord), so a coordinator naming a wrong id shows.
* **Views** of ConsumerGroupHeartbeat (error, error message with member ids
  aliased, member id, epoch, heartbeat interval, assignment),
  ConsumerGroupDescribe (epochs, state, assignor, each member's epoch,
  subscription, assignment and target, type), ListGroups v5 (the scenario's
  own groups only: the clusters hold other tests' groups too), and
  OffsetFetch v8+ (per group).
* :class:`Member`: a consumer-protocol member as Kafka's client behaves in
  its heartbeats: it reports what it owns, takes the assignment it is given
  at once (revokes, then owns the new partitions), keeps its epoch. Member
  ids given by the scenario (v1: the client chooses its id) are the same on
  both sides, so the assignors (which iterate member ids in ``HashMap``
  order) deal the same partitions; ids a coordinator makes (v0, classic
  joins) are aliased.

Conditions that take time (a topic showing in a coordinator's image, a
regular expression resolved again, a session expired) are polled for with a
deadline (:meth:`Member.until`), and only the answer that met the condition
is recorded: how many polls it took is timing, not behaviour.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping

from kafka.protocol.admin.groups import ListGroupsRequest
from kafka.protocol.consumer.group import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata import MetadataRequest

from tests.support.differential import NONE, NOT_READY, Run, error_of
from tests.support.wire import WireClient, coordinator_client, parse_address
from zkcoord.schemas import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest
from zkcoord.topic_ids import topic_id_text

UNKNOWN_MEMBER_ID, GROUP_ID_NOT_FOUND, FENCED_INSTANCE_ID = 25, 69, 82
FENCED_MEMBER_EPOCH, UNRELEASED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR = 110, 111, 112
REBALANCE_MS = 30_000
POLL_S = 0.1
TOPICS_WAIT_S = 60.0

Assignment = Mapping[str, Iterable[int]]  # topic name -> partitions


# -- the same topics on both clusters ---------------------------------------------------------

class Side:
    """One cluster of the comparison: Kafka 4.4 (``zookeeper`` None: topics
    made through its admin API, their ids recorded in ``ids``) or the 3.9
    cluster zkcoord reads (topics registered in its ZooKeeper under the ids
    Kafka 4.4 gave, ``ids``, as Kafka 3.9's ``AdminZkClient`` writes them).
    Kafka's run goes first: every topic has its id by the time zkcoord's
    run makes it."""

    def __init__(self, bootstrap: str, ids: dict[str, str], zookeeper: str | None = None):
        self.bootstrap = bootstrap
        self.ids = ids
        self.zookeeper = zookeeper

    async def create_topics(self, topics: Mapping[str, int]) -> None:
        await asyncio.to_thread(self._create, dict(topics))

    async def add_partitions(self, topics: Mapping[str, int]) -> None:
        await asyncio.to_thread(self._add_partitions, dict(topics))

    def _create(self, topics: dict[str, int]) -> None:
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=30_000)
        try:
            if self.zookeeper is None:
                admin.create_topics([NewTopic(n, num_partitions=p, replication_factor=1) for n, p in topics.items()])
            else:
                self._register(topics)
            for t in _described(admin, list(topics), topics):
                found = topic_id_text(uuid.UUID(str(t["topic_id"])))
                if self.zookeeper is None:
                    self.ids[t["name"]] = found
                assert found == self.ids[t["name"]], f"{t['name']} has the id {found}, not {self.ids[t['name']]}"
        finally:
            admin.close()

    def _register(self, topics: dict[str, int]) -> None:
        from kazoo.client import KazooClient

        missing = [n for n in topics if n not in self.ids]
        assert not missing, f"topics {missing} have no id yet: Kafka 4.4's run makes them first"
        zk = KazooClient(hosts=self.zookeeper, timeout=10)
        zk.start(timeout=30)
        try:
            brokers = sorted(int(b) for b in zk.get_children("/brokers/ids"))
            for name, partitions in topics.items():
                zk.create(f"/config/topics/{name}", json.dumps({"version": 1, "config": {}}).encode())
                zk.create(f"/brokers/topics/{name}", json.dumps({
                    "version": 3, "topic_id": self.ids[name], "adding_replicas": {}, "removing_replicas": {},
                    "partitions": {str(p): [brokers[p % len(brokers)]] for p in range(partitions)}}).encode())
        finally:
            zk.stop()
            zk.close()

    def _add_partitions(self, topics: dict[str, int]) -> None:
        from kafka import KafkaAdminClient
        from kafka.admin import NewPartitions

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=30_000)
        try:
            admin.create_partitions({n: NewPartitions(total_count=p) for n, p in topics.items()})
            _described(admin, list(topics), topics)
        finally:
            admin.close()


def _described(admin, names: list[str], partitions: Mapping[str, int]) -> list[dict]:
    """The topics as the broker describes them, once each has its partitions with a leader."""
    deadline = time.monotonic() + TOPICS_WAIT_S
    while True:
        described = admin.describe_topics(names)
        if all(t["error_code"] == 0 and len(t["partitions"]) == partitions[t["name"]]
               and all(p["leader_id"] >= 0 for p in t["partitions"]) for t in described):
            return described
        assert time.monotonic() < deadline, f"topics {names} not ready after {TOPICS_WAIT_S} s: {described}"
        time.sleep(0.1)


# -- requests ---------------------------------------------------------------------------------

def cg_heartbeat(group: str, member_id: str = "", epoch: int = 0, *, version: int = 1,
                 instance: str | None = None, rack: str | None = None, rebalance_ms: int = -1,
                 topics: Iterable[str] | None = None, regex: str | None = None, assignor: str | None = None,
                 owned: Iterable[tuple[uuid.UUID, Iterable[int]]] | None = None) -> ConsumerGroupHeartbeatRequest:
    """ConsumerGroupHeartbeat; ``owned``: (topic id, partitions) pairs, None: not sent."""
    partitions = None if owned is None else [
        ConsumerGroupHeartbeatRequest.TopicPartitions(version=version, topic_id=t, partitions=list(p))
        for t, p in owned]
    fields = {"subscribed_topic_regex": regex} if version >= 1 else {}
    return ConsumerGroupHeartbeatRequest(
        version=version, group_id=group, member_id=member_id, member_epoch=epoch, instance_id=instance,
        rack_id=rack, rebalance_timeout_ms=rebalance_ms, subscribed_topic_names=None if topics is None else list(topics),
        server_assignor=assignor, topic_partitions=partitions, **fields)


def cg_describe(*groups: str, version: int = 1, operations: bool = False) -> ConsumerGroupDescribeRequest:
    return ConsumerGroupDescribeRequest(version=version, group_ids=list(groups),
                                        include_authorized_operations=operations)


def list_groups(states: Iterable[str] = (), types: Iterable[str] = ()) -> ListGroupsRequest:
    return ListGroupsRequest(version=5, states_filter=list(states), types_filter=list(types))


def commit9(group: str, offsets: Mapping[str, Mapping[int, int]], *, member_id: str = "", epoch: int = -1,
            instance: str | None = None, version: int = 9) -> OffsetCommitRequest:
    """OffsetCommit v9 (member id and member epoch), by topic name."""
    Topic = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(
        version=version, group_id=group, generation_id_or_member_epoch=epoch, member_id=member_id,
        group_instance_id=instance, topics=[Topic(name=t, partitions=[
            Topic.OffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                               committed_metadata=f"m{p}") for p, o in parts.items()])
            for t, parts in offsets.items()])


def fetch9(group: str, topics: Mapping[str, Iterable[int]] | None, *, member_id: str | None = None,
           epoch: int = -1, version: int = 9) -> OffsetFetchRequest:
    """OffsetFetch v9 (one group, with a member id and epoch); ``topics`` None: all."""
    Group = OffsetFetchRequest.OffsetFetchRequestGroup
    wanted = None if topics is None else [Group.OffsetFetchRequestTopics(name=t, partition_indexes=list(p))
                                          for t, p in topics.items()]
    return OffsetFetchRequest(version=version, require_stable=False, groups=[
        Group(group_id=group, member_id=member_id, member_epoch=epoch, topics=wanted)])


# -- the run ------------------------------------------------------------------------------------

class ConsumerRun(Run):
    """One scenario on one coordinator, its topics on ``side`` (whose
    metadata names them); ``names``: the scenario's topic keys -> the names
    of this test's topics ("t" -> "t-<test>-<hex>")."""

    def __init__(self, target: str, bootstrap: tuple[str, int], group: str, side: Side, names: Mapping[str, str]):
        super().__init__(target, bootstrap, group, names.get("t", ""))
        self.side = side
        self.names = dict(names)
        self.metadata = parse_address(side.bootstrap.split(",")[0])
        self._names: dict[uuid.UUID, str] = {}
        self._ids: dict[str, uuid.UUID] = {}

    # -- topics ------------------------------------------------------------------------
    def n(self, key: str) -> str:
        """The name of the scenario's topic ``key``."""
        return self.names[key]

    def by_keys(self, assignment: Mapping[str, Iterable[int]]) -> dict[str, tuple[int, ...]]:
        return {self.names[k]: tuple(p) for k, p in assignment.items()}

    async def create_topics(self, topics: Mapping[str, int]) -> None:
        """Create the scenario's topics ``{key: partitions}`` on this run's cluster."""
        await self.side.create_topics({self.names[k]: p for k, p in topics.items()})

    async def add_partitions(self, topics: Mapping[str, int]) -> None:
        await self.side.add_partitions({self.names[k]: p for k, p in topics.items()})

    async def refresh_topics(self) -> None:
        """Learn every topic's id from the cluster's metadata (Metadata v12)."""
        client = await WireClient.connect(*self.metadata, "metadata")
        try:
            answer = await client.call(MetadataRequest(version=12, topics=None, allow_auto_topic_creation=False,
                                                       include_topic_authorized_operations=False))
        finally:
            await client.close()
        for t in answer.topics:
            if t.error_code == 0 and t.name:
                self._names[t.topic_id] = t.name
                self._ids[t.name] = t.topic_id

    async def topic_id(self, name: str) -> uuid.UUID:
        if name not in self._ids:
            await self.refresh_topics()
        return self._ids[name]

    async def owned(self, assignment: Assignment) -> list[tuple[uuid.UUID, list[int]]]:
        """An assignment by name as ConsumerGroupHeartbeat's TopicPartitions."""
        return [(await self.topic_id(t), sorted(p)) for t, p in sorted(assignment.items()) if p]

    async def poll(self, label: str, client: WireClient, request, done: Callable[[object], bool], *,
                   limit_s: float = 60.0):
        """Send ``request`` every 0.1 s until ``done(answer)``, for at most
        ``limit_s``; only the answer that met it is recorded (a classic
        member's heartbeats until its rebalance time-out fenced it, ...)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit_s
        while True:
            response = await client.call(request)
            if done(response) or loop.time() > deadline:
                if not done(response):
                    self.expect(f"{label}: within {limit_s} s", "last answer " + repr(self.view(response)), "done")
                await self.prepare(response)
                return self.record(label, response)
            await asyncio.sleep(POLL_S)

    async def until_topics_seen(self, topics: Mapping[str, int], *, limit_s: float = TOPICS_WAIT_S) -> None:
        """Wait until the coordinator assigns from an image holding ``topics``
        ({key: partitions}): a probe member, in a group of its own, heartbeats
        until it is given all their partitions, then leaves (not recorded)."""
        wanted = {self.names[k]: tuple(range(p)) for k, p in topics.items()}
        group = f"probe-{self.group}"
        client = await self.client(group, client_id="probe")
        probe = Member(self, client, "probe-member", group=group)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit_s
        answer = await probe.call(probe.request(epoch=0, owned=[], topics=sorted(wanted), rebalance_ms=REBALANCE_MS))
        while answer.error_code != NONE or probe.owns != wanted:
            assert loop.time() < deadline, f"{self.target}: the coordinator never assigned {wanted}: {answer}"
            await asyncio.sleep(POLL_S)
            answer = await probe.send()
        await probe.call(probe.request(epoch=-1))

    def name_of(self, topic_id: uuid.UUID) -> str:
        return self._names.get(topic_id, f"<unknown topic {topic_id}>")

    async def prepare(self, response) -> None:
        if any(t not in self._names for t in _topic_ids(response)):
            await self.refresh_topics()

    def by_name(self, topic_partitions) -> tuple:
        """((name, (partitions...)), ...) sorted, of wire TopicPartitions."""
        merged: dict[str, set[int]] = {}
        for t in topic_partitions or ():
            merged.setdefault(self.name_of(t.topic_id), set()).update(t.partitions)
        return tuple(sorted((name, tuple(sorted(parts))) for name, parts in merged.items()))

    def message(self, text: str | None) -> str | None:
        """An error message with the member ids it names aliased."""
        if not text:
            return text
        for member_id in sorted(self._aliases, key=len, reverse=True):
            text = text.replace(member_id, self._aliases[member_id])
        return text

    # -- views ---------------------------------------------------------------------------
    def view(self, r) -> object:
        kind = type(r).__name__
        a = self.alias
        if kind == "ConsumerGroupHeartbeatResponse":
            member = a(r.member_id)
            assignment = None if r.assignment is None else self.by_name(r.assignment.topic_partitions)
            return ("cg-heartbeat", r.error_code, self.message(r.error_message), member, r.member_epoch,
                    r.heartbeat_interval_ms, assignment)
        if kind == "ConsumerGroupDescribeResponse":
            groups = []
            # Kafka answers ids that cannot name a group first, then the others in the order of its
            # __consumer_offsets shards (a HashMap's): that order is not compared, the first is.
            order = tuple("invalid" if g.error_code == 24 else "group" for g in r.groups)
            for g in r.groups:
                self._alias_new(g.members, lambda m: (m.instance_id or "", m.client_id, m.member_id))
                members = tuple(sorted(
                    (a(m.member_id), m.instance_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
                     tuple(sorted(m.subscribed_topic_names)), m.subscribed_topic_regex,
                     self.by_name(m.assignment.topic_partitions), self.by_name(m.target_assignment.topic_partitions),
                     getattr(m, "member_type", None)) for m in g.members))
                groups.append((g.error_code, self.message(g.error_message), g.group_id, g.group_state,
                               g.group_epoch, g.assignment_epoch, g.assignor_name, members, g.authorized_operations))
            return ("cg-describe", order, tuple(sorted(groups, key=repr)))
        if kind == "ListGroupsResponse":
            mine = sorted((g.group_id, g.protocol_type, g.group_state, getattr(g, "group_type", None))
                          for g in r.groups if g.group_id.startswith(self.group))
            return ("list", r.error_code, tuple(mine))
        if kind == "SyncGroupResponse":
            return ("sync", r.error_code, r.protocol_type, r.protocol_name, assignment_view(bytes(r.assignment)))
        if kind == "DescribeGroupsResponse":
            for g in r.groups:
                self._alias_new(g.members, lambda m: (m.group_instance_id or "", m.client_id))
            return ("describe", tuple(
                (g.error_code, g.group_id, g.group_state, g.protocol_type, g.protocol_data, tuple(sorted(
                    (a(m.member_id), m.group_instance_id, m.client_id, m.client_host,
                     bytes(m.member_metadata), assignment_view(bytes(m.member_assignment))) for m in g.members)))
                for g in r.groups))
        if kind == "OffsetFetchResponse" and getattr(r, "groups", None) is not None:
            return ("fetch", tuple((g.group_id, g.error_code, tuple(sorted(
                (t.name, p.partition_index, p.committed_offset, p.metadata, p.error_code)
                for t in g.topics for p in t.partitions))) for g in r.groups))
        return super().view(r)


def assignment_view(data: bytes) -> object:
    """A ConsumerProtocolAssignment as (version, ((topic, (partitions...)), ...), user data),
    topics and partitions sorted (their order in the bytes is a HashMap's); other bytes as they are."""
    from zkcoord.core.consumer.protocol import MalformedProtocolError
    from zkcoord.server.consumer_protocol import CONSUMER_PROTOCOL

    if not data:
        return data
    try:
        decoded = CONSUMER_PROTOCOL.assignment(data)
    except MalformedProtocolError:
        return data
    version = int.from_bytes(data[:2], "big", signed=True)
    return (version, tuple(sorted((t, tuple(sorted(p))) for t, p in decoded.partitions.items() if p)),
            decoded.user_data)


def assignment_bytes(partitions: Mapping[str, Iterable[int]], version: int = 0) -> bytes:
    """A leader's ConsumerProtocolAssignment for a member of a classic group."""
    from zkcoord.server.consumer_protocol import CONSUMER_PROTOCOL

    return CONSUMER_PROTOCOL.encode_assignment(partitions, version)


def _topic_ids(response) -> list[uuid.UUID]:
    kind = type(response).__name__
    if kind == "ConsumerGroupHeartbeatResponse" and response.assignment is not None:
        return [t.topic_id for t in response.assignment.topic_partitions]
    if kind == "ConsumerGroupDescribeResponse":
        return [t.topic_id for g in response.groups for m in g.members
                for t in (*m.assignment.topic_partitions, *m.target_assignment.topic_partitions)]
    return []


# -- a member ---------------------------------------------------------------------------------

class Member:
    """A consumer-protocol member, as Kafka's consumer heartbeats: its id
    (``member_id`` "" at v0: the coordinator gives one), its epoch, the
    partitions it owns (by topic name). Each answer without an error is
    applied at once: the epoch taken, the assignment owned (a real consumer
    revokes and assigns in its callbacks before its next heartbeat)."""

    def __init__(self, run: ConsumerRun, client: WireClient, member_id: str = "", *, version: int = 1,
                 instance: str | None = None, group: str | None = None, name: str | None = None):
        self.name = name or member_id or instance or "member"  # for labels: never a generated id
        self.run = run
        self.client = client
        self.member_id = member_id
        self.version = version
        self.instance = instance
        self.group = group or run.group
        self.epoch = 0
        self.owns: dict[str, tuple[int, ...]] = {}

    def request(self, *, epoch: int | None = None, owned=None, **fields) -> ConsumerGroupHeartbeatRequest:
        return cg_heartbeat(self.group, self.member_id, self.epoch if epoch is None else epoch,
                            version=self.version, instance=self.instance, owned=owned, **fields)

    async def send(self, *, epoch: int | None = None, report: bool = True, owning: Assignment | None = None,
                   owning_ids: Iterable[tuple[uuid.UUID, Iterable[int]]] = (), **fields):
        """One heartbeat, applied, not recorded; ``report``: send what it owns
        (``owning``: report these instead, {name: partitions}; ``owning_ids``:
        and these (topic id, partitions), topics that need not exist)."""
        owned = None
        if report:
            owned = await self.run.owned(self.owns if owning is None else owning) + [(t, list(p)) for t, p in owning_ids]
        return await self.call(self.request(epoch=epoch, owned=owned, **fields))

    async def call(self, request):
        """Send, learn the answer's topics, apply it."""
        response = await self.client.call(request)
        await self.run.prepare(response)
        self.apply(response)
        return response

    def apply(self, r) -> None:
        if r.error_code != NONE:
            return
        if r.member_id:
            self.member_id = r.member_id
        self.epoch = r.member_epoch
        if r.assignment is not None:
            self.owns = dict(self.run.by_name(r.assignment.topic_partitions))

    async def join(self, label: str, *, topics: Iterable[str] | None = None, regex: str | None = None,
                   assignor: str | None = None, rebalance_ms: int = REBALANCE_MS, expect: int | None = NONE, **fields):
        """Epoch 0, every field a join must carry (no partitions owned)."""
        self.owns = {}
        response = await self.call(self.request(
            epoch=0, owned=[], topics=topics, regex=regex, assignor=assignor, rebalance_ms=rebalance_ms, **fields))
        return self._record(label, response, expect)

    async def heartbeat(self, label: str, *, expect: int | None = None, epoch: int | None = None,
                        report: bool = True, owning: Assignment | None = None,
                        owning_ids: Iterable[tuple[uuid.UUID, Iterable[int]]] = (), **fields):
        """A heartbeat at its epoch (or ``epoch``), reporting what it owns
        (``owning``, ``owning_ids``: as :meth:`send`), recorded."""
        response = await self.send(epoch=epoch, report=report, owning=owning, owning_ids=owning_ids, **fields)
        return self._record(label, response, expect)

    async def leave(self, label: str, *, epoch: int = -1, expect: int | None = NONE):
        response = await self.client.call(self.request(epoch=epoch))
        await self.run.prepare(response)
        if response.error_code == NONE:
            self.epoch, self.owns = epoch, {}
        return self._record(label, response, expect)

    async def until(self, label: str, done: Callable[[object], bool], *, limit_s: float = 60.0, **fields):
        """Heartbeat every 0.1 s until ``done(answer)``, for at most ``limit_s``;
        only the answer that met it is recorded (an expectation names a miss)."""
        deadline = asyncio.get_running_loop().time() + limit_s
        while True:
            response = await self.send(**fields)
            if done(response):
                return self._record(label, response, None)
            if asyncio.get_running_loop().time() > deadline:
                self.run.expect(f"{label}: within {limit_s} s", "last answer " + repr(self.run.view(response)), "done")
                return self._record(label, response, None)
            await asyncio.sleep(POLL_S)

    def owns_all(self, assignment: Assignment) -> Callable[[object], bool]:
        """A condition for :meth:`until`: it owns ``assignment`` ({name: partitions}) exactly."""
        wanted = {t: tuple(sorted(p)) for t, p in assignment.items() if p}
        return lambda r: r.error_code == NONE and self.owns == wanted

    def _record(self, label: str, response, expect: int | None):
        self.run.record(label, response)
        if expect is not None:
            self.run.expect(label, error_of(response), expect)
        return response


async def settle(members: list[Member], label: str, *, rounds: int = 8) -> None:
    """Heartbeat each member in turn, every answer recorded, until a whole
    round changes nothing (a deterministic sequence: each heartbeat is the
    previous one's consequence)."""
    for n in range(1, rounds + 1):
        changed = False
        for m in members:
            before = (m.epoch, dict(m.owns))
            r = await m.heartbeat(f"{label}: {m.name}, round {n}")
            changed |= r.error_code != NONE or r.assignment is not None or (m.epoch, m.owns) != before
        if not changed:
            return
    members[0].run.expect(f"{label}: settled within {rounds} rounds", "still changing", "settled")


async def assigns_at_every_change(bootstrap: str, group: str) -> bool:
    """Does the coordinator compute a new target assignment at every change
    (``group.consumer.assignment.interval.ms=0`` in effect)? Two members
    join ``group`` one right after the other: the second gets the new group
    epoch only if the target was computed again for it; else the last
    target's epoch. Both leave."""
    client = await coordinator_client(bootstrap, group)
    try:
        join = dict(epoch=0, rebalance_ms=REBALANCE_MS, topics=["no-such-topic"], owned=[])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TOPICS_WAIT_S
        while (first := await client.call(cg_heartbeat(group, "probe-1", **join))).error_code in NOT_READY:
            assert loop.time() < deadline, f"the coordinator of {group} is not ready: {first}"
            await asyncio.sleep(POLL_S)  # its __consumer_offsets partition is still loading
        second = await client.call(cg_heartbeat(group, "probe-2", **join))
        for member_id in ("probe-1", "probe-2"):
            await client.call(cg_heartbeat(group, member_id, -1))
        assert (first.error_code, second.error_code) == (NONE, NONE), (first, second)
        return second.member_epoch > first.member_epoch
    finally:
        await client.close()
