"""Consumer offsets in the legacy ZooKeeper layout, committed in batches.

This module owns ``<root>/<group>/offsets/<topic>/<partition>`` (a plain
decimal string such as ``42``: what Kafka's old ZooKeeper consumer writes and
legacy tools read) and, beside it, ``<root>/<group>/offsets-metadata/<topic>/
<partition>`` holding ``{"o":42,"m":"<metadata>"}``.

Rules:

1. One commit request is one multi-op, so it lands whole or not at all: per
   partition one op (``create`` if absent, else ``set_data``), plus a
   metadata op only when the metadata is not empty or stale metadata must go.
   With a fence (:meth:`GroupOwnership.fence`) the multi also checks it.
2. Metadata counts only while its ``"o"`` equals the offset znode's value: a
   legacy consumer committing straight to ZooKeeper leaves our metadata
   behind, and fetch then reports ``""`` for it.
3. One multi is in flight at a time. Requests arriving meanwhile queue and go
   together in the next multi (at most ``max_ops_per_multi`` ops and
   ``max_multi_bytes`` bytes, below ZooKeeper's 1 MB packet limit,
   jute.maxbuffer; a request too big for one multi by itself is split, and
   one partition whose ops alone would not fit is refused with UsageError
   before anything is queued: no multi is ever sent over the limit). A failed merged multi names its culprit op: that request gets its
   own error, the others are sent again; a failure nobody can be blamed for
   sends each request alone. A failed fence fails every request holding it,
   and is reported once to ``on_deposed(fence, reason)`` (the daemon drops
   the group there, as it does when a fenced state write fails).
4. What exists is known per (group, topic) directory from one
   ``get_children`` (not one read per partition), parents are ensured once,
   and both are corrected when a multi proves them wrong.
5. Fetch issues its reads in slices of ``FETCH_SLICE`` partitions (of a
   topic asked for by more than that many, only those its directory lists:
   a request naming millions reads the few that exist) and reports unparsable values (not an int64 decimal, by
   :mod:`zkcoord.core.legacy_values`) per partition instead of failing,
   logging each corrupt znode once. Everything runs on the event loop;
   kazoo results hop onto it.
6. A commit of thousands of partitions can be made ready with
   :meth:`OffsetStore.prepare` (its ops built and split in slices, yielding
   to the event loop between them) and then queued by :meth:`submit` at
   once, so a caller holding a group's lock holds the loop only briefly.
7. The root and ``<root>/<group>`` are created with open ACLs even with
   ``zookeeper_set_acl`` (:mod:`zkcoord.zk.auth` rule 1: legacy consumers
   register under them); ``offsets``, ``offsets-metadata`` and below get
   the connection's ACL.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kazoo.exceptions import (
    ConnectionClosedError, KazooException, NodeExistsError, NoNodeError, NotEmptyError, SessionExpiredError,
)

from zkcoord.core.legacy_values import Unparsable, partition_number, read_legacy_value, shown
from zkcoord.core.offset_fetch import Wanted, wanted_by_topic
from zkcoord.errors import NotOwnerError, ServiceUnavailableError, UsageError, ZkcoordError
from zkcoord.zk import aio, paths
from zkcoord.zk.auth import OPEN_ACL
from zkcoord.zk.multi_read import GET_DATA, read_many
from zkcoord.zk.connection import ZkConnection
from zkcoord.zk.ownership import Fence

__all__ = ["OffsetStore", "FetchedOffsets", "OffsetStats", "PreparedCommit", "TopicPartition", "ensure_offsets_root",
           "ensure_group_dirs"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
_OP_OVERHEAD_BYTES = 64  # multi header, op header, ACL of a create
_MAX_ATTEMPTS = 5  # a request re-sent this often because the cache was wrong fails
_FENCE_RESERVE_BYTES = 2048  # what a prepared chunk leaves for its fence check (a path under 1 KB)
_PREPARE_SLICE = 2000  # entries built between two yields to the event loop
FETCH_SLICE = 1000  # partitions read at once by a fetch
_VALIDATE_SLICE = 10_000  # partition numbers checked between two yields to the event loop
_MAX_REPORTED = 10_000  # corrupt znodes remembered as already logged


def _check_partition_numbers(numbers: Sequence[int]) -> None:
    """UsageError unless every one is a partition number (an int >= 0), in C-speed passes."""
    try:
        lowest = min(numbers, default=0)
        ints = all(type(n) is int for n in numbers) if len(numbers) < 64 else isinstance(lowest, int)
    except TypeError:
        ints = False
    if not ints:
        for n in numbers:
            paths.partition_name(n)
    paths.partition_name(lowest)


@dataclass
class OffsetStats:
    """Counters since start, for tests and metrics."""

    multis: int = 0  # multi-ops sent
    failed_multis: int = 0  # of which failed (or lost their answer)
    ops: int = 0  # ops in those multis
    commits: int = 0  # commit requests that succeeded


class FetchedOffsets(dict):
    """``{(topic, partition): (offset, metadata)}`` of the committed offsets;
    ``unparsable`` holds partitions whose znode is not an offset, with the
    reason (:func:`~zkcoord.core.legacy_values.read_legacy_value`)."""

    def __init__(self) -> None:
        super().__init__()
        self.unparsable: dict[TopicPartition, str] = {}


@dataclass
class _Entry:
    topic: str
    partition: int
    name: str  # the partition's znode name
    odir: str  # offsets/<topic>
    mdir: str  # offsets-metadata/<topic>
    value: bytes
    meta: bytes | None  # None: empty metadata


@dataclass(eq=False)
class _Request:
    group: str
    entries: list[_Entry]
    fence: Fence | None
    future: asyncio.Future
    nbytes: int
    nops: int
    attempts: int = 0
    solo: bool = False


@dataclass
class _Batch:
    requests: list[_Request]
    blame: list[object] = field(default_factory=list)  # per op: its _Request, or the Fence it checks
    dirs: set[str] = field(default_factory=set)


async def _done() -> None:
    """An awaitable that is already complete: nothing to commit."""


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode())


@dataclass
class PreparedCommit:
    """A commit's ops, built and split by :meth:`OffsetStore.prepare`."""

    group: str
    chunks: list[tuple[list[_Entry], int, int]]


async def ensure_offsets_root(conn: ZkConnection, root: str = paths.DEFAULT_CONSUMERS_ROOT) -> None:
    """Create the offsets root (``/consumers``) where missing, persistent and
    empty. A daemon does it at start: a tool that lists the root once (Burrow
    1.2's ZooKeeper module lists it at its own start, and never again if it
    was absent) then finds it before the first group commits."""
    path = paths.OffsetPaths(root).root
    await conn.retry(f"create {path}", aio.call, conn.client.ensure_path_async, path, OPEN_ACL)


def ensure_group_dirs(conn: ZkConnection, group_dirs: Iterable[str]) -> asyncio.Future:
    """Create each ``<root>/<group>`` (and the root) where missing, with open
    ACLs whatever the connection's default (rule 7); a future of each
    outcome (:func:`~zkcoord.zk.aio.gather`). Call on the event loop."""
    client = conn.client
    return aio.gather(asyncio.get_running_loop(), [client.ensure_path_async(d, OPEN_ACL) for d in group_dirs])


class OffsetStore:
    """Commits and fetches legacy ZooKeeper offsets for many groups."""

    def __init__(self, conn: ZkConnection, *, offsets_root: str = paths.DEFAULT_CONSUMERS_ROOT,
                 max_ops_per_multi: int = 1000, max_multi_bytes: int = 900_000,
                 on_deposed: Callable[[Fence, str], None] | None = None) -> None:
        self._conn = conn
        self._on_deposed = on_deposed
        self.paths = paths.OffsetPaths(offsets_root)
        self.max_ops_per_multi = max_ops_per_multi
        self.max_multi_bytes = max_multi_bytes
        self.stats = OffsetStats()
        self._queue: collections.deque[_Request] = collections.deque()
        self._wakeup = asyncio.Event()
        self._worker: asyncio.Task | None = None
        self._children: dict[str, set[str] | None] = {}  # dir -> children; None: dir absent
        self._dirs: dict[tuple[str, str], tuple[str, str]] = {}
        self._dead_fences: set[str] = set()
        self._reported: set[tuple[str, bytes | None]] = set()  # corrupt znodes logged already
        self._in_flight: _Batch | None = None

    # ------------------------------------------------------------ commits
    async def commit(self, group: str, offsets: Mapping[TopicPartition, tuple[int, str]],
                     fence: Fence | None = None) -> None:
        """Commit ``{(topic, partition): (offset, metadata)}`` atomically.

        Raises NotOwnerError (the fence is gone; nothing written),
        ServiceUnavailableError (no answer within the request time-out: the
        commit may still land), UsageError (bad names or values).
        """
        await self.submit(group, offsets, fence)

    async def prepare(self, group: str, offsets: Mapping[TopicPartition, tuple[int, str]]) -> PreparedCommit:
        """Build and split the ops of a commit in slices, yielding to the
        event loop between them (rule 6); queue it with :meth:`submit`.
        Raises UsageError (bad names or values, a partition too big)."""
        entries = []
        for i, (tp, om) in enumerate(offsets.items()):
            if i and i % _PREPARE_SLICE == 0:
                await asyncio.sleep(0)
            entries.append(self._entry(group, tp, om))
        return PreparedCommit(group, self._chunks(entries, None, reserve=True) if entries else [])

    def submit(self, group: str, offsets: Mapping[TopicPartition, tuple[int, str]] | PreparedCommit,
               fence: Fence | None = None) -> Awaitable[None]:
        """Queue the commit now, in call order, and return what to await for
        its outcome (see :meth:`commit`).

        Queuing is synchronous, so a caller holding a group's lock fixes the
        commit's place in the write order before the lock is released: a
        commit validated against generation N is queued before any commit of
        N+1. UsageError and NotOwnerError are raised here, before queuing.
        """
        if isinstance(offsets, PreparedCommit):
            if offsets.group != group:
                raise UsageError(f"a commit prepared for group {offsets.group!r} cannot be submitted for {group!r}")
            if fence is not None and len(fence.path) + _OP_OVERHEAD_BYTES > _FENCE_RESERVE_BYTES:
                raise UsageError(f"fence path {fence.path!r} is longer than a prepared commit leaves room for")
            chunks = offsets.chunks
        else:
            chunks = None
            entries = [self._entry(group, tp, om) for tp, om in offsets.items()]
            if not entries:
                return _done()
        if chunks is not None and not chunks:
            return _done()
        if fence is not None and fence.group != group:
            raise UsageError(f"the fence of group {fence.group!r} cannot guard a commit of group {group!r}")
        if fence is not None and fence.path in self._dead_fences:
            raise self._not_owner(fence)
        if chunks is None:
            chunks = list(self._chunks(entries, fence))
        elif fence is not None:  # the fence's check, in the room every prepared chunk left for it
            extra = _utf8_len(fence.path) + _OP_OVERHEAD_BYTES
            chunks = [(chunk, nbytes + extra, nops + 1) for chunk, nbytes, nops in chunks]
        loop = asyncio.get_running_loop()
        futures = [self._enqueue(loop, group, chunk, fence) for chunk in chunks]
        self._wakeup.set()
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._run())
        return self._confirmed(group, futures)

    async def _confirmed(self, group: str, futures: list[asyncio.Future]) -> None:
        # The request time-out bounds each multi of the commit, counted from the previous one's answer: a
        # commit of 100,000 partitions is 100 multis, which ZooKeeper may take longer than one time-out to
        # apply while it keeps making progress.
        try:
            for fut in futures:
                async with asyncio.timeout(self._conn.request_timeout_ms / 1000):
                    await fut
        except TimeoutError:
            raise ServiceUnavailableError(
                f"ZooKeeper at {self._conn.hosts} did not confirm the offset commit of group {group!r} within "
                f"{self._conn.request_timeout_ms / 1000:g} s; it may still be applied") from None

    def _entry(self, group: str, tp: TopicPartition, om: tuple[int, str]) -> _Entry:
        try:
            (topic, partition), (offset, metadata) = tp, om
        except (TypeError, ValueError):
            raise UsageError(f"offsets must map (topic, partition) to (offset, metadata), got {tp!r}: {om!r}") from None
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise UsageError(f"offset of {topic}-{partition} must be a whole number, got {offset!r}")
        if metadata is not None and not isinstance(metadata, str):
            raise UsageError(f"metadata of {topic}-{partition} must be a string, got {metadata!r}")
        odir, mdir = self._topic_dirs(group, topic)
        name = paths.partition_name(partition)
        meta = json.dumps({"o": offset, "m": metadata}, separators=(",", ":")).encode() if metadata else None
        return _Entry(topic, partition, name, odir, mdir, str(offset).encode(), meta)

    def _topic_dirs(self, group: str, topic: str) -> tuple[str, str]:
        found = self._dirs.get((group, topic))
        if found is None:
            found = (self.paths.topic_dir(group, topic), self.paths.metadata_topic_dir(group, topic))
            if len(self._dirs) > 100_000:
                self._dirs.clear()
            self._dirs[(group, topic)] = found
        return found

    @staticmethod
    def _cost(entry: _Entry) -> tuple[int, int]:
        """(bytes, ops) the entry adds to a multi (paths in UTF-8, as ZooKeeper sends them)."""
        nbytes = _utf8_len(entry.odir) + _utf8_len(entry.name) + len(entry.value) + _OP_OVERHEAD_BYTES
        if entry.meta is None:
            return nbytes, 1
        return nbytes + _utf8_len(entry.mdir) + _utf8_len(entry.name) + len(entry.meta) + _OP_OVERHEAD_BYTES, 2

    def _chunks(self, entries: list[_Entry], fence: Fence | None,
                reserve: bool = False) -> Iterable[tuple[list[_Entry], int, int]]:
        """The request as one chunk, or several if it cannot fit one multi
        (bytes or ops); with ``reserve``, each chunk leaves room for a fence
        check added later. UsageError, before anything is queued, for an
        entry too big for any multi."""
        if reserve:
            room_bytes, room_ops = self.max_multi_bytes - _FENCE_RESERVE_BYTES, self.max_ops_per_multi - 1
            base = (0, 0)
        else:
            base = (_utf8_len(fence.path) + _OP_OVERHEAD_BYTES, 1) if fence else (0, 0)
            room_bytes, room_ops = self.max_multi_bytes, self.max_ops_per_multi
        chunks = []
        chunk, nbytes, nops = [], *base
        for entry in entries:
            b, n = self._cost(entry)
            if base[0] + b > room_bytes:
                raise UsageError(
                    f"the offset of {entry.topic}-{entry.partition} needs a {b}-byte ZooKeeper write, more than "
                    f"one multi may carry ({room_bytes - base[0]} bytes, under ZooKeeper's 1 MB jute.maxbuffer); "
                    "shorten its metadata")
            if chunk and (nbytes + b > room_bytes or nops + n > room_ops):
                chunks.append((chunk, nbytes, nops))
                chunk, nbytes, nops = [], *base
            chunk.append(entry)
            nbytes, nops = nbytes + b, nops + n
        chunks.append((chunk, nbytes, nops))
        return chunks

    def _enqueue(self, loop, group: str, chunk: tuple[list[_Entry], int, int], fence: Fence | None):
        entries, nbytes, nops = chunk
        fut = loop.create_future()
        self._queue.append(_Request(group, entries, fence, fut, nbytes, nops))
        return fut

    async def stop(self) -> None:
        """Stop the batching task; queued commits fail with ServiceUnavailableError."""
        in_flight = self._in_flight.requests if self._in_flight else []
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
            self._worker = None
        stopped = ServiceUnavailableError("the offset store was stopped; the commit may or may not have landed")
        for request in in_flight:
            self._fail(request, stopped)
        while self._queue:
            self._fail(self._queue.popleft(), stopped)

    def forget(self, group: str) -> None:
        """Drop what is cached about ``group`` (e.g. when we stop owning it)."""
        prefix = self.paths.group(group) + "/"
        for path in [p for p in self._children if p.startswith(prefix)]:
            del self._children[path]

    # ------------------------------------------------------- the batcher
    async def _run(self) -> None:
        delay = 0.02
        while True:
            if not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            batch = self._take()
            if not batch.requests:
                continue
            self._in_flight = batch
            try:
                connection_trouble = await self._send(batch)
            except Exception as exc:  # a bug: fail this batch, keep serving
                log.exception("offset commit batch failed")
                for request in batch.requests:
                    self._fail(request, exc)
                connection_trouble = False
            finally:
                self._in_flight = None
            if connection_trouble:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
            else:
                delay = 0.02

    def _take(self) -> _Batch:
        taken: list[_Request] = []
        nbytes = nops = 0
        while self._queue:
            request = self._queue[0]
            if request.future.done():  # its caller timed out
                self._queue.popleft()
                continue
            if request.fence is not None and request.fence.path in self._dead_fences:
                self._fail(self._queue.popleft(), self._not_owner(request.fence))
                continue
            if taken and (request.solo or taken[0].solo or nops + request.nops > self.max_ops_per_multi
                          or nbytes + request.nbytes > self.max_multi_bytes):
                break
            taken.append(self._queue.popleft())
            nbytes, nops = nbytes + request.nbytes, nops + request.nops
        return _Batch(taken)

    async def _send(self, batch: _Batch) -> bool:
        """Send one batch as one multi; True if the connection was the trouble."""
        sent = False
        try:
            await self._prepare(batch)
            txn = self._build(batch)
            self.stats.multis += 1
            self.stats.ops += len(txn.operations)
            sent = True
            results = await aio.future_of(asyncio.get_running_loop(), txn.commit_async())
        except ConnectionClosedError as exc:
            self._forget_dirs(batch)
            for request in batch.requests:
                self._fail(request, aio.translate(exc, "commit offsets", self._conn.hosts))
            return False
        except (*aio.RETRYABLE, SessionExpiredError) as exc:
            self.stats.failed_multis += sent  # its answer was lost: it may have landed
            self._forget_dirs(batch)
            expired = isinstance(exc, SessionExpiredError)
            for request in batch.requests:
                if expired and request.fence is not None:
                    self._fence_failed(request.fence, "the ZooKeeper session that held it expired")
                    self._fail(request, self._not_owner(request.fence))
            self._requeue([r for r in batch.requests if not r.future.done()])
            return True
        except KazooException as exc:
            self._forget_dirs(batch)
            for request in batch.requests:
                self._fail(request, aio.translate(exc, "commit offsets", self._conn.hosts))
            return False
        failure = aio.transaction_failure(results)
        if failure is None:
            for request in batch.requests:
                self.stats.commits += 1
                if not request.future.done():
                    request.future.set_result(None)
            return False
        self.stats.failed_multis += 1
        self._forget_dirs(batch)
        self._blame(batch, *failure)
        return False

    def _blame(self, batch: _Batch, index: int, exc: BaseException) -> None:
        culprit = batch.blame[index] if 0 <= index < len(batch.blame) else None
        if isinstance(culprit, Fence):
            self._fence_failed(culprit, f"its contender {culprit.path} is gone")
            for request in batch.requests:
                if request.fence is not None and request.fence.path == culprit.path:
                    self._fail(request, self._not_owner(culprit))
        elif isinstance(culprit, _Request) and isinstance(exc, (NoNodeError, NodeExistsError, NotEmptyError)):
            culprit.attempts += 1  # what we knew about existing znodes was wrong: re-read and resend
            if culprit.attempts >= _MAX_ATTEMPTS:
                self._fail(culprit, ZkcoordError(
                    f"offset commit of group {culprit.group!r} kept failing ({type(exc).__name__}); "
                    "is another process deleting its znodes?"))
        elif isinstance(culprit, _Request):
            self._fail(culprit, aio.translate(exc, f"commit offsets of group {culprit.group!r}", self._conn.hosts))
        elif len(batch.requests) > 1:
            for request in batch.requests:
                request.solo = True  # nobody to blame: send each alone
        else:
            self._fail(batch.requests[0], aio.translate(exc, "commit offsets", self._conn.hosts))
        self._requeue([r for r in batch.requests if not r.future.done()])

    def _requeue(self, requests: list[_Request]) -> None:
        self._queue.extendleft(reversed(requests))  # first again, in their order

    def _fail(self, request: _Request, exc: BaseException) -> None:
        if not request.future.done():
            request.future.set_exception(exc)

    def _fence_failed(self, fence: Fence, why: str) -> None:
        if fence.path in self._dead_fences:
            return
        self._dead_fences.add(fence.path)
        if self._on_deposed is not None:
            try:
                self._on_deposed(fence, f"an offset commit of group {fence.group!r} was refused: {why}")
            except Exception:  # the listener's bug must not fail the batch
                log.exception("on_deposed listener failed for %s", fence.path)

    def _not_owner(self, fence: Fence) -> NotOwnerError:
        return NotOwnerError(f"offsets of group {fence.group!r} not committed: this daemon no longer owns "
                             f"the group (contender {fence.path} is gone); look the coordinator up again",
                             fence.group)

    def _forget_dirs(self, batch: _Batch) -> None:
        for path in batch.dirs:
            self._children.pop(path, None)

    # --------------------------------------------- what exists, and the multi
    async def _prepare(self, batch: _Batch) -> None:
        """Learn the children of every directory the batch touches; create
        the offset directories (and metadata ones it writes to) if absent."""
        need: dict[str, bool] = {}  # dir -> must exist
        group_of: dict[str, str] = {}  # dir -> its <root>/<group>
        for request in batch.requests:
            for e in request.entries:
                need[e.odir] = True
                need[e.mdir] = need.get(e.mdir, False) or e.meta is not None
                if e.odir not in group_of:
                    group_of[e.odir] = group_of[e.mdir] = self.paths.group(request.group)
        client = self._conn.client
        loop = asyncio.get_running_loop()
        unknown = [d for d in need if d not in self._children]
        listed = await aio.gather(loop, [client.get_children_async(d) for d in unknown])
        for path, outcome in zip(unknown, listed):
            if isinstance(outcome, NoNodeError):
                self._children[path] = None
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                self._children[path] = set(outcome)
        missing = [d for d, must in need.items() if must and self._children.get(d) is None]
        for outcome in await ensure_group_dirs(self._conn, sorted({group_of[d] for d in missing})):
            if isinstance(outcome, BaseException):
                raise outcome
        for path, outcome in zip(missing, await aio.gather(loop, [client.ensure_path_async(d) for d in missing])):
            if isinstance(outcome, BaseException):
                raise outcome
            self._children[path] = set()

    def _build(self, batch: _Batch):
        txn = self._conn.client.transaction()
        checked: set[str] = set()
        for request in batch.requests:
            fence = request.fence
            if fence is not None and fence.path not in checked:
                checked.add(fence.path)
                fence.add_check(txn)
                batch.blame.append(fence)
            for e in request.entries:
                self._put(txn, batch, request, e.odir, e.name, e.value)
                if e.meta is not None:
                    self._put(txn, batch, request, e.mdir, e.name, e.meta)
                elif self._children.get(e.mdir) and e.name in self._children[e.mdir]:
                    txn.delete(f"{e.mdir}/{e.name}")  # stale metadata of an earlier commit
                    self._children[e.mdir].discard(e.name)
                    batch.blame.append(request)
                    batch.dirs.add(e.mdir)
        return txn

    def _put(self, txn, batch: _Batch, request: _Request, directory: str, name: str, value: bytes) -> None:
        children = self._children.get(directory)  # None only if forget() ran meanwhile
        if children is not None and name in children:
            txn.set_data(f"{directory}/{name}", value)
        else:
            txn.create(f"{directory}/{name}", value)
            if children is not None:
                children.add(name)  # optimistic: forgotten if the multi fails
        batch.dirs.add(directory)  # a failed multi re-reads every directory it touched
        batch.blame.append(request)

    # ------------------------------------------------------------- delete
    async def delete_group(self, group: str, fence: Fence | None = None) -> int:
        """Delete the group's committed offsets and their metadata (Kafka's
        DeleteGroups does), in fenced multi-ops of at most
        ``max_ops_per_multi`` deletes, leaves first. Returns znodes deleted."""
        self.paths.group(group)  # validates
        return await self._conn.retry(f"delete the offsets of group {group!r}", self._inner_delete_group,
                                      group, fence)

    async def _inner_delete_group(self, group: str, fence: Fence | None) -> int:
        client = self._conn.client
        doomed: list[str] = []
        for root in (self.paths.offsets_dir(group), self.paths.metadata_dir(group)):
            doomed += await self._subtree_leaves_first(root)
        self.forget(group)
        deleted = 0
        step = max(1, self.max_ops_per_multi - 1)
        for start in range(0, len(doomed), step):
            txn = client.transaction()
            if fence is not None:
                fence.add_check(txn)
            for path in doomed[start:start + step]:
                txn.delete(path)
            results = await aio.call(txn.commit_async)
            failure = aio.transaction_failure(results)
            if failure is not None:
                index, exc = failure
                if fence is not None and index == 0:
                    raise self._not_owner(fence)
                raise ServiceUnavailableError(f"offsets of group {group!r} not deleted: {exc!r}")
            deleted += len(doomed[start:start + step])
        return deleted

    async def _subtree_leaves_first(self, root: str) -> list[str]:
        client = self._conn.client
        try:
            children = await aio.call(client.get_children_async, root)
        except NoNodeError:
            return []
        below: list[str] = []
        for child in children:
            below += await self._subtree_leaves_first(f"{root}/{child}")
        return below + [root]

    # -------------------------------------------------------------- reads
    async def fetch(self, group: str, partitions: Iterable[TopicPartition] | Wanted | None = None) -> FetchedOffsets:
        """Committed offsets of ``partitions`` (all of the group's if None).

        ``partitions`` is ``[(topic, partition)]`` or ``{topic: [partition]}``
        (:data:`~zkcoord.core.offset_fetch.Wanted`, as a request names them).
        Partitions without a committed offset are left out; values that are
        not decimals are in ``.unparsable``.
        """
        wanted: Wanted | None = None
        if partitions is not None:
            wanted = partitions if isinstance(partitions, Mapping) else wanted_by_topic(partitions)
            # Validated before any read, each topic once and its partitions in slices: one request may
            # name millions of partitions of a few topics, and this runs on the event loop.
            for topic, numbers in wanted.items():
                self.paths.topic_dir(group, topic)
                for start in range(0, len(numbers), _VALIDATE_SLICE):
                    _check_partition_numbers(numbers[start:start + _VALIDATE_SLICE])
                    await asyncio.sleep(0)
        else:
            self.paths.group(group)
        # Each step under its own retry (and request time-out): a group of 100,000 offsets is 100 slices,
        # which may take longer than one time-out while every slice is answered in time.
        listed = await self._conn.retry(f"list the offsets of group {group!r}", self._inner_list, group, wanted)
        found = FetchedOffsets()
        for start in range(0, len(listed), FETCH_SLICE):
            await self._conn.retry(f"fetch the offsets of group {group!r}", self._fetch_slice, group,
                                   listed[start:start + FETCH_SLICE], found)
        return found

    async def _inner_list(self, group: str, wanted: Wanted | None) -> list[TopicPartition]:
        if wanted is None:
            return await self._list_partitions(group)
        listed = []
        for topic, numbers in wanted.items():
            listed += await self._present(group, topic, numbers)
        return listed

    async def _present(self, group: str, topic: str, numbers: Sequence[int]) -> list[TopicPartition]:
        """The partitions of ``numbers`` worth a read: all of them when few
        (one round trip reads them), else those with a znode in the topic's
        directory (one ``get_children``; a request naming two million
        partitions of a topic with ten committed reads ten)."""
        if len(numbers) <= FETCH_SLICE:
            return [(topic, n) for n in dict.fromkeys(numbers)]
        directory = self.paths.topic_dir(group, topic)
        try:
            names = await aio.call(self._conn.client.get_children_async, directory)
        except NoNodeError:
            return []
        committed: set[int] = set()
        for start in range(0, len(names), _VALIDATE_SLICE):
            committed.update(n for name in names[start:start + _VALIDATE_SLICE]
                             if (n := partition_number(name)) is not None)
            await asyncio.sleep(0)
        present: set[int] = set()
        for start in range(0, len(numbers), _VALIDATE_SLICE):
            present |= committed.intersection(numbers[start:start + _VALIDATE_SLICE])
            await asyncio.sleep(0)
        return [(topic, n) for n in sorted(present)]

    async def _fetch_slice(self, group: str, wanted: list[TopicPartition], found: FetchedOffsets) -> None:
        values, metas = {}, {}  # topic -> its directories, built once per slice (fetch validated them)
        for topic, _ in wanted:
            if topic not in values:
                values[topic] = self.paths.topic_dir(group, topic)
                metas[topic] = self.paths.metadata_topic_dir(group, topic)
        reads = [(GET_DATA, f"{values[t]}/{p}") for t, p in wanted]
        reads += [(GET_DATA, f"{metas[t]}/{p}") for t, p in wanted]
        outcomes = await read_many(self._conn, reads)
        for i, tp in enumerate(wanted):
            value, meta = outcomes[i], outcomes[len(wanted) + i]
            for outcome in (value, meta):
                if isinstance(outcome, BaseException) and not isinstance(outcome, NoNodeError):
                    raise outcome
            if isinstance(value, NoNodeError):
                continue
            offset = read_legacy_value(value)
            if isinstance(offset, Unparsable):
                found.unparsable[tp] = offset.reason
                self._report_unparsable(self.paths.partition(group, *tp), value, offset)
                continue
            found[tp] = (offset, "" if isinstance(meta, NoNodeError) else self._metadata(meta, offset))

    async def _list_partitions(self, group: str) -> list[TopicPartition]:
        client = self._conn.client
        try:
            topics = await aio.call(client.get_children_async, self.paths.offsets_dir(group))
        except NoNodeError:
            return []
        listed = await aio.gather(asyncio.get_running_loop(),
                                  [client.get_children_async(self.paths.topic_dir(group, t)) for t in topics])
        wanted = []
        for topic, outcome in zip(topics, listed):
            if isinstance(outcome, NoNodeError):
                continue
            if isinstance(outcome, BaseException):
                raise outcome
            for name in outcome:
                if (number := partition_number(name)) is not None:
                    wanted.append((topic, number))
                else:
                    log.warning("ignoring %s/%s: not a partition number", self.paths.topic_dir(group, topic), name)
        return sorted(wanted)

    def _report_unparsable(self, path: str, data: bytes | None, value: Unparsable) -> None:
        """Log a corrupt offset znode once per path and value, not at every fetch."""
        key = (path, data)
        if key in self._reported:
            return
        if len(self._reported) >= _MAX_REPORTED:
            self._reported.clear()
        self._reported.add(key)
        log.error("offset znode %s holds %s, not an offset (%s); OffsetFetch answers UNKNOWN_SERVER_ERROR for "
                  "that partition until it is repaired (write a decimal offset, or delete the znode)",
                  path, shown(data), value.reason)

    @staticmethod
    def _metadata(data: bytes, offset: int) -> str:
        try:
            record = json.loads(data)
            if record.get("o") == offset and isinstance(record.get("m"), str):
                return record["m"]
        except (ValueError, AttributeError):
            log.warning("ignoring unreadable offset metadata %r", data[:80])
        return ""  # absent, stale (the offset moved on without us) or unreadable

    async def list_groups(self) -> list[str]:
        """Every group under the offsets root, sorted."""
        return await self._conn.retry("list the consumer groups", self._inner_list_groups)

    async def _inner_list_groups(self) -> list[str]:
        try:
            return paths.group_ids(await aio.call(self._conn.client.get_children_async, self.paths.root))
        except NoNodeError:
            return []
