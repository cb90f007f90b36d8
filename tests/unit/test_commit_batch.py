"""The batching rules of offset commits (zkcoord.zk.commit_batch), without
ZooKeeper: which commits share a multi, and what a refused or lost multi
does to each group's commits. A multi lands whole or not at all, so a
deposed owner's fence check must fail its own group's commits only."""

from __future__ import annotations

import asyncio

import pytest
from kazoo.exceptions import BadVersionError, NoAuthError, NodeExistsError, NoNodeError, RuntimeInconsistency

from zkcoord.errors import NotOwnerError, ServiceUnavailableError, ZkcoordError
from zkcoord.zk import paths
from zkcoord.zk.commit_batch import MAX_ATTEMPTS, CommitQueue, QueuedCommit, Targets
from zkcoord.zk.jute import OpCodec
from zkcoord.zk.ownership import Fence


class World:
    """A queue with its targets, the fences of three groups, and the deposed reports."""

    def __init__(self, max_ops: int = 1000, max_bytes: int = 900_000) -> None:
        self.codec = OpCodec()
        self.targets = Targets(paths.OffsetPaths(), self.codec)
        self.deposed: list[tuple[str, str]] = []
        self.queue = CommitQueue(self.codec, max_ops=max_ops, max_bytes=max_bytes,
                                 describe=lambda exc, what: ZkcoordError(f"cannot {what}: {exc!r}"),
                                 on_deposed=lambda fence, why: self.deposed.append((fence.group, why)))
        self.fences = {g: Fence(g, f"/coordinators/{g}/owner/x__lock__000000000{i}") for i, g in enumerate("abc")}

    def commit(self, group: str, partition: int, offset: int, deadline: float = 100.0) -> QueuedCommit:
        target = self.targets(group, "t", partition)
        commit = QueuedCommit(group, [(target, str(offset).encode(), None)], self.fences[group],
                              asyncio.get_running_loop().create_future(), 100, 1, deadline)
        self.queue.put(commit)
        return commit

    def known(self, *groups: str) -> None:
        """Every offset directory of ``groups`` exists with partitions 0-9 (as the store learns it)."""
        for group in groups:
            self.queue.children[paths.OffsetPaths().topic_dir(group, "t")] = {str(p) for p in range(10)}
            self.queue.children[paths.OffsetPaths().metadata_topic_dir(group, "t")] = None


def _outcome(commit: QueuedCommit):
    if not commit.future.done():
        return "waiting"
    return commit.future.exception() or "landed"


def run(scenario) -> None:
    asyncio.run(scenario())


def test_a_deposed_owners_fence_fails_only_its_groups_commits_and_the_others_land_next():
    async def scenario():
        w = World()
        w.known("a", "b", "c")
        a1, b1, a2, c1, b2 = (w.commit("a", 0, 1), w.commit("b", 0, 1), w.commit("a", 1, 2), w.commit("c", 0, 1),
                              w.commit("b", 0, 2))
        batch = w.queue.take()
        assert batch.commits == [a1, b1, a2, c1, b2]  # one multi for every group
        ops = w.queue.build(batch)
        # a's fence, a1, b's fence, b1, a2, c's fence, c1, b2: each fence once, before its group's first op
        assert [type(x).__name__ if isinstance(x, Fence) else x.group for x in batch.blame] == \
            ["Fence", "a", "Fence", "b", "a", "Fence", "c", "b"]
        assert len(ops) == 8
        w.queue.refused(batch, 2, BadVersionError())  # b's check: b's owner was deposed
        assert isinstance(_outcome(b1), NotOwnerError) and isinstance(_outcome(b2), NotOwnerError)
        assert b1.future.exception().group == "b"
        assert [_outcome(c) for c in (a1, a2, c1)] == ["waiting"] * 3
        assert w.deposed == [("b", "an offset commit of group 'b' was refused: its contender "
                                   f"{w.fences['b'].path} is gone")]
        retry = w.queue.take()
        assert retry.commits == [a1, a2, c1]  # the survivors, in their order, without b
        assert len(w.queue.build(retry)) == 5  # a's check, a1, a2, c's check, c1
        assert w.queue.applied(retry) == 3
        assert [_outcome(c) for c in (a1, a2, c1)] == ["landed"] * 3
        late = w.commit("b", 3, 9)  # refused before any write, without a round trip
        assert w.queue.take().commits == []
        assert isinstance(_outcome(late), NotOwnerError)
        assert len(w.deposed) == 1  # reported once
    run(scenario)


def test_a_wrong_guess_about_existing_znodes_resends_only_after_a_fresh_look():
    async def scenario():
        w = World()
        w.known("a", "b")
        a1, b1 = w.commit("a", 0, 1), w.commit("b", 0, 1)
        batch = w.queue.take()
        w.queue.build(batch)  # both are setData: the cache says partition 0 exists
        w.queue.refused(batch, 3, NoNodeError())  # b1's setData: somebody deleted it
        assert (_outcome(a1), _outcome(b1)) == ("waiting", "waiting")
        assert paths.OffsetPaths().topic_dir("b", "t") not in w.queue.children  # forgotten: read again
        assert b1.attempts == 1
        for attempt in range(MAX_ATTEMPTS):
            batch = w.queue.take()
            assert batch.commits == [a1, b1]
            w.queue.build(batch)
            w.queue.refused(batch, 1, NodeExistsError())  # a1's op, every time
            assert _outcome(a1) == ("waiting" if attempt < MAX_ATTEMPTS - 1 else _outcome(a1))
        assert isinstance(_outcome(a1), ZkcoordError) and "kept failing" in str(a1.future.exception())
        assert _outcome(b1) == "waiting"
    run(scenario)


def test_another_error_fails_its_commit_and_an_unblamed_refusal_sends_each_alone():
    async def scenario():
        w = World()
        w.known("a", "b")
        a1, b1 = w.commit("a", 0, 1), w.commit("b", 0, 1)
        batch = w.queue.take()
        w.queue.build(batch)
        w.queue.refused(batch, 1, NoAuthError())
        assert "NoAuthError" in str(a1.future.exception()) and _outcome(b1) == "waiting"
        b2 = w.commit("b", 1, 2)
        batch = w.queue.take()
        assert batch.commits == [b1, b2]
        w.queue.build(batch)
        w.queue.refused(batch, -1, RuntimeInconsistency())
        assert w.queue.take().commits == [b1]  # solo
        assert w.queue.take().commits == [b2]
    run(scenario)


def test_a_lost_answer_resends_and_an_expired_session_deposes():
    async def scenario():
        w = World()
        w.known("a", "b")
        a1, b1 = w.commit("a", 0, 1), w.commit("b", 0, 1)
        batch = w.queue.take()
        w.queue.lost(batch, expired=False)
        batch = w.queue.take()
        assert batch.commits == [a1, b1] and w.deposed == []  # sent again: it may not have landed
        w.queue.lost(batch, expired=True)
        assert isinstance(_outcome(a1), NotOwnerError) and isinstance(_outcome(b1), NotOwnerError)
        assert sorted(g for g, _ in w.deposed) == ["a", "b"]
    run(scenario)


def test_caps_split_batches_and_keep_each_groups_order():
    async def scenario():
        w = World(max_ops=3)
        commits = [w.commit("a" if i % 2 else "b", i % 10, i) for i in range(7)]
        taken = []
        while len(w.queue):
            taken.append(w.queue.take().commits)
        assert [len(t) for t in taken] == [3, 3, 1]
        assert [c for t in taken for c in t] == commits
    run(scenario)


def test_commits_past_their_deadline_fail_in_the_queue_and_in_flight():
    async def scenario():
        w = World()
        early, late = w.commit("a", 0, 1, deadline=5.0), w.commit("b", 0, 1, deadline=9.0)
        w.queue.in_flight = w.queue.take()
        queued = w.commit("c", 0, 1, deadline=6.0)
        why = lambda group: ServiceUnavailableError(f"{group} timed out")  # noqa: E731
        assert w.queue.expire(4.0, why) == 5.0
        assert w.queue.expire(6.5, why) == 9.0
        assert str(early.future.exception()) == "a timed out" and str(queued.future.exception()) == "c timed out"
        assert _outcome(late) == "waiting"
        w.queue.applied(w.queue.in_flight)  # a late answer settles only what still waits
        assert _outcome(late) == "landed"
    run(scenario)


def test_stale_metadata_is_deleted_in_the_same_multi():
    async def scenario():
        w = World()
        w.known("a")
        mdir = paths.OffsetPaths().metadata_topic_dir("a", "t")
        w.queue.children[mdir] = {"0"}
        w.commit("a", 0, 5)
        batch = w.queue.take()
        ops = w.queue.build(batch)
        assert ops[-1] == w.codec.delete(f"{mdir}/0")
        assert w.queue.children[mdir] == set()
    run(scenario)


@pytest.mark.parametrize("bad", [-1, True, "1"])
def test_targets_refuse_what_cannot_be_a_partition(bad):
    from zkcoord.errors import UsageError

    targets = Targets(paths.OffsetPaths(), OpCodec())
    targets("g", "t", 1)  # cached: a bool must not hit it as 1
    with pytest.raises(UsageError):
        targets("g", "t", bad)


def test_targets_of_a_big_commit_are_made_without_being_cached():
    """A commit of 100,000 partitions makes its targets and drops them: cached,
    they would live on and be walked by the cyclic collector (zk/offsets.py)."""
    targets = Targets(paths.OffsetPaths(), OpCodec())
    made = targets("g", "t", 1, keep=False)
    assert targets("g", "t", 1, keep=False) is not made  # nothing kept
    kept = targets("g", "t", 1)
    assert (kept.opath, kept.mpath) == (made.opath, made.mpath) and targets("g", "t", 1) is kept and targets("g", "t", 1, keep=False) is kept
