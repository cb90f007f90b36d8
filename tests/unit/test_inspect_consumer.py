"""KIP-848 consumer groups in `zkcoord describe` / `groups` (zkcoord.inspect.consumer and
views): exact views from stored records and from ConsumerGroupDescribe answers."""

from __future__ import annotations

from uuid import UUID

import pytest

from zkcoord.core.consumer.describe import DescribedConsumerGroup, DescribedMember, DescribedTopic
from zkcoord.inspect import consumer
from zkcoord.inspect.live import to_consumer_description
from zkcoord.inspect.model import Coordinator, Daemon, GroupError, GroupSummary, MemberView, OffsetRow
from zkcoord.inspect.views import KafkaFacts, LiveFacts, build_view, summarize, wanted_partitions
from zkcoord.schemas import ConsumerGroupDescribeResponse
from zkcoord.wire.messages import build_message
from zkcoord.topic_ids import topic_id_text, topic_id_uuid
from zkcoord.zk.group_reads import ZkFacts, consumer_topic_names

TOOL = 2**31 - 1
DAEMONS = {1: Daemon(1, "coord-1", 9301, "0.1.0")}
ORDERS, GONE = topic_id_text(UUID(int=7)), topic_id_text(UUID(int=9))
A, B = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg"


def member(mid: str, epoch: int, owned: dict, target: dict, *, classic: bool = False, state: int = 0,
           pending: dict | None = None, **extra) -> dict:
    rec = {"v": 1, "id": mid, "e": epoch, "pe": epoch - 1, "s": state, "rt": 30000, "c": f"client-{mid[-1]}",
           "h": f"/10.0.0.{len(mid)}", "tn": ["orders"], "te": 5, **extra}
    if owned:
        rec["a"] = {t: [[p, epoch] for p in ps] for t, ps in owned.items()}
    if pending:
        rec["pr"] = {t: [[p, epoch] for p in ps] for t, ps in pending.items()}
    if target:
        rec["tg"] = target
    if classic:
        rec["cl"] = {"st": 45000, "p": [["range", ""]]}
    return rec


def record(ge: int = 5, ae: int = 5, members: list | None = None, os: str = "zookeeper") -> dict:
    members = members if members is not None else [
        member(A, 5, {ORDERS: [0, 1]}, {ORDERS: [0, 1]}, sa="range"),
        member("classic-1", 5, {ORDERS: [2]}, {ORDERS: [2]}, classic=True)]
    return {"v": 1, "t": "consumer", "os": os, "ge": ge, "ae": ae, "members": members}


def view(zk: ZkFacts, live: LiveFacts = LiveFacts(), kafka: KafkaFacts = KafkaFacts()):
    return build_view(zk, live, kafka, DAEMONS, zk_root="/consumers", bootstrap_servers=None, tool_node_id=TOOL)


def test_stored_group_as_its_owner_would_describe_it():
    zk = ZkFacts("g", record=record(), owner_node_id=5, topic_ids={"orders": ORDERS},
                 zk_offsets={("orders", 0): "11", ("orders", 3): "2"})
    got = view(zk)
    assert (got.group_type, got.state, got.read_from, got.generation, got.group_epoch, got.assignment_epoch,
            got.protocol_type, got.assignment_strategy, got.storage) == \
        ("consumer", "Stable", "zookeeper", None, 5, 5, "consumer", "range", "zookeeper")
    assert got.coordinator == Coordinator(5, None, None, live=False)
    assert got.members == (
        MemberView(A, None, "client-Q", "/10.0.0.22", (("orders", (0, 1)),), member_type="consumer", member_epoch=5,
                   target_assignment=(("orders", (0, 1)),), subscribed_topic_names=("orders",)),
        MemberView("classic-1", None, "client-1", "/10.0.0.9", (("orders", (2,)),), member_type="classic",
                   member_epoch=5, target_assignment=(("orders", (2,)),), subscribed_topic_names=("orders",)))
    assert got.offsets == (OffsetRow("orders", 0, 11, 11, None, None, A, "/10.0.0.22", "client-Q"),
                           OffsetRow("orders", 1, None, None, None, None, A, "/10.0.0.22", "client-Q"),
                           OffsetRow("orders", 2, None, None, None, None, "classic-1", "/10.0.0.9", "client-1"),
                           OffsetRow("orders", 3, 2, 2, None, None))
    assert got.notes == (
        "its owner, node 5, is not registered under /zkcoord/nodes (stopping or lost); showing its state as last "
        "stored in ZooKeeper",
        f"mixed group: 1 of 2 member(s) use the classic protocol (JoinGroup/SyncGroup), the others the consumer "
        f"protocol: classic-1")
    assert got.mixed


def test_assignor_unknown_when_no_member_names_one():
    """No member names a server assignor: the daemons' default, which ZooKeeper does not hold."""
    zk = ZkFacts("g", record=record(members=[member(A, 5, {}, {})]), topic_ids={"orders": ORDERS})
    assert view(zk).assignment_strategy is None


def test_states_and_what_they_mean():
    moving = [member(A, 4, {ORDERS: [0, 1]}, {ORDERS: [0]}, state=1), member(B, 5, {}, {ORDERS: [1]}, state=2)]
    got = view(ZkFacts("g", record=record(ge=6, ae=5, members=moving), topic_ids={"orders": ORDERS}))
    assert got.state == "Assigning"
    assert got.notes[-2:] == (
        "group epoch 6 is ahead of the target assignment's (5): the coordinator computes a new target assignment",
        f"2 member(s) not at the target assignment of epoch 5 yet: {A}, {B}")
    reconciling = view(ZkFacts("g", record=record(members=moving), topic_ids={"orders": ORDERS}))
    assert reconciling.state == "Reconciling" and not reconciling.mixed
    assert [(m.member_id, m.assignment, m.target_assignment) for m in reconciling.members] == [
        (A, (("orders", (0, 1)),), (("orders", (0,)),)), (B, (), (("orders", (1,)),))]
    empty = view(ZkFacts("g", record=record(members=[])))
    assert (empty.state, empty.members, empty.notes[-1]) == ("Empty", (), "Consumer group 'g' has no active members.")


def test_partitions_pending_revocation_are_part_of_the_current_assignment():
    revoking = [member(A, 5, {ORDERS: [0]}, {ORDERS: [0]}, pending={ORDERS: [1]}, state=1)]
    got = view(ZkFacts("g", record=record(members=revoking), topic_ids={"orders": ORDERS}))
    assert got.members[0].assignment == (("orders", (0, 1)),) and got.members[0].partitions == 2


def test_topic_ids_named_by_kafka_and_unnamed_ones():
    both = [member(A, 5, {ORDERS: [0], GONE: [4]}, {ORDERS: [0]})]
    zk = ZkFacts("g", record=record(members=both), owner_node_id=1)  # ZooKeeper named nothing (a chrooted zkcoord)
    unasked = view(zk)
    assert unasked.members[0].assignment == ()
    assert unasked.notes[0] == (f"topic id(s) {ORDERS}, {GONE} in its stored assignments are named by neither "
                                "ZooKeeper's /brokers/topics (pass --bootstrap-servers to ask Kafka): their partitions "
                                "are left out (deleted topics?)")
    named = view(zk, kafka=KafkaFacts(asked=True, topic_ids={"orders": ORDERS}))
    assert named.members[0].assignment == (("orders", (0,)),)
    assert named.notes[0] == (f"topic id(s) {GONE} in its stored assignments are named by neither ZooKeeper's "
                              "/brokers/topics nor Kafka: their partitions are left out (deleted topics?)")
    assert wanted_partitions(zk, None, None) == set()
    assert consumer.unnamed_topic_ids(zk.record, {"orders": ORDERS}) == [GONE]
    assert consumer_topic_names({"members": both, "rx": {"ord.*": {"t": ["orders-eu"], "ver": 1, "ts": 1}}}) == \
        ["orders", "orders-eu"]


def test_live_answer_wins_and_names_what_it_names():
    live = DescribedConsumerGroup("g", "Reconciling", 8, 8, "uniform", (
        DescribedMember(B, "static", "rack-1", 7, "c", "/10.0.0.1", ("orders",), None,
                        (DescribedTopic(ORDERS, "orders", (3, 1)),), (), 1),))
    zk = ZkFacts("g", record=record(), owner_node_id=1)
    got = view(zk, LiveFacts(live))
    assert (got.read_from, got.state, got.group_epoch, got.assignment_epoch, got.assignment_strategy) == \
        ("daemon", "Reconciling", 8, 8, "uniform")
    assert got.members == (MemberView(B, "static", "c", "/10.0.0.1", (("orders", (1, 3)),), member_type="consumer",
                                      member_epoch=7, target_assignment=(), rack_id="rack-1",
                                      subscribed_topic_names=("orders",)),)
    silent = view(zk, LiveFacts(error="GROUP_ID_NOT_FOUND: Group g is not a consumer group."))
    assert silent.notes[0] == ("its owner coord-1:9301 (1) did not answer ConsumerGroupDescribe (GROUP_ID_NOT_FOUND: "
                               "Group g is not a consumer group.); showing its state as last stored in ZooKeeper")


def test_the_wire_answer_as_a_description():
    """A ConsumerGroupDescribe v1 answer, through its bytes, as the core's description."""
    built = build_message(ConsumerGroupDescribeResponse, 1, throttle_time_ms=0, groups=[{
        "error_code": 0, "error_message": None, "group_id": "g", "group_state": "Stable", "group_epoch": 3,
        "assignment_epoch": 3, "assignor_name": "range", "authorized_operations": -2**31, "members": [{
            "member_id": A, "instance_id": None, "rack_id": None, "member_epoch": 3, "client_id": "c",
            "client_host": "/h", "subscribed_topic_names": ["orders"], "subscribed_topic_regex": None,
            "assignment": {"topic_partitions": [{"topic_id": topic_id_uuid(ORDERS), "topic_name": "orders",
                                                 "partitions": [2, 0]}]},
            "target_assignment": {"topic_partitions": []}, "member_type": 0}]}])
    [group] = ConsumerGroupDescribeResponse.decode(built.encode(), version=1).groups
    assert to_consumer_description(group) == DescribedConsumerGroup("g", "Stable", 3, 3, "range", (
        DescribedMember(A, None, None, 3, "c", "/h", ("orders",), None, (DescribedTopic(ORDERS, "orders", (0, 2)),),
                        (), 0),))


def test_corrupt_member_records():
    broken = record(members=[{"v": 1, "id": A, "e": "five"}])
    got = view(ZkFacts("g", record_error="group 'g': member 'A': 'e' is 'five', not a 32-bit whole number"))
    assert got == GroupError("g", "corrupt", "group 'g': member 'A': 'e' is 'five', not a 32-bit whole number")
    with pytest.raises(Exception, match="not a 32-bit whole number"):
        consumer.stored_description("g", broken, {})
    listed = summarize(ZkFacts("g", record=broken), None, False, DAEMONS)
    assert (listed.state, listed.group_type) == ("Corrupt", None) and "not a 32-bit whole number" in listed.error


def test_summary_of_a_consumer_group():
    zk = ZkFacts("g", record=record(ge=7, ae=6, os="dual"), owner_node_id=1)
    assert summarize(zk, None, True, DAEMONS) == GroupSummary(
        "g", "Assigning", ("zkcoord",), "dual", 2, None, Coordinator(1, "coord-1", 9301, live=True),
        group_type="consumer", group_epoch=7, assignment_epoch=6)
