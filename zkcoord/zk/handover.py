"""The znodes of the legacy consumers' rebalance, for the handover (issue 26).

This module owns reading and writing, for the owner daemon of a group in
handover, what Kafka 0.8.1-1.1's ``ZookeeperConsumerConnector`` reads and
writes (paths in :class:`~zkcoord.zk.paths.OffsetPaths`)::

    <root>/<group>/ids/<consumer id>         ephemeral registration (JSON)
    <root>/<group>/owners/<topic>/<p>        ephemeral, the thread id consuming p
    /brokers/topics/<topic>                  the topic's partitions (Kafka's)

* :meth:`LegacyRebalanceZk.read`: one :class:`Reading` of a group (every
  registration, the topics and partitions it subscribes to, the owner
  znodes of those topics; which znodes the daemon's session holds), from
  which :meth:`Reading.view` makes the core's
  :class:`~zkcoord.core.handover.decision.View`; optionally arming one-shot
  watches on what starts a legacy rebalance (children of ``ids``, the
  subscribed topics' registrations) and on the owner directories (a
  release we wait for).
* :meth:`consumer_ids`: who is registered, with a watch (how a daemon
  notices that legacy consumers share one of its groups).
* :meth:`register` / :meth:`unregister`: a member's registration,
  ephemeral, in the form legacy consumers write.
* :meth:`claim` / :meth:`release`: an owner znode, created ephemeral (only
  where absent), deleted only when the daemon's session holds it and it
  names the thread we release it for.
* :meth:`carry_out`: a plan's ZooKeeper steps in the plan's order
  (unregister, register, release, claim); revocations are the runtime's
  (they need the members), so it leaves them out. Its :class:`Outcome`
  says which claims found the znode taken (back off:
  :meth:`~zkcoord.core.handover.retries.Attempts.failed`).

Rules:

1. "Ours" is the znode's ``ephemeralOwner`` equal to this connection's
   session id: never the name a znode holds.
2. Every step is idempotent and retried on connection loss
   (``conn.retry``): a create whose answer was lost is recognised as ours
   by its session and data; a delete of what is gone already succeeded.
3. The directories legacy consumers create children in (``ids``,
   ``owners``, ``owners/<topic>``) are created with open ACLs whatever the
   connection's default, as Kafka keeps them (:mod:`zkcoord.zk.auth` rule
   1); the ephemeral znodes get the connection's default (secure ACLs give
   everybody READ, all legacy consumers need of them).
4. An unreadable registration does not stop the read: it is listed in
   ``Reading.problems`` and :meth:`Reading.view` raises its StateError (no
   consumer of the group, legacy or not, can rebalance while it is there).
5. A read's watches are ZooKeeper's one-shot watches: ``on_change`` is
   called at most once per read, and not for a session event (a watch set
   in a session that expired never fires). The caller reads again after
   every call and after every RECONNECTED or LOST/CONNECTED.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.retry import ForceRetryError

from zkcoord.core.handover.decision import Member, Owner, Plan, View
from zkcoord.core.handover.legacy_range import TopicPartition, subscribed_threads
from zkcoord.core.handover.registration import (
    LegacyRegistration, encode_registration, parse_registration, split_thread_id,
)
from zkcoord.core.legacy_values import partition_number
from zkcoord.errors import ConflictError, NotOwnerError, StateError, UsageError
from zkcoord.zk import aio, paths
from zkcoord.zk.auth import OPEN_ACL
from zkcoord.zk.connection import ZkConnection
from zkcoord.zk.multi_read import GET_CHILDREN, read_many
from zkcoord.zk.ownership import Fence
from zkcoord.zk.watches import last_zxid, set_watches
from zkcoord.zk.topics import parse_partition_ids

__all__ = ["Reading", "Outcome", "LegacyRebalanceZk"]

log = logging.getLogger(__name__)
KEPT = b'{"keep":true}'  # a handover marker's data when an operator keeps the group in handover


@dataclass(frozen=True)
class Reading:
    """One read of a group's legacy rebalance znodes."""

    group: str
    registrations: Mapping[str, LegacyRegistration] = field(default_factory=dict)
    ours: frozenset[str] = frozenset()  # consumer ids whose registration our session holds
    topics: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # subscribed topics -> partitions
    owners: Mapping[TopicPartition, Owner] = field(default_factory=dict)
    problems: Mapping[str, str] = field(default_factory=dict)  # consumer id -> why its registration is unreadable
    exclude_internal_topics: bool = True  # what the read assumed of the legacy consumers

    def view(self, members: Mapping[str, Member], quiesced: Set[tuple[TopicPartition, str]] = frozenset()) -> View:
        """The core's view; StateError for an unreadable registration."""
        if self.problems:
            raise StateError(next(iter(self.problems.values())))
        return View(self.registrations, self.topics, self.owners, members, self.ours, frozenset(quiesced),
                    self.exclude_internal_topics)


@dataclass(frozen=True)
class Outcome:
    """What :meth:`LegacyRebalanceZk.carry_out` did."""

    released: tuple[TopicPartition, ...] = ()
    claimed: tuple[TopicPartition, ...] = ()
    taken: tuple[TopicPartition, ...] = ()  # claims that found the znode held by another session

    @property
    def complete(self) -> bool:
        return not self.taken


class LegacyRebalanceZk:
    """The legacy rebalance znodes under ``consumers_root`` (``/consumers``)."""

    def __init__(self, conn: ZkConnection, consumers_root: str = paths.DEFAULT_CONSUMERS_ROOT) -> None:
        self._conn = conn
        self.paths = paths.OffsetPaths(consumers_root)  # ConfigError for a bad root, before any I/O

    # ---------------------------------------------------------------- reading
    async def read(self, group: str, on_change: Callable[[], None] | None = None,
                   exclude_internal_topics: bool = True, recorded: Set[str] | None = None) -> Reading:
        """The group as the legacy consumers see it. ``on_change`` (on the
        loop, once) when a registration comes or goes, a subscribed topic's
        registration or the topic list changes, or an owner znode of a
        subscribed topic is created or deleted. ``recorded``: the consumer
        ids the group's record lists (persistent mode, rule 1): their
        registrations and the owner znodes naming their threads are ours."""
        self.paths.ids_dir(group)  # validates the group id before any I/O
        return await self._conn.retry(f"read the legacy consumers of group {group!r}", self._inner_read, group,
                                      on_change, exclude_internal_topics, recorded)

    def _watch(self, on_change: Callable[[], None] | None):
        if on_change is None:
            return None
        loop = asyncio.get_running_loop()
        fired = []

        def watcher(event) -> None:  # kazoo's thread; many watches, one call
            if not fired:
                fired.append(event)
                aio.post(loop, on_change)
        return watcher

    async def consumer_ids(self, group: str, on_change: Callable[[], None] | None = None) -> list[str]:
        """The consumer ids registered in the group (none when ``ids`` is
        absent), with a one-shot watch calling ``on_change`` (on the loop)
        when one comes or goes, or when ``ids`` is created."""
        ids_dir = self.paths.ids_dir(group)
        return await self._conn.retry(f"list the legacy consumers of group {group!r}", self._inner_ids, ids_dir,
                                      on_change)

    async def _inner_ids(self, ids_dir: str, on_change) -> list[str]:
        client, watch = self._conn.client, self._watch(on_change)
        try:
            return list(await aio.call(client.get_children_async, ids_dir, watch))
        except NoNodeError:
            pass
        if await aio.call(client.exists_async, ids_dir, watch) is not None:
            raise ForceRetryError()  # created meanwhile: list it
        return []

    def zxid(self) -> int:
        """The last zxid seen: taken before a bulk read, for :meth:`watch_many`."""
        return last_zxid(self._conn)

    async def consumer_ids_many(self, groups: list[str]) -> dict[str, list[str] | None]:
        """The consumer ids registered in each of ``groups`` (None when its
        ``ids`` is absent), read in multiReads and without watches (a
        takeover's look; :meth:`watch_many` then sets them)."""
        return await self._conn.retry(f"list the legacy consumers of {len(groups)} groups", self._inner_ids_many,
                                      groups)

    async def _inner_ids_many(self, groups: list[str]) -> dict[str, list[str] | None]:
        outcomes = await read_many(self._conn, [(GET_CHILDREN, self.paths.ids_dir(g)) for g in groups])
        found: dict[str, list[str] | None] = {}
        for group, outcome in zip(groups, outcomes):
            if isinstance(outcome, NoNodeError):
                found[group] = None
            elif isinstance(outcome, BaseException):
                raise outcome  # retried (a lost connection) or translated
            else:
                found[group] = list(outcome)
        return found

    async def watch_many(self, listed: Mapping[str, list[str] | None], zxid: int,
                         on_change: Callable[[str], Callable[[], None]]) -> None:
        """The watches :meth:`consumer_ids` and :meth:`kept` set, for groups
        whose ``ids`` were listed as of ``zxid`` (None: absent) and that
        have no marker, in one SetWatches (:mod:`zkcoord.zk.watches`):
        ``on_change(group)()`` is called once, on the loop, when one fires.
        Raises kazoo's ConnectionLoss when the connection fails first."""
        child, exist = [], []
        for group, ids in listed.items():
            watcher = self._watch(on_change(group))
            (exist if ids is None else child).append((self.paths.ids_dir(group), watcher))
            exist.append((paths.handover_marker(group), watcher))
        await set_watches(self._conn, zxid, exist=exist, child=child)

    # -------------------------------------------------------------- markers
    async def mark(self, group: str) -> None:
        """The group is in a handover: its marker under ``/zkcoord/handovers``."""
        await self._conn.retry(f"mark group {group!r} as in handover", self._inner_mark, paths.handover_marker(group))

    async def _inner_mark(self, path: str) -> None:
        try:
            await aio.call(self._conn.client.create_async, path, b"", makepath=True)
        except NodeExistsError:
            pass

    async def unmark(self, group: str) -> None:
        await self._conn.retry(f"unmark group {group!r}", self._inner_unmark, paths.handover_marker(group))

    async def _inner_unmark(self, path: str) -> None:
        try:
            await aio.call(self._conn.client.delete_async, path)
        except NoNodeError:
            pass

    async def set_kept(self, group: str, kept: bool) -> None:
        """An operator's switch: a kept group stays in handover (its members
        registered as legacy consumers) even with no legacy consumer left, so
        that one can be started again at any time (a rollback)."""
        path = paths.handover_marker(group)
        data = KEPT if kept else b""
        await self._conn.retry(f"{'keep' if kept else 'stop keeping'} group {group!r} in handover",
                               self._inner_set_marker, path, data)

    async def _inner_set_marker(self, path: str, data: bytes) -> None:
        client = self._conn.client
        try:
            await aio.call(client.set_async, path, data)
        except NoNodeError:
            if data:
                try:
                    await aio.call(client.create_async, path, data, makepath=True)
                except NodeExistsError:
                    raise ForceRetryError() from None

    async def kept(self, group: str, on_change: Callable[[], None] | None = None) -> bool:
        """Whether an operator keeps the group in handover (a watch on its marker)."""
        return await self._conn.retry(f"read the handover marker of {group!r}", self._inner_kept,
                                      paths.handover_marker(group), on_change)

    async def _inner_kept(self, path: str, on_change) -> bool:
        watch = self._watch(on_change)
        try:
            data, _ = await aio.call(self._conn.client.get_async, path, watch)
        except NoNodeError:
            await aio.call(self._conn.client.exists_async, path, watch)
            return False
        return data == KEPT

    async def marked(self, on_change: Callable[[], None] | None = None) -> list[str]:
        """The groups marked as in handover (with a watch on the list)."""
        return await self._conn.retry("list the groups in handover", self._inner_marked, on_change)

    async def _inner_marked(self, on_change) -> list[str]:
        watch = self._watch(on_change)
        try:
            names = await aio.call(self._conn.client.get_children_async, paths.HANDOVERS, watch)
        except NoNodeError:
            await aio.call(self._conn.client.exists_async, paths.HANDOVERS, watch)
            return []
        return paths.group_ids(names)

    async def _inner_read(self, group: str, on_change, exclude_internal_topics: bool,
                          recorded: Set[str] | None) -> Reading:
        client, loop = self._conn.client, asyncio.get_running_loop()
        watch = self._watch(on_change)
        ids, names = await aio.gather(loop, [client.get_children_async(self.paths.ids_dir(group), watch),
                                             client.get_children_async(paths.BROKER_TOPICS)])
        missing = [self.paths.ids_dir(group)] if isinstance(ids, NoNodeError) else []
        ids, names = _list_or_empty(ids), sorted(_list_or_empty(names))
        values = await aio.gather(loop, [client.get_async(self.paths.registration(group, c)) for c in ids])
        registrations, ours, problems = {}, set(), {}
        session = self._conn.session_id
        for cid, value in zip(ids, values):
            if isinstance(value, NoNodeError):
                continue  # gone meanwhile: the watch fires
            _raise(value)
            data, stat = value
            if _ours(cid, stat, session, recorded):
                ours.add(cid)
            try:
                registrations[cid] = parse_registration(cid, data, self.paths.registration(group, cid))
            except StateError as exc:
                problems[cid] = str(exc)
        subscribed = set()
        for reg in registrations.values():
            try:
                subscribed.update(t for t in subscribed_threads(reg, names, exclude_internal_topics) if _topic_name(t))
            except StateError as exc:
                problems[reg.consumer_id] = str(exc)
        if watch is not None and any(r.wildcard is not None for r in registrations.values()):
            await aio.call(client.get_children_async, paths.BROKER_TOPICS, watch)  # a topic a filter allows
        topics = await self._read_topics(sorted(subscribed), watch, missing)
        owners = await self._read_owners(group, sorted(subscribed), watch, session, missing, recorded)
        if watch is not None and missing:  # no watch is left on a znode that is not there: watch its creation
            _raise_first(await aio.gather(loop, [client.exists_async(path, watch) for path in missing]))
        return Reading(group, registrations, frozenset(ours), topics, owners, problems, exclude_internal_topics)

    async def _read_topics(self, topics: list[str], watch, missing: list[str]) -> dict[str, tuple[int, ...]]:
        loop = asyncio.get_running_loop()
        values = await aio.gather(loop, [self._conn.client.get_async(paths.broker_topic(t), watch) for t in topics])
        found = {}
        for topic, value in zip(topics, values):
            if isinstance(value, NoNodeError):
                missing.append(paths.broker_topic(topic))  # no such topic: no partitions
                continue
            _raise(value)
            try:
                found[topic] = parse_partition_ids(topic, value[0])
            except StateError as exc:
                log.warning("%s; read as a topic without partitions, as legacy consumers would fail on it", exc)
                found[topic] = ()
        return found

    async def _read_owners(self, group: str, topics: list[str], watch, session: int | None,
                           missing: list[str], recorded: Set[str] | None) -> dict[TopicPartition, Owner]:
        client, loop = self._conn.client, asyncio.get_running_loop()
        listed = await aio.gather(loop, [client.get_children_async(self.paths.owners_topic_dir(group, t), watch)
                                         for t in topics])
        missing += [self.paths.owners_topic_dir(group, t) for t, names in zip(topics, listed)
                    if isinstance(names, NoNodeError)]
        wanted = [(t, p) for t, names in zip(topics, listed) for p in map(partition_number, _list_or_empty(names))
                  if p is not None]
        values = await aio.gather(loop, [client.get_async(self.paths.owner(group, t, p)) for t, p in wanted])
        owners = {}
        for tp, value in zip(wanted, values):
            if isinstance(value, NoNodeError):
                continue
            _raise(value)
            data, stat = value
            holder = (data or b"").decode("utf-8", "backslashreplace")
            split = split_thread_id(holder)
            owners[tp] = Owner(holder, _ours(split[0] if split else None, stat, session, recorded))
        return owners

    # ---------------------------------------------------------- registrations
    async def register(self, group: str, consumer_id: str, topics: Mapping[str, int], timestamp_ms: int,
                       fence: Fence | None = None) -> None:
        """Register a member as a legacy consumer (ephemeral; with ``fence``,
        persistent and fenced). ConflictError when another holds that id."""
        path = self.paths.registration(group, consumer_id)
        data = encode_registration(topics, timestamp_ms)
        await self._conn.retry(f"register consumer {consumer_id!r} in group {group!r}", self._inner_create,
                               path, data, self.paths.ids_dir(group), "consumer id", fence)

    async def unregister(self, group: str, consumer_id: str, fence: Fence | None = None) -> bool:
        """Delete a registration of ours; False when there is none of ours."""
        path = self.paths.registration(group, consumer_id)
        return await self._conn.retry(f"unregister consumer {consumer_id!r} of group {group!r}",
                                      self._inner_delete_ours, path, None, fence)

    # ------------------------------------------------------------------ owners
    async def claim(self, group: str, tp: TopicPartition, holder: str, fence: Fence | None = None) -> bool:
        """Create the owner znode of ``tp`` naming ``holder``; False when it
        exists and is not ours with that name (wait for its release)."""
        topic, partition = tp
        path = self.paths.owner(group, topic, partition)
        try:
            await self._conn.retry(f"claim {path}", self._inner_create, path, holder.encode(),
                                   self.paths.owners_topic_dir(group, topic), "owner", fence)
        except ConflictError:
            return False
        return True

    async def release(self, group: str, tp: TopicPartition, holder: str, fence: Fence | None = None) -> bool:
        """Delete the owner znode of ``tp`` if it is ours and names ``holder``;
        whether it was (and is now gone)."""
        path = self.paths.owner(group, *tp)
        return await self._conn.retry(f"release {path}", self._inner_delete_ours, path, holder.encode(), fence)

    async def carry_out(self, group: str, plan: Plan, members: Mapping[str, Member], now_ms: int,
                        fence: Fence | None = None) -> Outcome:
        """The plan's ZooKeeper steps, in order (module docstring); a
        registration is timestamped ``now_ms``."""
        for cid in plan.unregister:
            await self.unregister(group, cid, fence)
        for cid in plan.register:
            await self.register(group, cid, members[cid].topics, now_ms, fence)
        released = [r.partition for r in plan.release if await self.release(group, r.partition, r.holder, fence)]
        claimed, taken = [], []
        for claim in plan.claim:
            ok = await self.claim(group, claim.partition, claim.holder, fence)
            (claimed if ok else taken).append(claim.partition)
        return Outcome(tuple(released), tuple(claimed), tuple(taken))

    # ------------------------------------------------------------------ steps
    async def _inner_create(self, path: str, data: bytes, parent: str, what: str, fence: Fence | None) -> None:
        client = self._conn.client
        await aio.call(client.ensure_path_async, parent, OPEN_ACL)  # rule 3
        try:
            if fence is None:
                await aio.call(client.create_async, path, data, ephemeral=True)
            else:
                txn = client.transaction()
                fence.add_check(txn)
                txn.create(path, data)
                await self._commit(txn, fence, f"create {path}")
            return
        except NodeExistsError:
            pass
        try:
            found, stat = await aio.call(client.get_async, path)
        except NoNodeError:
            raise ForceRetryError() from None  # released meanwhile: create again
        mine = stat.ephemeralOwner == (0 if fence is not None else self._conn.session_id)
        if mine and found == data:
            return  # ours already (a create whose answer was lost)
        holder = ("another owner (a persistent znode)" if stat.ephemeralOwner == 0
                  else f"another ZooKeeper session (0x{stat.ephemeralOwner:x})")
        raise ConflictError(f"{path} is held by {holder}; its {what} is taken")

    async def _inner_delete_ours(self, path: str, data: bytes | None, fence: Fence | None) -> bool:
        client = self._conn.client
        try:
            found, stat = await aio.call(client.get_async, path)
        except NoNodeError:
            return False
        owner = 0 if fence is not None else self._conn.session_id
        if stat.ephemeralOwner != owner or (data is not None and found != data):
            return False  # rule 1: never delete what another holds, nor a name we did not mean
        try:
            if fence is None:
                await aio.call(client.delete_async, path, stat.version)
            else:
                txn = client.transaction()
                fence.add_check(txn)
                txn.delete(path, stat.version)
                await self._commit(txn, fence, f"delete {path}")
        except NoNodeError:
            pass  # deleted by a try whose answer was lost
        except BadVersionError:
            raise ForceRetryError() from None  # changed meanwhile: look again
        return True

    async def _commit(self, txn, fence: Fence, what: str) -> None:
        """A fenced multi of one op: NotOwnerError when the fence fails; the
        op's own error (NodeExists, NoNode, BadVersion) raised as kazoo's."""
        results = await aio.future_of(asyncio.get_running_loop(), txn.commit_async())
        failure = aio.transaction_failure(results)
        if failure is None:
            return
        index, exc = failure
        if index == 0:
            raise NotOwnerError(f"not the owner of group {fence.group!r} any more (its contender {fence.path} "
                                f"is gone): cannot {what}", fence.group)
        raise exc


def _ours(consumer_id: str | None, stat, session: int | None, recorded: Set[str] | None) -> bool:
    """Rule 1: ephemeral mode, the znode is our session's; persistent mode
    (``recorded``), a persistent znode of a consumer id the record lists."""
    if recorded is None:
        return session is not None and stat.ephemeralOwner == session
    return stat.ephemeralOwner == 0 and consumer_id in recorded


def _topic_name(topic: str) -> bool:
    """Whether a subscribed name can be a topic's znode (a registration may
    name anything; one that cannot be a topic has no partitions, as legacy
    consumers find)."""
    try:
        paths.broker_topic(topic)
    except UsageError:
        return False
    return True


def _list_or_empty(outcome) -> list[str]:
    if isinstance(outcome, NoNodeError):
        return []
    _raise(outcome)
    return list(outcome)


def _raise_first(outcomes) -> None:
    for outcome in outcomes:
        _raise(outcome)


def _raise(outcome) -> None:
    if isinstance(outcome, BaseException):
        raise outcome
