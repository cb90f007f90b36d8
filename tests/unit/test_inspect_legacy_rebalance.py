"""The legacy rebalance in `zkcoord describe` / `zkcoord groups` (issue 26): which
registrations are legacy consumers' and which zkcoord members', when a group is
"mixed", each one's subscription and owner znodes, the partitions nobody holds,
unreadable registrations; as views, JSON and tables, from given readings."""

from __future__ import annotations

import doctest
import json

from test_inspect_render import cells, printed
from test_inspect_views import DAEMONS, record, view

from zkcoord.cli import inspect_cmd as cmd
from zkcoord.inspect import legacy_rebalance
from zkcoord.core.handover.decision import Owner
from zkcoord.core.handover.registration import LegacyRegistration, Pattern, zkcoord_consumer_id
from zkcoord.inspect.legacy_rebalance import handover, kind, legacy_count, section
from zkcoord.inspect.model import DescribeReport, GroupsReport, GroupSummary, LegacyConsumer, LegacyRebalance
from zkcoord.inspect.views import summarize
from zkcoord.zk.group_reads import ZkFacts
from zkcoord.zk.handover import Reading

OLD = "g_web-1-1700000000000-abcd1234"  # a legacy consumer, 2 streams of orders
FILTER = "g_etl-2-1700000000001-0000beef"  # a legacy whitelist consumer
ZID = zkcoord_consumer_id("g", 1795315596682, "0a1b2c3d")  # a zkcoord member
BAD = "g_bad-3-1700000000002-12345678"  # an unreadable registration
WHY = f"/consumers/g/ids/{BAD} cannot be read as a legacy consumer registration (not JSON: ...)"
READING = Reading(
    "g",
    {OLD: LegacyRegistration.static(OLD, {"orders": 2}), ZID: LegacyRegistration.static(ZID, {"orders": 1}),
     FILTER: LegacyRegistration.filtered(FILTER, Pattern.WHITE_LIST, "pay.*", 1)},
    topics={"orders": (0, 1, 2, 3, 4), "payments": (0, 1)},
    owners={("orders", 0): Owner(f"{OLD}-0", False), ("orders", 1): Owner(f"{OLD}-1", False),
            ("orders", 2): Owner(f"{ZID}-0", False), ("payments", 0): Owner(f"{FILTER}-0", False),
            ("orders", 4): Owner("g_gone-9-1700000000003-00000000-0", False), ("payments", 1): Owner("junk", False)},
    problems={BAD: WHY})
IDS = (BAD, FILTER, OLD, ZID)


def test_docstring_examples():
    failures, tried = doctest.testmod(legacy_rebalance)
    assert tried > 0 and failures == 0


def test_kinds_and_when_a_group_is_mixed():
    assert (kind(OLD), kind(ZID), kind("g_zkcoord-17953155966-0a1b2c3d")) == ("legacy", "zkcoord", "legacy")
    assert legacy_count(IDS) == 3
    assert handover([OLD, ZID], 0) == "mixed"  # a zkcoord member registered beside a legacy consumer
    assert handover([OLD], 3) == "mixed"  # zkcoord's record has members
    assert handover([OLD], 0) is None  # a legacy group
    assert handover([ZID], 3) is None and handover([], 3) is None  # zkcoord's alone


def test_the_section_of_a_reading():
    got = section(READING, "/consumers/g/ids", 0, {"member-1": ZID, "gone": "g_zkcoord-1795315596600-00000000"})
    assert got == LegacyRebalance("/consumers/g/ids", (
        LegacyConsumer(BAD, "legacy", None, None, (), WHY),
        LegacyConsumer(FILTER, "legacy", "white_list", (("pay.*", 1),), (("payments", (0,)),)),
        LegacyConsumer(OLD, "legacy", "static", (("orders", 2),), (("orders", (0, 1)),)),
        LegacyConsumer(ZID, "zkcoord", "static", (("orders", 1),), (("orders", (2,)),), member="member-1")),
        handover="mixed", unowned=(("orders", (3,)),),
        other_owners=(("g_gone-9-1700000000003-00000000-0", (("orders", (4,)),)), ("junk", (("payments", (1,)),))))
    assert [c.subscription_label() for c in got.consumers] == ["-", "pay.*:1", "orders:2", "orders:1"]
    assert got.summary() == "3 legacy consumer(s) and 1 zkcoord member(s) registered (mixed)"
    assert json.loads(json.dumps(got.as_dict())) == {
        "ids_dir": "/consumers/g/ids", "handover": "mixed",
        "consumers": [
            {"consumer_id": BAD, "kind": "legacy", "pattern": None, "subscription": None, "owned": {},
             "problem": WHY, "member": None},
            {"consumer_id": FILTER, "kind": "legacy", "pattern": "white_list", "subscription": {"pay.*": 1},
             "owned": {"payments": [0]}, "problem": None, "member": None},
            {"consumer_id": OLD, "kind": "legacy", "pattern": "static", "subscription": {"orders": 2},
             "owned": {"orders": [0, 1]}, "problem": None, "member": None},
            {"consumer_id": ZID, "kind": "zkcoord", "pattern": "static", "subscription": {"orders": 1},
             "owned": {"orders": [2]}, "problem": None, "member": "member-1"}],
        "unowned": {"orders": [3]},
        "other_owners": [{"thread_id": "g_gone-9-1700000000003-00000000-0", "owned": {"orders": [4]}},
                         {"thread_id": "junk", "owned": {"payments": [1]}}]}
    alone = section(Reading("g", {OLD: READING.registrations[OLD]}, topics={"orders": (0, 1)},
                            owners={("orders", 0): Owner(f"{OLD}-0", False), ("orders", 1): Owner(f"{OLD}-1", False)}),
                    "/consumers/g/ids", 0)
    assert (alone.handover, alone.unowned, alone.other_owners) == (None, (), ())
    assert alone.summary() == "1 legacy consumer(s) and 0 zkcoord member(s) registered"


def test_a_zkcoord_group_in_handover_is_described_side_by_side():
    zk = ZkFacts("g", record=record(), owner_node_id=1, legacy=True, legacy_ids=IDS, legacy_rebalance=READING,
                 zk_offsets={("orders", 0): "5", ("orders", 3): "6"})
    got = view(zk)
    assert got.sources == ("zkcoord", "legacy") and got.legacy_rebalance == section(READING, "/consumers/g/ids", 2)
    # the offsets view: zkcoord's members own what their assignments say, the legacy threads the rest they hold
    assert [(r.partition, r.member_id) for r in got.offsets] == [(0, "m1"), (1, "m1"), (2, "m2"), (3, None)]
    legacy_only = view(ZkFacts("g", record=record(members=[]), owner_node_id=1, legacy=True, legacy_ids=(OLD,),
                               legacy_rebalance=Reading("g", {OLD: READING.registrations[OLD]},
                                                        owners={("orders", 3): Owner(f"{OLD}-1", False)}),
                               zk_offsets={("orders", 3): "6"}))
    assert legacy_only.legacy_rebalance.handover is None  # a zkcoord group without members: not mixed
    assert [(r.partition, r.member_id, r.host) for r in legacy_only.offsets] == [(3, f"{OLD}-1", "web-1")]
    # zkcoord's own registrations alone make no legacy group
    mine = view(ZkFacts("g", record=record(), owner_node_id=1, legacy=True, legacy_ids=(ZID,),
                        legacy_rebalance=Reading("g", {ZID: READING.registrations[ZID]})))
    assert mine.sources == ("zkcoord",) and mine.legacy_rebalance.handover is None
    failed = view(ZkFacts("g", legacy=True, legacy_ids=(OLD,), legacy_rebalance_error="cannot be read: no ACL"))
    assert failed.legacy_rebalance is None and failed.notes[-1] == "cannot be read: no ACL"
    assert view(ZkFacts("g", record=record(), owner_node_id=1)).as_dict()["legacy_rebalance"] is None


def test_groups_marks_a_mixed_group():
    def summary(**facts) -> GroupSummary:
        return summarize(ZkFacts("g", legacy=True, **facts), None, False, DAEMONS)

    assert (summary(record=record(), legacy_ids=(OLD,)).handover, summary(record=record(), legacy_ids=(OLD,)).sources) \
        == ("mixed", ("zkcoord", "legacy"))
    assert summary(record=record(members=[]), legacy_ids=(OLD, ZID)).handover == "mixed"
    assert summary(record=record(members=[]), legacy_ids=(OLD,)).handover is None  # zkcoord's, but no members
    assert summary(legacy_ids=(OLD, ZID)).handover == "mixed"  # no record, a zkcoord member registered
    assert summary(legacy_ids=(OLD, FILTER)).handover is None
    assert summary(record=record(), legacy_ids=(ZID,)).handover is None
    assert [summary(legacy_ids=ids).legacy_consumers for ids in ((), (ZID,), (OLD, ZID, FILTER))] == [0, 0, 2]
    assert summary(record_error="corrupt", legacy_ids=(OLD,)).handover is None  # its members are unknown
    assert summary(record=record(), legacy_ids=(OLD,)).as_dict()["handover"] == "mixed"


def test_tables(capsys):
    zk = ZkFacts("g", record={**record(), "ho": {"m1": ZID}}, owner_node_id=1, legacy=True, legacy_ids=IDS,
                 legacy_rebalance=READING)
    report = DescribeReport("z", "/consumers", None, tuple(DAEMONS.values()), (view(zk),))
    for shown in ("offsets", "members"):
        lines = printed(cmd._describe_tables(report, shown, False), capsys)
        assert "Legacy rebalance under /consumers/g/ids: 3 legacy consumer(s) and 1 zkcoord member(s) registered " \
               "(mixed)" in lines
        assert ["GROUP", "CONSUMER-ID", "KIND", "PATTERN", "SUBSCRIPTION", "OWNED", "MEMBER"] in cells(lines, "GROUP")
        assert [row for row in cells(lines, "g") if row[1] in IDS] == [
            ["g", BAD, "legacy", "-", "-", "-", "-"],
            ["g", FILTER, "legacy", "white_list", "pay.*:1", "payments(0)", "-"],
            ["g", OLD, "legacy", "static", "orders:2", "orders(0,1)", "-"],
            ["g", ZID, "zkcoord", "static", "orders:1", "orders(2)", "m1"]]
        assert lines[-4:] == [
            "  note: partitions of subscribed topics no owner znode holds: orders(3)",
            "  note: orders(4) held by thread g_gone-9-1700000000003-00000000-0, of no registered consumer",
            "  note: payments(1) held by thread junk, of no registered consumer",
            f"  note: consumer {BAD}: {WHY}"]
    state = printed(cmd._describe_tables(report, "state", False), capsys)
    assert state[-1] == ("note: g: legacy rebalance: 3 legacy consumer(s) and 1 zkcoord member(s) registered (mixed); "
                         "--offsets or --members shows it")

    plain = GroupSummary("a", "Stable", ("zkcoord",), "zookeeper", 2, 3, group_type="classic")
    mixed = GroupSummary("b", "Stable", ("zkcoord", "legacy"), "zookeeper", 1, 1, group_type="classic",
                         legacy_consumers=1, handover="mixed")
    lines = printed(cmd._groups_table(GroupsReport("z", "/consumers", None, (), (plain, mixed))), capsys)
    assert cells(lines, "GROUP") == [["GROUP", "TYPE", "STATE", "OWNER", "MEMBERS", "STORAGE", "SOURCE", "HANDOVER"]]
    assert cells(lines, "a")[0][-1] == "-" and cells(lines, "b")[0][-2:] == ["zkcoord+legacy", "mixed"]
    lines = printed(cmd._groups_table(GroupsReport("z", "/consumers", None, (), (plain,))), capsys)
    assert cells(lines, "GROUP") == [["GROUP", "TYPE", "STATE", "OWNER", "MEMBERS", "STORAGE", "SOURCE"]]
