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
   before anything is queued: no multi is ever sent over the limit). A
   failed merged multi names its culprit op: that request gets its own
   error, the others are sent again; a failure nobody can be blamed for
   sends each request alone. A failed fence fails every request holding it,
   and is reported once to ``on_deposed(fence, reason)`` (the daemon drops
   the group there, as it does when a fenced state write fails). These
   rules, apart from the I/O, are :mod:`zkcoord.zk.commit_batch`'s; the
   ops are bytes encoded once per partition (:mod:`zkcoord.zk.jute`), and a
   commit's waiter is a future, or (``submit(on_done=...)``) a function the
   batcher calls in place when ZooKeeper answered, a deadline
   (``request_timeout_ms``) failing it in either form. The multis go on a
   ZooKeeper session of the event loop's own
   (:mod:`zkcoord.zk.multi_session`), not through kazoo's thread, while
   that session is open; through kazoo until it is (it is opened in the
   background, never waited for) and with a SASL login. Every other
   request here goes through kazoo.
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
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from kazoo.exceptions import (
    ConnectionClosedError, KazooException, NoNodeError, SessionExpiredError,
)

from zkcoord.core.legacy_values import Unparsable, partition_number, read_legacy_value, shown
from zkcoord.core.offset_fetch import Wanted, wanted_by_topic
from zkcoord.errors import ServiceUnavailableError, UsageError
from zkcoord.zk import aio, paths
from zkcoord.zk.auth import OPEN_ACL
from zkcoord.zk.commit_batch import OP_OVERHEAD_BYTES, Batch, Callback, CommitQueue, Entry, QueuedCommit, Targets
from zkcoord.zk.jute import EncodedMulti, OpCodec
from zkcoord.zk.multi_session import MultiSession, usable
from zkcoord.zk.multi_read import GET_DATA, read_many
from zkcoord.zk.connection import ZkConnection
from zkcoord.zk.ownership import Fence

__all__ = ["OffsetStore", "FetchedOffsets", "OffsetStats", "PreparedCommit", "TopicPartition", "ensure_offsets_root",
           "ensure_group_dirs"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
_FENCE_RESERVE_BYTES = 2048  # what a prepared chunk leaves for its fence check (a path under 1 KB)
_PREPARE_SLICE = 2000  # entries built between two yields to the event loop
# The encoded paths of a commit's partitions are cached for the next commit of the same ones, for a commit of
# at most this many: the steady commits of ordinary members. A bigger one's would stay alive and be walked by
# the cyclic collector after its pause (100,000 paths: 85-130 ms); it makes its own and drops them.
CACHED_TARGETS_PER_COMMIT = 1000
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


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode())


def _settled(loop: asyncio.AbstractEventLoop, on_done) -> asyncio.Future | None:
    """Nothing to commit: a future already complete, or ``on_done(None)`` now."""
    if on_done is not None:
        on_done(None)
        return None
    future = loop.create_future()
    future.set_result(None)
    return future


def _error_of(future: asyncio.Future) -> BaseException | None:
    return asyncio.CancelledError() if future.cancelled() else future.exception()


def _all(loop: asyncio.AbstractEventLoop, futures: list[asyncio.Future]) -> asyncio.Future:
    """One future for a commit split over several multis: None once every part
    landed, the first failure's exception otherwise (the others retrieved)."""
    combined = loop.create_future()
    left = [len(futures)]

    def done(part: asyncio.Future) -> None:
        error = part.exception() if not part.cancelled() else asyncio.CancelledError()
        if combined.done():
            return
        if error is not None:
            combined.set_exception(error)
            return
        left[0] -= 1
        if not left[0]:
            combined.set_result(None)

    for future in futures:
        future.add_done_callback(done)
    return combined


def _entry(targets: Targets, group: str, tp: TopicPartition, om: tuple[int, str], keep: bool = True) -> Entry:
    """One partition of a commit: its target (cached with ``keep``), the
    offset's znode value, the metadata's (None when empty); UsageError for
    bad names or values."""
    try:
        (topic, partition), (offset, metadata) = tp, om
    except (TypeError, ValueError):
        raise UsageError(f"offsets must map (topic, partition) to (offset, metadata), got {tp!r}: {om!r}") from None
    if type(offset) is not int:
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise UsageError(f"offset of {topic}-{partition} must be a whole number, got {offset!r}")
        offset = int(offset)
    if metadata is not None and not isinstance(metadata, str):
        raise UsageError(f"metadata of {topic}-{partition} must be a string, got {metadata!r}")
    if not metadata:
        return targets(group, topic, partition, keep), str(offset).encode(), None
    return (targets(group, topic, partition, keep), str(offset).encode(),
            json.dumps({"o": offset, "m": metadata}, separators=(",", ":")).encode())


@dataclass
class PreparedCommit:
    """A commit's ops, built and split by :meth:`OffsetStore.prepare`."""

    group: str
    chunks: list[tuple[list[Entry], int, int]]


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
        self._wakeup = asyncio.Event()
        self._worker: asyncio.Task | None = None
        self._reported: set[tuple[str, bytes | None]] = set()  # corrupt znodes logged already
        self._watchdog: asyncio.TimerHandle | None = None  # fails commits past their deadline
        self._client = None  # the kazoo client the encodings below are for (its chroot and ACL)
        self._targets: Targets | None = None
        # The commits' multis go on a session of the event loop's own (zk/multi_session.py), not through kazoo's
        # thread; with a SASL login, through kazoo.
        self._multis = MultiSession(conn) if usable(conn.security) else None
        self._commits = CommitQueue(OpCodec(), max_ops=max_ops_per_multi, max_bytes=max_multi_bytes,
                                    describe=lambda exc, what: aio.translate(exc, what, conn.hosts),
                                    on_deposed=on_deposed)

    @property
    def commit_session(self) -> MultiSession | None:
        """The session the multis go on; None when they go through kazoo (a SASL login)."""
        return self._multis

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
        targets = self._current_targets()
        keep = len(offsets) <= CACHED_TARGETS_PER_COMMIT
        for i, (tp, om) in enumerate(offsets.items()):
            if i and i % _PREPARE_SLICE == 0:
                await asyncio.sleep(0)
            entries.append(_entry(targets, group, tp, om, keep))
        return PreparedCommit(group, self._chunks(entries, None, reserve=True) if entries else [])

    def submit(self, group: str, offsets: Mapping[TopicPartition, tuple[int, str]] | PreparedCommit,
               fence: Fence | None = None,
               on_done: Callable[[BaseException | None], None] | None = None) -> asyncio.Future | None:
        """Queue the commit now, in call order, and return the future of its
        outcome (see :meth:`commit`): None once ZooKeeper applied every part.
        With ``on_done``, nothing is returned: ``on_done(None)`` is called
        when it landed, ``on_done(exception)`` when not, from the batcher
        (not a loop step later, as a future's callbacks are).

        Queuing is synchronous, so a caller holding a group's lock fixes the
        commit's place in the write order before the lock is released: a
        commit validated against generation N is queued before any commit of
        N+1. UsageError and NotOwnerError are raised here, before queuing.
        """
        loop = asyncio.get_running_loop()
        if isinstance(offsets, PreparedCommit):
            if offsets.group != group:
                raise UsageError(f"a commit prepared for group {offsets.group!r} cannot be submitted for {group!r}")
            if fence is not None and len(fence.path) + OP_OVERHEAD_BYTES > _FENCE_RESERVE_BYTES:
                raise UsageError(f"fence path {fence.path!r} is longer than a prepared commit leaves room for")
            chunks = offsets.chunks
        else:
            chunks = None
            targets = self._current_targets()
            keep = len(offsets) <= CACHED_TARGETS_PER_COMMIT
            entries = [_entry(targets, group, tp, om, keep) for tp, om in offsets.items()]
            if not entries:
                return _settled(loop, on_done)
        if chunks is not None and not chunks:
            return _settled(loop, on_done)
        if fence is not None and fence.group != group:
            raise UsageError(f"the fence of group {fence.group!r} cannot guard a commit of group {group!r}")
        if self._commits.is_dead(fence):
            raise self._commits.not_owner(fence)
        if chunks is None:
            chunks = self._chunks(entries, fence)
        elif fence is not None:  # the fence's check, in the room every prepared chunk left for it
            extra = _utf8_len(fence.path) + OP_OVERHEAD_BYTES
            chunks = [(chunk, nbytes + extra, nops + 1) for chunk, nbytes, nops in chunks]
        # The request time-out bounds each multi of a commit: a commit of 100,000 partitions is 100 multis, which
        # ZooKeeper may take longer than one time-out to apply while it keeps making progress.
        timeout_s = self._conn.request_timeout_ms / 1000
        deadline = loop.time() + timeout_s
        single = len(chunks) == 1 and on_done is not None
        futures = []
        for i, (chunk, nbytes, nops) in enumerate(chunks):
            future = Callback(on_done) if single else loop.create_future()
            self._commits.put(QueuedCommit(group, chunk, fence, future, nbytes, nops, deadline + i * timeout_s))
            futures.append(future)
        self._wakeup.set()
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._run())
        if self._watchdog is None:
            self._watchdog = loop.call_at(deadline, self._expire)
        if single:
            return None
        outcome = futures[0] if len(futures) == 1 else _all(loop, futures)
        if on_done is None:
            return outcome
        outcome.add_done_callback(lambda done: on_done(_error_of(done)))
        return None

    def _current_targets(self) -> Targets:
        """The encoded targets of the connection's current client (a restarted
        connection has a new one: its chroot and ACL are read again)."""
        client = self._conn.client
        if client is not self._client or self._targets is None:
            codec = OpCodec(client.chroot, client.default_acl)
            self._client, self._targets = client, Targets(self.paths, codec)
            self._commits.codec = codec
        return self._targets

    def _expire(self) -> None:
        """The watchdog: fail the commits past their deadline, re-armed for the next one."""
        self._watchdog = None
        loop = asyncio.get_running_loop()
        nearest = self._commits.expire(loop.time(), self._timed_out)
        if nearest is not None:
            self._watchdog = loop.call_at(nearest, self._expire)

    def _timed_out(self, group: str) -> ServiceUnavailableError:
        return ServiceUnavailableError(
            f"ZooKeeper at {self._conn.hosts} did not confirm the offset commit of group {group!r} within "
            f"{self._conn.request_timeout_ms / 1000:g} s; it may still be applied")

    def _chunks(self, entries: list[Entry], fence: Fence | None,
                reserve: bool = False) -> list[tuple[list[Entry], int, int]]:
        """The request as one chunk, or several if it cannot fit one multi
        (bytes or ops); with ``reserve``, each chunk leaves room for a fence
        check added later. UsageError, before anything is queued, for an
        entry too big for any multi."""
        if reserve:
            room_bytes, room_ops = self.max_multi_bytes - _FENCE_RESERVE_BYTES, self.max_ops_per_multi - 1
            base = (0, 0)
        else:
            room_bytes, room_ops = self.max_multi_bytes, self.max_ops_per_multi
            base = (_utf8_len(fence.path) + OP_OVERHEAD_BYTES, 1) if fence else (0, 0)
        chunks = []
        chunk, nbytes, nops = [], *base
        for entry in entries:
            target, value, meta = entry
            b, n = target.cost(value, meta)
            if base[0] + b > room_bytes:
                raise UsageError(
                    f"the offset of {target.topic}-{target.partition} needs a {b}-byte ZooKeeper write, more "
                    f"than one multi may carry ({room_bytes - base[0]} bytes, under ZooKeeper's 1 MB "
                    "jute.maxbuffer); shorten its metadata")
            if chunk and (nbytes + b > room_bytes or nops + n > room_ops):
                chunks.append((chunk, nbytes, nops))
                chunk, nbytes, nops = [], *base
            chunk.append(entry)
            nbytes, nops = nbytes + b, nops + n
        chunks.append((chunk, nbytes, nops))
        return chunks

    async def stop(self) -> None:
        """Stop the batching task; queued commits fail with ServiceUnavailableError."""
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
            self._worker = None
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self._commits.drain(ServiceUnavailableError("the offset store was stopped; the commit may or may not "
                                                    "have landed"))
        self._commits.in_flight = None
        if self._multis is not None:
            await self._multis.close()

    def forget(self, group: str) -> None:
        """Drop what is cached about ``group`` (e.g. when we stop owning it)."""
        self._commits.forget_group(self.paths.group(group))
        if self._targets is not None:
            self._targets.forget(group)

    # ------------------------------------------------------- the batcher
    async def _run(self) -> None:
        delay = 0.02
        commits = self._commits
        while True:
            if not len(commits):
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            batch = commits.take()
            if not batch.commits:
                continue
            commits.in_flight = batch
            try:
                connection_trouble = await self._send(batch)
            except Exception as exc:  # a bug: fail this batch, keep serving
                log.exception("offset commit batch failed")
                for commit in batch.commits:
                    if not commit.future.done():
                        commit.future.set_exception(exc)
                connection_trouble = False
            finally:
                commits.in_flight = None
            if connection_trouble:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
            else:
                delay = 0.02

    async def _send(self, batch: Batch) -> bool:
        """Send one batch as one multi; True if the connection was the trouble."""
        commits = self._commits
        sent = False
        multis = self._multis
        try:
            if multis is not None and multis.unsettled:
                # A lost multi may still land: nothing goes anywhere until ZooKeeper fences it (multi_session
                # rule 3a); ConnectionLoss meanwhile, and the batch waits.
                await multis.settle()
            await self._learn_dirs(batch)
            ops = commits.build(batch)
            self.stats.multis += 1
            self.stats.ops += len(ops)
            sent = True
            if multis is not None and multis.ready_now():
                answer = await multis.multi(EncodedMulti(ops))
            else:  # no session of its own open yet (or SASL): through kazoo, never waiting for one
                if multis is not None:
                    multis.open_soon()
                answer = await aio.call_request(self._conn.client, EncodedMulti(ops))
        except ConnectionClosedError as exc:
            commits.failed(batch, aio.translate(exc, "commit offsets", self._conn.hosts))
            return False
        except (*aio.RETRYABLE, SessionExpiredError) as exc:
            self.stats.failed_multis += sent  # its answer was lost: it may have landed
            commits.lost(batch, expired=isinstance(exc, SessionExpiredError))
            return True
        except KazooException as exc:
            commits.failed(batch, aio.translate(exc, "commit offsets", self._conn.hosts))
            return False
        if not answer:
            self.stats.commits += commits.applied(batch)
            return False
        self.stats.failed_multis += 1
        refused = answer[0]
        commits.refused(batch, refused.index, refused.error)
        return False

    # --------------------------------------------- what exists
    async def _learn_dirs(self, batch: Batch) -> None:
        """Learn the children of every directory the batch touches; create
        the offset directories (and metadata ones it writes to) if absent."""
        children = self._commits.children
        need: dict[str, bool] | None = None  # dir -> must exist
        group_of: dict[str, str] = {}  # dir -> its <root>/<group>
        for commit in batch.commits:
            for target, _, meta in commit.entries:
                if children.get(target.odir) is not None and target.mdir in children \
                        and (meta is None or children[target.mdir] is not None):
                    continue  # the usual case: known, and there where it must be
                if need is None:
                    need = {}
                need[target.odir] = True
                need[target.mdir] = need.get(target.mdir, False) or meta is not None
                if target.odir not in group_of:
                    group_of[target.odir] = group_of[target.mdir] = self.paths.group(commit.group)
        if need is None:
            return
        client = self._conn.client
        loop = asyncio.get_running_loop()
        unknown = [d for d in need if d not in children]
        listed = await aio.gather(loop, [client.get_children_async(d) for d in unknown])
        for path, outcome in zip(unknown, listed):
            if isinstance(outcome, NoNodeError):
                children[path] = None
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                children[path] = set(outcome)
        missing = [d for d, must in need.items() if must and children.get(d) is None]
        for outcome in await ensure_group_dirs(self._conn, sorted({group_of[d] for d in missing})):
            if isinstance(outcome, BaseException):
                raise outcome
        for path, outcome in zip(missing, await aio.gather(loop, [client.ensure_path_async(d) for d in missing])):
            if isinstance(outcome, BaseException):
                raise outcome
            children[path] = set()

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
                    raise self._commits.not_owner(fence)
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
        children = dict(zip(topics, listed))
        wanted = []
        # Sorted by topic, then partition; read in slices between yields to the event loop (a group of
        # 100,000 committed partitions lists 100,000 names here).
        for topic in sorted(children):
            outcome = children[topic]
            if isinstance(outcome, NoNodeError):
                continue
            if isinstance(outcome, BaseException):
                raise outcome
            numbers = []
            for start in range(0, len(outcome), _VALIDATE_SLICE):
                for name in outcome[start:start + _VALIDATE_SLICE]:
                    if (number := partition_number(name)) is not None:
                        numbers.append(number)
                    else:
                        log.warning("ignoring %s/%s: not a partition number", self.paths.topic_dir(group, topic),
                                    name)
                await asyncio.sleep(0)
            numbers.sort()
            wanted += [(topic, number) for number in numbers]
        return wanted

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
