"""The fault-run checker on hand-made logs: a clean run passes, and each kind
of violation is detected (a checker that cannot fail proves nothing)."""

from __future__ import annotations

import json

from tests.faults.checker import (
    Assignment,
    Commit,
    GenerationSeen,
    OffsetSample,
    Violation,
    check_all_consumed,
    check_commits_durable,
    check_commits_monotonic,
    check_exclusive_ownership,
    check_no_stale_commit,
    check_offsets_monotonic,
    check_run,
    parse_daemon_log,
    read_jsonl,
    run_log,
)

HISTORY = [GenerationSeen(1, frozenset({"a"}), "CompletingRebalance", 10.0),
           GenerationSeen(1, frozenset({"a"}), "Stable", 10.1),
           GenerationSeen(2, frozenset({"a", "b"}), "CompletingRebalance", 20.0),
           GenerationSeen(2, frozenset({"a", "b"}), "Stable", 20.2)]


def commit(member="a", gen=1, offsets=None, acked=True, t=15.0, gen_high=None, proc="c0"):
    return Commit(proc, member, gen, gen if gen_high is None else gen_high, offsets or {0: 5}, acked, t, t + 0.1)


def clean_events():
    t = 10.5
    return [
        {"ev": "acked", "recs": [[0, 0], [0, 1], [1, 0]], "t": 9.0},
        {"ev": "assigned", "proc": "c0", "member": "a", "gen": 1, "partitions": [0, 1], "t": t},
        {"ev": "records", "proc": "c0", "member": "a", "gen": 1, "recs": [[0, 0], [0, 1], [1, 0]], "t": t},
        {"ev": "commit", "proc": "c0", "member": "a", "gen_low": 1, "gen_high": 1, "offsets": {"0": 2, "1": 1},
         "ok": True, "t_sent": 11.0, "t_done": 11.1},
        {"ev": "zk_offsets", "t": 12.0, "offsets": {"0": 2, "1": 1}},
        {"ev": "assigned", "proc": "c0", "member": "a", "gen": 2, "partitions": [0], "t": 20.3},
        {"ev": "assigned", "proc": "c1", "member": "b", "gen": 2, "partitions": [1], "t": 20.3},
        {"ev": "commit", "proc": "c1", "member": "b", "gen_low": 2, "gen_high": 2, "offsets": {"1": 1},
         "ok": True, "t_sent": 21.0, "t_done": 21.1},
        {"ev": "commit", "proc": "c0", "member": "a", "gen_low": 1, "gen_high": 1, "offsets": {"0": 1},
         "ok": False, "t_sent": 21.0, "t_done": 21.1},  # stale, refused: fine
        {"ev": "state", "gen": 2, "state": "Stable", "members": ["a", "b"], "t": 20.5},
        {"ev": "final_offsets", "t": 30.0, "offsets": {"0": 2, "1": 1}},
    ]


def test_a_clean_run_has_no_violation():
    log = run_log(clean_events(), HISTORY)
    assert check_run(log) == []
    assert log.produced == {(0, 0), (0, 1), (1, 0)} and len(log.commits) == 3


def kinds(violations: list[Violation]) -> list[str]:
    return [v.kind for v in violations]


def test_two_owners_of_a_partition_in_one_generation():
    found = check_exclusive_ownership([Assignment("c0", "a", 2, (0, 1), 1.0), Assignment("c1", "b", 2, (1,), 1.0)])
    assert kinds(found) == ["double-owner"] and "partition 1" in found[0].detail


def test_the_same_partition_in_two_generations_is_fine():
    assert check_exclusive_ownership([Assignment("c0", "a", 1, (0,), 1.0), Assignment("c1", "b", 2, (0,), 2.0)]) == []


def test_an_assignment_to_a_member_the_generation_does_not_have():
    found = check_exclusive_ownership([Assignment("c2", "z", 2, (3,), 21.0)], HISTORY)
    assert kinds(found) == ["foreign-member"]


def test_a_commit_sent_after_a_newer_generation_was_stored_and_acked():
    found = check_no_stale_commit([commit(gen=1, t=25.0)], HISTORY)
    assert kinds(found) == ["stale-commit"] and "generation 2" in found[0].detail


def test_the_same_stale_commit_refused_is_fine():
    assert check_no_stale_commit([commit(gen=1, t=25.0, acked=False)], HISTORY) == []


def test_a_commit_sent_before_the_newer_generation_was_stored_is_not_flagged():
    # sent at 19.9, generation 2 stored by 20.0: the server may have taken it first
    assert check_no_stale_commit([commit(gen=1, t=19.9)], HISTORY) == []


def test_an_ambiguous_generation_uses_the_later_bound():
    assert check_no_stale_commit([commit(gen=1, gen_high=2, t=25.0)], HISTORY) == []


def test_an_acked_commit_by_a_non_member_of_its_generation():
    found = check_no_stale_commit([commit(member="x", gen=2, t=25.0)], HISTORY)
    assert kinds(found) == ["stale-commit"] and "its members" in found[0].detail


def test_a_sampled_offset_going_back():
    found = check_offsets_monotonic([OffsetSample(1.0, {0: 5, 1: 3}), OffsetSample(2.0, {0: 4, 1: 3})])
    assert kinds(found) == ["rewind"] and "from 5" in found[0].detail


def test_the_final_offset_below_a_sample_or_gone():
    assert kinds(check_offsets_monotonic([OffsetSample(1.0, {0: 5})], {0: 2})) == ["rewind"]
    assert kinds(check_offsets_monotonic([OffsetSample(1.0, {0: 5, 1: 1})], {0: 5})) == ["rewind"]


def test_acked_commits_of_one_generation_going_back():
    found = check_commits_monotonic([commit(offsets={0: 9}, t=1.0), commit(offsets={0: 7}, t=2.0)])
    assert kinds(found) == ["commit-rewind"]
    # across generations (a new owner resuming from what is stored) it is not this check's business
    assert check_commits_monotonic([commit(offsets={0: 9}, t=1.0), commit(gen=2, offsets={0: 7}, t=2.0)]) == []


def test_an_acked_commit_above_the_final_offset_is_lost():
    found = check_commits_durable([commit(offsets={0: 9, 1: 2})], {0: 8, 1: 2})
    assert kinds(found) == ["commit-lost"] and "partition 0" in found[0].detail
    assert kinds(check_commits_durable([commit(offsets={3: 1})], {})) == ["commit-lost"]
    assert check_commits_durable([commit(offsets={0: 9}, acked=False)], {0: 8}) == []


def test_an_acknowledged_record_never_consumed():
    found = check_all_consumed({(0, 0), (0, 1), (2, 7)}, {(0, 0), (0, 1)})
    assert kinds(found) == ["not-consumed"] and "(2, 7)" in found[0].detail


def test_each_violation_reaches_check_run():
    events = clean_events()
    events.append({"ev": "acked", "recs": [[1, 1]], "t": 29.0})  # never consumed
    events.append({"ev": "zk_offsets", "t": 13.0, "offsets": {"0": 1}})  # went back from 2
    log = run_log(events, HISTORY)
    assert sorted(kinds(check_run(log))) == ["not-consumed", "rewind"]


def test_torn_lines_are_counted_not_fatal():
    text = json.dumps({"ev": "acked", "recs": [[0, 0]]}) + "\n" + '{"ev": "reco'
    events, torn = read_jsonl(text)
    assert events == [{"ev": "acked", "recs": [[0, 0]]}] and torn == 1


def test_daemon_log_lines_give_the_generation_history():
    text = "\n".join([
        "2026-11-22 05:30:01,250 INFO zkcoord.server.manager: group g1: CompletingRebalance, generation 3, "
        "leader m-1, members [m-1, m-2]",
        "2026-11-22 05:30:01,300 INFO zkcoord.server.manager: group other: Stable, generation 9, leader x, "
        "members [x]",
        "2026-11-22 05:30:02,000 INFO zkcoord.server.manager: group g1: Empty, generation 3, leader -, members []",
        "2026-11-22 05:30:02,100 INFO zkcoord.server.group_runtime: group g1 loaded: Stable generation 3, 2 members",
    ])
    seen = parse_daemon_log(text, "g1")
    assert [(g.generation, g.state, sorted(g.members)) for g in seen] == \
        [(3, "CompletingRebalance", ["m-1", "m-2"]), (3, "Empty", [])]
    assert round(seen[1].t - seen[0].t, 3) == 0.75
