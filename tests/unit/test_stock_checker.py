"""The stock clients' checker (tests/faults/stock_checker.py) on hand-made
event streams in VerifiableConsumer's shape: a clean run passes, and every
verdict fails on a stream made to break it (a checker that cannot fail
proves nothing)."""

from __future__ import annotations

import json

import pytest

from tests.faults.stock_checker import MemberRun, check_stock, load_dir

T = "t"


def _parts(parts):
    return [{"topic": T, "partition": p} for p in parts]


def assigned(ts, *parts):
    return {"name": "partitions_assigned", "timestamp": ts, "partitions": _parts(parts)}


def revoked(ts, *parts):
    return {"name": "partitions_revoked", "timestamp": ts, "partitions": _parts(parts)}


def lost(ts, *parts):
    return {"name": "partitions_lost", "timestamp": ts, "partitions": _parts(parts)}


def consumed(ts, partition, low, high):
    return {"name": "records_consumed", "timestamp": ts, "count": high - low + 1,
            "partitions": [{"topic": T, "partition": partition, "count": high - low + 1, "minOffset": low,
                            "maxOffset": high}]}


def committed(ts, partition, offset, success=True):
    event = {"name": "offsets_committed", "timestamp": ts, "success": success,
             "offsets": [{"topic": T, "partition": partition, "offset": offset}]}
    if not success:
        event["error"] = "The coordinator is not aware of this member."
    return event


def produced(*ranges):
    """producer_send_success events: (partition, first, last) ranges."""
    return [{"name": "producer_send_success", "timestamp": 1, "topic": T, "partition": p, "offset": o,
             "key": None, "value": str(o)} for p, first, last in ranges for o in range(first, last + 1)]


ACKED = produced((0, 0, 9), (1, 0, 9))
FINAL = {(T, 0): 10, (T, 1): 10}


def clean_runs(**overrides):
    """a holds 0 and 1, hands 1 over to b (cooperatively) halfway, both leave cleanly."""
    a = [assigned(100, 0, 1), consumed(110, 0, 0, 4), committed(111, 0, 5), consumed(112, 1, 0, 4),
         committed(113, 1, 5), revoked(120, 1), consumed(140, 0, 5, 9), committed(141, 0, 10), revoked(190, 0)]
    b = [assigned(121, 1), consumed(130, 1, 5, 9), committed(131, 1, 10), revoked(191, 1)]
    events = {"a": a, "b": b, **overrides}
    return [MemberRun("a#0", events["a"], 200, "clean"), MemberRun("b#0", events["b"], 201, "clean")]


def kinds(verdict):
    return sorted({v.kind for v in verdict.violations})


def test_a_clean_handover_passes():
    verdict = check_stock(clean_runs(), ACKED, final_committed=FINAL)
    assert verdict.violations == []
    assert verdict.summary() == {"acked": 20, "consumed": 20, "commits": 4, "members": 2, "duplicates": {},
                                 "lost_overlaps": 0, "violations": 0}


def test_an_eager_rebalance_replays_alike():
    """Eager classic: everything revoked, then the whole new assignment."""
    a = [revoked(99), assigned(100, 0, 1), consumed(110, 0, 0, 4), committed(111, 0, 5), consumed(112, 1, 0, 4),
         committed(113, 1, 5), revoked(120, 0, 1), assigned(125, 0), consumed(140, 0, 5, 9), committed(141, 0, 10)]
    b = [revoked(98), assigned(125, 1), consumed(130, 1, 5, 9), committed(131, 1, 10)]
    verdict = check_stock([MemberRun("a#0", a, 200, "clean"), MemberRun("b#0", b, 201, "clean")], ACKED,
                          final_committed=FINAL)
    assert verdict.violations == []


def test_a_record_nobody_consumed():
    b = [assigned(121, 1), consumed(130, 1, 5, 8), committed(131, 1, 9), revoked(191, 1)]
    verdict = check_stock(clean_runs(b=b), ACKED)
    assert kinds(verdict) == ["not-consumed"]
    assert "t-1: acknowledged but never consumed: 9" in verdict.violations[0].detail


def test_a_commit_going_back():
    b = [assigned(121, 1), consumed(130, 1, 5, 9), committed(131, 1, 10), committed(132, 1, 4), revoked(191, 1)]
    verdict = check_stock(clean_runs(b=b), ACKED)
    assert kinds(verdict) == ["commit-rewind"]
    assert "b#0 committed 4 at 132 after b#0 committed 10 at 131" in verdict.violations[0].detail


def test_commits_in_one_millisecond_are_not_ordered():
    b = [assigned(121, 1), consumed(130, 1, 5, 9), committed(131, 1, 10), revoked(191, 1)]
    a = clean_runs()[0].events[:-1] + (committed(131, 0, 10), revoked(190, 0))
    verdict = check_stock([MemberRun("a#0", a, 200, "clean"), MemberRun("b#0", b, 201, "clean")], ACKED)
    assert "commit-rewind" not in kinds(verdict)
    # and a commit of the same partition below another of the same millisecond is not one either
    b2 = [assigned(121, 1), consumed(130, 1, 5, 9), committed(131, 1, 10), committed(131, 1, 7), revoked(191, 1)]
    assert "commit-rewind" not in kinds(check_stock(clean_runs(b=b2), ACKED))


def test_an_acknowledged_commit_lost():
    verdict = check_stock(clean_runs(), ACKED, final_committed={(T, 0): 10, (T, 1): 5})
    assert kinds(verdict) == ["commit-lost"]
    assert "t-1: b#0's commit of 10" in verdict.violations[0].detail


def test_two_live_owners_at_once():
    b = [assigned(115, 1), consumed(130, 1, 5, 9), committed(131, 1, 10), revoked(191, 1)]
    verdict = check_stock(clean_runs(b=b), ACKED)
    assert kinds(verdict) == ["double-owner"]
    assert "t-1 held by a#0 100..120 and b#0 115..191" == verdict.violations[0].detail


def test_a_handover_in_one_millisecond_is_not_a_double_owner():
    b = [assigned(120, 1), consumed(130, 1, 5, 9), committed(131, 1, 10), revoked(191, 1)]
    assert check_stock(clean_runs(b=b), ACKED).violations == []


def hard_kill_runs(b_assigned_at=160, a_end="killed"):
    """a consumes both partitions, commits only partition 0, and is killed at
    150; b takes both over and consumes from the committed offsets."""
    a = [assigned(100, 0, 1), consumed(110, 0, 0, 4), committed(111, 0, 5), consumed(112, 1, 0, 4)]
    b = [assigned(b_assigned_at, 0, 1), consumed(170, 0, 5, 9), committed(171, 0, 10), consumed(172, 1, 0, 9),
         committed(173, 1, 10), revoked(190, 0, 1)]
    return [MemberRun("a#0", a, 150, a_end), MemberRun("b#0", b, 200, "clean")]


def test_duplicates_after_a_hard_kill_are_counted_not_violations():
    verdict = check_stock(hard_kill_runs(), ACKED, final_committed=FINAL)
    assert verdict.violations == []
    assert verdict.duplicates["hard-kill"] == 5 and verdict.summary()["duplicates"] == {"hard-kill": 5}


def test_a_dead_member_held_its_partitions_until_it_died():
    """Ownership ends at the process's death: b assigned before a was dead."""
    verdict = check_stock(hard_kill_runs(b_assigned_at=140), ACKED)
    assert kinds(verdict) == ["double-owner"]
    assert [v.detail for v in verdict.violations] == ["t-0 held by a#0 100..150 and b#0 140..190",
                                                      "t-1 held by a#0 100..150 and b#0 140..190"]


def test_duplicates_after_a_clean_stop_are_violations():
    verdict = check_stock(hard_kill_runs(a_end="clean"), ACKED)
    assert kinds(verdict) == ["duplicate"]
    assert "t-1: 5 record(s) consumed again (unexplained): 0, 1, 2, 3, 4; by [('a#0', 'b#0')]" == \
        verdict.violations[0].detail
    assert verdict.duplicates["unexplained"] == 5


def test_duplicates_not_allowed_even_after_a_kill():
    verdict = check_stock(hard_kill_runs(), ACKED, allowed_duplicates=())
    assert kinds(verdict) == ["duplicate"] and "(hard-kill)" in verdict.violations[0].detail


def test_duplicates_after_a_failed_commit():
    """a's commit of partition 1 fails, a gives it up, b consumes it from 0."""
    a = [assigned(100, 0, 1), consumed(110, 0, 0, 9), committed(111, 0, 10), consumed(112, 1, 0, 4),
         committed(113, 1, 5, success=False), revoked(120, 1)]
    b = [assigned(121, 1), consumed(130, 1, 0, 9), committed(131, 1, 10)]
    runs = [MemberRun("a#0", a, 200, "clean"), MemberRun("b#0", b, 201, "clean")]
    verdict = check_stock(runs, ACKED, final_committed=FINAL)
    assert kinds(verdict) == ["duplicate"] and verdict.duplicates["failed-commit"] == 5
    assert check_stock(runs, ACKED, allowed_duplicates=("failed-commit",)).violations == []


def test_duplicates_after_lost_partitions_and_their_overlap():
    """A fenced librdkafka member's on_lost runs late: the overlap is counted
    apart, the re-consumption attributed to the loss."""
    a = [assigned(100, 0, 1), consumed(110, 0, 0, 9), committed(111, 0, 10), consumed(112, 1, 0, 4), lost(125, 1)]
    b = [assigned(121, 1), consumed(130, 1, 0, 9), committed(131, 1, 10)]
    runs = [MemberRun("a#0", a, 200, "clean"), MemberRun("b#0", b, 201, "clean")]
    verdict = check_stock(runs, ACKED)
    assert kinds(verdict) == ["duplicate"] and verdict.duplicates["lost"] == 5
    assert len(verdict.lost_overlaps) == 1
    assert check_stock(runs, ACKED, allowed_duplicates=("lost",)).violations == []


def test_consumed_below_a_commit():
    b = [assigned(121, 1), consumed(130, 1, 3, 9), committed(131, 1, 10), revoked(191, 1)]
    verdict = check_stock(clean_runs(b=b), ACKED)
    assert kinds(verdict) == ["consumed-behind-commit", "duplicate"]
    assert "b#0 consumed 3..9 at 130, below a#0's commit of 5 at 113" in \
        next(v.detail for v in verdict.violations if v.kind == "consumed-behind-commit")


def test_consumed_a_partition_not_held():
    a = clean_runs()[0].events + (consumed(195, 1, 10, 10),)
    verdict = check_stock([MemberRun("a#0", a, 200, "clean"), clean_runs()[1]], ACKED)
    assert kinds(verdict) == ["consumed-unassigned"]


def test_committed_a_partition_not_held():
    a = clean_runs()[0].events[:-1] + (committed(150, 1, 10), revoked(190, 0))
    verdict = check_stock([MemberRun("a#0", a, 200, "clean"), clean_runs()[1]], ACKED)
    assert kinds(verdict) == ["commit-unassigned"]


def test_committed_past_what_was_consumed():
    a = [assigned(100, 0, 1), consumed(110, 0, 0, 4), committed(111, 0, 7), consumed(112, 1, 0, 4),
         committed(113, 1, 5), revoked(120, 1), consumed(140, 0, 5, 9), committed(141, 0, 10), revoked(190, 0)]
    verdict = check_stock(clean_runs(a=a), ACKED)
    assert kinds(verdict) == ["commit-ahead", "consumed-behind-commit"]


def test_a_position_jump_within_one_holding():
    a = [assigned(100, 0, 1), consumed(110, 0, 0, 4), committed(111, 0, 5), consumed(112, 1, 0, 4),
         committed(113, 1, 5), revoked(120, 1), consumed(140, 0, 6, 9), committed(141, 0, 10), revoked(190, 0)]
    verdict = check_stock(clean_runs(a=a), ACKED)
    assert kinds(verdict) == ["not-consumed", "position-jump"]


def test_a_failed_commit_counts_for_nothing():
    """An unsuccessful commit neither rewinds nor must be kept."""
    b = [assigned(121, 1), consumed(130, 1, 5, 9), committed(131, 1, 10), committed(132, 1, 2, success=False),
         revoked(191, 1)]
    assert check_stock(clean_runs(b=b), ACKED, final_committed=FINAL).violations == []


def test_runs_are_named_once_and_ends_are_valid():
    with pytest.raises(ValueError, match="share a member name"):
        check_stock([MemberRun("a#0", []), MemberRun("a#0", [])], [])
    with pytest.raises(ValueError, match="end 'gone'"):
        MemberRun("a#0", [], 5, "gone")
    with pytest.raises(ValueError, match="go together"):
        MemberRun("a#0", [], 5, None)
    with pytest.raises(ValueError, match="causes are"):
        check_stock([], [], allowed_duplicates=("hard_kill",))


def test_load_dir_reads_what_the_clients_wrote(tmp_path):
    runs = hard_kill_runs()
    lines = []
    for run in runs:
        name = run.member.replace("#", "-") + ".jsonl"
        (tmp_path / name).write_text("a JVM warning\n" + "".join(json.dumps(e) + "\n" for e in run.events))
        lines.append({"member": run.member, "kind": "consumer", "file": name, "ended_ms": None, "end": None})
        lines.append({"member": run.member, "kind": "consumer", "file": name, "ended_ms": run.ended_ms,
                      "end": run.end, "client": "java"})
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ACKED))
    lines.append({"member": "producer#0", "kind": "producer", "file": "p.jsonl", "ended_ms": 300, "end": "clean"})
    (tmp_path / "members.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    loaded, producer_events = load_dir(tmp_path)
    assert [(r.member, r.events, r.ended_ms, r.end) for r in loaded] == \
        [(r.member, r.events, r.ended_ms, r.end) for r in runs]
    assert check_stock(loaded, producer_events).duplicates["hard-kill"] == 5


def test_a_kill_after_the_consumption_again_explains_nothing():
    """b consumed a's records while a still lived: a later kill of a is no excuse."""
    a = [assigned(100, 0, 1), consumed(110, 0, 0, 4), committed(111, 0, 5), consumed(112, 1, 0, 4)]
    b = [assigned(160, 0, 1), consumed(170, 0, 5, 9), committed(171, 0, 10), consumed(172, 1, 0, 9),
         committed(173, 1, 10), revoked(190, 0, 1)]
    verdict = check_stock([MemberRun("a#0", a, 180, "killed"), MemberRun("b#0", b, 200, "clean")], ACKED)
    assert kinds(verdict) == ["double-owner", "duplicate"]
    assert verdict.duplicates == {"hard-kill": 0, "failed-commit": 0, "lost": 0, "unexplained": 5}


def test_a_batch_of_several_partitions():
    """One records_consumed event with a summary per partition."""
    batch = {"name": "records_consumed", "timestamp": 110, "count": 20, "partitions": [
        {"topic": T, "partition": 0, "count": 10, "minOffset": 0, "maxOffset": 9},
        {"topic": T, "partition": 1, "count": 10, "minOffset": 0, "maxOffset": 9}]}
    commit = {"name": "offsets_committed", "timestamp": 111, "success": True,
              "offsets": [{"topic": T, "partition": 0, "offset": 10}, {"topic": T, "partition": 1, "offset": 10}]}
    run = MemberRun("a#0", [assigned(100, 0, 1), batch, commit, revoked(120, 0, 1)], 130, "clean")
    verdict = check_stock([run], ACKED, final_committed=FINAL)
    assert verdict.violations == [] and verdict.consumed == 20 and verdict.commits == 2
    per_offset_error = {**commit, "offsets": [{"topic": T, "partition": 0, "offset": 10},
                                              {"topic": T, "partition": 1, "offset": 10, "error": "OFFSET_METADATA"}]}
    run = MemberRun("a#0", [assigned(100, 0, 1), batch, per_offset_error, revoked(120, 0, 1)], 130, "clean")
    verdict = check_stock([run], ACKED, final_committed=FINAL)
    assert verdict.commits == 1 and verdict.violations == []


def test_a_commit_refused_and_a_loss_learnt_after_the_next_owner_consumed_again():
    """A librdkafka member fenced while its coordinator moved: its commit is
    answered UNKNOWN_MEMBER_ID and its partition lost only after the next
    owner consumed the records again (seed 4125111952 of the stock fault run)."""
    a = [assigned(100, 0, 1), consumed(110, 0, 0, 9), committed(111, 0, 10), consumed(112, 1, 0, 4),
         committed(150, 1, 5, success=False), lost(150, 1)]
    b = [assigned(121, 1), consumed(130, 1, 0, 9), committed(131, 1, 10)]
    runs = [MemberRun("a#0", a, 200, "clean"), MemberRun("b#0", b, 201, "clean")]
    verdict = check_stock(runs, ACKED, allowed_duplicates=("failed-commit", "lost"))
    assert verdict.violations == [] and verdict.duplicates["failed-commit"] == 5 and len(verdict.lost_overlaps) == 1
    a_lost_only = a[:-2] + [lost(150, 1)]
    verdict = check_stock([MemberRun("a#0", a_lost_only, 200, "clean"), runs[1]], ACKED, allowed_duplicates=("lost",))
    assert verdict.violations == [] and verdict.duplicates["lost"] == 5
    # a refusal printed before the member consumed the records explains nothing
    a_early = [assigned(100, 0, 1), consumed(110, 0, 0, 9), committed(111, 0, 10), committed(111, 1, 5, False),
               consumed(112, 1, 0, 4)]
    verdict = check_stock([MemberRun("a#0", a_early, 120, "clean"), runs[1]], ACKED,
                          allowed_duplicates=("failed-commit", "lost"))
    assert verdict.duplicates["unexplained"] == 5
