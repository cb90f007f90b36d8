"""Kafka's ACLs from ZooKeeper, kept current for the authorizer.

This module owns reading what Kafka's AclAuthorizer keeps in ZooKeeper mode
(Kafka 3.9 ``ZkData.scala``), paths relative to the connection's chroot::

    /kafka-acl/<ResourceType>/<name>                     literal ACLs (JSON)
    /kafka-acl-extended/prefixed/<ResourceType>/<name>   prefixed ACLs (JSON)
    /kafka-acl-changes/acl_changes_<seq>                 "GROUP:alice-g"
    /kafka-acl-extended-changes/acl_changes_<seq>        {"version":1,"resourceType":
                                                          "GROUP","name":"alice-",
                                                          "patternType":"PREFIXED"}

and feeding it into a :class:`zkcoord.core.acl.Authorizer` with
:class:`KafkaAclWatcher`, as Kafka's ``AclAuthorizer`` and
``ZkNodeChangeNotificationListener`` do.

Rules:

1. Read-only. Kafka's brokers (and ``kafka-acls``) write these znodes and
   purge old notifications; none of them need exist (no ACL was ever
   created) and each is picked up once it appears.
2. Listen first, then load, as ``AclAuthorizer.configure``: the
   notification parents are listed with a watch (an existence watch while
   absent), their highest sequence number noted, then every ACL znode is
   read. A change made meanwhile has a notification above the noted number.
3. A notification names one resource pattern; only its znode is read again,
   once per pattern however many notifications name it. Notifications are
   processed in sequence order, each once (above the last one processed).
   A parent that was deleted or created anew (its czxid changed) starts its
   numbering again, so processing starts again at -1.
4. Sessions: kazoo drops every watch when the connection drops. Back on the
   same session (RECONNECTED), the notifications are listed again: watches
   are set again and the ones missed meanwhile have higher numbers. A new
   session (CONNECTED) reloads everything.
5. A corrupt znode is logged once (again only if its content changes) and
   skipped: its resource keeps the last ACLs read from it (none if none
   were). It never stops the watcher. ACL changes are logged at INFO in
   Kafka's words ("Processing Acl change notification for ...").
6. One owner task does every read; kazoo's callbacks only set flags and
   wake it on the event loop. When ZooKeeper cannot be reached within the
   connection's request time-out, it logs, waits (growing to 30 s) and
   tries again; decisions keep using the ACLs read so far.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import EventType

from zkcoord.core.acl import AclEntry, Authorizer, PatternType, ResourcePattern, ResourceType
from zkcoord.core.acl_records import parse_acls_json, parse_extended_change, parse_literal_change
from zkcoord.errors import ZkcoordError
from zkcoord.zk import aio
from zkcoord.zk.connection import SessionEvent, ZkConnection
from zkcoord.zk.multi_read import GET_CHILDREN, GET_DATA, read_many

__all__ = ["KafkaAclWatcher", "ACL_ROOTS", "LITERAL_CHANGES", "EXTENDED_CHANGES", "CHANGE_PREFIX", "acl_path"]

log = logging.getLogger(__name__)

ACL_ROOTS = {PatternType.LITERAL: "/kafka-acl", PatternType.PREFIXED: "/kafka-acl-extended/prefixed"}
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
_FIRST_BACKOFF_S = 0.5
_MAX_BACKOFF_S = 30.0
_NO_VERSION = -2  # Kafka's ZkVersion.UnknownVersion, logged for a resource without a znode


def acl_path(pattern: ResourcePattern) -> str:
    """The znode of a pattern's ACLs (Kafka's ``ResourceZNode.path``)."""
    return f"{ACL_ROOTS[pattern.pattern_type]}/{pattern.resource_type.kafka_name}/{pattern.name}"


def _storable(pattern: ResourcePattern) -> bool:
    """Whether Kafka can have a znode for this pattern at all."""
    return (not pattern.is_unknown and pattern.pattern_type in ACL_ROOTS
            and pattern.name not in ("", ".", "..") and "/" not in pattern.name)


def _sequence(name: str) -> int | None:
    if not name.startswith(CHANGE_PREFIX):
        return None
    digits = name[len(CHANGE_PREFIX):]
    return int(digits) if digits.isdigit() else None


def _scala_set(acls: Iterable[AclEntry]) -> str:
    """A set of ACLs as Kafka's log line prints it (``Set(...)``), in a stable order."""
    return "Set(" + ", ".join(sorted(str(a) for a in acls)) + ")"


@dataclass(eq=False)
class _Feed:
    """One notification parent and how far it has been processed."""

    path: str
    parse: Callable[[bytes], ResourcePattern]
    last_seq: int = -1
    czxid: int | None = None
    pending: bool = False
    watcher: Callable[[Any], None] | None = field(default=None, repr=False)  # one object: kazoo keeps a set


class KafkaAclWatcher:
    """Loads Kafka's ACLs into ``authorizer`` on :meth:`start` and keeps them
    current until :meth:`stop`. ``conn`` must be started."""

    def __init__(self, conn: ZkConnection, authorizer: Authorizer) -> None:
        self._conn = conn
        self.authorizer = authorizer
        self._feeds = (_Feed(LITERAL_CHANGES, parse_literal_change), _Feed(EXTENDED_CHANGES, parse_extended_change))
        for feed in self._feeds:
            feed.watcher = self._watch_callback(feed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._reload = False
        self._stopped = True
        self._loaded = False
        self._corrupt: dict[str, bytes] = {}  # ACL znode path -> the content logged as corrupt
        self._ignored_types: set[str] = set()
        self.notifications_processed = 0
        self.reloads = 0

    # ------------------------------------------------------ health, metrics
    @property
    def loaded(self) -> bool:
        """Whether the first full load completed (it stays true while a
        reload after a new session runs: the ACLs read so far apply)."""
        return self._loaded

    @property
    def resource_count(self) -> int:
        return self.authorizer.resource_count

    @property
    def acl_count(self) -> int:
        return self.authorizer.acl_count

    @property
    def corrupt_znodes(self) -> tuple[str, ...]:
        """ACL znodes skipped because they cannot be read, now."""
        return tuple(sorted(self._corrupt))

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Listen for changes, load every ACL (ServiceUnavailableError if
        ZooKeeper does not let us within the request time-out), then follow
        the changes in the background."""
        if self._task is not None:
            raise RuntimeError("KafkaAclWatcher.start() was called twice")
        self._loop = asyncio.get_running_loop()
        self._stopped = False
        self._reload = True
        self._conn.add_listener(self._on_session, self._loop)
        try:
            await self._conn.retry("load Kafka's ACLs", self._step)
        except BaseException:
            self._stopped = True
            self._conn.remove_listener(self._on_session)
            raise
        self._task = asyncio.create_task(self._run(), name="kafka-acl-watcher")

    async def stop(self) -> None:
        """Stop following changes (kazoo's watches stay set but are ignored)."""
        self._stopped = True
        self._conn.remove_listener(self._on_session)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def __aenter__(self) -> KafkaAclWatcher:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # ------------------------------------------------------------- wake-ups
    def _watch_callback(self, feed: _Feed) -> Callable[[Any], None]:
        def fired(event: Any) -> None:  # kazoo's event thread: never block
            # NONE: kazoo dropped its watches with the connection; rule 4 sets them again.
            if self._stopped or event.type == EventType.NONE or self._loop is None:
                return
            aio.post(self._loop, self._poke, feed)
        return fired

    def _poke(self, feed: _Feed) -> None:
        if not self._stopped:
            feed.pending = True
            self._wake.set()

    def _on_session(self, event: SessionEvent) -> None:  # on the loop
        if self._stopped:
            return
        if event is SessionEvent.CONNECTED:
            self._reload = True
        elif event is SessionEvent.RECONNECTED:
            for feed in self._feeds:
                feed.pending = True
        else:
            return
        self._wake.set()

    async def _run(self) -> None:
        backoff_s = _FIRST_BACKOFF_S
        while not self._stopped:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._conn.retry("follow Kafka's ACL changes", self._step)
                backoff_s = _FIRST_BACKOFF_S
                continue
            except ZkcoordError as exc:
                log.warning("%s; trying again in %g s (authorization uses the ACLs read so far)", exc, backoff_s)
            except Exception:  # a bug must not end the watcher
                log.exception("following Kafka's ACL changes failed; trying again in %g s", backoff_s)
            await asyncio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, _MAX_BACKOFF_S)
            self._wake.set()

    async def _step(self) -> None:
        """Whatever is due: a full load, then the notifications of each feed."""
        if self._reload:
            self._reload = False
            try:
                await self._load_everything()
            except BaseException:
                self._reload = True
                raise
        for feed in self._feeds:
            if feed.pending:
                feed.pending = False
                try:
                    await self._follow(feed)
                except BaseException:
                    feed.pending = True
                    raise

    # ----------------------------------------------------------- full load
    async def _load_everything(self) -> None:
        for feed in self._feeds:  # rule 2: listen first
            feed.pending = False
            children = await self._list(feed)
            seqs = [s for s in map(_sequence, children or ()) if s is not None]
            feed.last_seq = max(seqs, default=-1)
        acls = await self._read_all()
        first = not self._loaded
        changed = self.authorizer.replace_all(acls)
        self._loaded = True
        self.reloads += 1
        if first or changed:
            log.info("%s Kafka's ACLs from ZooKeeper at %s: %d ACLs on %d resources",
                     "Loaded" if first else "Reloaded (they changed while the session was lost)",
                     self._conn.hosts, self.authorizer.acl_count, self.authorizer.resource_count)

    async def _read_all(self) -> dict[ResourcePattern, frozenset[AclEntry]]:
        patterns = []
        for pattern_type, root in ACL_ROOTS.items():
            types = await self._known_types(root)
            listed = await read_many(self._conn, [(GET_CHILDREN, f"{root}/{t.kafka_name}") for t in types])
            for resource_type, names in zip(types, listed):
                if isinstance(names, NoNodeError):
                    continue  # deleted meanwhile
                if isinstance(names, BaseException):
                    raise names
                patterns += [ResourcePattern(resource_type, name, pattern_type) for name in names]
        outcomes = await read_many(self._conn, [(GET_DATA, acl_path(p)) for p in patterns])
        present = {acl_path(p) for p, outcome in zip(patterns, outcomes) if not isinstance(outcome, NoNodeError)}
        self._corrupt = {path: data for path, data in self._corrupt.items() if path in present}
        acls = {}
        for pattern, outcome in zip(patterns, outcomes):
            if isinstance(outcome, NoNodeError):
                continue
            if isinstance(outcome, BaseException):
                raise outcome
            found = self._decode(pattern, outcome)
            acls[pattern] = self.authorizer.acls(pattern) if found is None else found
        return acls

    async def _known_types(self, root: str) -> list[ResourceType]:
        """The resource types under an ACL root that Kafka reads: those
        spelled as Kafka spells them (it reads ``Group``, never ``GROUP``)."""
        try:
            names = await aio.call(self._conn.client.get_children_async, root)
        except NoNodeError:
            return []
        types = []
        for name in names:
            resource_type = ResourceType.parse(name)
            if resource_type in (ResourceType.UNKNOWN, ResourceType.ANY) or resource_type.kafka_name != name:
                if name not in self._ignored_types:
                    self._ignored_types.add(name)
                    log.warning("Ignoring unknown ResourceType: %s (znode %s/%s)", name, root, name)
                continue
            types.append(resource_type)
        return types

    def _decode(self, pattern: ResourcePattern, data: bytes) -> frozenset[AclEntry] | None:
        """The ACLs in a znode's data; None if corrupt (logged once, rule 5)."""
        path = acl_path(pattern)
        try:
            acls = parse_acls_json(data, path)
        except ValueError as exc:
            if self._corrupt.get(path) != data:
                self._corrupt[path] = data
                kept = self.authorizer.acls(pattern)
                log.warning("%s; skipped it: %s keeps the %d ACL(s) read before", exc, pattern, len(kept))
            return None
        if self._corrupt.pop(path, None) is not None:
            log.info("%s is readable again", path)
        return acls

    # -------------------------------------------------------- notifications
    async def _list(self, feed: _Feed) -> list[str] | None:
        """The notifications under a feed's parent, with a watch on it (an
        existence watch while it is absent: then None)."""
        client = self._conn.client
        while True:
            try:
                children, stat = await aio.call(client.get_children_async, feed.path, feed.watcher, True)
            except NoNodeError:
                if await aio.call(client.exists_async, feed.path, feed.watcher) is None:
                    feed.czxid, feed.last_seq = None, -1
                    return None
                continue  # created in between: list it
            if feed.czxid is not None and stat.czxid != feed.czxid:
                feed.last_seq = -1  # a new parent numbers its notifications from 0 again
            feed.czxid = stat.czxid
            return children

    async def _follow(self, feed: _Feed) -> None:
        """Process the notifications above the last one processed (rule 3)."""
        children = await self._list(feed)
        new = sorted((seq, name) for name in children or () if (seq := _sequence(name)) is not None
                     and seq > feed.last_seq)
        if not new:
            return
        outcomes = await read_many(self._conn, [(GET_DATA, f"{feed.path}/{name}") for _, name in new])
        patterns: dict[ResourcePattern, None] = {}
        for (_, name), outcome in zip(new, outcomes):
            path = f"{feed.path}/{name}"
            if isinstance(outcome, NoNodeError):
                log.warning("read null data from %s", path)  # purged meanwhile
                continue
            if isinstance(outcome, BaseException):
                raise outcome
            try:
                pattern = feed.parse(outcome)
            except ValueError as exc:
                log.warning("error processing change notification %s from %s: %s",
                            outcome.decode("utf-8", errors="replace"), path, exc)
                continue
            if not _storable(pattern):
                log.warning("ignoring change notification %s for %s: Kafka keeps no ACLs for it", path, pattern)
                continue
            patterns[pattern] = None
        await self._reread(list(patterns))
        self.notifications_processed += len(new)
        feed.last_seq = new[-1][0]

    async def _reread(self, patterns: list[ResourcePattern]) -> None:
        outcomes = await read_many(self._conn, [(GET_DATA, acl_path(p)) for p in patterns], stats=True)
        for pattern, outcome in zip(patterns, outcomes):
            if isinstance(outcome, NoNodeError):
                acls, version = frozenset(), _NO_VERSION
                self._corrupt.pop(acl_path(pattern), None)
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                data, stat = outcome
                found = self._decode(pattern, data)
                if found is None:
                    continue
                acls, version = found, stat.version
            log.info("Processing Acl change notification for %s, versionedAcls : %s, zkVersion : %s",
                     pattern, _scala_set(acls), version)
            self.authorizer.update(pattern, acls)
