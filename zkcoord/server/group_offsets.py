"""The offsets of the groups this daemon serves: commits, fetches, storage modes.

This module owns OffsetCommit and OffsetFetch for served groups, the offset
storage mode of each group (where its offsets go: :mod:`.offset_storage`),
the mode switches a migrate command asks for, and the repair of a ``dual``
group's ZooKeeper offsets when the group is loaded.

A commit follows the rule every write follows (:mod:`zkcoord.core.offset_commit`):

1. before the group is asked: partitions of topics the cluster does not
   have get UNKNOWN_TOPIC_OR_PARTITION, metadata over
   ``offset_metadata_max_bytes`` OFFSET_METADATA_TOO_LARGE (a topic name
   longer than a topic's can be, UNKNOWN_TOPIC_OR_PARTITION), and nothing is
   written for them; the ZooKeeper write of the rest is made ready
   (:meth:`~zkcoord.zk.offsets.OffsetStore.prepare`);
2. under the group's lock: the group decides (its kind: generation or
   member epoch), and the write is queued in the store of the group's mode,
   which fixes its order (Kafka appends to its log under the group lock
   too);
3. the write is awaited outside the lock; once accepted, the member's
   session restarts where its kind counts a commit as a heartbeat, and the
   member is answered, per partition.

A request with thousands of partitions is worked through in slices of
:data:`~zkcoord.wire.bulk_work.SLICE`, yielding to the event loop between
them; an OffsetFetch keeps its partitions per topic as asked
(:mod:`zkcoord.core.offset_fetch`) and the store reads only those with a
committed offset.

Kafka's answers about its own members (UNKNOWN_MEMBER_ID ... for a forwarded
commit) never reach a zkcoord member as they are (:mod:`zkcoord.core.dual_commit`).
Loading a ``dual`` group copies Kafka's offsets into ZooKeeper where
ZooKeeper is behind (a commit cut between its two writes).

The mode changes while the group is served: a migrate command posts a mode
request, the owner's :class:`~zkcoord.zk.modes.ModeRequestWatch` hands it
to :meth:`GroupOffsets.switch_mode`, which persists it through the
runtime's own fenced write (members kept) and so never races the command.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from zkcoord.core.errors import ErrorCode
from zkcoord.core.groups import kind_of
from zkcoord.core.limits import DEFAULT_OFFSET_METADATA_MAX_BYTES, offset_commit_error
from zkcoord.core.membership import OFFSET_STORAGES
from zkcoord.core.messages import Outcome
from zkcoord.core.offset_commit import CommitRequest, after_commit, decide_commit
from zkcoord.core.offset_fetch import FetchAnswer, Wanted
from zkcoord.errors import NotOwnerError, ZkcoordError
from zkcoord.kafka.forwarder import KafkaForwarder
from zkcoord.server.dual_commit import ForwardedOffsets
from zkcoord.server.group_runtime import NOT_NOW, GroupRuntime, GroupUnavailableError
from zkcoord.server.offset_storage import OffsetStorages
from zkcoord.tasks import Background
from zkcoord.wire.bulk_work import in_slices
from zkcoord.zk.modes import ModeRequestWatch

if TYPE_CHECKING:
    from zkcoord.server.manager import GroupManager

__all__ = ["GroupOffsets", "COMMIT_TOPIC_CHECK_WAIT_S"]

log = logging.getLogger(__name__)
E = ErrorCode

# How long an OffsetCommit waits to learn a topic's partition count; then it is
# committed as if the topic exists (Kafka down must not stall a group's commits,
# nor, behind them on the member's connection, its heartbeats).
COMMIT_TOPIC_CHECK_WAIT_S = 2.0


class GroupOffsets:
    """Offsets of the groups ``manager`` serves."""

    def __init__(self, manager: GroupManager, *, kafka_forwarder: KafkaForwarder | None = None,
                 offset_metadata_max_bytes: int = DEFAULT_OFFSET_METADATA_MAX_BYTES):
        self.manager = manager
        self.zookeeper = manager.offsets  # zk.offsets.OffsetStore
        self.forwarder = kafka_forwarder
        self.forwarded = ForwardedOffsets(self.zookeeper, lambda: manager.metrics)
        self.storages = OffsetStorages(self.zookeeper, self.forwarded, kafka_forwarder)
        self.offset_metadata_max_bytes = offset_metadata_max_bytes
        self.repairs: dict[str, asyncio.Task] = {}  # group -> its last load's dual repair (tests await it)
        self._background = Background(log, "group offsets")
        # Without a ZooKeeper connection (unit tests) no mode request reaches the groups.
        self.mode_requests = ModeRequestWatch(manager.conn, self.switch_mode) if manager.conn is not None else None

    # -- the manager's group life cycle --------------------------------------------------
    def loaded(self, runtime: GroupRuntime) -> None:
        """A group was loaded here: follow its mode requests, repair a ``dual`` group."""
        group_id = runtime.group_id
        if self.mode_requests is not None:
            self.mode_requests.watch(group_id)  # a request posted before we loaded is delivered now
        if runtime.group.offset_storage == "dual" and self.forwarder is not None:
            self.repairs[group_id] = self._background.spawn(self._repair_dual(group_id),
                                                            f"repair the dual offsets of group {group_id}")

    async def loaded_many(self, runtimes: list[GroupRuntime]) -> None:
        """:meth:`loaded` of many groups (a takeover): their mode requests watched in one request."""
        if self.mode_requests is not None:
            await self.mode_requests.watch_many([r.group_id for r in runtimes])
        for runtime in runtimes:
            if runtime.group.offset_storage == "dual" and self.forwarder is not None:
                self.repairs[runtime.group_id] = self._background.spawn(
                    self._repair_dual(runtime.group_id), f"repair the dual offsets of group {runtime.group_id}")

    def forget(self, group_id: str, why: str = "no longer served here") -> None:
        """The group is no longer served here (its forward in flight, if any, aborted)."""
        self.abort_forwards([group_id], why)
        self.forwarded.forget(group_id)
        if self.mode_requests is not None:
            self.mode_requests.unwatch(group_id)

    def abort_forwards(self, group_ids: Iterable[str], why: str) -> None:
        """Groups this daemon stops owning (synchronously, before anything
        tells their members): if a commit of one is in flight to Kafka, the
        forwarder's connections are aborted, so that commit cannot land after
        the next owner's (:mod:`~zkcoord.server.dual_commit`, "A deposed
        owner's forward"). Other groups' forwards in flight fail with them
        (COORDINATOR_NOT_AVAILABLE: their members commit again)."""
        if self.forwarder is None:
            return
        caught = [g for g in group_ids if self.forwarded.forwarding(g)]
        if caught and self.forwarder.abort(f"{why}: group(s) {', '.join(sorted(caught)[:5])}"):
            if self.manager.metrics is not None:
                self.manager.metrics.observe_forward_abort()
            log.warning("%d group(s) %s no longer owned here with a commit in flight to Kafka (%s): the Kafka "
                        "connections were aborted, so that commit cannot be stored after the next owner's",
                        len(caught), sorted(caught)[:10], why)

    async def close(self) -> None:
        if self.mode_requests is not None:
            self.mode_requests.unwatch_all()
        if self.forwarder is not None:
            await self.forwarder.close()

    async def _repair_dual(self, group_id: str) -> None:
        """ZooKeeper behind Kafka in a ``dual`` group (a commit cut between its
        two writes): copy Kafka's offsets, fenced, in the group's commit order."""
        try:
            slot = self.forwarded.order.take(group_id)
            try:
                fence = self.manager.ownership.fence(group_id)
            except ZkcoordError:
                slot.release()
                raise
            await self.forwarded.repair(self.forwarder, group_id, slot, fence)
        except ZkcoordError as exc:
            log.warning("group %s: ZooKeeper's offsets not compared with Kafka's after loading: %s", group_id, exc)
        finally:
            if self.repairs.get(group_id) is asyncio.current_task():
                del self.repairs[group_id]

    # -- OffsetCommit ----------------------------------------------------------------------
    async def commit(self, group_id, member_id, generation_id, instance_id, wanted, api_version: int = 0):
        """OffsetCommit: one error per ``(topic, partition, offset, metadata)``
        of ``wanted``, in order (the module's three steps)."""
        manager = self.manager
        try:
            runtime = await manager.runtime(group_id, allow_empty=True)
            exists = generation_id < 0 or await manager.exists(runtime)
            counts = await self._partition_counts(wanted)
            kept, refused_early = await self._sort_commit(wanted, counts)
            prepared = await self.zookeeper.prepare(group_id, kept) if kept else None
            request = CommitRequest(member_id, generation_id, instance_id, kept, api_version)

            def begin(decision):
                if not decision.writes:
                    return None
                return self.storages[decision.mode].begin(group_id, decision.offsets, prepared,
                                                          lambda: manager.ownership.fence(group_id))

            decision, refused = await runtime.write_then_apply(
                lambda group, now: decide_commit(group, request, exists, runtime.config), begin,
                lambda group, decided, now: after_commit(group, request, decided, now))
            if decision.error is E.NONE:
                if decision.writes and manager.metrics is not None:
                    manager.metrics.observe_offset_commit(decision.mode)
                return await self._answer_of(wanted, refused or {}, refused_early)
            code = decision.error
        except GroupUnavailableError as exc:
            code = exc.code
        except NotOwnerError:
            code = E.NOT_COORDINATOR
        except ZkcoordError as exc:
            log.warning("OffsetCommit %s failed: %s", group_id, exc)
            code = E.COORDINATOR_LOAD_IN_PROGRESS if manager.ownership.is_suspended(group_id) \
                else E.UNKNOWN_SERVER_ERROR
        return [code] * len(wanted)

    def commit_now(self, group_id, member_id, generation_id, instance_id, wanted, api_version,
                   respond: Callable[[list | BaseException], None]) -> bool:
        """:meth:`commit` without a task, for a small commit of a ``zookeeper``
        group served right now whose lock is free and whose existence and
        topics are known without asking anyone: the same three steps, with
        ``respond(codes)`` called once the write was accepted (or refused, or
        at once when nothing is written; an exception: a bug), from the
        offset store's batcher. False, with nothing done, when :meth:`commit`
        must take it."""
        manager = self.manager
        runtime = manager.serving(group_id)
        if runtime is None:
            return False
        group = runtime.group
        if group.offset_storage != "zookeeper" or (generation_id >= 0 and runtime.version is None
                                                   and group.size == 0):
            return False  # another store's path, or Kafka's "does the group exist" needs a read
        counts = self._counts_now(wanted)
        if counts is None:
            return False
        kept, refused_early = self._sort_now(wanted, counts)
        request = CommitRequest(member_id, generation_id, instance_id, kept, api_version)
        answer = [refused_early.get((t, p), E.NONE) for t, p, _, _ in wanted] if refused_early \
            else [E.NONE] * len(wanted)

        def begin(decision) -> bool:
            if not decision.writes:
                return False

            def written(error: BaseException | None) -> None:  # the batcher's, once ZooKeeper answered
                if error is not None:
                    respond([self._commit_error(group_id, error)] * len(wanted)
                            if isinstance(error, ZkcoordError) else error)
                    return
                if manager.metrics is not None:
                    manager.metrics.observe_offset_commit("zookeeper")
                self._after_commit(runtime, request, decision, lambda: respond(answer))

            self.zookeeper.submit(group_id, decision.offsets, manager.ownership.fence(group_id), on_done=written)
            return True

        try:
            found = runtime.write_now(lambda g, now: decide_commit(g, request, True, runtime.config), begin)
        except ZkcoordError as exc:
            respond([self._commit_error(group_id, exc)] * len(wanted))
            return True
        if found is NOT_NOW:
            return False
        decision, queued = found
        if decision.error is not E.NONE:
            respond([decision.error] * len(wanted))
        elif not queued:
            self._after_commit(runtime, request, decision, lambda: respond(answer))
        return True

    def _after_commit(self, runtime: GroupRuntime, request: CommitRequest, decision, then: Callable[[], None]) -> None:
        """Step 3 of an accepted commit (the member's session restarts), then
        ``then()``; in a task only when the group's lock is held meanwhile."""
        after = lambda group, now: after_commit(group, request, decision, now)  # noqa: E731
        if not runtime.active or runtime.apply_now(after):
            then()
            return

        async def later() -> None:
            try:
                await runtime.apply(after)
            except GroupUnavailableError:
                pass  # no longer served here: the commit stands, nothing to apply
            then()
        self._background.spawn(later(), f"apply a commit of group {runtime.group_id}")

    def _commit_error(self, group_id: str, exc: ZkcoordError) -> ErrorCode:
        """The code a commit gets for a failure of its own (as :meth:`commit` answers it)."""
        if isinstance(exc, GroupUnavailableError):
            return exc.code
        if isinstance(exc, NotOwnerError):
            return E.NOT_COORDINATOR
        log.warning("OffsetCommit %s failed: %s", group_id, exc)
        return E.COORDINATOR_LOAD_IN_PROGRESS if self.manager.ownership.is_suspended(group_id) \
            else E.UNKNOWN_SERVER_ERROR

    def _counts_now(self, wanted) -> dict | None:
        """:meth:`_partition_counts` from memory; None when it would ask."""
        watcher = self.manager.topic_watcher
        if watcher is None:
            return {}
        return watcher.partition_counts_now({t for t, _, _, _ in wanted})

    async def _partition_counts(self, wanted) -> dict:
        """The partition count of each topic of an OffsetCommit the cluster
        knows (None: a topic it does not have); {} without topic metadata.
        Kafka answers UNKNOWN_TOPIC_OR_PARTITION for a partition it does not
        have and commits the rest (:func:`_sort_into`)."""
        watcher = self.manager.topic_watcher
        if watcher is None:
            return {}
        topics = set()
        async for part in in_slices(wanted):  # a commit may name 460,000 partitions
            topics.update(w[0] for w in part)
        return await watcher.partition_counts(topics, wait_s=COMMIT_TOPIC_CHECK_WAIT_S)

    def _sort_now(self, wanted, counts: dict) -> tuple[dict, dict]:
        """:meth:`_sort_commit` of a small commit, without yielding."""
        kept, refused = {}, {}
        _sort_into(kept, refused, wanted, counts, self.offset_metadata_max_bytes)
        return kept, refused

    async def _sort_commit(self, wanted, counts: dict) -> tuple[dict, dict]:
        """``({(topic, partition): (offset, metadata)} to write, {(topic,
        partition): error} refused before any write)`` of an OffsetCommit,
        in slices between yields to the event loop."""
        kept, refused = {}, {}
        async for part in in_slices(wanted):
            _sort_into(kept, refused, part, counts, self.offset_metadata_max_bytes)
        return kept, refused

    @staticmethod
    async def _answer_of(wanted, refused: dict, refused_early: dict) -> list[ErrorCode]:
        """Each partition's error in request order: refused before any write
        (``refused_early``) or by the decision (``refused``), else NONE; in
        slices between yields to the event loop."""
        if not refused and not refused_early:  # every partition committed (a commit may name 100,000)
            return [E.NONE] * len(wanted)
        answer = []
        async for part in in_slices(wanted):
            for t, p, _, _ in part:
                code = refused_early.get((t, p))
                answer.append(code if code is not None else refused.get((t, p), E.NONE))
        return answer

    # -- OffsetFetch -----------------------------------------------------------------------
    async def fetch(self, group_id: str, wanted: Wanted | None, member_id: str | None = None,
                    member_epoch: int = -1) -> tuple[ErrorCode, FetchAnswer]:
        """OffsetFetch: (group error, answer); ``wanted`` None asks for every
        committed partition. A partition whose legacy znode holds no offset
        gets :data:`~zkcoord.core.offset_fetch.CORRUPT_OFFSET_ERROR`; the
        others are answered. A member named (OffsetFetch v9+) is checked as
        the group's kind says (a consumer group's member must exist at that
        epoch: UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH)."""
        manager = self.manager
        if group_id in await manager.unknown([group_id]):
            return E.NONE, FetchAnswer(wanted)
        try:
            runtime = await manager.runtime(group_id, allow_empty=True)
            if member_id is not None or member_epoch >= 0:
                code = await runtime.read(lambda g, now: kind_of(g).validate_offset_fetch(g, member_id, member_epoch))
                if code is not E.NONE:
                    return code, FetchAnswer({})
            stored = await self.storages[runtime.group.offset_storage].fetch(group_id, wanted)
        except GroupUnavailableError as exc:
            return exc.code, FetchAnswer({})
        except ZkcoordError as exc:
            log.warning("OffsetFetch %s failed: %s", group_id, exc)
            return E.COORDINATOR_LOAD_IN_PROGRESS, FetchAnswer({})
        return E.NONE, FetchAnswer(wanted, stored, getattr(stored, "unparsable", {}))

    # -- offset storage mode ------------------------------------------------------------
    async def switch_mode(self, group_id: str, mode: str) -> None:
        """A migrate command asks for ``mode``: persist it with our own fenced
        write, then use it (members, generation and timers stay as they are)."""
        runtime = self.manager.runtimes.get(group_id)
        if runtime is None or not runtime.active or mode not in OFFSET_STORAGES:
            return

        def switch(group, now_ms: int) -> Outcome:
            if group.offset_storage == mode:
                return Outcome(group)
            return Outcome(kind_of(group).with_offset_storage(group, mode), persist=True)

        before = runtime.group.offset_storage
        await runtime.apply(switch)
        if before != mode:
            log.info("group %s: offset storage %s -> %s", group_id, before, mode)


def _sort_into(kept: dict, refused: dict, wanted, counts: dict, metadata_max_bytes: int) -> None:
    """Sort an OffsetCommit's ``(topic, partition, offset, metadata)`` into
    ``kept`` (to write) and ``refused`` (an error before any write): a
    partition the cluster does not have (``counts``: topic -> partition
    count, None for a topic it does not have; a topic not in it is not
    checked), or metadata over the limit. A partition named twice: the last
    one counts."""
    for t, p, o, m in wanted:
        if t in counts and ((count := counts[t]) is None or not 0 <= p < count):
            refused[(t, p)] = E.UNKNOWN_TOPIC_OR_PARTITION
            continue
        code = offset_commit_error(t, m, metadata_max_bytes)
        if code is not E.NONE:
            refused[(t, p)] = code
            kept.pop((t, p), None)
        else:
            kept[(t, p)] = (o, m or "")
            refused.pop((t, p), None)
