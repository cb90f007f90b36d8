"""Which orphaned groups a daemon takes over, and when (zkcoord.core.placement):
exact outcomes for small cases, and properties over many group ids and live
sets (every orphan has exactly one taker among the live daemons)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from zkcoord.core.placement import choose_node, groups_to_take, takeover_due

GROUPS = [f"group-{i}" for i in range(300)]


def test_a_lone_daemon_takes_every_group_nobody_owns():
    assert groups_to_take(GROUPS, [7], 7) == GROUPS


def test_a_daemon_that_is_not_live_takes_nothing():
    assert groups_to_take(GROUPS, [1, 2], 3) == []
    assert groups_to_take(GROUPS, [], 3) == []


def test_each_daemon_takes_the_groups_lookups_send_it_in_the_order_given():
    live = [1, 2, 3]
    for node in live:
        assert groups_to_take(GROUPS, live, node) == [g for g in GROUPS if choose_node(g, live) == node]
    assert groups_to_take(list(reversed(GROUPS)), live, 2) == list(reversed(groups_to_take(GROUPS, live, 2)))


@given(st.sets(st.integers(min_value=0, max_value=2**31 - 2), min_size=1, max_size=6),
       st.lists(st.text(max_size=20), max_size=40, unique=True))
def test_every_orphan_has_exactly_one_taker_among_the_live_daemons(live, groups):
    takers = {node: set(groups_to_take(groups, live, node)) for node in live}
    assert set().union(*takers.values()) == set(groups)
    assert sum(len(t) for t in takers.values()) == len(groups)


@given(st.sets(st.integers(min_value=0, max_value=100), min_size=2, max_size=6), st.data())
def test_when_a_daemon_leaves_the_survivors_keep_their_placement_and_split_its_groups(live, data):
    gone = data.draw(st.sampled_from(sorted(live)))
    survivors = live - {gone}
    orphans = [g for g in GROUPS[:60] if choose_node(g, live) == gone]
    for node in survivors:
        taken = groups_to_take(orphans, survivors, node)
        assert all(choose_node(g, survivors) == node for g in taken)
        # a group placed on a survivor before the leave is placed on it still (rendezvous hashing)
        assert all(choose_node(g, survivors) == node for g in GROUPS[:60] if choose_node(g, live) == node)


def test_a_takeover_is_due_when_a_daemon_leaves():
    assert takeover_due({1, 2}, {1}, 1)
    assert takeover_due({1, 2, 3}, {1, 3}, 3)
    assert takeover_due({1, 2}, {1, 3}, 1)  # one left, one came: the one that left had groups


def test_a_takeover_is_due_when_this_daemon_is_live_again():
    assert takeover_due({2}, {1, 2}, 1)  # its session ended and it registered again: its groups are free
    assert takeover_due(set(), {1}, 1)


def test_no_takeover_when_daemons_only_join_or_this_one_starts_or_is_not_live():
    assert not takeover_due(None, {1, 2}, 1)  # starting: the groups nobody owns wait for their clients
    assert not takeover_due({1}, {1, 2}, 1)
    assert not takeover_due({1, 2}, {1, 2}, 1)
    assert not takeover_due({1, 2}, {2}, 1)  # this daemon is not live: it takes nothing
