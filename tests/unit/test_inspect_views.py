"""The pure rules of inspection (zkcoord.inspect.views): exact views from given facts."""

from __future__ import annotations

import base64

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from zkcoord.core.errors import ErrorCode
from zkcoord.core.group import GroupDescription, MemberDescription
from zkcoord.inspect.gather import select
from zkcoord.inspect.model import (
    Coordinator, Daemon, GroupError, GroupSummary, GroupView, KafkaGroupInfo, MemberView, Migration, OffsetRow,
)
from zkcoord.inspect.views import (
    KafkaFacts, LiveFacts, build_view, decode_assignment, legacy_host, sources, summarize, wanted_partitions,
)
from zkcoord.zk.group_reads import ZkFacts

TOOL = 2**31 - 1
DAEMONS = {1: Daemon(1, "coord-1", 9301, "0.1.0"), 2: Daemon(2, "coord-2", 9302, "0.1.0")}


def assignment(**topics) -> bytes:
    return bytes(ConsumerProtocolAssignment(version=0, assigned_partitions=[
        ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=list(ps)) for t, ps in topics.items()],
        user_data=None).encode())


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def member(mid: str, client: str, parts: bytes | None) -> dict:
    rec = {"id": mid, "c": client, "h": f"/10.0.0.{mid[-1]}", "st": 10000, "rt": 30000,
           "p": [["range", b64(bytes(ConsumerProtocolSubscription(version=0, topics=["orders"],
                                                                  user_data=None).encode()))]]}
    if parts is not None:
        rec["a"] = b64(parts)
    return rec


def record(state="Stable", os="zookeeper", members=None) -> dict:
    members = members if members is not None else [member("m1", "c1", assignment(orders=[0, 1])),
                                                   member("m2", "c2", assignment(orders=[2]))]
    rec = {"v": 1, "s": state, "g": 7, "os": os, "pt": "consumer", "pn": "range", "m": members}
    if members:
        rec["l"] = members[0]["id"]
    return rec


def view(zk: ZkFacts, live: LiveFacts = LiveFacts(), kafka: KafkaFacts = KafkaFacts(), daemons=DAEMONS,
         bootstrap: str | None = None):
    return build_view(zk, live, kafka, daemons, zk_root="/consumers", bootstrap_servers=bootstrap, tool_node_id=TOOL)


# -- small rules ---------------------------------------------------------------------------
def test_decode_assignment():
    assert decode_assignment("consumer", assignment(b=[3, 1], a=[0])) == (("a", (0,)), ("b", (1, 3)))
    v1 = bytes(ConsumerProtocolAssignment(version=1, assigned_partitions=[
        ConsumerProtocolAssignment.TopicPartition(topic="t", partitions=[5])], user_data=b"x").encode())
    assert decode_assignment("consumer", v1) == (("t", (5,)),)
    assert decode_assignment("consumer", b"") == ()
    assert decode_assignment("consumer", b"[0,2]") is None  # not the consumer protocol
    assert decode_assignment("connect", assignment(a=[0])) is None


def test_legacy_host():
    assert legacy_host("g", "g_host-a.example-1700000000000-abcd1234") == "host-a.example"
    assert legacy_host("g", "g_host-1700000000000") is None
    assert legacy_host("g", "other_host-1700000000000-abcd1234") is None


# -- zkcoord groups ----------------------------------------------------------------------
def test_stored_group_with_its_owner_down():
    zk = ZkFacts("g", record=record(), owner_node_id=3, legacy=True,
                 zk_offsets={("orders", 0): "42", ("orders", 1): "7", ("orders", 5): "3"})
    got = view(zk)
    assert got == GroupView(
        "g", ("zkcoord",), "Stable", "zookeeper", "zookeeper", generation=7, protocol_type="consumer",
        assignment_strategy="range", coordinator=Coordinator(3, None, None, live=False),
        members=(MemberView("m1", None, "c1", "/10.0.0.1", (("orders", (0, 1)),), member_type="classic"),
                 MemberView("m2", None, "c2", "/10.0.0.2", (("orders", (2,)),), member_type="classic")),
        offsets=(OffsetRow("orders", 0, 42, 42, None, None, "m1", "/10.0.0.1", "c1"),
                 OffsetRow("orders", 1, 7, 7, None, None, "m1", "/10.0.0.1", "c1"),
                 OffsetRow("orders", 2, None, None, None, None, "m2", "/10.0.0.2", "c2"),
                 OffsetRow("orders", 5, 3, 3, None, None, None, None, None)),  # committed, nobody owns it
        notes=("its owner, node 3, is not registered under /zkcoord/nodes (stopping or lost); showing its state "
               "as last stored in ZooKeeper",), group_type="classic")


def test_live_description_wins_over_the_record():
    live = GroupDescription("g", ErrorCode.NONE, "PreparingRebalance", "consumer", "", (
        MemberDescription("m1", None, "c1", "/10.0.0.1", b"", b""),
        MemberDescription("m3", "static-3", "c3", "/10.0.0.3", b"", b"")))
    got = view(ZkFacts("g", record=record(), owner_node_id=1), LiveFacts(live))
    assert (got.state, got.read_from, got.generation, got.assignment_strategy) == \
        ("PreparingRebalance", "daemon", 7, "range")
    assert got.coordinator == Coordinator(1, "coord-1", 9301, live=True)
    assert got.members == (MemberView("m1", None, "c1", "/10.0.0.1", (), member_type="classic"),
                           MemberView("m3", "static-3", "c3", "/10.0.0.3", (), member_type="classic"))
    assert got.notes == ()


def test_owner_notes():
    stored = "showing its state as last stored in ZooKeeper"
    no_owner = view(ZkFacts("g", record=record()))
    assert no_owner.notes == (f"no daemon owns the group now (the next FindCoordinator loads it); {stored}",)
    assert view(ZkFacts("g", record=record()), daemons={}).notes == ()  # said once for the report instead
    tool = view(ZkFacts("g", record=record(), owner_node_id=TOOL))
    assert tool.notes == (f"a zkcoord migrate command holds the group's election right now; {stored}",)
    silent = view(ZkFacts("g", record=record(), owner_node_id=2), LiveFacts(error="no answer within 3 s"))
    assert silent.notes == (f"its owner coord-2:9302 (2) did not answer DescribeGroups (no answer within 3 s); "
                            f"{stored}",)
    assert silent.read_from == "zookeeper"


def test_dual_storage_shows_both_stores_and_resumes_from_the_larger():
    zk = ZkFacts("g", record=record(os="dual"), owner_node_id=1, legacy=True,
                 zk_offsets={("orders", 0): "42", ("orders", 1): "7"},
                 migration={"v": 1, "phase": "dual", "since_ms": 1700000000000})
    kafka = KafkaFacts(asked=True, committed={("orders", 0): 40, ("orders", 1): 9, ("orders", 3): 1},
                       group=KafkaGroupInfo("Empty", 0), log_ends={("orders", 0): 50, ("orders", 1): 9})
    got = view(zk, LiveFacts(), kafka)
    assert [(r.partition, r.current_offset, r.zookeeper_offset, r.kafka_offset, r.log_end_offset, r.lag,
             r.member_id) for r in got.offsets] == [
        (0, 42, 42, 40, 50, 8, "m1"), (1, 9, 7, 9, 9, 0, "m1"), (2, None, None, None, None, None, "m2"),
        (3, 1, None, 1, None, None, None)]
    assert got.sources == ("zkcoord",)  # the Kafka offsets are zkcoord's own, Kafka's coordinator has no members
    assert got.migration == Migration("dual", 1700000000000)
    assert got.kafka_group == KafkaGroupInfo("Empty", 0)

    unread = view(zk, LiveFacts(), KafkaFacts())
    assert [(r.current_offset, r.zookeeper_offset, r.kafka_offset) for r in unread.offsets] == \
        [(None, 42, None), (None, 7, None), (None, None, None)]
    assert unread.notes[-1] == ("the group's offsets are in Kafka too (dual storage); pass --bootstrap-servers "
                                "(or set ZKCOORD_BOOTSTRAP_SERVERS) to see them")


def test_kafka_storage_reads_kafka_and_warns_of_foreign_members():
    zk = ZkFacts("g", record=record(os="kafka", members=[]), owner_node_id=1, zk_offsets={("orders", 0): "42"})
    kafka = KafkaFacts(asked=True, committed={("orders", 1): 5}, group=KafkaGroupInfo(
        "Stable", 2, (("k-1", "stock", "/10.0.0.7"), ("k-2", "", ""))))
    got = view(zk, LiveFacts(), kafka)
    assert [(r.partition, r.current_offset, r.zookeeper_offset, r.kafka_offset) for r in got.offsets] == \
        [(1, 5, None, 5)]  # the frozen ZooKeeper offset is not the group's any more
    assert got.notes == ("warning: Kafka's own coordinator reports 2 member(s) in this group (Stable): k-1 (client "
                         "stock, host /10.0.0.7); k-2 (client -, host -). Consumers outside zkcoord use the same "
                         "group id: both coordinators assign the partitions, and Kafka refuses the commits zkcoord "
                         "forwards while they stay", "Consumer group 'g' has no active members.")


def test_unparsable_legacy_offsets_and_missing_topics_are_notes():
    zk = ZkFacts("g", record=record(members=[]), owner_node_id=1, zk_offsets={("orders", 0): "abc", ("gone", 0): "1"})
    got = view(zk, kafka=KafkaFacts(asked=True, missing_topics=frozenset({"gone"})))
    assert [(r.topic, r.partition, r.current_offset) for r in got.offsets] == [("gone", 0, 1), ("orders", 0, None)]
    assert got.notes[:2] == ("legacy offset of orders-0 is unparsable: znode /consumers/g/offsets/orders/0 holds "
                             "'abc' (not a decimal number)",
                             "topic 'gone' does not exist in Kafka: no log end offset")


# -- legacy and Kafka-only groups, errors ---------------------------------------------------
def test_legacy_group():
    cid = "g_web-1-1700000000000-abcd1234"
    zk = ZkFacts("g", legacy=True, zk_offsets={("orders", 0): "5", ("orders", 1): "6"}, legacy_ids=(cid,),
                 legacy_owners={("orders", 0): f"{cid}-0"})
    got = view(zk)
    assert got == GroupView(
        "g", ("legacy",), "Stable", "zookeeper", "zookeeper",
        members=(MemberView(cid, None, "", "web-1", (("orders", (0,)),)),),
        offsets=(OffsetRow("orders", 0, 5, 5, None, None, f"{cid}-0", "web-1", None),
                 OffsetRow("orders", 1, 6, 6, None, None, None, None, None)),
        notes=("legacy group: no zkcoord state; 1 old ZooKeeper consumer(s) registered",))
    assert view(ZkFacts("g", legacy=True)).state == "Empty"


def test_kafka_only_group():
    kafka = KafkaFacts(asked=True, committed={("orders", 0): 3}, group=KafkaGroupInfo("Empty", 0),
                       log_ends={("orders", 0): 10})
    got = view(ZkFacts("k"), kafka=kafka, bootstrap="k1:9092")
    assert (got.sources, got.state, got.read_from, got.storage) == (("kafka",), "Empty", "kafka", "kafka")
    assert got.offsets == (OffsetRow("orders", 0, 3, None, 3, 10),)
    assert got.offsets[0].lag == 7


def test_unknown_and_corrupt_groups():
    assert view(ZkFacts("nope"), kafka=KafkaFacts(asked=True, committed={}, group=KafkaGroupInfo("Dead", 0)),
                bootstrap="k1:9092") == GroupError(
        "nope", "not-found", "Consumer group 'nope' does not exist (no state at /coordinators/nope/state, nothing "
        "under /consumers/nope, and Kafka at k1:9092 does not know it); `zkcoord groups` lists the groups")
    assert view(ZkFacts("nope")).message.endswith("; Kafka not asked: no --bootstrap-servers); `zkcoord groups` "
                                                  "lists the groups")
    corrupt = view(ZkFacts("c", record_error="state znode /coordinators/c/state of group 'c' is empty"))
    assert (corrupt.error, corrupt.exit_code) == ("corrupt", 1)
    invalid = view(ZkFacts("c", record={"v": 3, "s": "Stable", "g": 1}))
    assert invalid.error == "corrupt" and "unsupported record version 3" in invalid.message


def test_wanted_partitions():
    zk = ZkFacts("g", record=record(), zk_offsets={("a", 0): "1"}, legacy_owners={("b", 1): "x-0"})
    desc = GroupDescription("g", ErrorCode.NONE, "Stable", "consumer", "range", (
        MemberDescription("m1", None, "c", "h", b"", assignment(orders=[0, 1])),))
    assert wanted_partitions(zk, desc, {("k", 2): 5}) == {("a", 0), ("b", 1), ("k", 2), ("orders", 0), ("orders", 1)}


# -- who uses a group (SOURCE), and Kafka's view of it -----------------------------------------
@pytest.mark.parametrize("zk, kafka_knows, kafka_group, expected", [
    # a zkcoord group keeps its own offsets under the root in zookeeper storage: that is not legacy
    (ZkFacts("g", record=record(), legacy=True), False, None, ("zkcoord",)),
    # old ZooKeeper consumers registered beside zkcoord's members
    (ZkFacts("g", record=record(), legacy=True, legacy_ids=("g_h-1-abcd1234",)), False, None, ("zkcoord", "legacy")),
    # offsets under the root without zkcoord state: old consumers or tools wrote them
    (ZkFacts("g", legacy=True), False, None, ("legacy",)),
    (ZkFacts("g", legacy=True, legacy_ids=("g_h-1-abcd1234",)), True, KafkaGroupInfo("Empty", 0), ("legacy", "kafka")),
    # in dual / kafka storage zkcoord writes the group's Kafka offsets itself: kafka only with Kafka-side members
    (ZkFacts("g", record=record(os="dual"), legacy=True), True, KafkaGroupInfo("Empty", 0), ("zkcoord",)),
    (ZkFacts("g", record=record(os="kafka")), True, KafkaGroupInfo("Stable", 2), ("zkcoord", "kafka")),
    # in zookeeper storage, offsets in Kafka are somebody else's
    (ZkFacts("g", record=record()), True, KafkaGroupInfo("Empty", 0), ("zkcoord", "kafka")),
    (ZkFacts("g", record_error="corrupt"), False, None, ("zkcoord",)),
    (ZkFacts("g"), True, KafkaGroupInfo("Stable", 1), ("kafka",)),
])
def test_sources_say_who_uses_the_group(zk, kafka_knows, kafka_group, expected):
    assert sources(zk, kafka_knows, kafka_group) == expected
    if zk.record_error is None:
        assert summarize(zk, kafka_group, kafka_knows, DAEMONS).sources == expected
        kafka = KafkaFacts(asked=True, committed={("t", 0): 1} if kafka_knows else {}, group=kafka_group)
        assert view(zk, kafka=kafka, bootstrap="k1:9092").sources == expected


def test_a_group_kafka_never_saw_has_no_kafka_view():
    never = KafkaFacts(asked=True, committed={}, group=KafkaGroupInfo("Dead", 0))
    got = view(ZkFacts("g", record=record()), kafka=never, bootstrap="k1:9092")
    assert got.kafka_group is None and got.sources == ("zkcoord",)
    assert got.as_dict()["kafka_group"] is None
    legacy = view(ZkFacts("g", legacy=True), kafka=never, bootstrap="k1:9092")
    assert legacy.kafka_group is None
    seen = view(ZkFacts("g", record=record()), kafka=KafkaFacts(asked=True, group=KafkaGroupInfo("Empty", 0)),
                bootstrap="k1:9092")
    assert seen.kafka_group == KafkaGroupInfo("Empty", 0)


# -- the groups listing ------------------------------------------------------------------------
def test_summaries_and_selection():
    zkcoord = summarize(ZkFacts("a", record=record(os="dual"), owner_node_id=2, legacy=True), None, True, DAEMONS)
    assert zkcoord == GroupSummary("a", "Stable", ("zkcoord",), "dual", 2, 7,
                                   Coordinator(2, "coord-2", 9302, live=True), group_type="classic")
    legacy = summarize(ZkFacts("b", legacy=True, legacy_ids=("b_h-1-x",)), None, False, DAEMONS)
    assert legacy == GroupSummary("b", "Stable", ("legacy",), "zookeeper", 1, legacy_consumers=1)
    kafka = summarize(ZkFacts("c"), KafkaGroupInfo("PreparingRebalance", 3), True, DAEMONS)
    assert kafka == GroupSummary("c", "PreparingRebalance", ("kafka",), "kafka", 3)
    everything = (zkcoord, legacy, kafka)
    assert select(everything, ["stable"]) == (zkcoord, legacy)
    assert select(everything, [], ["kafka", "dual"]) == (zkcoord, kafka)
    assert select(everything, ["Stable"], ["zookeeper"]) == (legacy,)
    assert select(everything, [], [], ["classic"]) == (zkcoord,)
    assert select(everything, [], [], ["consumer"]) == ()


@pytest.mark.parametrize("storage", ["zookeeper", "dual", "kafka"])
def test_every_partition_assigned_shows_its_owner(storage):
    zk = ZkFacts("g", record=record(os=storage), owner_node_id=1)
    got = view(zk, kafka=KafkaFacts(asked=True, committed={}))
    assert [(r.partition, r.member_id, r.client_id) for r in got.offsets] == [(0, "m1", "c1"), (1, "m1", "c1"),
                                                                             (2, "m2", "c2")]
