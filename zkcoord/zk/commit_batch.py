"""Offset commits of many groups merged into fenced multis, and what a multi's answer does to each.

This module owns the rules of :class:`~zkcoord.zk.offsets.OffsetStore`'s
batching, apart from its I/O, so that they can be tested without ZooKeeper:
which queued commits go into the next multi (:meth:`CommitQueue.take`), the
multi's ops and whom each op belongs to (:meth:`CommitQueue.build`), and
what its answer means for each commit (:meth:`CommitQueue.applied`,
:meth:`CommitQueue.refused`, :meth:`CommitQueue.lost`,
:meth:`CommitQueue.expire`).

Rules:

1. Commits queue in call order; a multi takes them from the front while
   they fit (``max_ops``, ``max_bytes``), so one group's commits reach
   ZooKeeper in the order they were queued, whatever the other groups do.
2. Every commit carries its group's fence (the owner's contender znode,
   :class:`~zkcoord.zk.ownership.Fence`); a multi checks each fence it
   holds once, before that group's ops. A multi lands whole or not at all,
   so one deposed owner's check would refuse every group's commit in it:
   the op that refused is blamed (:class:`~zkcoord.zk.jute.MultiRefused`),
   and
   - a refused fence check fails the commits holding that fence
     (NotOwnerError), reports the fence once to ``on_deposed``, and refuses
     its later commits before any write; every other commit of the multi is
     queued again, first, in its order, and lands in the next multi;
   - an op on a znode that existed or did not, against what the cache of
     existing znodes said, is that commit's: the cache is corrected and the
     commit sent again (at most ``MAX_ATTEMPTS`` times);
   - another error of a commit's op fails that commit only;
   - a refusal nobody can be blamed for sends each commit on its own.
3. A multi whose answer was lost (connection loss) may have landed: its
   commits are queued again (writing the same offsets twice is harmless);
   a session expiry also deposes every fence they hold.
4. A commit not confirmed by its deadline fails with
   ServiceUnavailableError ("it may still be applied").
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError

from zkcoord.errors import NotOwnerError, ServiceUnavailableError, ZkcoordError
from zkcoord.zk import paths
from zkcoord.zk.jute import OpCodec

__all__ = ["Target", "Targets", "Callback", "QueuedCommit", "Batch", "CommitQueue", "MAX_ATTEMPTS", "OP_OVERHEAD_BYTES"]

log = logging.getLogger(__name__)

OP_OVERHEAD_BYTES = 64  # multi header, op header, ACL of a create
MAX_ATTEMPTS = 5  # a commit sent this often because the cache was wrong fails


@dataclass(slots=True, eq=False)
class Target:
    """One partition's offset znode and metadata znode, their paths encoded once."""

    topic: str
    partition: int
    name: str  # the partition's znode name
    odir: str  # <root>/<group>/offsets/<topic>
    mdir: str  # <root>/<group>/offsets-metadata/<topic>
    opath: bytes  # the offset znode's path, as jute writes it
    mpath: bytes  # the metadata znode's path, as jute writes it

    def cost(self, value: bytes, meta: bytes | None) -> tuple[int, int]:
        """(bytes, ops) the partition's commit adds to a multi."""
        nbytes = len(self.opath) + len(value) + OP_OVERHEAD_BYTES
        if meta is None:
            return nbytes, 1
        return nbytes + len(self.mpath) + len(meta) + OP_OVERHEAD_BYTES, 2


# One partition of one commit: its target, the offset's bytes, the metadata's (None: empty).
Entry = tuple[Target, bytes, "bytes | None"]


class Targets:
    """:class:`Target` of each (group, topic, partition), validated and encoded once."""

    def __init__(self, offset_paths: paths.OffsetPaths, codec: OpCodec, max_cached: int = 200_000) -> None:
        self.paths = offset_paths
        self.codec = codec
        self._max = max_cached
        self._found: dict[tuple[str, str, int], Target] = {}

    def __call__(self, group: str, topic: str, partition: int, keep: bool = True) -> Target:
        """UsageError for a topic or partition that cannot be a znode name.
        Without ``keep``, a target not cached yet is made and not cached."""
        key = (group, topic, partition)
        found = self._found.get(key)
        if found is not None and type(partition) is int:  # True == 1 as a key
            return found
        odir = self.paths.topic_dir(group, topic)
        mdir = self.paths.metadata_topic_dir(group, topic)
        name = paths.partition_name(partition)
        target = Target(topic, partition, name, odir, mdir, self.codec.path(f"{odir}/{name}"),
                        self.codec.path(f"{mdir}/{name}"))
        if not keep:
            return target
        if len(self._found) >= self._max:
            self._found.clear()
        self._found[key] = target
        return target

    def forget(self, group: str) -> None:
        for key in [k for k in self._found if k[0] == group]:
            del self._found[key]


class Callback:
    """A commit's waiter that hands the outcome to ``fn`` (None: landed; an
    exception: not) at once, from the batcher, instead of a future's callback
    one loop step later: the daemon's commit path (no future, no hop). It
    has the part of a future's interface the queue uses; ``fn`` must not
    raise (a failure is logged)."""

    __slots__ = ("fn", "_done")

    def __init__(self, fn: Callable[[BaseException | None], None]) -> None:
        self.fn = fn
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, _value: object) -> None:
        self._settle(None)

    def set_exception(self, error: BaseException) -> None:
        self._settle(error)

    def _settle(self, error: BaseException | None) -> None:
        if self._done:
            return
        self._done = True
        try:
            self.fn(error)
        except Exception:
            log.exception("an offset commit's continuation failed")


@dataclass(slots=True, eq=False)
class QueuedCommit:
    """One multi's worth of one commit request (a big request is several)."""

    group: str
    entries: list[Entry]
    fence: object  # a Fence (``group``, ``path``, ``version``), or None
    future: asyncio.Future | Callback
    nbytes: int
    nops: int
    deadline: float  # loop time
    attempts: int = 0
    solo: bool = False


@dataclass(slots=True)
class Batch:
    """The commits of one multi; ``blame``: per op, the QueuedCommit it
    writes for or the fence it checks; ``dirs``: the directories it touched."""

    commits: list[QueuedCommit]
    blame: list[object] = field(default_factory=list)
    dirs: set[str] = field(default_factory=set)


class CommitQueue:
    """The queue of commits and the rules of the module docstring.

    ``children``: directory -> the znode names known to exist in it (None:
    the directory does not exist); the store learns it, :meth:`build` relies
    on it and keeps it up to date with what a multi creates or deletes, and a
    multi that fails forgets what it touched. ``describe(exc, what)``
    translates a kazoo error into zkcoord's (:func:`~zkcoord.zk.aio.translate`).
    """

    def __init__(self, codec: OpCodec, *, max_ops: int, max_bytes: int,
                 describe: Callable[[BaseException, str], ZkcoordError],
                 on_deposed: Callable[[object, str], None] | None = None) -> None:
        self.codec = codec
        self.max_ops, self.max_bytes = max_ops, max_bytes
        self.describe = describe
        self.on_deposed = on_deposed
        self.children: dict[str, set[str] | None] = {}
        self.dead_fences: set[str] = set()
        self._queue: collections.deque[QueuedCommit] = collections.deque()
        self.in_flight: Batch | None = None

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, commit: QueuedCommit) -> None:
        self._queue.append(commit)

    def is_dead(self, fence) -> bool:
        return fence is not None and fence.path in self.dead_fences

    # -- the next multi ------------------------------------------------------------
    def take(self) -> Batch:
        """The commits of the next multi, from the front of the queue (rule 1)."""
        taken: list[QueuedCommit] = []
        nbytes = nops = 0
        queue = self._queue
        while queue:
            commit = queue[0]
            if commit.future.done():  # its caller gave up, or it expired
                queue.popleft()
                continue
            if commit.fence is not None and commit.fence.path in self.dead_fences:
                self._fail(queue.popleft(), self.not_owner(commit.fence))
                continue
            if taken and (commit.solo or taken[0].solo or nops + commit.nops > self.max_ops
                          or nbytes + commit.nbytes > self.max_bytes):
                break
            taken.append(queue.popleft())
            nbytes, nops = nbytes + commit.nbytes, nops + commit.nops
        return Batch(taken)

    def build(self, batch: Batch) -> list[bytes]:
        """The multi's ops: each fence checked once before its group's first op,
        then per partition a create or a setData of its offset, and of its
        metadata (or a delete of stale metadata)."""
        codec = self.codec
        children = self.children
        ops: list[bytes] = []
        blame = batch.blame
        dirs = batch.dirs
        checked: set[str] = set()
        for commit in batch.commits:
            fence = commit.fence
            if fence is not None and fence.path not in checked:
                checked.add(fence.path)
                ops.append(codec.check(fence.path, fence.version))
                blame.append(fence)
            for target, value, meta in commit.entries:
                ops.append(self._put(target.odir, target.name, target.opath, value))
                blame.append(commit)
                dirs.add(target.odir)
                known = children.get(target.mdir)
                if meta is not None:
                    ops.append(self._put(target.mdir, target.name, target.mpath, meta))
                    blame.append(commit)
                    dirs.add(target.mdir)
                elif known and target.name in known:
                    ops.append(codec.delete(f"{target.mdir}/{target.name}"))  # stale metadata of an earlier commit
                    known.discard(target.name)
                    blame.append(commit)
                    dirs.add(target.mdir)
        return ops

    def _put(self, directory: str, name: str, encoded_path: bytes, value: bytes) -> bytes:
        known = self.children.get(directory)  # None only if forgotten meanwhile
        if known is not None and name in known:
            return self.codec.set_data_with(encoded_path, value)
        if known is not None:
            known.add(name)  # optimistic: forgotten if the multi fails
        return self.codec.create_with(encoded_path, value)

    # -- its answer ----------------------------------------------------------------
    def applied(self, batch: Batch) -> int:
        """The multi landed: every commit of it is confirmed. How many were."""
        confirmed = 0
        for commit in batch.commits:
            confirmed += 1
            if not commit.future.done():
                commit.future.set_result(None)
        return confirmed

    def refused(self, batch: Batch, index: int, error: BaseException) -> None:
        """ZooKeeper refused the multi, blaming op ``index`` (-1: none) (rule 2)."""
        self.forget_dirs(batch)
        culprit = batch.blame[index] if 0 <= index < len(batch.blame) else None
        if culprit is not None and not isinstance(culprit, QueuedCommit):  # a fence check
            self.fence_failed(culprit, f"its contender {culprit.path} is gone")
            for commit in batch.commits:
                if commit.fence is not None and commit.fence.path == culprit.path:
                    self._fail(commit, self.not_owner(culprit))
            others = sum(not c.future.done() for c in batch.commits)
            if others:
                log.info("a multi of %d commits was refused by the fence of group %r; the %d commits of other "
                         "groups in it are sent again", len(batch.commits), culprit.group, others)
        elif culprit is not None and isinstance(error, (NoNodeError, NodeExistsError, NotEmptyError)):
            culprit.attempts += 1  # what we knew about existing znodes was wrong: re-read and resend
            if culprit.attempts >= MAX_ATTEMPTS:
                self._fail(culprit, ZkcoordError(
                    f"offset commit of group {culprit.group!r} kept failing ({type(error).__name__}); "
                    "is another process deleting its znodes?"))
        elif culprit is not None:
            self._fail(culprit, self.describe(error, f"commit offsets of group {culprit.group!r}"))
        elif len(batch.commits) > 1:
            for commit in batch.commits:
                commit.solo = True  # nobody to blame: send each alone
        else:
            self._fail(batch.commits[0], self.describe(error, "commit offsets"))
        self.requeue(batch.commits)

    def lost(self, batch: Batch, *, expired: bool) -> None:
        """The multi's answer was lost: it may have landed; send it again (rule 3)."""
        self.forget_dirs(batch)
        if expired:
            for commit in batch.commits:
                if commit.fence is not None:
                    self.fence_failed(commit.fence, "the ZooKeeper session that held it expired")
                    self._fail(commit, self.not_owner(commit.fence))
        self.requeue(batch.commits)

    def failed(self, batch: Batch, error: ZkcoordError) -> None:
        """The multi could not be sent or answered at all: its commits fail."""
        self.forget_dirs(batch)
        for commit in batch.commits:
            self._fail(commit, error)

    def requeue(self, commits: Iterable[QueuedCommit]) -> None:
        """First again, in their order (those still waiting)."""
        self._queue.extendleft(reversed([c for c in commits if not c.future.done()]))

    def expire(self, now: float, why: Callable[[str], ServiceUnavailableError]) -> float | None:
        """Fail every commit past its deadline (rule 4); the next deadline, None if none."""
        nearest = None
        waiting = list(self._queue) + (self.in_flight.commits if self.in_flight else [])
        for commit in waiting:
            if commit.future.done():
                continue
            if commit.deadline <= now:
                self._fail(commit, why(commit.group))
            elif nearest is None or commit.deadline < nearest:
                nearest = commit.deadline
        return nearest

    def drain(self, error: BaseException) -> None:
        """Fail everything queued or in flight (the store stops)."""
        for commit in self.in_flight.commits if self.in_flight else []:
            self._fail(commit, error)
        while self._queue:
            self._fail(self._queue.popleft(), error)

    # -- the cache and the fences ---------------------------------------------------
    def forget_dirs(self, batch: Batch) -> None:
        for path in batch.dirs:
            self.children.pop(path, None)

    def forget_group(self, group_dir: str) -> None:
        prefix = group_dir + "/"
        for path in [p for p in self.children if p.startswith(prefix)]:
            del self.children[path]

    def fence_failed(self, fence, why: str) -> None:
        if fence.path in self.dead_fences:
            return
        self.dead_fences.add(fence.path)
        if self.on_deposed is not None:
            try:
                self.on_deposed(fence, f"an offset commit of group {fence.group!r} was refused: {why}")
            except Exception:  # the listener's bug must not fail the batch
                log.exception("on_deposed listener failed for %s", fence.path)

    @staticmethod
    def not_owner(fence) -> NotOwnerError:
        return NotOwnerError(f"offsets of group {fence.group!r} not committed: this daemon no longer owns "
                             f"the group (contender {fence.path} is gone); look the coordinator up again",
                             fence.group)

    @staticmethod
    def _fail(commit: QueuedCommit, error: BaseException) -> None:
        if not commit.future.done():
            commit.future.set_exception(error)
