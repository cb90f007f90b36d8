"""tests/support/ownership.py: two owners of one partition found from the
members' own callbacks, for eager, incremental and lost hand-overs; the time
a partition had no owner, or two, over a window."""

from __future__ import annotations

import pytest

from tests.support.ownership import (AssignmentChange, Coverage, Ownership, Overlap, coverage, current_owners,
                                     double_owners, ownerships)


def change(member, kind, ts, *partitions):
    return AssignmentChange(member, kind, ts, frozenset(("t", p) for p in partitions))


def test_incremental_hand_over_in_the_same_millisecond_is_no_overlap():
    changes = [change("a", "assigned", 10, 0, 1), change("b", "assigned", 15),
               change("a", "revoked", 20, 1), change("b", "assigned", 20, 1)]
    assert double_owners(changes) == []
    assert current_owners(changes) == {("t", 0): {"a"}, ("t", 1): {"b"}}


def test_assignment_before_the_old_owner_revoked_is_an_overlap():
    changes = [change("a", "assigned", 10, 0, 1), change("b", "assigned", 19, 1), change("a", "revoked", 20, 1)]
    assert double_owners(changes) == [
        Overlap(("t", 1), Ownership("a", ("t", 1), 10, 20, "revoked"), Ownership("b", ("t", 1), 19, None, None))]
    assert str(double_owners(changes)[0]) == "t-1 held by a 10..20 and b 19..end"


def test_eager_rebalance_revokes_everything_then_assigns_the_whole_assignment():
    changes = [change("a", "assigned", 10, 0, 1), change("a", "revoked", 30, 0, 1), change("a", "assigned", 32, 0),
               change("b", "assigned", 31, 1)]
    assert double_owners(changes) == []
    assert ownerships(changes) == [Ownership("a", ("t", 0), 10, 30, "revoked"),
                                   Ownership("a", ("t", 1), 10, 30, "revoked"),
                                   Ownership("a", ("t", 0), 32, None, None),
                                   Ownership("b", ("t", 1), 31, None, None)]


def test_a_lost_partition_may_have_a_new_owner_before_the_callback():
    changes = [change("a", "assigned", 10, 0), change("b", "assigned", 40, 0), change("a", "lost", 50, 0)]
    assert double_owners(changes) == []
    assert [o.partition for o in double_owners(changes, include_lost=True)] == [("t", 0)]


def test_a_partition_still_held_by_two_members_at_the_end():
    changes = [change("a", "assigned", 10, 0), change("b", "assigned", 12, 0)]
    assert len(double_owners(changes)) == 1
    assert current_owners(changes) == {("t", 0): {"a", "b"}}


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="kind 'moved'"):
        change("a", "moved", 1, 0)


def test_coverage_counts_gaps_and_shared_time_within_the_window():
    changes = [change("a", "assigned", 10, 0), change("a", "revoked", 20, 0), change("b", "assigned", 25, 0),
               change("c", "assigned", 30, 0), change("c", "revoked", 40, 0)]
    assert coverage(changes, [("t", 0), ("t", 1)], 0, 50) == {
        ("t", 0): Coverage(unowned=15, longest_gap=10, shared=10),  # 0-10, 20-25 free; 30-40 two owners
        ("t", 1): Coverage(unowned=50, longest_gap=50, shared=0)}
    assert coverage(changes, [("t", 0)], 15, 35) == {("t", 0): Coverage(unowned=5, longest_gap=5, shared=5)}


def test_coverage_of_a_hand_over_in_the_same_instant_has_no_gap_and_no_overlap():
    changes = [change("a", "assigned", 0, 0), change("a", "revoked", 20, 0), change("b", "assigned", 20, 0)]
    assert coverage(changes, [("t", 0)], 0, 30) == {("t", 0): Coverage(0, 0, 0)}
