"""The group manager: which groups this daemon serves, and how.

Owns the map group id -> :class:`GroupRuntime` of the groups this daemon
owns, their loading after an election win, and the reaction to ZooKeeper's
connection state:

* FindCoordinator: the group's elected owner. With none, nobody contends: a
  lookup must leave nothing in ZooKeeper (an anonymous client could look up
  group ids without end). The answer is the live daemon
  :func:`zkcoord.core.placement.choose_node` picks (rendezvous hashing over
  ``/zkcoord/nodes``; only daemons the caller can name, e.g. with a
  gateway). A daemon that owns nothing for this group answers itself only
  when it is that choice.
* A request for a group nobody owns (JoinGroup, OffsetCommit, ... whatever
  comes first): this daemon contends, and if it wins loads the group and
  serves the request; if another daemon wins, or the group has an owner
  already: NOT_COORDINATOR, and the client looks up again, as with Kafka.
  For a group still loading, or while the ZooKeeper connection is SUSPENDED:
  COORDINATOR_LOAD_IN_PROGRESS (SyncGroup gets REBALANCE_IN_PROGRESS and
  Heartbeat NONE while loading, as Kafka does).
* Ownership lost (our contender node vanished, a fenced write refused, the
  session LOST): the runtime is unloaded at once; parked requests get
  NOT_COORDINATOR.

Cleanup, every ``cleanup_interval_ms`` (Kafka's
``offsets.retention.check.interval.ms``): a group this daemon owns that is
Empty, has no members, uses ``zookeeper`` offset storage and has no committed
offsets is removed, as Kafka's offsets cleanup removes such groups: its state
znode (fenced, at its version), then its election znodes
(:meth:`~zkcoord.zk.ownership.GroupOwnership.retire`). A request that made
this daemon contend for a group with nothing stored (a DescribeGroups or
OffsetFetch of an unknown group) so leaves no znodes for long, and
ListGroups never lists such a group.

Offsets go where the group's offset storage mode (``"os"`` in its state
record, :mod:`zkcoord.zk.modes`) says:

=========  ==============================================================
mode       OffsetCommit                         OffsetFetch
=========  ==============================================================
zookeeper  the legacy layout, :mod:`zkcoord.zk.offsets`, fenced by the
           group's election node (a deposed owner cannot commit)
dual       Kafka first, then ZooKeeper (fenced)   both; per partition the
           (:mod:`zkcoord.server.dual_commit`:    larger offset
           the order, its failure points and      (``core.migration.dual_fetch``)
           their recovery); ack only when both
           stored it
kafka      Kafka only, after checking that we     Kafka only
           still own the group
=========  ==============================================================

Kafka's answers about its own members (UNKNOWN_MEMBER_ID ... for a forwarded
commit) never reach a zkcoord member as they are (:mod:`zkcoord.core.dual_commit`).
Loading a ``dual`` group copies Kafka's offsets into ZooKeeper where
ZooKeeper is behind (a commit cut between its two writes).

A ``dual`` / ``kafka`` group on a daemon without ``bootstrap_servers``
answers COORDINATOR_NOT_AVAILABLE (logged once per group). Kafka not
answering in time: COORDINATOR_NOT_AVAILABLE, so the client retries.

Limits (:mod:`zkcoord.core.limits`): an OffsetCommit partition whose
metadata is over ``offset_metadata_max_bytes`` gets OFFSET_METADATA_TOO_LARGE
(one whose topic name is longer than a topic's can be,
UNKNOWN_TOPIC_OR_PARTITION) once the group accepts the commit, and nothing
is written for it; the other partitions are committed, as Kafka does. A
request with thousands of partitions or groups is worked through in slices
of :data:`SLICE`, yielding to the event loop between them, so other
groups' requests are answered meanwhile; an OffsetFetch keeps its partitions
per topic as asked (:mod:`zkcoord.core.offset_fetch`) and the store reads
only those with a committed offset.

The mode changes while the group is served: a migrate command posts a mode
request, the owner's :class:`~zkcoord.zk.modes.ModeRequestWatch` hands
it to :meth:`GroupManager._on_mode_request`, which persists it through the
runtime's own fenced write (members kept) and so never races the command.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from zkcoord.core import group as core
from zkcoord.core.errors import ErrorCode, validate_group_id
from zkcoord.core.limits import DEFAULT_OFFSET_METADATA_MAX_BYTES, offset_commit_error
from zkcoord.core.membership import OFFSET_STORAGES
from zkcoord.core.migration import dual_fetch
from zkcoord.core.offset_fetch import FetchAnswer, Wanted
from zkcoord.core.placement import choose_node
from zkcoord.errors import NotOwnerError, ServiceUnavailableError, StateError, ZkcoordError
from zkcoord.kafka.forwarder import KafkaForwarder
from zkcoord.zk.group_reads import unknown_groups
from zkcoord.zk.modes import ModeRequestWatch
from zkcoord.zk.offsets import FetchedOffsets
from zkcoord.server.dual_commit import ForwardedOffsets
from zkcoord.server.group_runtime import GroupRuntime, GroupUnavailableError, monotonic_ms
from zkcoord.tasks import Background

log = logging.getLogger(__name__)
E = ErrorCode

# How long an OffsetCommit waits to learn a topic's partition count; then it is
# committed as if the topic exists (Kafka down must not stall a group's commits,
# nor, behind them on the member's connection, its heartbeats).
COMMIT_TOPIC_CHECK_WAIT_S = 2.0
SLICE = 500  # partitions or groups handled between two yields to the event loop
BROKEN_RECHECK_MS = 5_000  # a group whose state could not be loaded is read again after this long
UNKNOWN_TOKEN = 0  # the token of a request answered for a group that exists nowhere (runtimes count from 1)


async def pause_every(index: int) -> None:
    """Yield to the event loop at every SLICE-th item of a long request."""
    if index and index % SLICE == 0:
        await asyncio.sleep(0)


class GroupManager:
    def __init__(self, node_id: int, group_config: core.GroupConfig, ownership, store, offsets, nodes,
                 topic_watcher=None, *, conn=None, kafka_forwarder: KafkaForwarder | None = None,
                 member_disconnect_grace_ms: int = -1, rebalance_notice_hold_ms: int = 0,
                 cleanup_interval_ms: int = 600_000,
                 offset_metadata_max_bytes: int = DEFAULT_OFFSET_METADATA_MAX_BYTES):
        self.node_id = node_id
        self.group_config = group_config
        self.ownership = ownership
        self.store = store
        self.offsets = offsets
        self.nodes = nodes
        self.conn = conn
        self.topic_watcher = topic_watcher
        self._background = Background(log, "group manager")
        self.runtimes: dict[str, GroupRuntime] = {}
        self._loading: dict[str, asyncio.Task] = {}
        # group -> (why its state cannot be loaded, when that was found): its requests get UNKNOWN_SERVER_ERROR
        # without a read for BROKEN_RECHECK_MS, then the state is read again (an operator may have repaired it).
        self._broken: dict[str, tuple[str, int]] = {}
        # Without a ZooKeeper connection (unit tests) no mode request reaches the groups; without a
        # forwarder (no --bootstrap-servers) dual and kafka groups are not available.
        self.mode_requests = ModeRequestWatch(conn, self._on_mode_request) if conn is not None else None
        self.forwarder = kafka_forwarder
        self.forwarded = ForwardedOffsets(offsets, lambda: self.metrics)
        self.repairs: dict[str, asyncio.Task] = {}  # group -> its last load's dual repair (tests await it)
        self._warned_no_kafka: set[str] = set()
        self.metrics = None  # DaemonMetrics, set by the daemon with --metrics-listen
        self.member_disconnect_grace_ms = member_disconnect_grace_ms  # -1: off
        self.rebalance_notice_hold_ms = rebalance_notice_hold_ms  # 0: heartbeats never held (core.notice)
        self.cleanup_interval_ms = cleanup_interval_ms
        self._cleanup_task: asyncio.Task | None = None
        self._live: dict | None = None  # node id -> NodeInfo of the live daemons, while a watch holds
        self.offset_metadata_max_bytes = offset_metadata_max_bytes

    # -- ownership ---------------------------------------------------------------
    async def find_coordinator(self, group_id: str) -> tuple[int, str, int]:
        """(node id, host, port) of the group's owner: its daemon listener."""
        owner = await self.find_owner(group_id)
        return owner.node_id, owner.host, owner.port

    async def find_owner(self, group_id: str, eligible=None):
        """The registration (:class:`~zkcoord.zk.nodes.NodeInfo`) of the group's
        owner; with none, of the live daemon chosen for it (module docstring),
        among those ``eligible(info)`` accepts. GroupUnavailableError."""
        found = (await self.find_owners([group_id], eligible))[group_id]
        if isinstance(found, GroupUnavailableError):
            raise found
        return found

    async def find_owners(self, group_ids: list[str], eligible=None) -> dict:
        """:meth:`find_owner` of distinct ids: {id: NodeInfo or the
        GroupUnavailableError it would raise}. The owners are looked up
        together (:meth:`~zkcoord.zk.ownership.GroupOwnership.current_owners`),
        in slices of :data:`SLICE` with a yield between them."""
        answers: dict = {}
        for start in range(0, len(group_ids), SLICE):
            if start:
                await asyncio.sleep(0)
            chunk = group_ids[start:start + SLICE]
            try:
                owners = await self.ownership.current_owners(chunk)
            except ZkcoordError as exc:
                for group_id in chunk:
                    answers[group_id] = GroupUnavailableError(group_id, E.COORDINATOR_NOT_AVAILABLE, str(exc))
                continue
            for group_id in chunk:
                try:
                    answers[group_id] = await self._owner_info(group_id, owners[group_id], eligible)
                except GroupUnavailableError as exc:
                    answers[group_id] = exc
        return answers

    async def _owner_info(self, group_id: str, owner: int | None, eligible):
        try:
            if owner == self.node_id and not self.ownership.is_owned(group_id):
                owner = None  # a contender of ours from a lost session, on its way out
            if owner is None:
                return await self._choose(group_id, eligible)
            if owner == self.node_id:
                if self.ownership.is_suspended(group_id):
                    raise GroupUnavailableError(group_id, E.COORDINATOR_NOT_AVAILABLE, "ZooKeeper suspended")
                await self._ensure_loaded(group_id)
            info = await self.nodes.node(owner)
        except GroupUnavailableError:
            raise
        except ZkcoordError as exc:
            raise GroupUnavailableError(group_id, E.COORDINATOR_NOT_AVAILABLE, str(exc)) from exc
        if info is None:
            raise GroupUnavailableError(group_id, E.COORDINATOR_NOT_AVAILABLE, f"owner {owner} not registered")
        return info

    async def _choose(self, group_id: str, eligible):
        """The live daemon FindCoordinator names for a group nobody owns."""
        live = self._live
        if live is None:
            live = await self.nodes.nodes(on_change=self._nodes_changed)
            self._live = live
        candidates = {n: info for n, info in live.items() if eligible is None or eligible(info)}
        chosen = choose_node(group_id, candidates)
        if chosen is None:
            raise GroupUnavailableError(group_id, E.COORDINATOR_NOT_AVAILABLE, "no live zkcoord daemon registered")
        return candidates[chosen]

    def _nodes_changed(self) -> None:
        self._live = None

    async def _take(self, group_id: str) -> None:
        """A request for a group we do not own: contend if nobody owns it;
        NOT_COORDINATOR if another daemon owns it or wins."""
        try:
            owner = await self.ownership.current_owner(group_id)
            if owner is None or owner == self.node_id:
                owner = await self.ownership.contend(group_id)
        except ZkcoordError as exc:
            raise GroupUnavailableError(group_id, E.COORDINATOR_NOT_AVAILABLE, str(exc)) from exc
        if owner != self.node_id:
            raise GroupUnavailableError(group_id, E.NOT_COORDINATOR, f"owned by node {owner}")

    async def _ensure_loaded(self, group_id: str) -> GroupRuntime:
        runtime = self.runtimes.get(group_id)
        if runtime is not None and runtime.active:
            return runtime
        task = self._loading.get(group_id)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._load(group_id))
            self._loading[group_id] = task
            task.add_done_callback(lambda _t, g=group_id: self._loading.pop(g, None))
        return await asyncio.shield(task)

    async def _load(self, group_id: str) -> GroupRuntime:
        try:
            record, version = await self.store.load(group_id)
            runtime = GroupRuntime(group_id, self.group_config, self._persist, self._stepped_down,
                                   on_persisted=self._on_persisted,
                                   on_transition=None if self.metrics is None else self.metrics.observe_transition)
            if self.metrics is not None:
                self.metrics.observe_loaded(core.from_record(group_id, record) if record else runtime.group)
            await runtime.load(record, None if version is None or version < 0 else version)
            self._track_topics(runtime.group)
        except StateError as exc:
            self._broken[group_id] = (str(exc), monotonic_ms())
            log.error("group %s cannot be served: %s", group_id, exc)
            raise GroupUnavailableError(group_id, E.UNKNOWN_SERVER_ERROR, str(exc)) from exc
        except ZkcoordError as exc:
            raise GroupUnavailableError(group_id, E.COORDINATOR_LOAD_IN_PROGRESS, str(exc)) from exc
        self._broken.pop(group_id, None)
        self.runtimes[group_id] = runtime
        if self.mode_requests is not None:
            self.mode_requests.watch(group_id)  # a request posted before we loaded is delivered now
        if runtime.group.offset_storage == "dual" and self.forwarder is not None:
            self.repairs[group_id] = self._background.spawn(self._repair_dual(group_id),
                                                            f"repair the dual offsets of group {group_id}")
        return runtime

    async def _repair_dual(self, group_id: str) -> None:
        """ZooKeeper behind Kafka in a ``dual`` group (a commit cut between its
        two writes): copy Kafka's offsets, fenced, in the group's commit order."""
        try:
            slot = self.forwarded.order.take(group_id)
            try:
                fence = self.ownership.fence(group_id)
            except ZkcoordError:
                slot.release()
                raise
            await self.forwarded.repair(self.forwarder, group_id, slot, fence)
        except ZkcoordError as exc:
            log.warning("group %s: ZooKeeper's offsets not compared with Kafka's after loading: %s", group_id, exc)
        finally:
            if self.repairs.get(group_id) is asyncio.current_task():
                del self.repairs[group_id]

    async def runtime(self, group_id: str, loading_code: ErrorCode = E.COORDINATOR_LOAD_IN_PROGRESS,
                      allow_empty: bool = False):
        """The runtime of an owned, loaded group (contending first if nobody
        owns it), or GroupUnavailableError. Returns None only when
        ``loading_code`` is NONE and the group loads. ``allow_empty``: the
        API takes the empty group id (Kafka's rule, ``validate_group_id``)."""
        code = validate_group_id(group_id, allow_empty=allow_empty)
        if code is not E.NONE:
            raise GroupUnavailableError(group_id, code, "invalid group id")
        if group_id in self._broken:
            reason, since = self._broken[group_id]
            if monotonic_ms() - since < BROKEN_RECHECK_MS:
                raise GroupUnavailableError(group_id, E.UNKNOWN_SERVER_ERROR, reason)
        if group_id in self._loading or (self.ownership.is_owned(group_id)
                                         and self.ownership.is_suspended(group_id)):
            if loading_code is E.NONE:
                return None
            raise GroupUnavailableError(group_id, loading_code, "loading or ZooKeeper suspended")
        if not self.ownership.is_owned(group_id):
            await self._take(group_id)
            if self.ownership.is_suspended(group_id):
                raise GroupUnavailableError(group_id, loading_code if loading_code is not E.NONE
                                            else E.COORDINATOR_LOAD_IN_PROGRESS, "ZooKeeper suspended")
        runtime = self.runtimes.get(group_id)
        if runtime is not None and runtime.active:
            return runtime
        return await self._ensure_loaded(group_id)

    def serving(self, group_id: str) -> GroupRuntime | None:
        """The runtime of a group served right now, without waiting: owned,
        loaded, active, not suspended. None when :meth:`runtime` must decide
        (it answers or raises what the request gets)."""
        runtime = self.runtimes.get(group_id)
        if (runtime is None or not runtime.active or group_id in self._loading
                or not self.ownership.is_owned(group_id) or self.ownership.is_suspended(group_id)):
            return None
        return runtime

    async def _persist(self, group_id: str, record: dict | None, version: int | None) -> int | None:
        """The runtime's write: fenced by the store through the ownership."""
        if record is None:
            await self.store.delete(group_id, version)
            return None
        return await self.store.write(group_id, record, version)

    def _stepped_down(self, group_id: str) -> None:
        self.runtimes.pop(group_id, None)
        self.forwarded.forget(group_id)
        if self.mode_requests is not None:
            self.mode_requests.unwatch(group_id)
        if self.topic_watcher is not None:
            self.topic_watcher.untrack(group_id)

    def _on_persisted(self, group: core.Group) -> None:
        """A runtime wrote the group's state: log it, watch its topics."""
        log.info("group %s: %s, generation %d, leader %s, members [%s]", group.group_id, group.state.value,
                 group.generation_id, group.leader_id or "-", ", ".join(group.members))
        self._track_topics(group)

    # -- topic metadata --------------------------------------------------------------
    def _track_topics(self, group: core.Group) -> None:
        """Watch the partition counts of what the group's members subscribe to."""
        if self.topic_watcher is None:
            return
        from zkcoord.server.subscriptions import subscribed_topics

        self._background.spawn(self.topic_watcher.track(group.group_id, subscribed_topics(group)),
                               f"watch the topics of group {group.group_id}")

    async def metadata_changed(self, group_id: str) -> None:
        """A subscribed topic's partition count changed: rebalance the group."""
        runtime = self.runtimes.get(group_id)
        if runtime is None or not runtime.active:
            return
        try:
            await runtime.apply(lambda g, now: core.handle_metadata_change(g, now, runtime.config))
        except ZkcoordError as exc:
            log.warning("group %s: rebalance after a partition change not started: %s", group_id, exc)

    def on_ownership_change(self, change) -> None:
        """GroupOwnership's callback (on the loop thread; must not block)."""
        from zkcoord.zk.ownership import ChangeKind

        if change.kind is ChangeKind.LOST:
            for group_id in change.groups:
                if self.topic_watcher is not None:
                    self.topic_watcher.untrack(group_id)
                if self.mode_requests is not None:
                    self.mode_requests.unwatch(group_id)
                self.forwarded.forget(group_id)
                runtime = self.runtimes.pop(group_id, None)
                if runtime is not None:
                    self._background.spawn(runtime.unload(change.reason), f"unload group {group_id}")

    # -- cleanup of groups that hold nothing -------------------------------------------
    def start_cleanup(self) -> None:
        """Start the periodic cleanup (module docstring); stopped by :meth:`release_all`."""
        if self._cleanup_task is None:
            self._cleanup_task = self._background.spawn(self._cleanup_loop(), "remove empty groups")

    async def _cleanup_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cleanup_interval_ms / 1000)
            await self.cleanup_empty_groups()

    async def cleanup_empty_groups(self) -> list[str]:
        """Remove every owned group that holds nothing; the ids removed."""
        removed = []
        for group_id, runtime in list(self.runtimes.items()):
            try:
                if await self._remove_if_empty(group_id, runtime):
                    removed.append(group_id)
            except ZkcoordError as exc:  # the next round tries again
                log.warning("group %s: not removed although empty: %s", group_id, exc)
        return removed

    async def _remove_if_empty(self, group_id: str, runtime: GroupRuntime) -> bool:
        if self.serving(group_id) is not runtime or not _holds_nothing(runtime.group):
            return False
        if await self.offsets.fetch(group_id):
            return False
        removed = await runtime.retire(_holds_nothing)
        if not removed:
            return False
        self._stepped_down(group_id)
        await self.ownership.retire(group_id)
        log.info("group %s: Empty with no committed offsets, removed with its znodes", group_id)
        return True

    async def release_all(self) -> None:
        """Graceful stop: unload every group and give up its election node."""
        if self._cleanup_task is not None:
            self._cleanup_task.cancel()
            self._cleanup_task = None
        runtimes, self.runtimes = self.runtimes, {}
        if self.mode_requests is not None:
            self.mode_requests.unwatch_all()
        for runtime in runtimes.values():
            await runtime.unload("daemon stopping")
        try:
            await self.ownership.release_all()
        finally:
            if self.forwarder is not None:
                await self.forwarder.close()

    # -- members whose connection closed ------------------------------------------
    def member_disconnected(self, group_id: str, member_id: str) -> asyncio.Task | None:
        """The connection ``member_id`` last spoke on closed: with
        ``member_disconnect_grace_ms`` on, its session ends within the grace
        (:func:`~zkcoord.core.group_timers.expire_member_by`); the session
        timer then removes it. Nothing for a group not served here. Returns
        the task applying it (tests await it), or None."""
        grace = self.member_disconnect_grace_ms
        runtime = self.serving(group_id) if grace >= 0 else None
        if runtime is None:
            return None
        log.info("group %s: the connection of member %s closed; its session ends within %d ms unless it "
                 "comes back", group_id, member_id, grace)
        return self._background.spawn(self._expire_disconnected(runtime, member_id, grace),
                                      f"end the session of disconnected member {member_id} of group {group_id}")

    @staticmethod
    async def _expire_disconnected(runtime: GroupRuntime, member_id: str, grace_ms: int) -> None:
        try:
            await runtime.apply(lambda g, now: core.expire_member_by(g, member_id, now + grace_ms))
        except ZkcoordError as exc:  # stepped down meanwhile: the new owner has its own sessions
            log.debug("group %s: member %s disconnected, not expired early: %s", runtime.group_id, member_id, exc)

    # -- offset storage mode ----------------------------------------------------------
    async def _on_mode_request(self, group_id: str, mode: str) -> None:
        """A migrate command asks for ``mode``: persist it with our own fenced
        write, then use it (members, generation and timers stay as they are)."""
        runtime = self.runtimes.get(group_id)
        if runtime is None or not runtime.active or mode not in OFFSET_STORAGES:
            return

        def switch(group: core.Group, now_ms: int) -> core.Outcome:
            if group.offset_storage == mode:
                return core.Outcome(group)
            return core.Outcome(dataclasses.replace(group, offset_storage=mode), persist=True)

        before = runtime.group.offset_storage
        await runtime.apply(switch)
        if before != mode:
            log.info("group %s: offset storage %s -> %s", group_id, before, mode)

    # -- offsets -------------------------------------------------------------------
    async def commit_offsets(self, group_id, member_id, generation_id, instance_id, wanted):
        """OffsetCommit: one error per ``(topic, partition, offset, metadata)``.

        The generation check and the queuing of the ZooKeeper write (in
        ``dual`` and ``kafka``: the commit's place in the group's order of
        forwarded commits) happen under the group's lock, in one step: a
        commit accepted for generation N is ordered before every commit of a
        later generation, so it cannot land after them (Kafka appends to its
        log under the group lock too).
        """
        try:
            runtime = await self.runtime(group_id, allow_empty=True)
            exists = generation_id < 0 or await self._exists(runtime)
            missing = await self._missing_partitions(wanted)
            kept, refused_early = await self._sort_commit(wanted, missing)
            prepared = await self.offsets.prepare(group_id, kept) if kept else None

            def validate_and_queue(group, now):
                code = core.validate_offset_commit(group if exists else None, member_id, generation_id, instance_id)
                if code is not E.NONE or not kept:
                    return code, None, group.offset_storage
                return code, self._queue_offsets(group_id, group.offset_storage, kept, prepared), group.offset_storage

            code, queued, mode = await runtime.read(validate_and_queue)
            if code is E.NONE:
                refused = await self._store_offsets(group_id, mode, kept, queued) if kept else {}
                if kept and self.metrics is not None:
                    self.metrics.observe_offset_commit(mode)
                if member_id:
                    await runtime.apply(lambda g, now: core.touch_member(g, member_id, now))
                refused.update(refused_early)
                return [refused.get((t, p), E.NONE) for t, p, _, _ in wanted]
        except GroupUnavailableError as exc:
            code = exc.code
        except NotOwnerError:
            code = E.NOT_COORDINATOR
        except ZkcoordError as exc:
            log.warning("OffsetCommit %s failed: %s", group_id, exc)
            code = E.COORDINATOR_LOAD_IN_PROGRESS if self.ownership.is_suspended(group_id) else E.UNKNOWN_SERVER_ERROR
        return [code] * len(wanted)

    async def _sort_commit(self, wanted, missing) -> tuple[dict, dict]:
        """``({(topic, partition): (offset, metadata)} to write, {(topic,
        partition): error} refused before any write)`` of an OffsetCommit."""
        kept, refused = {}, {}
        limit = self.offset_metadata_max_bytes
        for i, (t, p, o, m) in enumerate(wanted):
            await pause_every(i)
            if (t, p) in missing:
                refused[(t, p)] = E.UNKNOWN_TOPIC_OR_PARTITION
                continue
            code = offset_commit_error(t, m, limit)
            if code is not E.NONE:
                refused[(t, p)] = code
                kept.pop((t, p), None)  # a partition named twice: the last one counts
            else:
                kept[(t, p)] = (o, m or "")
                refused.pop((t, p), None)
        return kept, refused

    def _queue_offsets(self, group_id: str, mode: str, kept, prepared=None):
        """``zookeeper``: queue the fenced ZooKeeper write and return its
        awaitable. ``dual`` and ``kafka``: check that we own the group
        (NotOwnerError) and return (place in the group's commit order, fence,
        the prepared ZooKeeper write); nothing is written yet (what ZooKeeper
        would refuse was refused by ``prepare``, before Kafka saw anything)."""
        commit = kept if prepared is None else prepared
        if mode == "zookeeper":
            return self.offsets.submit(group_id, commit, fence=self.ownership.fence(group_id))
        self._forwarder_for(group_id, mode)  # no Kafka: refused before anything is written
        fence = self.ownership.fence(group_id)  # NotOwnerError if we were deposed meanwhile
        return self.forwarded.order.take(group_id), fence, commit

    async def _store_offsets(self, group_id: str, mode: str, kept, queued) -> dict[tuple[str, int], ErrorCode]:
        """Finish a commit where the group's mode says (``dual``: Kafka, then
        ZooKeeper, :mod:`zkcoord.server.dual_commit`); the error of each
        partition refused, as the member is to hear it."""
        if mode == "zookeeper":
            await queued
            return {}
        slot, fence, prepared = queued
        try:
            forwarder = self._forwarder_for(group_id, mode)
        except GroupUnavailableError:
            slot.release()
            raise
        try:
            return await self.forwarded.commit(forwarder, group_id, mode, kept, slot, fence, prepared)
        except ServiceUnavailableError as exc:
            raise GroupUnavailableError(group_id, E.COORDINATOR_NOT_AVAILABLE, str(exc)) from exc

    def _forwarder_for(self, group_id: str, mode: str) -> KafkaForwarder:
        if self.forwarder is None:
            if group_id not in self._warned_no_kafka:
                self._warned_no_kafka.add(group_id)
                log.error("group %s uses %s offset storage, but this daemon has no Kafka bootstrap servers "
                          "(--bootstrap-servers); its offset requests get COORDINATOR_NOT_AVAILABLE", group_id, mode)
            raise GroupUnavailableError(group_id, E.COORDINATOR_NOT_AVAILABLE,
                                        f"{mode} offset storage needs --bootstrap-servers")
        return self.forwarder

    async def fetch_offsets(self, group_id: str, wanted: Wanted | None) -> tuple[ErrorCode, FetchAnswer]:
        """OffsetFetch: (group error, answer); ``wanted`` None asks for every
        committed partition. A partition whose legacy znode holds no offset
        gets :data:`~zkcoord.core.offset_fetch.CORRUPT_OFFSET_ERROR`; the
        others are answered."""
        if group_id in await self._unknown([group_id]):
            return E.NONE, FetchAnswer(wanted)
        try:
            runtime = await self.runtime(group_id, allow_empty=True)
            stored = await self._fetch_stored(runtime, wanted)
        except GroupUnavailableError as exc:
            return exc.code, FetchAnswer({})
        except ZkcoordError as exc:
            log.warning("OffsetFetch %s failed: %s", group_id, exc)
            return E.COORDINATOR_LOAD_IN_PROGRESS, FetchAnswer({})
        return E.NONE, FetchAnswer(wanted, stored, getattr(stored, "unparsable", {}))

    async def _fetch_stored(self, runtime: GroupRuntime, wanted) -> dict:
        """``{(topic, partition): (offset, metadata)}`` from the store(s) of the group's mode."""
        group_id, mode = runtime.group_id, runtime.group.offset_storage
        if mode == "zookeeper":
            return await self.offsets.fetch(group_id, wanted)
        forwarder = self._forwarder_for(group_id, mode)
        if mode == "kafka":
            return await self._kafka_fetch(forwarder, group_id, wanted)
        zk, kafka = await asyncio.gather(self.offsets.fetch(group_id, wanted),
                                         self._kafka_fetch(forwarder, group_id, wanted))
        merged = FetchedOffsets()
        merged.update(merge_dual(zk, kafka))
        merged.unparsable.update(getattr(zk, "unparsable", {}))  # the larger of the two is unknowable
        return merged

    @staticmethod
    async def _kafka_fetch(forwarder: KafkaForwarder, group_id: str, wanted) -> dict:
        try:
            return await forwarder.fetch(group_id, wanted)
        except ServiceUnavailableError as exc:
            raise GroupUnavailableError(group_id, E.COORDINATOR_NOT_AVAILABLE, str(exc)) from exc

    # -- describe, list, delete ------------------------------------------------------
    async def _unknown(self, group_ids: list[str]) -> set[str]:
        """Of ``group_ids``, those that exist nowhere: not served here, and
        nothing of them in ZooKeeper (:func:`~zkcoord.zk.group_reads.unknown_groups`).
        Reads of such a group (DescribeGroups, OffsetFetch, DeleteGroups) are
        answered as Kafka answers a group it never heard of, without
        contending for it: asking about a name creates nothing in ZooKeeper.
        (A group created meanwhile is answered as it was when read.) Empty
        when ZooKeeper cannot tell: :meth:`runtime` then answers the error."""
        if self.conn is None:
            return set()
        candidates = [g for g in group_ids
                      if g not in self.runtimes and g not in self._loading and g not in self._broken
                      and not self.ownership.is_owned(g) and validate_group_id(g, allow_empty=True) is E.NONE]
        if not candidates:
            return set()
        try:
            return await unknown_groups(self.conn, self.offsets.paths, candidates)
        except ZkcoordError as exc:
            log.debug("could not tell whether %d group(s) exist: %s", len(candidates), exc)
            return set()

    async def reply_if_unknown(self, group_id: str, decide) -> object | None:
        """For a group that exists nowhere (:meth:`_unknown`): the payload of
        the reply ``decide(group, now_ms)`` (a core handler, its request
        carrying :data:`UNKNOWN_TOKEN`) gives on a new empty group, when it
        writes nothing and starts no timer. None otherwise: the request goes
        to the group's owner (:meth:`runtime`). A Heartbeat, SyncGroup or
        LeaveGroup naming a group nobody has is answered as the group would
        answer it, without contending for it."""
        if group_id not in await self._unknown([group_id]):
            return None
        outcome = decide(core.new_group(group_id), monotonic_ms())
        reply = outcome.reply_for(UNKNOWN_TOKEN)
        if outcome.persist or outcome.timers or reply is None:
            return None
        return reply.payload

    async def _each_group(self, group_ids: list[str], if_unknown, served) -> dict:
        """{id: if_unknown(id) for a group that exists nowhere, else await
        served(id)}, the unknown ones looked up together in slices of :data:`SLICE`."""
        answers = {}
        for start in range(0, len(group_ids), SLICE):
            chunk = group_ids[start:start + SLICE]
            unknown = await self._unknown(chunk)
            for group_id in chunk:
                answers[group_id] = if_unknown(group_id) if group_id in unknown else await served(group_id)
        return answers

    async def describe_groups(self, group_ids: list[str]) -> dict[str, tuple[ErrorCode, object]]:
        """DescribeGroups of distinct ids: {id: (error, description)}; an
        unknown group is Dead without contending for it."""
        return await self._each_group(group_ids, lambda g: (E.NONE, core.describe_missing(g)), self._describe)

    async def describe(self, group_id):
        return (await self.describe_groups([group_id]))[group_id]

    async def _describe(self, group_id):
        try:
            runtime = await self.runtime(group_id, allow_empty=True)
        except GroupUnavailableError as exc:
            return exc.code, None
        exists = await self._exists(runtime)
        return E.NONE, await runtime.read(
            lambda g, now: core.describe(g) if exists else core.describe_missing(group_id))

    async def _exists(self, runtime: GroupRuntime) -> bool:
        """Does the group exist as Kafka sees it: a stored state, members, or
        committed offsets? (A runtime is created for any group asked about.)"""
        if runtime.version is not None or runtime.group.size > 0:
            return True
        return bool(await self.offsets.fetch(runtime.group_id))

    async def _missing_partitions(self, wanted) -> set[tuple[str, int]]:
        """Partitions of an OffsetCommit that the cluster does not have (Kafka
        answers UNKNOWN_TOPIC_OR_PARTITION for those and commits the rest)."""
        if self.topic_watcher is None:
            return set()
        counts = await self.topic_watcher.partition_counts({t for t, _, _, _ in wanted},
                                                           wait_s=COMMIT_TOPIC_CHECK_WAIT_S)
        return {(t, p) for t, p, _, _ in wanted
                if t in counts and (counts[t] is None or not 0 <= p < counts[t])}

    async def list_groups(self):
        listed = []
        for i, (group_id, runtime) in enumerate(list(self.runtimes.items())):
            await pause_every(i)
            if runtime.active and (runtime.version is not None or runtime.group.size > 0):
                g = runtime.group
                listed.append((group_id, g.state.value, g.protocol_type or ""))
        return listed

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        """DeleteGroups of distinct names: {name: error}; an unknown group is
        GROUP_ID_NOT_FOUND without contending for it."""
        return await self._each_group(group_ids, lambda g: E.GROUP_ID_NOT_FOUND, self.delete_group)

    async def delete_group(self, group_id: str) -> ErrorCode:
        try:
            runtime = await self.runtime(group_id, allow_empty=True)
            token = runtime.next_token()
            exists = await self._exists(runtime)
            result = await runtime.call(token, lambda g, now: core.handle_delete(g, token, exists=exists))
            if result.error is E.NONE:
                await self.offsets.delete_group(group_id, fence=self.ownership.fence(group_id))
                self.runtimes.pop(group_id, None)
            return result.error
        except GroupUnavailableError as exc:
            return exc.code
        except ZkcoordError as exc:
            log.warning("DeleteGroups %s failed: %s", group_id, exc)
            return E.UNKNOWN_SERVER_ERROR


def _holds_nothing(group: core.Group) -> bool:
    """Empty, no members, offsets in ZooKeeper (a ``dual`` / ``kafka`` group's
    state records its mode, which must not be lost)."""
    return (group.state is core.GroupState.EMPTY and group.size == 0 and not group.pending_members
            and group.offset_storage == "zookeeper")


def merge_dual(zk: dict, kafka: dict) -> dict:
    """Per partition the larger of the two offsets (``dual_fetch``) with the
    metadata stored beside it; on a tie ZooKeeper's metadata.

    >>> merge_dual({("t", 0): (5, "z"), ("t", 1): (9, "z")}, {("t", 0): (7, "k"), ("t", 2): (1, "k")})
    {('t', 0): (7, 'k'), ('t', 1): (9, 'z'), ('t', 2): (1, 'k')}
    """
    merged = {}
    for tp in sorted(set(zk) | set(kafka)):
        z, k = zk.get(tp), kafka.get(tp)
        best = dual_fetch(z[0] if z else None, k[0] if k else None)
        merged[tp] = z if z is not None and z[0] == best else k
    return merged

