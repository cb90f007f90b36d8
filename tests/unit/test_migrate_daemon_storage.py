"""The daemon's offset storage modes without a network: a GroupManager with
in-memory stand-ins for ZooKeeper offsets, the state store and Kafka, and
KafkaGroupOffsets over a scripted admin client."""

from __future__ import annotations

import asyncio

import kafka.errors as Errors
import pytest
from kafka import TopicPartition
from kafka.structs import OffsetAndMetadata

from tests.unit.test_kafka_offsets import ScriptedAdmin
from zkcoord.core.errors import ErrorCode as E
from zkcoord.core.group import GroupConfig
from zkcoord.core.offset_fetch import pairs, wanted_by_topic
from zkcoord.errors import ServiceUnavailableError
from zkcoord.kafka.forwarder import KafkaGroupOffsets
from zkcoord.kafka.offsets import KafkaGroup
from zkcoord.zk.offsets import FetchedOffsets
from zkcoord.server.manager import GroupManager
from zkcoord.server.offset_storage import merge_dual

T0, T1, T2 = ("t", 0), ("t", 1), ("t", 2)


class Ownership:
    def is_owned(self, group):
        return True

    def is_suspended(self, group):
        return False

    def fence(self, group):
        return f"fence-{group}"


class Store:
    """The state store: one record per group, versions counted."""

    def __init__(self, records):
        self.records = {g: (r, 0) for g, r in records.items()}
        self.writes = []

    async def load(self, group):
        return self.records.get(group, (None, -1))

    async def write(self, group, record, version):
        self.writes.append((group, record, version))
        self.records[group] = (record, (version or 0) + 1)
        return (version or 0) + 1

    async def write_changes(self, group, changes, version):
        """GroupStateStore.write_changes' stand-in: the state record of the changes."""
        (record,) = [r for key, r, _ in changes if key == ""]
        return await self.write(group, record, version)


class ZkOffsets:
    def __init__(self, stored=None):
        self.stored = dict(stored or {})
        self.commits = []

    async def commit(self, group, offsets, fence=None):
        await self.submit(group, offsets, fence)

    async def prepare(self, group, offsets):
        """OffsetStore.prepare's stand-in: submit takes the offsets themselves."""
        return dict(offsets)

    def submit(self, group, offsets, fence=None):
        """Queued (here: stored) at the call, as OffsetStore.submit queues."""
        self.commits.append((group, dict(offsets), fence))
        self.stored.update(offsets)
        return asyncio.sleep(0)

    async def fetch(self, group, partitions=None):
        found = FetchedOffsets()
        asked = None if partitions is None else set(pairs(partitions))
        found.update({tp: v for tp, v in self.stored.items() if asked is None or tp in asked})
        return found


def fetched(m, partitions):
    """(group error, rows) of an OffsetFetch of group g."""
    code, answer = run(m.group_offsets.fetch("g", None if partitions is None else wanted_by_topic(partitions)))
    return code, answer.rows()


class Kafka:
    def __init__(self, stored=None, refuse=None, down=False, members=()):
        self.stored, self.refuse, self.down = dict(stored or {}), dict(refuse or {}), down
        self.commits = []
        self.members = tuple(members)  # Kafka-side (member id, client id, host)

    async def group(self, group):
        return KafkaGroup("Stable" if self.members else "Empty", len(self.members), "consumer", self.members)

    async def commit(self, group, offsets, before_try=None):
        if before_try is not None:
            before_try()  # the owner's check, as the forwarder asks it before its one try here
        if self.down:
            raise ServiceUnavailableError("Kafka at k:9092 did not answer")
        self.commits.append((group, dict(offsets)))
        self.stored.update({tp: v for tp, v in offsets.items() if tp not in self.refuse})
        return {tp: code for tp, code in self.refuse.items() if tp in offsets}

    async def fetch(self, group, partitions=None):
        if self.down:
            raise ServiceUnavailableError("Kafka at k:9092 did not answer")
        asked = None if partitions is None else set(pairs(partitions))
        return {tp: v for tp, v in self.stored.items() if asked is None or tp in asked}

    async def close(self):
        pass


def manager(mode, zk=None, kafka=None):
    record = {"v": 1, "s": "Empty", "g": 0, "os": mode}
    store = Store({"g": record})
    m = GroupManager(1, GroupConfig(), Ownership(), store, zk or ZkOffsets(), nodes=None, kafka_forwarder=kafka)
    return m, store


def run(coro):
    return asyncio.run(coro)


def test_zookeeper_mode_never_touches_kafka():
    zk, kafka = ZkOffsets(), Kafka()
    m, _ = manager("zookeeper", zk, kafka)
    assert run(m.group_offsets.commit("g", "", -1, None, [("t", 0, 5, "m")])) == [E.NONE]
    assert (zk.commits, kafka.commits) == ([("g", {T0: (5, "m")}, "fence-g")], [])


def test_dual_mode_commits_kafka_then_zookeeper_and_fetches_the_max():
    zk, kafka = ZkOffsets({T1: (9, "z1"), T2: (3, "z2")}), Kafka({T1: (4, "k1"), T2: (3, "k2")})
    m, _ = manager("dual", zk, kafka)
    assert run(m.group_offsets.commit("g", "", -1, None, [("t", 0, 5, "m")])) == [E.NONE]
    assert zk.commits == [("g", {T0: (5, "m")}, "fence-g")] and kafka.commits == [("g", {T0: (5, "m")})]
    kafka.stored[T0] = (8, "k0")  # Kafka ahead on 0, ZooKeeper ahead on 1, equal on 2
    code, rows = fetched(m, None)
    assert (code, rows) == (E.NONE, [("t", 0, 8, "k0", E.NONE), ("t", 1, 9, "z1", E.NONE), ("t", 2, 3, "z2", E.NONE)])


def test_kafka_mode_commits_and_fetches_kafka_only():
    zk, kafka = ZkOffsets({T0: (1, "")}), Kafka({T0: (7, "k")})
    m, _ = manager("kafka", zk, kafka)
    assert run(m.group_offsets.commit("g", "", -1, None, [("t", 1, 2, "")])) == [E.NONE]
    assert zk.commits == [] and kafka.commits == [("g", {T1: (2, "")})]
    assert fetched(m, [T0, T2]) == (E.NONE, [("t", 0, 7, "k", E.NONE), ("t", 2, -1, "", E.NONE)])


def test_kafka_refusals_are_passed_on_per_partition_and_never_reach_zookeeper():
    zk, kafka = ZkOffsets(), Kafka(refuse={T1: 12})
    m, _ = manager("dual", zk, kafka)
    assert run(m.group_offsets.commit("g", "", -1, None, [("t", 0, 5, ""), ("t", 1, 6, "x" * 10)])) == \
        [E.NONE, E.OFFSET_METADATA_TOO_LARGE]
    assert zk.commits == [("g", {T0: (5, "")}, "fence-g")]  # only what Kafka stored


@pytest.mark.parametrize("code", [25, 22, 82, 27])
def test_kafkas_answers_about_its_own_members_are_not_passed_on(code):
    """UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS
    of a forwarded commit are about Kafka's members: the zkcoord member hears
    UNKNOWN_SERVER_ERROR, ZooKeeper is not written, the Kafka-side members are named."""
    zk, kafka = ZkOffsets({T0: (1, "")}), Kafka({T0: (1, "")}, refuse={T0: code}, members=[("k-1", "c", "/h")])
    m, _ = manager("dual", zk, kafka)
    assert run(m.group_offsets.commit("g", "", -1, None, [("t", 0, 5, "")])) == [E.UNKNOWN_SERVER_ERROR]
    assert zk.commits == [] and zk.stored == {T0: (1, "")}
    assert [mem.member_id for mem in m.group_offsets.forwarded.kafka_members.of("g")] == ["k-1"]
    kafka.refuse, kafka.members = {}, ()  # the Kafka-side consumer left: the next commit is stored
    assert run(m.group_offsets.commit("g", "", -1, None, [("t", 0, 6, "")])) == [E.NONE]
    assert m.group_offsets.forwarded.kafka_members.of("g") == () and zk.stored[T0] == (6, "")


def test_kafka_down_leaves_zookeeper_untouched():
    zk = ZkOffsets()
    m, _ = manager("dual", zk, Kafka(down=True))
    assert run(m.group_offsets.commit("g", "", -1, None, [("t", 0, 5, "")])) == [E.COORDINATOR_NOT_AVAILABLE]
    assert zk.commits == []


def test_zookeeper_refusing_after_kafka_stored_is_not_acknowledged_and_counted():
    from zkcoord.errors import NotOwnerError

    class Deposed(ZkOffsets):
        def submit(self, group, offsets, fence=None):
            raise NotOwnerError("node 1 does not own group 'g'", group)

    counted = []
    kafka = Kafka()
    m, _ = manager("dual", Deposed(), kafka)

    class Metrics:
        def observe_dual_divergence(self):
            counted.append(1)

        def __getattr__(self, name):
            return lambda *args: None

    m.metrics = Metrics()
    assert run(m.group_offsets.commit("g", "", -1, None, [("t", 0, 5, "")])) == [E.NOT_COORDINATOR]
    assert kafka.stored == {T0: (5, "")} and counted == [1]


def test_forwarded_commits_go_on_in_the_order_they_were_validated():
    order = []

    class Slow(Kafka):
        async def commit(self, group, offsets, before_try=None):
            first = not order
            order.append(("kafka", dict(offsets)))
            if first:
                await asyncio.sleep(0.05)  # the first commit's Kafka call is slow; the second must wait
            return await super().commit(group, offsets, before_try)

    class Recording(ZkOffsets):
        def submit(self, group, offsets, fence=None):
            order.append(("zk", dict(offsets)))
            return super().submit(group, offsets, fence)

    m, _ = manager("dual", Recording(), Slow())

    async def both():
        await m.runtime("g")
        await m.group_offsets.repairs["g"]
        return await asyncio.gather(m.group_offsets.commit("g", "", -1, None, [("t", 0, 5, "")]),
                                    m.group_offsets.commit("g", "", -1, None, [("t", 0, 6, "")]))

    assert run(both()) == [[E.NONE], [E.NONE]]
    assert order == [("kafka", {T0: (5, "")}), ("zk", {T0: (5, "")}), ("kafka", {T0: (6, "")}),
                     ("zk", {T0: (6, "")})]


@pytest.mark.parametrize("mode", ["dual", "kafka"])
@pytest.mark.parametrize("how", ["deposed", "owned-again"])
def test_a_commit_waiting_for_its_turn_is_not_forwarded_once_its_owner_was_deposed(mode, how):
    """The second commit was accepted while this daemon owned the group; the
    first one's forward to Kafka was slow, and meanwhile the daemon lost the
    group (or lost it and won it again, with another contender). Its forward
    would store an offset the new owner's commits may have passed: it is not
    sent, and the member hears NOT_COORDINATOR."""
    from zkcoord.errors import NotOwnerError

    class Losing(Ownership):
        lost = False

        def fence(self, group):
            if self.lost and how == "deposed":
                raise NotOwnerError(f"node 1 does not own group {group!r}", group)
            return f"fence-{group}" + ("-again" if self.lost else "")

    ownership = Losing()
    sent = []

    class Slow(Kafka):
        async def commit(self, group, offsets, before_try=None):
            if not sent:
                sent.append("first")
                await asyncio.sleep(0.05)  # the first forward is slow: the second waits for its turn
                ownership.lost = True  # deposed while it was in flight (it was sent before)
                return await super().commit(group, offsets)
            return await super().commit(group, offsets, before_try)

    zk, kafka = ZkOffsets(), Slow()
    record = {"v": 1, "s": "Empty", "g": 0, "os": mode}
    m = GroupManager(1, GroupConfig(), ownership, Store({"g": record}), zk, nodes=None, kafka_forwarder=kafka)

    async def both():
        await m.runtime("g")
        repair = m.group_offsets.repairs.get("g")
        if repair is not None:
            await repair
        return await asyncio.gather(m.group_offsets.commit("g", "", -1, None, [("t", 0, 5, "")]),
                                    m.group_offsets.commit("g", "", -1, None, [("t", 0, 6, "")]))

    first, second = run(both())
    assert second == [E.NOT_COORDINATOR]
    assert kafka.commits == [("g", {T0: (5, "")})]  # the second forward never reached Kafka
    assert all(offsets != {T0: (6, "")} for _, offsets, _ in zk.commits)


def test_loading_a_dual_group_copies_kafka_where_zookeeper_is_behind():
    zk, kafka = ZkOffsets({T0: (3, ""), T1: (9, "z")}), Kafka({T0: (5, "k"), T1: (7, ""), T2: (2, "")})
    m, _ = manager("dual", zk, kafka)

    async def load():
        await m.runtime("g")
        await m.group_offsets.repairs["g"]

    run(load())
    assert zk.commits == [("g", {T0: (5, "k"), T2: (2, "")}, "fence-g")]
    assert zk.stored == {T0: (5, "k"), T1: (9, "z"), T2: (2, "")}


@pytest.mark.parametrize("mode", ["dual", "kafka"])
def test_kafka_down_or_not_configured_is_coordinator_not_available(mode):
    m, _ = manager(mode, kafka=Kafka(down=True))
    assert run(m.group_offsets.commit("g", "", -1, None, [("t", 0, 5, "")])) == [E.COORDINATOR_NOT_AVAILABLE]
    assert fetched(m, None) == (E.COORDINATOR_NOT_AVAILABLE, [])
    bare, _ = manager(mode, kafka=None)
    assert run(bare.group_offsets.commit("g", "", -1, None, [("t", 0, 5, "")])) == [E.COORDINATOR_NOT_AVAILABLE]
    assert fetched(bare, None) == (E.COORDINATOR_NOT_AVAILABLE, [])


def test_a_mode_request_is_persisted_by_the_owner_and_used_at_once():
    zk, kafka = ZkOffsets(), Kafka()
    m, store = manager("zookeeper", zk, kafka)

    async def scenario():
        await m.runtime("g")
        await m.group_offsets.switch_mode("g", "dual")
        await m.group_offsets.switch_mode("g", "dual")  # the same request again: no second write
        await m.group_offsets.switch_mode("g", "bogus")  # ignored
        return await m.group_offsets.commit("g", "", -1, None, [("t", 0, 5, "")])

    assert run(scenario()) == [E.NONE]
    assert [(g, r["os"], v) for g, r, v in store.writes] == [("g", "dual", 0)]
    assert kafka.commits == [("g", {T0: (5, "")})]


def test_merge_dual_takes_the_larger_offset_and_its_metadata():
    assert merge_dual({T0: (5, "z"), T1: (9, "z")}, {T0: (7, "k"), T1: (9, "k"), T2: (1, "k")}) == \
        {T0: (7, "k"), T1: (9, "z"), T2: (1, "k")}
    assert merge_dual({}, {}) == {}


# -- KafkaGroupOffsets --------------------------------------------------------------------------

def kafka_with(admin) -> KafkaGroupOffsets:
    kafka = KafkaGroupOffsets("k1:9092", request_timeout_ms=2000)
    kafka._admin = admin
    return kafka


def test_commit_retries_retriable_partition_errors_and_returns_the_others():
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    admin = ScriptedAdmin(alter_group_offsets=[
        {tp0: Errors.NotCoordinatorError, tp1: Errors.NoError},
        {tp0: Errors.NoError, tp1: Errors.OffsetMetadataTooLargeError}])
    assert kafka_with(admin).commit_with_metadata("g", {T0: (5, "a"), T1: (6, "b")}) == {T1: 12}
    sent = admin.calls[-1][1]
    assert sent[0] == "g" and sent[1][tp0] == OffsetAndMetadata(5, "a", None)


def test_a_forwarded_commit_asks_its_owner_before_each_try_and_stops_once_deposed():
    """A retry of the forward after the owner was deposed would store an
    older offset in Kafka after the new owner's commits: the owner's check
    runs before every try, and its refusal ends the commit unsent."""
    from zkcoord.errors import NotOwnerError

    tp0 = TopicPartition("t", 0)
    admin = ScriptedAdmin(alter_group_offsets=[{tp0: Errors.NotCoordinatorError}, {tp0: Errors.NoError}])
    checks = []

    def still_owner():
        checks.append(len(admin.calls))
        if len(checks) == 2:  # deposed while the first try's coordinator moved
            raise NotOwnerError("group 'g' was taken over", "g")

    with pytest.raises(NotOwnerError):
        kafka_with(admin).commit_with_metadata("g", {T0: (5, "a")}, still_owner)
    assert checks == [0, 1]  # asked before the first try and before the retry
    assert len(admin.calls) == 1  # the retry was never sent

    admin = ScriptedAdmin(alter_group_offsets=[{tp0: Errors.NotCoordinatorError}, {tp0: Errors.NoError}])
    asked = []
    assert kafka_with(admin).commit_with_metadata("g", {T0: (5, "a")}, lambda: asked.append(1)) == {}
    assert len(asked) == 2 and len(admin.calls) == 2  # still the owner: retried and stored


def test_fetch_keeps_metadata_and_drops_partitions_without_an_offset():
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    admin = ScriptedAdmin(list_group_offsets=[{"g": {tp0: OffsetAndMetadata(5, "m", -1),
                                                     tp1: OffsetAndMetadata(-1, "", -1)}}])
    assert kafka_with(admin).fetch_with_metadata("g", [T0, T1]) == {T0: (5, "m")}
    assert admin.calls == [("list_group_offsets", ({"g": [tp0, tp1]},))]


@pytest.mark.parametrize("mode", ["zookeeper", "dual"])
def test_a_commit_is_queued_under_the_group_lock_it_was_validated_under(mode):
    """The generation check and the queuing of the ZooKeeper write (dual: the
    commit's place in the group's order) are one step under the group's lock,
    so no rebalance can slip between them and a commit accepted for
    generation N is ordered before any of N+1."""
    held, runtimes = [], []

    class Watching(ZkOffsets):
        def submit(self, group, offsets, fence=None):
            if mode == "zookeeper":
                held.append(runtimes[0]._lock.locked())
            return super().submit(group, offsets, fence)

    m, _ = manager(mode, Watching(), Kafka())
    take = m.group_offsets.forwarded.order.take

    def watched_take(group):
        held.append(runtimes[0]._lock.locked())
        return take(group)

    m.group_offsets.forwarded.order.take = watched_take

    async def commit():
        runtimes.append(await m.runtime("g"))
        return await m.group_offsets.commit("g", "", -1, None, [("t", 0, 5, "")])

    assert run(commit()) == [E.NONE]
    assert held == [True]
