"""The tables of `zkcoord describe` / `groups` (zkcoord.cli.inspect_cmd), from given
reports: kafka-consumer-groups' columns, "-" for what is unknown, and whole
rows when the output is not a terminal."""

from __future__ import annotations

from rich.text import Text

from zkcoord.cli import inspect_cmd as cmd
from zkcoord.cli.render import print_out
from zkcoord.inspect.gather import NO_KAFKA
from zkcoord.inspect.model import (
    Coordinator, DescribeReport, GroupError, GroupsReport, GroupSummary, GroupView, MemberView, Migration, OffsetRow,
)

A, B = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg"  # consumer-protocol member ids
MIXED = GroupView(
    "kip848", ("zkcoord",), "Reconciling", "daemon", "zookeeper", protocol_type="consumer",
    assignment_strategy="uniform", coordinator=Coordinator(2, "coord-2", 9302, live=True), group_type="consumer",
    group_epoch=5, assignment_epoch=5,
    members=(MemberView(A, None, "c1", "/10.0.0.5", (("a", (0, 1)), ("b", (2,))), member_type="consumer",
                        member_epoch=5, target_assignment=(("a", (0, 1)), ("b", (2,)))),
             MemberView(B, "static-b", "c2", "/10.0.0.6", (("a", (2,)),), member_type="consumer", member_epoch=4,
                        target_assignment=()),
             MemberView("classic-1", None, "c3", "/10.0.0.7", (), member_type="classic", member_epoch=5,
                        target_assignment=(("a", (2,)),))),
    offsets=(OffsetRow("a", 0, 4, 4, None, 9, A, "/10.0.0.5", "c1"),),
    notes=("1 member(s) not at the target assignment of epoch 5 yet: " + B,))

LIVE = GroupView(
    "billing", ("zkcoord",), "Stable", "daemon", "zookeeper", generation=7, protocol_type="consumer",
    assignment_strategy="range", coordinator=Coordinator(1, "coord-1", 9301, live=True),
    members=(MemberView("m1", None, "c1", "/10.0.0.5", (("a", (0, 1)), ("b", (2,)))),
             MemberView("m2", "static-2", "c2", "/10.0.0.6", None)),
    offsets=(OffsetRow("a", 0, 42, 42, None, 50, "m1", "/10.0.0.5", "c1"),
             OffsetRow("a", 3, 9, 9, None, None)))
DUAL = GroupView("mig", ("zkcoord", "kafka"), "Empty", "zookeeper", "dual", generation=2,
                 migration=Migration("dual", 1), offsets=(OffsetRow("a", 0, 12, 10, 12, 20),),
                 notes=("Consumer group 'mig' has no active members.",))


def printed(renderables, capsys) -> list[str]:
    print_out(*renderables)
    return [line.rstrip() for line in capsys.readouterr().out.splitlines()]


def cells(lines: list[str], first: str) -> list[list[str]]:
    return [line.split() for line in lines if line.split()[:1] == [first]]


def test_offsets_view(capsys):
    lines = printed(cmd._describe_tables(DescribeReport("z", "/consumers", None, (), (LIVE, DUAL),
                                                        notes=(NO_KAFKA,)), "offsets", False), capsys)
    assert lines[0] == f"note: {NO_KAFKA}"
    assert "Consumer group 'billing': Stable, generation 7, storage zookeeper, coordinator coord-1:9301 (1), " \
           "live from the owner" in lines
    assert cells(lines, "billing") == [["billing", "a", "0", "42", "50", "8", "m1", "/10.0.0.5", "c1"],
                                       ["billing", "a", "3", "9", "-", "-", "-", "-", "-"]]
    assert "Consumer group 'mig': Empty, generation 2, storage dual, migration phase dual, read from ZooKeeper" \
        in lines
    assert "  note: Consumer group 'mig' has no active members." in lines
    assert ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "ZK-OFFSET", "KAFKA-OFFSET", "LOG-END-OFFSET", "LAG",
            "CONSUMER-ID", "HOST", "CLIENT-ID"] in cells(lines, "GROUP")
    assert cells(lines, "mig") == [["mig", "a", "0", "12", "10", "12", "20", "8", "-", "-", "-"]]


def test_members_view_with_assignment(capsys):
    lines = printed(cmd._describe_tables(DescribeReport("z", "/c", None, (), (LIVE,), notes=(NO_KAFKA,)),
                                         "members", True), capsys)
    assert not any(NO_KAFKA in line for line in lines)  # log ends do not matter to this view
    assert cells(lines, "GROUP") == [["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                                      "#PARTITIONS", "ASSIGNMENT"]]
    assert cells(lines, "billing") == [["billing", "m1", "-", "/10.0.0.5", "c1", "3", "a(0,1),b(2)"],
                                       ["billing", "m2", "static-2", "/10.0.0.6", "c2", "-", "-"]]


def test_state_view(capsys):
    lines = printed(cmd._describe_tables(DescribeReport("z", "/c", None, (), (LIVE, DUAL)), "state", True), capsys)
    assert cells(lines, "GROUP")[0][:9] == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                                            "#MEMBERS", "GENERATION", "STORAGE", "MIGRATION"]
    assert cells(lines, "billing") == [["billing", "coord-1:9301", "(1)", "range", "Stable", "2", "7", "zookeeper", "-",
                                        "consumer", "daemon"]]
    assert cells(lines, "mig") == [["mig", "-", "-", "Empty", "0", "2", "dual", "dual", "-", "zookeeper"]]
    assert "note: mig: Consumer group 'mig' has no active members." in lines


def test_groups_table(capsys):
    report = GroupsReport("z", "/consumers", None, (), (
        GroupSummary("a", "Stable", ("zkcoord", "legacy"), "dual", 2, 3, Coordinator(4, None, None, live=False),
                     group_type="classic"),
        GroupSummary("b", "Empty", ("kafka",), "kafka", 0),
        GroupSummary("c", "Reconciling", ("zkcoord",), "zookeeper", 3, None, Coordinator(1, "coord-1", 9301, True),
                     group_type="consumer", group_epoch=4, assignment_epoch=4)))
    lines = printed(cmd._groups_table(report), capsys)
    assert cells(lines, "GROUP") == [["GROUP", "TYPE", "STATE", "OWNER", "MEMBERS", "STORAGE", "SOURCE"]]
    assert cells(lines, "a") == [["a", "Classic", "Stable", "node", "4", "(not", "registered)", "2", "dual",
                                  "zkcoord+legacy"]]
    assert cells(lines, "b") == [["b", "-", "Empty", "-", "0", "kafka", "kafka"]]
    assert cells(lines, "c") == [["c", "Consumer", "Reconciling", "coord-1:9301", "(1)", "3", "zookeeper", "zkcoord"]]
    assert printed(cmd._groups_table(GroupsReport("z", "/c", None, (), ())), capsys) == ["no consumer groups found"]


def test_rows_are_never_wrapped_off_a_terminal(capsys):
    long_id = "consumer-" + "x" * 150
    lines = printed([Text("note: " + "y" * 200)], capsys)
    assert lines == ["note: " + "y" * 200]
    view = GroupView("g", ("zkcoord",), "Stable", "zookeeper", "zookeeper",
                     offsets=(OffsetRow("t", 0, 1, 1, None, None, long_id, "h", "c"),))
    lines = printed(cmd._describe_tables(DescribeReport("z", "/c", "k:9092", (), (view,)), "offsets", False), capsys)
    assert cells(lines, "g") == [["g", "t", "0", "1", "-", "-", long_id, "h", "c"]]


def test_an_unknown_group_alone_prints_nothing_on_stdout(capsys):
    missing = GroupError("nope", "not-found", "Consumer group 'nope' does not exist (...)")
    for view in ("offsets", "members", "state"):
        report = DescribeReport("z", "/consumers", None, (), (), (missing,), notes=(NO_KAFKA,))
        assert printed(cmd._describe_tables(report, view, False), capsys) == []  # no empty line, no note
    assert printed([], capsys) == []


def test_watch_goes_on_after_a_failed_refresh(capsys):
    import asyncio
    import json

    from zkcoord.errors import ServiceUnavailableError

    answers = [ServiceUnavailableError("ZooKeeper at zk:2181 did not answer within 1 s"),
               DescribeReport("zk:2181", "/consumers", None, (), (LIVE,))]

    async def report():
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def target(output: str) -> cmd._Target:
        return cmd._Target("zk:2181", "/consumers", None, 1000, output, True, 0.2, 2)

    code = asyncio.run(cmd._watch(target("json"), report, lambda r: [], "zkcoord describe billing", "describe"))
    first, second = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert code == 0 and first["error"] == "ZooKeeper at zk:2181 did not answer within 1 s" and first["at"]
    assert first["schema"] == "zkcoord/describe/v1"  # a failed refresh is a document of the same schema
    assert second["schema"] == "zkcoord/describe/v1" and second["groups"][0]["group"] == "billing"

    answers[:] = [ServiceUnavailableError("down"), ServiceUnavailableError("still down")]
    code = asyncio.run(cmd._watch(target("table"), report, lambda r: [], "zkcoord describe billing", "describe"))
    out = capsys.readouterr().out
    assert code == 2 and out.count("Every 0.2s: zkcoord describe billing") == 2
    assert "error: down (retrying)" in out and "error: still down (retrying)" in out


# -- KIP-848 consumer groups: Kafka 4.x's layout ------------------------------------------------
def test_consumer_group_heading_and_offsets(capsys):
    lines = printed(cmd._describe_tables(DescribeReport("z", "/c", "k:9092", (), (MIXED,)), "offsets", False), capsys)
    assert ("Consumer group 'kip848': Reconciling, type consumer (mixed: classic and consumer members), group epoch 5, "
            "assignment epoch 5, assignor uniform, storage zookeeper, coordinator coord-2:9302 (2), live from the "
            "owner") in lines
    assert f"  note: 1 member(s) not at the target assignment of epoch 5 yet: {B}" in lines
    assert cells(lines, "GROUP") == [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                      "CONSUMER-ID", "HOST", "CLIENT-ID"]]
    assert cells(lines, "kip848") == [["kip848", "a", "0", "4", "9", "5", A, "/10.0.0.5", "c1"]]


def test_consumer_group_members(capsys):
    lines = printed(cmd._describe_tables(DescribeReport("z", "/c", None, (), (MIXED,)), "members", False), capsys)
    assert cells(lines, "GROUP") == [["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                      "MEMBER-TYPE"]]
    assert cells(lines, "kip848") == [["kip848", A, "-", "/10.0.0.5", "c1", "3", "Consumer"],
                                      ["kip848", B, "static-b", "/10.0.0.6", "c2", "1", "Consumer"],
                                      ["kip848", "classic-1", "-", "/10.0.0.7", "c3", "0", "Classic"]]


def test_consumer_group_members_verbose_as_kafka_4(capsys):
    """Kafka 4.x's --describe --members --verbose columns, its assignment form (topic:p,p;topic:p)."""
    lines = printed(cmd._describe_tables(DescribeReport("z", "/c", None, (), (MIXED,)), "members", True), capsys)
    assert cells(lines, "GROUP") == [["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                      "MEMBER-TYPE", "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                                      "TARGET-ASSIGNMENT"]]
    assert cells(lines, "kip848") == [
        ["kip848", A, "-", "/10.0.0.5", "c1", "3", "Consumer", "5", "a:0,1;b:2", "5", "a:0,1;b:2"],
        ["kip848", B, "static-b", "/10.0.0.6", "c2", "1", "Consumer", "4", "a:2", "5", "-"],
        ["kip848", "classic-1", "-", "/10.0.0.7", "c3", "0", "Classic", "5", "-", "5", "a:2"]]


def test_state_view_with_a_consumer_group(capsys):
    """A consumer group among those shown adds TYPE and the two epochs; a classic group shows "-" there."""
    lines = printed(cmd._describe_tables(DescribeReport("z", "/c", None, (), (LIVE, MIXED)), "state", False), capsys)
    assert cells(lines, "GROUP") == [["GROUP", "TYPE", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                                      "#MEMBERS", "GENERATION", "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "STORAGE",
                                      "MIGRATION"]]
    assert cells(lines, "billing") == [["billing", "-", "coord-1:9301", "(1)", "range", "Stable", "2", "7", "-", "-",
                                        "zookeeper", "-"]]
    assert cells(lines, "kip848") == [["kip848", "Consumer", "coord-2:9302", "(2)", "uniform", "Reconciling", "3",
                                       "-", "5", "5", "zookeeper", "-"]]
