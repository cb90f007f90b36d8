"""A KIP-848 member record with its runs of partitions folded
(zkcoord.core.consumer.record.compact_member_record): what the store writes
when a member's record would be over --max-state-bytes (the first member of
a group over 100,000 partitions holds them all). Read back, it is the same
member, the same partitions in the same order, at the same epochs; a folded
entry that is not a run is named."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from zkcoord.core.consumer.record import (
    MAX_RUN, _member_from, compact_member_record, from_records, member_problem, record_problem,
)

T1, T2 = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg"


def member(a: dict, tg: dict, pr: dict | None = None) -> dict:
    rec = {"v": 1, "id": "m-1", "e": 9, "pe": 8, "s": 0, "rt": 300000, "c": "c", "h": "/h", "tn": ["orders"],
           "a": a, "tg": tg, "te": 9}
    if pr is not None:
        rec["pr"] = pr
    return rec


def test_a_member_holding_100000_partitions_folds_to_a_few_bytes():
    a = {f"T{i:03d}{'A' * 18}": [[p, 5] for p in range(1000)] for i in range(100)}
    tg = {t: list(range(1000)) for t in a}
    plain = member(a, tg)
    folded = compact_member_record(plain)
    assert len(json.dumps(plain)) > 1_000_000 > 10_000 > len(json.dumps(folded))
    assert member_problem(folded) is None
    assert _member_from(folded) == _member_from(plain)


def test_folding_keeps_order_epochs_and_odd_partitions():
    plain = member({T1: [[4, 2], [5, 2], [6, 3], [7, 3], [0, 3], [9, 3], [10, 3]]},
                   {T1: [9, 10, 11, 3, 0, 1, 99998, 99999], T2: [5]}, pr={T2: [[1, 1], [2, 1]]})
    folded = compact_member_record(plain)
    assert folded["a"] == {T1: [[4, 2, 2], [6, 3, 2], [0, 3], [9, 3, 2]]}
    # a run of two is folded only where that is shorter: "0, 1" stays, "99998, 99999" is [99998, 2]
    assert folded["tg"] == {T1: [[9, 3], 3, 0, 1, [99998, 2]], T2: [5]}
    assert folded["pr"] == {T2: [[1, 1, 2]]}
    member_, target, epoch = _member_from(folded)
    assert (member_, target, epoch) == _member_from(plain)
    assert list(target[T1]) == [9, 10, 11, 3, 0, 1, 99998, 99999]
    assert list(member_.assigned[T1].items()) == [(4, 2), (5, 2), (6, 3), (7, 3), (0, 3), (9, 3), (10, 3)]


_pairs = st.lists(st.tuples(st.integers(0, 60), st.integers(-3, 3)), max_size=80).map(
    lambda ps: [list(p) for p in dict(ps).items()])  # one epoch per partition, as the model holds them
_parts = st.lists(st.integers(0, 60), unique=True, max_size=80)


@settings(max_examples=200, deadline=None)
@given(a=st.dictionaries(st.sampled_from([T1, T2]), _pairs), tg=st.dictionaries(st.sampled_from([T1, T2]), _parts),
       pr=st.dictionaries(st.sampled_from([T1, T2]), _pairs))
@example(a={}, tg={T1: [0, 1, 3, 4]}, pr={})  # found once: two runs of two were written longer than the plain list
def test_folding_round_trips(a, tg, pr):
    plain = member(a, tg, pr)
    folded = compact_member_record(plain)
    assert member_problem(folded) is None
    assert _member_from(folded) == _member_from(plain)
    assert len(json.dumps(folded)) <= len(json.dumps(plain)) + 2
    group = {"v": 1, "t": "consumer", "ge": 9, "ae": 9, "members": [folded]}
    assert record_problem(group) is None
    assert from_records("g", group) == from_records("g", dict(group, members=[plain]))


@pytest.mark.parametrize("a, tg, problem", [
    ({T1: [[0, 3, 1]]}, {}, "not a partition and epoch"),  # a run of one is written [p, e]
    ({T1: [[0, 3, 0]]}, {}, "not a partition and epoch"),
    ({T1: [[2**31 - 2, 3, 5]]}, {}, "not a partition and epoch"),  # past int32
    ({T1: [[0, 3, MAX_RUN + 1]]}, {}, "not a partition and epoch"),
    ({T1: [[0, 3, 2, 9]]}, {}, "not a partition and epoch"),
    ({}, {T1: [[0, 1]]}, "not a partition"),
    ({}, {T1: [[0, "5"]]}, "not a partition"),
    ({}, {T1: [[5]]}, "not a partition"),
])
def test_folded_entries_that_are_no_run_are_named(a, tg, problem):
    found = member_problem(member(a, tg))
    assert found is not None and problem in found
