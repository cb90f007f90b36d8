"""The group manager: which groups this daemon serves, and how they come and go.

Owns the map group id -> :class:`GroupRuntime` of the groups this daemon
owns, their loading after an election win, and the reaction to ZooKeeper's
connection state; its two parts serve what clients ask of those groups'
offsets (:class:`~zkcoord.server.group_offsets.GroupOffsets`) and what
administrators ask of the groups (:class:`~zkcoord.server.group_admin.GroupAdmin`:
describe, list, delete, cleanup).

* FindCoordinator: the group's elected owner. With none, nobody contends: a
  lookup must leave nothing in ZooKeeper (an anonymous client could look up
  group ids without end). The answer is the live daemon
  :func:`zkcoord.core.placement.choose_node` picks (rendezvous hashing over
  ``/zkcoord/nodes``; only daemons the caller can name, e.g. with a
  gateway). A daemon that owns nothing for this group answers itself only
  when it is that choice. A FindCoordinator of many keys looks the owners up
  together (:meth:`GroupManager.find_owners`).
  A group in transit while a takeover's rounds are due (held by a daemon
  that is no longer registered, its release under way; or free, placed
  here, and not reserved yet) is answered when a round finds it free, at
  most :data:`~zkcoord.server.takeover.PARK_S` later
  (:meth:`~zkcoord.server.takeover.Takeover.released`), not at once with
  COORDINATOR_NOT_AVAILABLE or a name its members would contend at alone.
* A request for a group nobody owns (JoinGroup, OffsetCommit, ... whatever
  comes first): this daemon contends, and if it wins loads the group and
  serves the request; if another daemon wins, or the group has an owner
  already: NOT_COORDINATOR, and the client looks up again, as with Kafka.
  For a group still loading, or while the ZooKeeper connection is SUSPENDED:
  COORDINATOR_LOAD_IN_PROGRESS (SyncGroup gets REBALANCE_IN_PROGRESS and
  Heartbeat NONE while loading, as Kafka does).
* A request about a group that exists nowhere (:meth:`GroupManager.unknown`)
  is answered as Kafka answers a group it never heard of, without
  contending for it.
* Ownership lost (our contender node vanished, a fenced write refused, the
  session LOST): the runtime is unloaded at once; parked requests get
  NOT_COORDINATOR.
* The session given up (the connection SUSPENDED for the session time-out:
  :mod:`zkcoord.core.session_loss`): every group is unloaded as on LOST;
  until the session is back, every group request gets NOT_COORDINATOR (the
  clients look their coordinator up again, and find the daemon that took
  the group over) and FindCoordinator COORDINATOR_NOT_AVAILABLE (retriable:
  a daemon without a session names nobody, itself least of all). When the
  session is back (REJOINED, or a new one) the takeover runs as after an
  expiry.
* A daemon whose session ended: its groups placed here are taken over at
  once, in bulk (:mod:`zkcoord.server.takeover`; :meth:`GroupManager.take_many`
  loads them), not when their members ask.
* Stopping (:meth:`GroupManager.release_all`): every group unloaded and its
  election node deleted (in multis); from then on this daemon contends for
  nothing, so a request arriving meanwhile cannot take a group back.

Nothing here knows a group's kind: the runtime asks the group's kind
(:mod:`zkcoord.core.groups`) for everything kind-specific.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from zkcoord.core import groups
from zkcoord.core.errors import ErrorCode, validate_group_id
from zkcoord.core.groups import kind_of
from zkcoord.core.limits import DEFAULT_OFFSET_METADATA_MAX_BYTES
from zkcoord.core.membership import GroupConfig
from zkcoord.core.placement import choose_node
from zkcoord.errors import StateError, ZkcoordError
from zkcoord.kafka.forwarder import KafkaForwarder
from zkcoord.server.group_admin import GroupAdmin
from zkcoord.server.group_offsets import GroupOffsets
from zkcoord.server.group_runtime import GroupRuntime, GroupUnavailableError, monotonic_ms
from zkcoord.server.handover import Handovers
from zkcoord.server.takeover import Takeover, TakeoverLoading
from zkcoord.tasks import Background, retrieve
from zkcoord.wire.bulk_work import SLICE
from zkcoord.zk import paths
from zkcoord.zk.group_reads import unknown_groups
from zkcoord.zk.handover import LegacyRebalanceZk
from zkcoord.zk.ownership import BATCH

log = logging.getLogger(__name__)
E = ErrorCode

ADOPT_INTERVAL_S = 5.0  # groups in handover without an owner are looked for at least this often
BROKEN_RECHECK_MS = 5_000  # a group whose state could not be loaded is read again after this long
UNKNOWN_TOKEN = 0  # the token of a request answered for a group that exists nowhere (runtimes count from 1)


class OwnerGoneError(GroupUnavailableError):
    """The group's owner is a daemon no longer registered (stopping: its
    release under way; or its session ending): COORDINATOR_NOT_AVAILABLE,
    unless a takeover round finds the group free first (:meth:`GroupManager.find_owners`)."""


class GroupManager(TakeoverLoading):
    def __init__(self, node_id: int, group_config: GroupConfig, ownership, store, offsets, nodes,
                 topic_watcher=None, *, conn=None, kafka_forwarder: KafkaForwarder | None = None,
                 member_disconnect_grace_ms: int = -1, rebalance_notice_hold_ms: int = 0,
                 cleanup_interval_ms: int = 600_000,
                 offset_metadata_max_bytes: int = DEFAULT_OFFSET_METADATA_MAX_BYTES,
                 clock: Callable[[], int] = monotonic_ms, timer_loop: Any = None):
        self.node_id = node_id
        self.group_config = group_config
        self.ownership = ownership
        self.store = store
        self.offsets = offsets  # zk.offsets.OffsetStore
        self.nodes = nodes
        self.conn = conn
        self.topic_watcher = topic_watcher
        self.clock = clock  # ms; with timer_loop, what the groups' timers run on (a test's fake clock)
        self._timer_loop = timer_loop
        self._background = Background(log, "group manager")
        self.runtimes: dict[str, GroupRuntime] = {}
        self._loading: dict[str, asyncio.Task] = {}
        # group -> (why its state cannot be loaded, when that was found): its requests get UNKNOWN_SERVER_ERROR
        # without a read for BROKEN_RECHECK_MS, then the state is read again (an operator may have repaired it).
        self._broken: dict[str, tuple[str, int]] = {}
        self.metrics = None  # DaemonMetrics, set by the daemon with --metrics-listen
        self.member_disconnect_grace_ms = member_disconnect_grace_ms  # -1: off
        self.rebalance_notice_hold_ms = rebalance_notice_hold_ms  # 0: heartbeats never held (core.notice)
        # KIP-848's consumer protocol served (the daemon's setting and a topic source; set by the daemon)
        self.consumer_groups_enabled = False
        self._live: dict | None = None  # node id -> NodeInfo of the live daemons, while a watch holds
        # Its two parts; without a forwarder (no --bootstrap-servers) dual and kafka groups are not available.
        self.group_offsets = GroupOffsets(self, kafka_forwarder=kafka_forwarder,
                                          offset_metadata_max_bytes=offset_metadata_max_bytes)
        self.admin = GroupAdmin(self, cleanup_interval_ms=cleanup_interval_ms)
        # Groups shared with legacy ZooKeeper consumers (issue 26); needs the ZooKeeper connection.
        self._adoption: asyncio.Task | None = None
        self._adopt_now = asyncio.Event()
        self.handovers = None if conn is None else Handovers(
            LegacyRebalanceZk(conn, offsets.paths.root if offsets is not None else paths.DEFAULT_CONSUMERS_ROOT),
            ownership.fence)
        self.takeover = Takeover(self)  # started by the daemon (start_takeover)
        self._taking: set[str] = set()  # groups a takeover reserved and has not served (or given up) yet
        self._stopping = False  # release_all began

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

    async def find_owners(self, group_ids: list[str], eligible=None, park: bool = True) -> dict:
        """:meth:`find_owner` of distinct ids: {id: NodeInfo or the
        GroupUnavailableError it would raise}. The owners are looked up
        together (:meth:`~zkcoord.zk.ownership.GroupOwnership.current_owners`),
        in slices of :data:`SLICE` with a yield between them. While a
        daemon's leaving is taken over here, the takeover's reservation is
        waited for first: its groups are then named without a read
        (thousands of clients looking up at once would otherwise queue
        thousands of reads in front of the takeover's own)."""
        answers: dict = {}
        given_up = self._session_given_up()
        if given_up is not None:  # names nobody, itself least of all: the client asks again (retriable)
            return {g: GroupUnavailableError(g, E.COORDINATOR_NOT_AVAILABLE, given_up) for g in group_ids}
        await self.takeover.settled()  # a daemon just left: its groups placed here are named at once when reserved
        transit = []  # groups in transit (module docstring): answered when a round finds them free
        for start in range(0, len(group_ids), SLICE):
            if start:
                await asyncio.sleep(0)
            chunk = group_ids[start:start + SLICE]
            if self._taking:  # a takeover's groups: this daemon, at once (their requests wait for the load)
                here = await self._taken_here(chunk, eligible)
                answers.update(dict.fromkeys(here, await self.nodes.node(self.node_id)) if here else {})
                chunk = [g for g in chunk if g not in here]
            if park and self.takeover.expecting:  # held by a daemon that left, as the last round found: no read
                held = [g for g in chunk if self.takeover.held_by_gone(g)]
                for group_id in held:
                    answers[group_id] = OwnerGoneError(group_id, E.COORDINATOR_NOT_AVAILABLE,
                                                       "held by a daemon no longer registered")
                transit.extend(held)
                chunk = [g for g in chunk if g not in answers] if held else chunk
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
                if park and self._in_transit(group_id, answers[group_id]):
                    transit.append(group_id)
        if transit and self.takeover.expecting:
            held = [g for g in transit if isinstance(answers[g], OwnerGoneError)]
            await self.takeover.released(held, [g for g in transit if not isinstance(answers[g], OwnerGoneError)])
            answers.update(await self.find_owners(transit, eligible, park=False))
        return answers

    def _in_transit(self, group_id: str, answer) -> bool:
        """Is the group, answered ``answer``, in transit: held by a daemon no
        longer registered, or free, placed here and not reserved (its
        members sent here now would contend for it one at a time, between
        the takeover's rounds)?"""
        if isinstance(answer, OwnerGoneError):
            return True
        return (not isinstance(answer, BaseException) and answer.node_id == self.node_id
                and group_id not in self._taking and self.takeable(group_id))

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
            raise OwnerGoneError(group_id, E.COORDINATOR_NOT_AVAILABLE, f"owner {owner} not registered")
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

    def _session_given_up(self) -> str | None:
        """Why this daemon has no ZooKeeper session for now (module
        docstring), for the answers; None while it has one."""
        reason = getattr(self.ownership, "session_given_up", None)  # test doubles have none
        return None if reason is None else f"node {self.node_id} has no ZooKeeper session: {reason}"

    def _nodes_changed(self) -> None:
        self._live = None
        self._adopt_now.set()  # a daemon left: its groups in handover may need a new owner

    async def _take(self, group_id: str) -> None:
        """A request for a group we do not own: contend if nobody owns it;
        NOT_COORDINATOR if another daemon owns it or wins."""
        if self._stopping:
            raise GroupUnavailableError(group_id, E.NOT_COORDINATOR, f"node {self.node_id} is stopping")
        await self.takeover.settled()  # a daemon just left: its groups placed here are about to be reserved
        if group_id in self._loading:
            return  # reserved by the takeover: runtime() waits for its load
        try:
            owner = None if self.ownership.is_contending(group_id) else await self.ownership.current_owner(group_id)
            if owner is None or owner == self.node_id:
                owner = await self.ownership.contend(group_id)  # joins a contention under way (a takeover's)
        except ZkcoordError as exc:
            raise GroupUnavailableError(group_id, E.COORDINATOR_NOT_AVAILABLE, str(exc)) from exc
        if owner != self.node_id:
            raise GroupUnavailableError(group_id, E.NOT_COORDINATOR, f"owned by node {owner}")

    async def _ensure_loaded(self, group_id: str) -> GroupRuntime:
        runtime = self.runtimes.get(group_id)
        if runtime is not None and runtime.active:
            return runtime
        if self._stopping:  # its release is under way: loading it again would keep it
            raise GroupUnavailableError(group_id, E.COORDINATOR_NOT_AVAILABLE, f"node {self.node_id} is stopping")
        task = self._loading.get(group_id)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._load(group_id))
            self._loading[group_id] = task
            task.add_done_callback(lambda t, g=group_id: (self._loading.pop(g, None), retrieve(t)))
        return await asyncio.shield(task)

    async def _load(self, group_id: str) -> GroupRuntime:
        runtime = await self._prepare(group_id)
        if self.handovers is not None:
            try:
                await self.handovers.loaded(runtime)
            except ZkcoordError as exc:
                await runtime.unload(f"not loaded: {exc}")
                raise GroupUnavailableError(group_id, E.COORDINATOR_LOAD_IN_PROGRESS, str(exc)) from exc
        if self._stopping:  # release_all began while this loaded: it would never be released
            await runtime.unload("daemon stopping", quiet=True)
            raise GroupUnavailableError(group_id, E.NOT_COORDINATOR, f"node {self.node_id} is stopping")
        self._serve(group_id, runtime)
        return runtime

    async def _prepare(self, group_id: str, read=None, quiet: bool = False) -> GroupRuntime:
        """A loaded runtime of the group, not served yet; ``read``: its stored
        ``(record, version)``, or the error reading it gave (None: read it
        here); ``quiet``: a takeover's (it logs one line for all, and tracks
        their topics after serving them)."""
        try:
            if read is None:
                read = await self.store.load(group_id)
            elif isinstance(read, BaseException):
                raise read
            record, version = read
            runtime = GroupRuntime(group_id, lambda: self.group_config, self._persist, self.stepped_down,
                                   clock=self.clock, on_persisted=self._on_persisted,
                                   on_transition=None if self.metrics is None else self.metrics.observe_transition,
                                   timer_loop=self._timer_loop)
            if self.metrics is not None:
                self.metrics.observe_loaded(groups.from_record(group_id, record) if record else runtime.group)
            await runtime.load(record, None if version is None or version < 0 else version, quiet=quiet)
            if not quiet:  # a takeover tracks its groups' topics after serving them (_track_many)
                self._track_topics(runtime.group)
        except StateError as exc:
            self._broken[group_id] = (str(exc), self.clock())
            log.error("group %s cannot be served: %s", group_id, exc)
            raise GroupUnavailableError(group_id, E.UNKNOWN_SERVER_ERROR, str(exc)) from exc
        except ZkcoordError as exc:
            raise GroupUnavailableError(group_id, E.COORDINATOR_LOAD_IN_PROGRESS, str(exc)) from exc
        return runtime

    def _serve(self, group_id: str, runtime: GroupRuntime, offsets: bool = True) -> None:
        """Serve a loaded runtime; ``offsets`` False: its offsets' part
        (:meth:`~zkcoord.server.group_offsets.GroupOffsets.loaded`) is left
        to the caller (a takeover does it for many at once)."""
        self._broken.pop(group_id, None)
        self.runtimes[group_id] = runtime
        if offsets:
            self.group_offsets.loaded(runtime)

    async def runtime(self, group_id: str, loading_code: ErrorCode = E.COORDINATOR_LOAD_IN_PROGRESS,
                      allow_empty: bool = False):
        """The runtime of an owned, loaded group (contending first if nobody
        owns it), or GroupUnavailableError. Returns None only when
        ``loading_code`` is NONE and the group loads. ``allow_empty``: the
        API takes the empty group id (Kafka's rule, ``validate_group_id``)."""
        code = validate_group_id(group_id, allow_empty=allow_empty)
        if code is not E.NONE:
            raise GroupUnavailableError(group_id, code, "invalid group id")
        given_up = self._session_given_up()
        if given_up is not None:  # its groups are given up: their members look the coordinator up again
            raise GroupUnavailableError(group_id, E.NOT_COORDINATOR, given_up)
        if group_id in self._broken:
            reason, since = self._broken[group_id]
            if self.clock() - since < BROKEN_RECHECK_MS:
                raise GroupUnavailableError(group_id, E.UNKNOWN_SERVER_ERROR, reason)
        if group_id in self._loading or (self.ownership.is_owned(group_id)
                                         and self.ownership.is_suspended(group_id)):
            if loading_code is E.NONE:
                return None
            raise GroupUnavailableError(group_id, loading_code, "loading or ZooKeeper suspended")
        if not self.ownership.is_owned(group_id):
            await self._take(group_id)
            if loading_code is E.NONE and group_id in self._loading:
                return None  # reserved by the takeover it waited for: answered now, as a loading group is
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

    async def _persist(self, group_id: str, changes: list, version: int | None) -> int | None:
        """The runtime's write: fenced by the store through the ownership."""
        return await self.store.write_changes(group_id, changes, version)

    def topics_changed(self, image, groups: list[str]) -> None:
        """The topics as the daemon knows them changed (the topic watcher's
        callback, on the loop): every group's handlers see the new image
        (:class:`~zkcoord.core.topics_image.TopicsImage`) from their next
        call, and ``groups`` (tracking a topic that changed) that assign from
        it look at their topics again."""
        self.group_config = dataclasses.replace(self.group_config, image=image)
        for group_id in groups:
            self._background.spawn(self.metadata_changed(group_id, from_image=True),
                                   f"refresh the topics of group {group_id}")

    def stepped_down(self, group_id: str) -> None:
        """The group is no longer served here (its runtime stepped down, or it was removed)."""
        self.runtimes.pop(group_id, None)
        self.group_offsets.forget(group_id, "stepped down")
        if self.topic_watcher is not None:
            self.topic_watcher.untrack(group_id)
        self._forget_handover(group_id)

    def _forget_handover(self, group_id: str) -> None:
        if self.handovers is not None:
            self._background.spawn(self.handovers.unloaded(group_id), f"end the handover of group {group_id}")

    def _on_persisted(self, group) -> None:
        """A runtime wrote the group's state: log it, watch its topics. (The
        fault checker reads this line: ``group G: Stable, generation 3, ...``.)"""
        log.info("group %s: %s", group.group_id, kind_of(group).summary(group))
        self._track_topics(group)

    # -- topic metadata --------------------------------------------------------------
    def _track_topics(self, group) -> None:
        """Watch the partition counts of what the group's members subscribe to."""
        if self.topic_watcher is None:
            return
        self._background.spawn(self._track(group), f"watch the topics of group {group.group_id}")

    async def _track(self, group) -> None:
        """Track the group's topics; a group assigning from the topics image looks
        at newly tracked ones again. Its decision read the image before its state
        was written, and it is tracked only after: an image that changed in
        between (a topic created just before the member subscribed) named no
        group, and the group would never have seen the topic (Kafka 4.x refreshes
        a consumer group's metadata only when the image changes)."""
        from zkcoord.server.subscriptions import subscribed_topics

        added = await self.topic_watcher.track(group.group_id, subscribed_topics(group))
        if added and kind_of(group).assigns_from_image:
            await self.metadata_changed(group.group_id, from_image=True)

    async def metadata_changed(self, group_id: str, from_image: bool = False) -> None:
        """A subscribed topic changed: in the topics image (``from_image``:
        groups assigning from it refresh their metadata) or its partition count
        (groups whose clients assign rebalance)."""
        runtime = self.runtimes.get(group_id)
        if runtime is None or not runtime.active or kind_of(runtime.group).assigns_from_image != from_image:
            return
        try:
            await runtime.apply(lambda g, now: kind_of(g).handle_metadata_change(g, now, runtime.config))
        except ZkcoordError as exc:
            log.warning("group %s: rebalance after a partition change not started: %s", group_id, exc)

    def on_ownership_change(self, change) -> None:
        """GroupOwnership's callback (on the loop thread; must not block)."""
        from zkcoord.zk.ownership import ChangeKind

        if change.kind is ChangeKind.REJOINED:  # the session given up is back: take over as after an expiry
            self.takeover.rejoined()
        elif change.kind is ChangeKind.LOST:
            self.group_offsets.abort_forwards(change.groups, change.reason)  # first, and once for all of them
            for group_id in change.groups:
                if self.topic_watcher is not None:
                    self.topic_watcher.untrack(group_id)
                self.group_offsets.forget(group_id, change.reason)
                self._forget_handover(group_id)
                runtime = self.runtimes.pop(group_id, None)
                if runtime is not None:
                    self._background.spawn(runtime.unload(change.reason), f"unload group {group_id}")

    def start_takeover(self) -> None:
        """Take over the groups of daemons that leave, at once (:mod:`zkcoord.server.takeover`)."""
        self.takeover.start()

    async def release_all(self) -> None:
        """Graceful stop: contend for nothing more, unload every group and give
        up its election node: the runtimes unloaded :data:`BATCH` at a time,
        each batch's election nodes deleted (one multi) while the next is
        unloaded. Logs how long it took."""
        self._stopping = True
        self.takeover.stop()
        self.admin.stop_cleanup()
        if self._adoption is not None:
            self._adoption.cancel()
            self._adoption = None
        started = time.monotonic()
        runtimes, self.runtimes = self.runtimes, {}
        if self.handovers is not None:
            await self.handovers.close()
        releases = []
        try:
            loaded = list(runtimes.items())
            for start in range(0, len(loaded), BATCH):
                batch = loaded[start:start + BATCH]
                for _, runtime in batch:
                    await runtime.unload("daemon stopping", quiet=True)
                self.group_offsets.abort_forwards([g for g, _ in batch], "daemon stopping")
                releases.append(asyncio.ensure_future(self.ownership.release_many([g for g, _ in batch])))
                await asyncio.sleep(0)  # the multi goes out while the next batch unloads
            unloaded = time.monotonic()
            outcomes = await asyncio.gather(*releases, return_exceptions=True)
            await self.ownership.release_all()  # groups owned but not loaded here, and what a batch left
            errors = [o for o in outcomes if isinstance(o, BaseException)]
            if errors:
                raise errors[0]
        finally:
            for release in releases:
                release.cancel()  # cut short (the stop's time-out): what is left goes with the session
            await self.group_offsets.close()
        log.info("released %d groups in %.0f ms (unloaded in %.0f ms, their election nodes deleted meanwhile)",
                 len(runtimes), (time.monotonic() - started) * 1e3, (unloaded - started) * 1e3)

    def still_owned(self) -> int:
        """Groups whose election node this daemon still holds (what a cut-short release left)."""
        return len(self.ownership.owned())

    # -- handovers nobody owns ----------------------------------------------------------
    def start_adoption(self) -> None:
        """Adopt groups in a handover whose owner is gone (:meth:`adopt_handovers`),
        at once, whenever the markers or the live daemons change, and every
        :data:`ADOPT_INTERVAL_S`; stopped by :meth:`release_all`."""
        if self.handovers is not None and self._adoption is None:
            self._adoption = self._background.spawn(self._adoption_loop(), "adopt groups in handover")

    async def _adoption_loop(self) -> None:
        while True:
            self._adopt_now.clear()
            try:
                await self.adopt_handovers()
            except ZkcoordError as exc:
                log.warning("groups in handover not looked at: %s", exc)
            try:
                async with asyncio.timeout(ADOPT_INTERVAL_S):
                    await self._adopt_now.wait()
            except TimeoutError:
                pass

    async def adopt_handovers(self) -> list[str]:
        """Load every group marked as in handover that nobody owns, if this
        daemon is the one placement names for it: a killed owner's members
        may never come back, and its znodes under ``/consumers`` (persistent)
        must not be held for them forever. The ids loaded."""
        marked = await self.handovers.marked(on_change=self._adopt_now.set)
        adopted = []
        for start in range(0, len(marked), SLICE):
            chunk = marked[start:start + SLICE]
            owners = await self.ownership.current_owners(chunk)
            for group_id in chunk:
                if owners[group_id] is not None or group_id in self.runtimes:
                    continue
                try:
                    if (await self._choose(group_id, None)).node_id != self.node_id:
                        continue
                    await self.runtime(group_id)
                    adopted.append(group_id)
                    log.info("group %s: in a handover without an owner; adopted", group_id)
                except GroupUnavailableError as exc:
                    log.info("group %s: in a handover without an owner; not adopted here: %s", group_id, exc)
        return adopted

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
            await runtime.apply(lambda g, now: kind_of(g).expire_member_by(g, member_id, now + grace_ms))
        except ZkcoordError as exc:  # stepped down meanwhile: the new owner has its own sessions
            log.debug("group %s: member %s disconnected, not expired early: %s", runtime.group_id, member_id, exc)

    # -- groups that exist nowhere ---------------------------------------------------
    async def unknown(self, group_ids: list[str]) -> set[str]:
        """Of ``group_ids``, those that exist nowhere: not served here, and
        nothing of them in ZooKeeper (:func:`~zkcoord.zk.group_reads.unknown_groups`).
        Reads of such a group (DescribeGroups, OffsetFetch, DeleteGroups) are
        answered as Kafka answers a group it never heard of, without
        contending for it: asking about a name creates nothing in ZooKeeper.
        (A group created meanwhile is answered as it was when read.) Empty
        when ZooKeeper cannot tell: :meth:`runtime` then answers the error."""
        if self.conn is None or self._session_given_up() is not None:
            return set()
        await self.takeover.settled()  # a daemon just left: the groups reserved here are no question
        candidates = [g for g in group_ids
                      if g not in self.runtimes and g not in self._loading and g not in self._broken
                      and not self.ownership.is_owned(g) and not self.ownership.is_contending(g)
                      and validate_group_id(g, allow_empty=True) is E.NONE]
        if not candidates:
            return set()
        try:
            return await unknown_groups(self.conn, self.offsets.paths, candidates)
        except ZkcoordError as exc:
            log.debug("could not tell whether %d group(s) exist: %s", len(candidates), exc)
            return set()

    async def reply_if_unknown(self, group_id: str, decide) -> object | None:
        """For a group that exists nowhere (:meth:`unknown`): the payload of
        the reply ``decide(group, now_ms)`` (a core handler, its request
        carrying :data:`UNKNOWN_TOKEN`) gives on a new empty group, when it
        writes nothing and starts no timer. None otherwise: the request goes
        to the group's owner (:meth:`runtime`). A Heartbeat, SyncGroup or
        LeaveGroup naming a group nobody has is answered as the group would
        answer it, without contending for it."""
        if group_id not in await self.unknown([group_id]):
            return None
        outcome = decide(groups.new_group(group_id), self.clock())
        reply = outcome.reply_for(UNKNOWN_TOKEN)
        if outcome.persist or outcome.timers or reply is None:
            return None
        return reply.payload

    async def exists(self, runtime: GroupRuntime) -> bool:
        """Does the group exist as Kafka sees it: a stored state, members, or
        committed offsets? (A runtime is created for any group asked about.)"""
        if runtime.version is not None or runtime.group.size > 0:
            return True
        return bool(await self.offsets.fetch(runtime.group_id))
