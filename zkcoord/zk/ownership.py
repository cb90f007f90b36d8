"""Which daemon coordinates which group: per-group owner election.

This module owns the contender znodes under ``/coordinators/<group>/owner``
and this daemon's view of the groups it owns. It is kazoo's ``Lock`` recipe
without the queue:

1. :meth:`GroupOwnership.contend` creates an ephemeral sequential contender
   ``<uuid>__lock__<seq>`` holding our node id. The uuid prefix lets a retry
   after a connection loss find a create that succeeded.
2. The lowest sequence owns the group. If that is ours, we own it and an
   exists-watch on our contender tells us when it vanishes. If not, we delete
   ours at once (we never queue) and return the winner's node id.
3. The owner's contender znode is the group's *fence*: every write that
   matters is a multi-op that first checks it (:class:`Fence`), so a deposed
   owner's write cannot land.

kazoo's ``Election`` ignores connection trouble; we react to it. An owned
group moves through this table (``OwnershipChange`` kinds in capitals are
reported to ``on_change``):

==================  ===========  ==============================================
event               group        effect
==================  ===========  ==============================================
session SUSPENDED   owned        suspended: the runtime answers
                                 COORDINATOR_LOAD_IN_PROGRESS (SUSPENDED)
session GIVEN_UP    any          every group dropped at once (LOST), nothing
                                 written; its contender is remembered as stale
                                 and no group is contended for until the
                                 session is back
session RECONNECTED suspended    re-check our contender exists and is lowest:
                                 keep (RESUMED) or drop (LOST)
session RECONNECTED given up     the stale contenders deleted (one multi per
                                 500), then contending again (REJOINED)
session LOST        any          every group dropped at once (LOST)
contender deleted   any          dropped (LOST)
:meth:`drop`        any          dropped (LOST): the state store's fenced
                                 write failed
:meth:`release`     any          contender deleted, dropped (no report)
:meth:`retire`      any          contender deleted with the group's empty
                                 ``owner`` and ``/coordinators/<group>``
                                 znodes, dropped (no report)
==================  ===========  ==============================================

GIVEN_UP is the connection's verdict that a suspension lasted the session
time-out (:mod:`zkcoord.zk.connection`, rule 6; :mod:`zkcoord.core.session_loss`):
the daemon then behaves as if its session had expired, without being able
to delete anything. If ZooKeeper had not expired the session after all, the
connection comes back with it (RECONNECTED) and our contenders with it:
they are deleted before we contend again, so the daemon rejoins the
elections exactly as after an expiry (REJOINED, with no groups: the
takeover runs then, :mod:`zkcoord.server.takeover`). Contentions under way
at the give-up withdraw what they created.

Many groups at once (a takeover, a stop): :mod:`zkcoord.zk.ownership_bulk`,
part of the same class, by the same rules.

:meth:`retire` is how a group that holds nothing (no state, no offsets)
leaves no znodes behind: one multi deletes our contender, the ``owner``
directory and the group's znode. ZooKeeper refuses to delete a znode with
children, so the multi fails as a whole if another contender or a state
znode appeared meanwhile; then only our contender is deleted, as
:meth:`release` does. A daemon contending at the same moment either created
its contender first (the multi fails) or after (its ``makepath`` create
makes the directories again): the election rules do not change.

Threading: all state lives on the event loop thread. kazoo's watch and
session callbacks only hop onto the loop (``aio.post``); ``on_change`` runs
there and must not block.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.exceptions import ConnectionLoss, NoNodeError
from kazoo.protocol.states import EventType
from kazoo.retry import ForceRetryError

from zkcoord.errors import NotOwnerError, ServiceUnavailableError
from zkcoord.tasks import Background
from zkcoord.zk import aio, election, paths
from zkcoord.zk.connection import SessionEvent, ZkConnection
from zkcoord.zk.multi_read import GET_CHILDREN, read_many
from zkcoord.zk.ownership_bulk import BATCH, BulkOwnership, Orphans

__all__ = ["Fence", "ChangeKind", "OwnershipChange", "Orphans", "GroupOwnership", "BATCH"]

log = logging.getLogger(__name__)

_MAX_ROUNDS = 5  # contention rounds before giving up (winners that vanish as we look)
_LOOKUPS_AT_ONCE = 100  # contended groups looked up concurrently by current_owners


@dataclass(frozen=True)
class Fence:
    """Proof of ownership for a multi-op: our contender znode at ``version``."""

    group: str
    path: str
    version: int = 0  # contenders are never modified

    def add_check(self, txn) -> None:
        """Add the fencing ``check`` op to a kazoo transaction."""
        txn.check(self.path, self.version)


class ChangeKind(enum.Enum):
    SUSPENDED = "suspended"
    RESUMED = "resumed"
    LOST = "lost"
    REJOINED = "rejoined"  # a session given up is back, its stale contenders deleted: contend again (no groups)


@dataclass(frozen=True)
class OwnershipChange:
    kind: ChangeKind
    groups: frozenset[str]
    reason: str


@dataclass
class _Owned:
    path: str
    suspended: bool
    watched: bool = False  # a watch on the contender is set (kazoo drops them all when the connection goes)
    releasing: bool = False  # release_all is deleting it: its deletion is no loss


@dataclass
class _Attempt:
    """One contention round; ``tried`` means a create may have landed."""

    prefix: str
    tried: bool = False


class GroupOwnership(BulkOwnership):
    """Owner election for every group, for the daemon ``node_id``."""

    def __init__(self, conn: ZkConnection, node_id: int,
                 on_change: Callable[[OwnershipChange], None] | None = None) -> None:
        paths.node(node_id)  # validates the id
        self._conn = conn
        self.node_id = node_id
        self._data = str(node_id).encode()
        self._on_change = on_change
        self._loop: asyncio.AbstractEventLoop | None = None
        self._owned: dict[str, _Owned] = {}
        self._contending: dict[str, asyncio.Future] = {}  # a contend's task, or a batch's future per group
        self._owner_cache: dict[str, int | None] = {}
        self._cache_epoch: dict[str, int] = {}
        self._generation = 0  # +1 per lost session: its contenders are gone
        self._session_epoch = 0  # +1 per session event: stale re-checks are ignored
        self._connected = True
        self._closing = False  # release_all began: no more contending (the daemon is stopping)
        self._given_up: str | None = None  # why, from GIVEN_UP until the session is back (module docstring)
        self._stale: set[str] = set()  # our contenders of a session given up, to delete when it comes back
        self._background = Background(log, "group ownership")

    # ----------------------------------------------------------- lifecycle
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._conn.add_listener(self._on_session, self._loop)

    async def stop(self) -> None:
        """Release every group (best effort) and stop listening."""
        self._conn.remove_listener(self._on_session)
        try:
            await self.release_all()
        except ServiceUnavailableError as exc:
            log.warning("could not release every group on stop: %s", exc)

    # ------------------------------------------------------------- queries
    def owned(self) -> frozenset[str]:
        """Groups we own, suspended ones included."""
        return frozenset(self._owned)

    def is_owned(self, group: str) -> bool:
        return group in self._owned

    def is_contending(self, group: str) -> bool:
        """A contention for ``group`` is under way here (one alone, or in a batch)."""
        return group in self._contending

    @property
    def session_given_up(self) -> str | None:
        """Why the daemon treats its session as lost (GIVEN_UP), until it is
        back and the stale contenders are deleted; None otherwise."""
        return self._given_up

    def is_suspended(self, group: str) -> bool:
        owned = self._owned.get(group)
        return owned is not None and owned.suspended

    def fence(self, group: str) -> Fence:
        """The fencing handle of a group we own, else NotOwnerError."""
        owned = self._owned.get(group)
        if owned is None:
            raise NotOwnerError(f"node {self.node_id} does not own group {group!r}; "
                                "look the coordinator up again", group)
        return Fence(group, owned.path)

    async def current_owner(self, group: str) -> int | None:
        """The owner's node id, or None if nobody owns ``group``.

        Cached per group while a children watch on its contenders holds
        (never for a group without an ``owner`` directory: no watch can
        tell when its first contender comes).
        """
        if group in self._owned:
            return self.node_id
        if group in self._owner_cache:
            return self._owner_cache[group]
        return await self._conn.retry(f"look up the owner of group {group!r}", self._inner_owner, group)

    async def current_owners(self, groups: list[str]) -> dict[str, int | None]:
        """:meth:`current_owner` of each of ``groups`` (distinct), with one
        ZooKeeper round for all of them: the owner directories not known
        here are listed together (multiRead, :func:`~zkcoord.zk.multi_read.read_many`);
        only a group with contenders is then looked up on its own (which
        caches it under a watch). A FindCoordinator naming 100,000 unused
        ids costs about a hundred multiReads, not 100,000 reads."""
        found: dict[str, int | None] = {}
        unknown = []
        for group in groups:
            if group in self._owned or group in self._contending:  # a contention here: most likely ours
                found[group] = self.node_id
            elif group in self._owner_cache:
                found[group] = self._owner_cache[group]
            else:
                unknown.append(group)
        if not unknown:
            return found
        listed = await self._conn.retry(f"list the contenders of {len(unknown)} group(s)",
                                        self._inner_list_owner_dirs, unknown)
        contended = []
        for group, children in zip(unknown, listed):
            if children:
                contended.append(group)
            else:
                found[group] = None  # no contender (not cached: current_owner's rule)
        for start in range(0, len(contended), _LOOKUPS_AT_ONCE):
            chunk = contended[start:start + _LOOKUPS_AT_ONCE]
            for group, owner in zip(chunk, await asyncio.gather(*(self.current_owner(g) for g in chunk))):
                found[group] = owner
        return found

    async def _inner_list_owner_dirs(self, groups: list[str]) -> list[list[str]]:
        """Each group's contender names ([] without an owner directory);
        raises the first failure other than a missing directory, so that
        the connection's retry reads again."""
        outcomes = await read_many(self._conn, [(GET_CHILDREN, paths.owner_dir(g)) for g in groups])
        listed = []
        for outcome in outcomes:
            if isinstance(outcome, NoNodeError):
                listed.append([])
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                listed.append(outcome)
        return listed

    async def _inner_owner(self, group: str) -> int | None:
        epoch = self._cache_epoch.get(group, 0)
        loop = asyncio.get_running_loop()
        watch = lambda event: aio.post(loop, self._invalidate, group)  # noqa: E731
        try:
            children = await aio.call(self._conn.client.get_children_async, paths.owner_dir(group), watch)
        except NoNodeError:
            # No election directory, so no watch was set: a cached None would outlive another daemon's
            # win. Not cached (a lookup of an unused id also leaves no cache entry behind).
            return None
        found = await election.lowest(self._conn.client, group, children=children)
        owner = None if found is None else found[0]
        if self._cache_epoch.get(group, 0) == epoch:
            self._owner_cache[group] = owner
        return owner

    def _invalidate(self, group: str) -> None:
        self._cache_epoch[group] = self._cache_epoch.get(group, 0) + 1
        self._owner_cache.pop(group, None)

    async def _read_contender(self, group: str, name: str) -> tuple[int, int] | None:
        """(node id, session id that owns the znode) of a contender, None if gone."""
        path = paths.contender(group, name)
        try:
            data, stat = await aio.call(self._conn.client.get_async, path)
        except NoNodeError:
            return None
        return election.node_id_of(group, path, data), stat.ephemeralOwner

    # ----------------------------------------------------------- contending
    async def contend(self, group: str) -> int:
        """Try to become the owner; return the winner's node id (ours if we won).

        Never queues: a losing contender is withdrawn before returning. Raises
        ServiceUnavailableError if ZooKeeper does not answer in time.
        Cancelling the caller does not abandon the attempt half-way.
        """
        paths.owner_dir(group)  # validates the group id
        if self._loop is None:
            raise RuntimeError("GroupOwnership.start() must be awaited before contend()")
        if group in self._owned:
            return self.node_id
        self._check_open()
        task = self._contending.get(group)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._contend(group))
            self._contending[group] = task
            task.add_done_callback(lambda t: self._contended(group, t))
        return await asyncio.shield(task)

    def _check_open(self) -> None:
        if self._closing:
            raise ServiceUnavailableError(f"node {self.node_id} is stopping: it contends for no group")
        if self._given_up is not None:
            raise ServiceUnavailableError(f"node {self.node_id} has no ZooKeeper session ({self._given_up}): "
                                          "it contends for no group")

    def _contended(self, group: str, task: asyncio.Task) -> None:
        self._contending.pop(group, None)
        if not task.cancelled():
            task.exception()  # retrieved here: callers that gave up waiting do not see it

    async def _contend(self, group: str) -> int:
        for _ in range(_MAX_ROUNDS):
            generation = self._generation
            attempt = _Attempt(uuid.uuid4().hex + paths.CONTENDER_MARKER)
            try:
                ours, contenders = await self._conn.retry(
                    f"contend for group {group!r}", self._inner_contend, group, attempt)
                if generation != self._generation:  # the session was lost or given up meanwhile
                    self._check_open()  # given up: ours may still be there (cleaned up below)
                    continue  # lost: our contender went with it
                if contenders[0] == ours:
                    self._adopt(group, ours)
                    return self.node_id
                await self._conn.retry(f"withdraw from group {group!r}", self._inner_delete,
                                       paths.contender(group, ours))
            except Exception:
                if attempt.tried:  # a create may have landed: do not leave it queued
                    self._spawn(self._cleanup(group, attempt.prefix))
                raise
            winner = await self._conn.retry(f"read the owner of group {group!r}", self._read_contender,
                                            group, contenders[0])
            if winner is None:
                continue  # the winner left while we looked: contend again
            node_id, session_id = winner
            if node_id == self.node_id and session_id == self._conn.session_id:
                self._adopt(group, contenders[0])  # ours from an abandoned attempt
                return self.node_id
            return node_id
        raise ServiceUnavailableError(f"contention for group {group!r} did not settle after {_MAX_ROUNDS} rounds")

    async def _cleanup(self, group: str, prefix: str) -> None:
        async def inner() -> None:
            try:
                children = await aio.call(self._conn.client.get_children_async, paths.owner_dir(group))
            except NoNodeError:
                return
            for name in children:
                if name.startswith(prefix):
                    await self._inner_delete(paths.contender(group, name))
        try:
            await self._conn.retry(f"clean up a contender of group {group!r}", inner)
        except Exception as exc:  # best effort: the session's end removes it anyway
            log.warning("could not clean up our contender for group %r: %s", group, exc)

    def _spawn(self, coro) -> None:
        self._background.spawn(coro, getattr(coro, "__qualname__", "ownership step"))

    async def _inner_contend(self, group: str, attempt: _Attempt) -> tuple[str, list[str]]:
        client = self._conn.client
        owner_dir = paths.owner_dir(group)
        ours = None
        if attempt.tried:
            try:
                children = await aio.call(client.get_children_async, owner_dir)
            except NoNodeError:
                children = []
            ours = next((c for c in children if c.startswith(attempt.prefix)), None)
        if ours is None:
            attempt.tried = True
            try:
                created = await aio.create(client, f"{owner_dir}/{attempt.prefix}", self._data,
                                           ephemeral=True, sequence=True)
            except NoNodeError:  # a new group: its directories and our contender in one multi
                ours = await self._create_group(group, attempt.prefix)
                if ours is not None:
                    return ours, [ours]  # a directory made with it holds no other contender
                created = await aio.call(client.create_async, f"{owner_dir}/{attempt.prefix}", self._data,
                                         ephemeral=True, sequence=True, makepath=True)
            ours = created.rsplit("/", 1)[1]
        contenders = election.ordered(await aio.call(client.get_children_async, owner_dir))
        if ours not in contenders:
            attempt.tried = False  # it vanished (session lost?): create anew
            raise ForceRetryError()
        return ours, contenders

    async def _create_group(self, group: str, prefix: str) -> str | None:
        """``/coordinators/<group>``, its ``owner`` directory and our contender
        in one multi (one request instead of kazoo's makepath's four or
        five); our contender's name, or None when some of it exists already
        (then the caller makes the path as usual)."""
        txn = self._conn.client.transaction()
        txn.create(paths.coordinator(group))
        txn.create(paths.owner_dir(group))
        txn.create(f"{paths.owner_dir(group)}/{prefix}", self._data, ephemeral=True, sequence=True)
        results = await aio.future_of(asyncio.get_running_loop(), txn.commit_async())
        failure = aio.transaction_failure(results)
        if failure is None:
            return results[2].rsplit("/", 1)[1]
        if isinstance(failure[1], ConnectionLoss):
            raise failure[1]  # retried: the attempt's prefix finds a contender that landed
        return None

    async def _inner_delete(self, path: str) -> None:
        try:
            await aio.call(self._conn.client.delete_async, path)
        except NoNodeError:
            pass  # already gone: what we wanted

    def _adopt(self, group: str, name: str, watch: bool = True) -> _Owned:
        if self._given_up is not None:  # callers check first; never own a group without a session
            self._stale.add(paths.contender(group, name))
            raise ServiceUnavailableError(f"node {self.node_id} has no ZooKeeper session ({self._given_up})")
        owned = _Owned(paths.contender(group, name), suspended=not self._connected)
        self._owned[group] = owned
        self._invalidate(group)
        if watch:
            log.info("node %s now owns group %r (%s)", self.node_id, group, owned.path)
            if not owned.suspended:
                self._watch(group, owned)
        return owned

    def _watcher(self, group: str, owned: _Owned) -> Callable:
        """The watch of our contender of ``group`` (kazoo's thread hops onto the loop)."""
        loop = self._loop
        return lambda event: aio.post(loop, self._on_contender_event, group, owned, event)

    def _watch(self, group: str, owned: _Owned) -> None:
        owned.watched = True
        loop = self._loop
        result = self._conn.client.exists_async(owned.path, watch=self._watcher(group, owned))
        result.rawlink(lambda r: aio.post(loop, self._on_watch_armed, group, owned,
                                          r.value if r.successful() else r.exception))

    def _on_watch_armed(self, group: str, owned: _Owned, outcome: object) -> None:
        if outcome is None and self._owned.get(group) is owned:
            self._lose({group}, f"contender znode {owned.path} is gone")
        elif isinstance(outcome, BaseException):
            owned.watched = False  # connection trouble: the session events take over (RECONNECTED sets it)

    def _on_contender_event(self, group: str, owned: _Owned, event) -> None:
        if self._owned.get(group) is not owned or owned.releasing:
            return
        if event.type == EventType.DELETED:
            self._lose({group}, f"contender znode {owned.path} was deleted")
        elif event.type != EventType.NONE:  # NONE: connection trouble, re-armed on RECONNECTED
            self._watch(group, owned)

    # ------------------------------------------------------------ releasing
    async def release(self, group: str) -> None:
        """Stop owning ``group``: delete our contender so another daemon can win."""
        owned = self._owned.pop(group, None)
        if owned is None:
            return
        self._invalidate(group)
        await self._conn.retry(f"release group {group!r}", self._inner_delete, owned.path)

    async def retire(self, group: str) -> None:
        """Stop owning ``group`` and delete its election's znodes when nothing
        else is under them (module docstring); else as :meth:`release`."""
        owned = self._owned.pop(group, None)
        if owned is None:
            return
        self._invalidate(group)
        await self._conn.retry(f"retire group {group!r}", self._inner_retire, group, owned.path)

    async def _inner_retire(self, group: str, contender_path: str) -> None:
        txn = self._conn.client.transaction()
        txn.delete(contender_path)
        txn.delete(paths.owner_dir(group))
        txn.delete(paths.coordinator(group))
        results = await aio.future_of(asyncio.get_running_loop(), txn.commit_async())
        failure = aio.transaction_failure(results)
        if failure is None:
            log.info("node %s retired group %r: its election znodes are deleted", self.node_id, group)
            return
        if isinstance(failure[1], ConnectionLoss):
            raise failure[1]  # retried: every step of the multi is idempotent but the first
        await self._inner_delete(contender_path)  # something is still under them: keep the directories

    def drop(self, group: str, reason: str, fence: Fence | None = None) -> None:
        """Forget ``group`` because a fenced write showed we lost it; report LOST.

        Only the ownership ``fence`` belongs to is dropped. Our contender is
        deleted in the background in case it still exists (e.g. the state
        was changed by someone else), so another daemon can take over.
        """
        owned = self._owned.get(group)
        if owned is None or (fence is not None and fence.path != owned.path):
            return
        self._lose({group}, reason)
        self._spawn(self._quiet_delete(owned.path))

    async def _quiet_delete(self, path: str) -> None:
        try:
            await self._conn.retry(f"delete contender {path}", self._inner_delete, path)
        except Exception as exc:  # best effort: the session's end removes it anyway
            log.warning("could not delete contender %s: %s", path, exc)

    def _lose(self, groups: set[str], reason: str) -> None:
        lost = frozenset(g for g in groups if self._owned.pop(g, None) is not None)
        for group in lost:
            self._invalidate(group)
        if lost:
            log.warning("node %s lost %s: %s", self.node_id, _some(lost), reason)
            self._report(ChangeKind.LOST, lost, reason)

    def _report(self, kind: ChangeKind, groups: frozenset[str], reason: str) -> None:
        if self._on_change is None or (not groups and kind is not ChangeKind.REJOINED):
            return
        try:
            self._on_change(OwnershipChange(kind, groups, reason))
        except Exception:
            log.exception("ownership listener failed on %s", kind.value)

    # ------------------------------------------------------ session events
    def _on_session(self, event: SessionEvent) -> None:  # on the loop thread
        self._session_epoch += 1
        for group in list(self._owner_cache):
            self._invalidate(group)
        if event is SessionEvent.SUSPENDED:
            self._connected = False
            fresh = [g for g, o in self._owned.items() if not o.suspended]
            for owned in self._owned.values():
                owned.watched = False  # kazoo drops every watcher with the connection
            for group in fresh:
                self._owned[group].suspended = True
            self._report(ChangeKind.SUSPENDED, frozenset(fresh), "ZooKeeper connection lost")
        elif event is SessionEvent.GIVEN_UP:
            self._connected = False
            self._generation += 1  # contentions under way withdraw what they create
            self._given_up = self._conn.last_given_up or "ZooKeeper session given up"
            self._stale.update(owned.path for owned in self._owned.values())
            self._lose(set(self._owned), f"ZooKeeper session given up: {self._given_up}")
        elif event is SessionEvent.LOST:
            self._connected = False
            self._generation += 1
            self._stale.clear()  # they went with the session
            self._lose(set(self._owned), "ZooKeeper session expired")
        elif event is SessionEvent.RECONNECTED:
            self._connected = True
            if self._given_up is not None:
                self._spawn(self._rejoin(self._session_epoch))
            else:
                self._spawn(self._recheck(self._session_epoch))
        else:  # CONNECTED: a new session owns nothing yet
            self._connected = True
            self._stale.clear()
            if self._given_up is not None:
                log.info("node %s contends again: a new ZooKeeper session replaces the one given up", self.node_id)
            self._given_up = None  # the new registration's watch starts the takeover (zkcoord.server.takeover)

    async def _rejoin(self, epoch: int) -> None:
        """The session given up is back (RECONNECTED): delete its contenders
        of ours (the groups were given up; their members look elsewhere),
        then contend again, as after an expiry (REJOINED). Tried again every
        second while the connection holds."""
        while epoch == self._session_epoch:
            stale = sorted(self._stale)
            try:
                if stale:
                    await self._conn.retry(f"delete {len(stale)} contenders of the session given up",
                                           self._inner_delete_many, stale)
            except Exception as exc:
                log.warning("node %s: could not delete the %d contenders of the session it gave up (%s); trying "
                            "again in 1 s", self.node_id, len(stale), exc)
                await asyncio.sleep(1.0)
                continue
            if epoch != self._session_epoch:
                return  # another session event came first; it decides
            self._stale.difference_update(stale)
            was, self._given_up = self._given_up, None
            log.info("node %s rejoins the group elections: the ZooKeeper session it had given up (%s) is back; "
                     "%d contender(s) of it deleted", self.node_id, was, len(stale))
            self._report(ChangeKind.REJOINED, frozenset(), "the ZooKeeper session given up is back")
            return

    async def _recheck(self, epoch: int) -> None:
        """After a reconnect: keep each group whose contender is still lowest
        (the elections read in multiReads); set the watches kazoo does not
        hold (groups won while suspended, watches whose setting failed)."""
        snapshot = dict(self._owned)
        outcomes = await read_many(self._conn, [(GET_CHILDREN, paths.owner_dir(g)) for g in snapshot])
        if epoch != self._session_epoch:
            return  # another session event came first; it decides
        kept, dropped = set(), set()
        for (group, owned), outcome in zip(snapshot.items(), outcomes):
            if self._owned.get(group) is not owned:
                continue
            if isinstance(outcome, ConnectionLoss):
                continue  # still suspended; the next RECONNECTED re-checks
            name = owned.path.rsplit("/", 1)[1]
            if isinstance(outcome, list) and election.ordered(outcome)[:1] == [name]:
                kept.add(group)
            else:
                dropped.add(group)
        for group in kept:
            self._owned[group].suspended = False
        if kept:
            self._report(ChangeKind.RESUMED, frozenset(kept), "ZooKeeper connection back, same session")
        unwatched = [(g, self._owned[g]) for g in kept if not self._owned[g].watched]
        if unwatched:
            self._spawn(self._watch_many(unwatched))
        for group in dropped:
            self._spawn(self._quiet_delete(snapshot[group].path))
        self._lose(dropped, "after reconnecting, our contender is no longer the lowest")

def _some(groups: frozenset[str], shown: int = 10) -> str:
    """``groups`` for a log line: all of a few, the first few of many."""
    names = sorted(groups)
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"{len(names)} group(s) {names[:shown]}{more}"
