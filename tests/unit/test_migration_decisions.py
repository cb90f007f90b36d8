"""The migration decisions of zkcoord.core.migration: every rule with exact
outcomes, an exhaustive sweep over small logs for the invariants, the group
and plan totals, and the dual-commit fetch rule."""

from __future__ import annotations

import doctest
import itertools

import pytest

from zkcoord.core import migration
from zkcoord.core.migration import (
    MAX_OFFSET, Decision, GroupActivity, Options, PartitionFacts, PartitionPlan, decide, dual_fetch,
    make_plan, parse_legacy_offset, plan_group,
)
from zkcoord.errors import UsageError

D = Decision
PLAIN, REWIND, FORCE, BOTH = Options(), Options(allow_rewind=True), Options(force=True), Options(True, True)


def facts(legacy="42", kafka=None, start=10, end=100, *, topic=True, partition=True, p=0, group="g"):
    if not partition:
        start = end = None
    return PartitionFacts(group, "t", p, legacy, kafka_offset=kafka, log_start=start, log_end=end,
                          topic_exists=topic, partition_exists=partition)


# -- every rule, exact outcome ------------------------------------------------------------

@pytest.mark.parametrize("legacy, kafka, options, decision, target", [
    # within the log
    ("42", None, PLAIN, D.COPY, 42),
    ("42", 30, PLAIN, D.COPY, 42),
    ("42", 42, PLAIN, D.EQUAL, None),
    ("42", 50, PLAIN, D.KAFKA_AHEAD_KEPT, None),
    ("42", 50, REWIND, D.REWIND, 42),
    ("42", 50, FORCE, D.KAFKA_AHEAD_KEPT, None),
    ("42", 0, PLAIN, D.COPY, 42),
    # the log's edges are valid offsets
    ("10", None, PLAIN, D.COPY, 10),
    ("100", None, PLAIN, D.COPY, 100),
    ("100", 100, PLAIN, D.EQUAL, None),
    # below the log start: clamped to it, then compared with Kafka
    ("5", None, PLAIN, D.CLAMPED_TO_LOG_START, 10),
    ("0", 3, PLAIN, D.CLAMPED_TO_LOG_START, 10),
    ("5", 10, PLAIN, D.EQUAL, None),
    ("5", 60, PLAIN, D.KAFKA_AHEAD_KEPT, None),
    ("5", 60, REWIND, D.REWIND, 10),
    ("9", None, PLAIN, D.CLAMPED_TO_LOG_START, 10),
    # beyond the log end: refused, or the log end with force
    ("101", None, PLAIN, D.BEYOND_LOG_END_REFUSED, None),
    ("120", 50, PLAIN, D.BEYOND_LOG_END_REFUSED, None),
    ("120", 50, REWIND, D.BEYOND_LOG_END_REFUSED, None),
    ("120", None, FORCE, D.BEYOND_LOG_END_FORCED, 100),
    ("120", 50, FORCE, D.BEYOND_LOG_END_FORCED, 100),
    ("120", 100, FORCE, D.EQUAL, None),
    ("120", 150, FORCE, D.KAFKA_AHEAD_KEPT, None),
    ("120", 150, BOTH, D.REWIND, 100),
    (str(MAX_OFFSET), None, FORCE, D.BEYOND_LOG_END_FORCED, 100),
    # what legacy consumers and tools left behind
    (" 42\n", None, PLAIN, D.COPY, 42),
    ("042", None, PLAIN, D.COPY, 42),
    ("abc", None, PLAIN, D.UNPARSABLE, None),
    ("", None, PLAIN, D.UNPARSABLE, None),
    (None, None, PLAIN, D.UNPARSABLE, None),
    ("-1", None, PLAIN, D.NO_POSITION, None),
    ("-7", 5, PLAIN, D.NO_POSITION, None),
    ("+5", None, PLAIN, D.UNPARSABLE, None),
    ("4 2", None, PLAIN, D.UNPARSABLE, None),
    ("42.0", None, BOTH, D.UNPARSABLE, None),
    ("{\"o\": 42}", 7, BOTH, D.UNPARSABLE, None),
    (str(MAX_OFFSET + 1), None, BOTH, D.UNPARSABLE, None),
    ("٤٢", None, PLAIN, D.UNPARSABLE, None),  # ASCII digits only, as zkcoord.zk.offsets reads them
])
def test_decision(legacy, kafka, options, decision, target):
    plan = decide(facts(legacy, kafka), options)
    assert (plan.decision, plan.target_offset) == (decision, target)


@pytest.mark.parametrize("options", [PLAIN, REWIND, FORCE, BOTH])
@pytest.mark.parametrize("legacy", ["42", "abc", None, "999"])
def test_missing_topic_and_partition_come_first(options, legacy):
    assert decide(facts(legacy, 5, topic=False, partition=False), options) == PartitionPlan(
        D.TOPIC_MISSING, None, "topic 't' does not exist in Kafka")
    assert decide(facts(legacy, 5, partition=False, p=7), options) == PartitionPlan(
        D.PARTITION_MISSING, None, "topic 't' has no partition 7 in Kafka")


def test_an_empty_log_accepts_only_zero():
    assert decide(facts("0", start=0, end=0)).decision is D.COPY
    assert decide(facts("1", start=0, end=0)).decision is D.BEYOND_LOG_END_REFUSED
    assert decide(facts("1", start=0, end=0), FORCE) == PartitionPlan(
        D.BEYOND_LOG_END_FORCED, 0, "legacy 1 is beyond the log end 0; commits the log end 0 (--force; "
                                    "Kafka has no offset)")
    # a log whose records were all deleted: start == end > 0
    assert decide(facts("3", start=50, end=50)) == PartitionPlan(
        D.CLAMPED_TO_LOG_START, 50,
        "legacy 3 is below the log start 50 (records deleted); commits the log start 50 (Kafka has no offset)")


def test_notes_say_what_and_why():
    assert decide(facts("42", None)).note == "copies 42 (Kafka has no offset)"
    assert decide(facts("42", 30)).note == "copies 42 (Kafka at 30)"
    assert decide(facts("42", 42)).note == "Kafka already at 42"
    assert decide(facts("42", 50)).note == "Kafka at 50 is ahead of 42; kept (--allow-rewind rewinds)"
    assert decide(facts("42", 50), REWIND).note == "rewinds Kafka from 50 to 42"
    assert decide(facts("5", 60)).note == ("legacy 5 is below the log start 10 (records deleted); Kafka at 60 "
                                           "is ahead of 10; kept (--allow-rewind rewinds)")
    assert decide(facts("120", None)).note == ("legacy 120 is beyond the log end 100 (log truncated or topic "
                                               "recreated?); --force commits the log end 100")
    assert decide(facts("120", 50), FORCE).note == ("legacy 120 is beyond the log end 100; commits the log end "
                                                    "100 (--force; Kafka at 50)")
    assert decide(facts("abc")).note == "legacy value 'abc' is not an offset (not a decimal number)"
    assert decide(facts("-1")).note == "legacy value -1 is Kafka's \"no offset\": nothing to copy"
    assert decide(facts("-5")).note == ("legacy value -5 is no position in any log (a consumer given it resets by "
                                        "its auto.offset.reset): nothing to copy")
    assert (decide(facts("-5")).decision, decide(facts(str(-2**63))).decision) == (D.NO_POSITION, D.NO_POSITION)
    assert decide(facts(None)).note == "the legacy znode holds no data"
    assert decide(facts("x" * 100)).note.startswith("legacy value '" + "x" * 37 + "...' is not")


# -- invariants, over every combination on a small log ----------------------------------------

LEGACY_VALUES = [None, "", "x", "-1", "-2"] + [str(v) for v in range(0, 9)]
KAFKA_VALUES = [None] + list(range(0, 9))
LOGS = [(s, e) for s in range(0, 5) for e in range(s, 6)]


def _sweep():
    for legacy, kafka, (start, end), options in itertools.product(
            LEGACY_VALUES, KAFKA_VALUES, LOGS, [PLAIN, REWIND, FORCE, BOTH]):
        f = facts(legacy, kafka, start, end)
        yield f, options, decide(f, options)


def test_invariants_hold_for_every_combination():
    seen = set()
    for f, options, plan in _sweep():
        seen.add(plan.decision)
        legacy = parse_legacy_offset(f.legacy_raw)
        # a target exactly when the decision writes, and it is always inside the log
        assert (plan.target_offset is not None) == plan.decision.writes, (f, options, plan)
        if plan.target_offset is not None:
            assert f.log_start <= plan.target_offset <= f.log_end, (f, options, plan)
            assert plan.target_offset != f.kafka_offset  # writing what is there is EQUAL
        # Kafka never moves backwards unless allowed, and only REWIND does so
        if plan.target_offset is not None and f.kafka_offset is not None and plan.target_offset < f.kafka_offset:
            assert options.allow_rewind and plan.decision is D.REWIND, (f, options, plan)
        # a legacy value inside the log is copied exactly (or kept / equal)
        if legacy is not None and f.log_start <= legacy <= f.log_end and plan.decision.writes:
            assert plan.target_offset == legacy
        # beyond the log end never writes without force
        if legacy is not None and legacy > f.log_end and not options.force:
            assert plan.decision is D.BEYOND_LOG_END_REFUSED
        if legacy is None:
            negative = f.legacy_raw is not None and f.legacy_raw.startswith("-")
            assert plan.decision is (D.NO_POSITION if negative else D.UNPARSABLE)
        assert plan.note
    assert seen == set(Decision) - {D.TOPIC_MISSING, D.PARTITION_MISSING}


def test_writes_and_flagged_sets():
    assert {d for d in Decision if d.writes} == {
        D.COPY, D.REWIND, D.CLAMPED_TO_LOG_START, D.BEYOND_LOG_END_FORCED}
    assert {d for d in Decision if not d.flagged} == {D.COPY, D.EQUAL, D.KAFKA_AHEAD_KEPT}
    assert [d.value for d in Decision] == [
        "copy", "equal", "kafka-ahead-kept", "rewind", "clamped-to-log-start", "beyond-log-end-refused",
        "beyond-log-end-forced", "topic-missing", "partition-missing", "unparsable", "no-position"]


# -- facts are validated ------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(partition=-1), "partition must be a whole number >= 0, got -1"),
    (dict(partition=True), "partition must be a whole number >= 0, got True"),
    (dict(kafka_offset=-1), "Kafka offset of group 'g' t-0 must be a whole number"),
    (dict(kafka_offset=MAX_OFFSET + 1), "Kafka offset of group 'g' t-0 must be a whole number"),
    (dict(log_start=None), "log start of group 'g' t-0 must be a whole number"),
    (dict(log_end="5"), "log end of group 'g' t-0 must be a whole number"),
    (dict(log_start=6, log_end=5), "group 'g' t-0: log start 6 is after log end 5"),
    (dict(topic_exists=False), "group 'g' t-0: a partition cannot exist in a missing topic"),
])
def test_bad_facts_are_usage_errors(kwargs, message):
    base = dict(group="g", topic="t", partition=0, legacy_raw="1", kafka_offset=None, log_start=0, log_end=5)
    with pytest.raises(UsageError) as info:
        PartitionFacts(**{**base, **kwargs})
    assert str(info.value).startswith(message)


def test_missing_partition_needs_no_log_offsets():
    f = PartitionFacts("g", "t", 3, "1", partition_exists=False)
    assert decide(f).decision is D.PARTITION_MISSING


# -- groups and totals ---------------------------------------------------------------------

def test_plan_group_sorts_rows_counts_and_warns():
    rows = [facts("abc", p=2), facts("42", 50, p=1), facts("42", p=0),
            PartitionFacts("g", "a", 0, "1", topic_exists=False, partition_exists=False)]
    activity = GroupActivity(kafka_state="Stable", kafka_members=2, zkcoord_members=1, offset_storage="dual",
                             legacy_consumers=3)
    group = plan_group("g", rows, PLAIN, activity, kafka_only=2)
    assert [(r.facts.topic, r.facts.partition, r.decision) for r in group.rows] == [
        ("a", 0, D.TOPIC_MISSING), ("t", 0, D.COPY), ("t", 1, D.KAFKA_AHEAD_KEPT), ("t", 2, D.UNPARSABLE)]
    assert (group.to_write, group.flagged, group.count(D.COPY), group.count(D.REWIND)) == (1, 2, 1, 0)
    assert group.activity.active
    assert group.notes == (
        "2 active member(s) in Kafka (state Stable): Kafka refuses offset commits from outside the group; "
        "stop them before applying",
        "1 active member(s) in zkcoord (offset storage dual): they keep committing, so legacy offsets move on",
        "3 legacy ZooKeeper consumer(s) registered: they keep committing to ZooKeeper",
        "Kafka also has offsets for 2 partition(s) without a legacy offset; kept",
    )


def test_an_idle_group_has_no_notes():
    idle = GroupActivity(kafka_state="Empty", kafka_members=0, zkcoord_members=0, offset_storage="zookeeper")
    group = plan_group("g", [facts("1")], PLAIN, idle)
    assert not idle.active and group.notes == ()
    assert not GroupActivity().active


def test_plan_group_refuses_foreign_or_repeated_partitions():
    with pytest.raises(UsageError, match="facts of group 'h' given to the plan of group 'g'"):
        plan_group("g", [facts(group="h")])
    with pytest.raises(UsageError, match="group 'g' t-0 is given twice"):
        plan_group("g", [facts("1"), facts("2")])


def test_make_plan_totals_every_decision():
    g1 = plan_group("g1", [facts("42", group="g1", p=0), facts("42", 42, group="g1", p=1),
                           facts("120", group="g1", p=2)])
    g2 = plan_group("g2", [facts("5", group="g2", p=0), facts("42", 50, group="g2", p=1)], REWIND,
                    GroupActivity(kafka_members=1, kafka_state="Stable"))
    empty = plan_group("g0", [])
    plan = make_plan([g2, empty, g1], REWIND)
    assert [g.group for g in plan.groups] == ["g0", "g1", "g2"]
    assert [(r.facts.group, r.facts.partition) for r in plan.rows] == [
        ("g1", 0), ("g1", 1), ("g1", 2), ("g2", 0), ("g2", 1)]
    t = plan.totals
    assert (t.groups, t.partitions, t.to_write, t.flagged, t.active_groups) == (3, 5, 3, 3, 1)
    assert dict(t.by_decision) == {d: 0 for d in Decision} | {
        D.COPY: 1, D.EQUAL: 1, D.BEYOND_LOG_END_REFUSED: 1, D.CLAMPED_TO_LOG_START: 1, D.REWIND: 1}
    assert t.as_dict() == {"groups": 3, "partitions": 5, "to_write": 3, "flagged": 3, "active_groups": 1,
                           "by_decision": {d.value: dict(t.by_decision)[d] for d in Decision}}
    assert plan.options == REWIND


def test_make_plan_of_nothing_and_duplicates():
    t = make_plan([]).totals
    assert (t.groups, t.partitions, t.to_write, sum(t.by_decision.values())) == (0, 0, 0, 0)
    with pytest.raises(UsageError, match=r"a plan lists group\(s\) twice: \['g'\]"):
        make_plan([plan_group("g", []), plan_group("g", [])])


# -- dual commit -------------------------------------------------------------------------

@pytest.mark.parametrize("zk, kafka, expected", [
    (None, None, None), (42, None, 42), (None, 42, 42), (42, 40, 42), (40, 42, 42), (0, 0, 0), (7, 7, 7),
    (0, None, 0), (None, 0, 0), (MAX_OFFSET, 0, MAX_OFFSET),
])
def test_dual_fetch_is_the_max_of_both(zk, kafka, expected):
    assert dual_fetch(zk, kafka) == expected


@pytest.mark.parametrize("zk, kafka", [(-1, 3), (3, -2), ("3", 1), (True, 1), (1.5, None)])
def test_dual_fetch_refuses_non_offsets(zk, kafka):
    with pytest.raises(UsageError, match="must be a whole number"):
        dual_fetch(zk, kafka)


def test_docstring_examples_hold():
    result = doctest.testmod(migration, raise_on_error=False)
    assert result.attempted >= 8 and result.failed == 0
