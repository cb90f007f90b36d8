"""Kafka's SCRAM credentials in ZooKeeper, cached and watched.

A Kafka cluster in ZooKeeper mode keeps each user's SCRAM credentials in
``/config/users/<sanitized user>`` (what ``kafka-configs --zookeeper ...
--alter --add-config 'SCRAM-SHA-512=[...]' --entity-type users`` writes;
Kafka's ``ConfigEntityZNode``)::

    {"version":1,"config":{"SCRAM-SHA-512":"salt=...,stored_key=...,server_key=...,iterations=4096"}}

The user name in the path is Kafka's ``Sanitizer.sanitize`` of it (URL
encoding: ``a@b.c`` is ``a%40b.c``, a space ``%20``, ``*`` ``%2A``).
This module owns reading them for logins (:class:`ScramCredentialStore`);
nothing here writes.

Rules:

1. A login costs at most one ZooKeeper read of its user's znode until the
   znode changes: the answer is cached and the read sets a data watch that
   drops it. Concurrent logins of one user share one read.
2. Which users exist is one more cached read: the children of
   ``/config/users``, watched. A name that is not among them is refused
   without any read, so a client trying a million user names costs
   ZooKeeper nothing and grows no cache; the cache of credentials is an
   LRU of at most ``max_users`` real users.
3. kazoo fires every watch with a NONE event when the connection drops (and
   forgets them): that, a lost session or a new one clears the whole cache.
   While ZooKeeper is unreachable a login that needs a read fails with
   :class:`~zkcoord.errors.ServiceUnavailableError` (after the connection's
   request time-out); its caller fails that login and logs why.
4. A znode or credential that cannot be read is logged once per version of
   the znode, never with key material, and counts as "no credential": it
   never raises into the login path.
5. All state lives on the event loop thread; kazoo's watch callbacks only
   hop onto the loop (``aio.post``). A read's result is cached only if no
   watch of that znode fired while it was out.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from urllib.parse import quote

from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent
from kazoo.retry import ForceRetryError

from zkcoord.core.scram import MECHANISMS, ScramCredential, mechanism_of, parse_credential
from zkcoord.zk import aio
from zkcoord.zk.connection import SessionEvent, ZkConnection

__all__ = ["ScramCredentialStore", "USERS", "sanitize", "user_path", "parse_user_config"]

log = logging.getLogger(__name__)

# Kafka's znodes (ConfigEntityTypeZNode.path("users")); kept here beside their
# only reader rather than in zkcoord/zk/paths.py, which holds zkcoord's own.
USERS = "/config/users"
DEFAULT_MAX_USERS = 10_000
_MAX_WARNED = 1_000

Credentials = dict[str, ScramCredential | None]  # mechanism -> credential (None: unusable)


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: Java's URLEncoder (UTF-8; keeps
    letters, digits, ``.-*_``; space as ``+``), then ``*`` -> ``%2A`` and
    ``+`` -> ``%20``. Python's ``quote`` differs only in keeping ``~``."""
    return quote(name, safe="").replace("~", "%7E")


def user_path(username: str) -> str | None:
    """The znode of ``username``'s configs, None if no znode can hold it."""
    try:
        name = sanitize(username)
    except UnicodeEncodeError:  # a lone surrogate: Kafka cannot have made such a user either
        return None
    if name in ("", ".", ".."):
        return None
    return f"{USERS}/{name}"


def parse_user_config(path: str, data: bytes | None) -> tuple[Credentials, list[str]]:
    """The SCRAM credentials in a user's config znode, and the problems found
    (each a log line naming the znode, never a key). A mechanism whose text
    is unusable maps to None."""
    if not data:
        return {}, []
    try:
        document = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}, [f"{path} is not JSON; its SCRAM credentials are ignored until it is rewritten "
                    "(kafka-configs --alter --add-config 'SCRAM-SHA-512=[...]')"]
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict):
        return {}, [f"{path} has no \"config\" object; its SCRAM credentials are ignored"]
    found: Credentials = {}
    problems = []
    for mechanism in MECHANISMS:
        text = config.get(mechanism)
        if text is None:
            continue
        try:
            found[mechanism] = parse_credential(text, mechanism)
        except ValueError as exc:
            found[mechanism] = None
            problems.append(f"the {mechanism} credential in {path} is unusable ({exc}); logins with it fail "
                            "until it is set again")
    return found, problems


class _Shared:
    """A read several logins await; ``stale`` once its znode changed while it
    was out (its answer then goes to those waiting, but is not cached, and
    later logins start a new read)."""

    __slots__ = ("task", "stale")

    def __init__(self) -> None:
        self.task: asyncio.Task | None = None
        self.stale = False

    def start(self, coro) -> _Shared:
        self.task = asyncio.ensure_future(coro)
        # an exception nobody awaited (every waiter gave up) is not reported as "never retrieved"
        self.task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return self

    async def wait(self):
        # shield: one login giving up (its client left) does not cancel the read for the others
        return await asyncio.shield(self.task)


class ScramCredentialStore:
    """SCRAM credentials of Kafka's users, for logins (see the module docstring).

    ``await start()`` on the event loop before use, ``await stop()`` after.
    ``user_reads`` and ``list_reads`` count the ZooKeeper reads issued.
    """

    def __init__(self, conn: ZkConnection, *, max_users: int = DEFAULT_MAX_USERS) -> None:
        if max_users < 1:
            raise ValueError(f"max_users must be at least 1, not {max_users}")
        self._conn = conn
        self.max_users = max_users
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cache: OrderedDict[str, Credentials] = OrderedDict()  # znode name -> credentials (LRU)
        self._reading: dict[str, _Shared] = {}  # znode name -> the read out
        self._names: frozenset[str] | None = None  # children of /config/users; None: list again
        self._listing: _Shared | None = None
        self._warned: OrderedDict[tuple[str, int], None] = OrderedDict()
        self.user_reads = 0
        self.list_reads = 0

    @property
    def reads(self) -> int:
        """Every ZooKeeper read this store issued."""
        return self.user_reads + self.list_reads

    def cached(self) -> list[str]:
        """The (sanitized) names of the users whose credentials are cached,
        least recently used first."""
        return list(self._cache)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._conn.add_listener(self._on_session, self._loop)

    async def stop(self) -> None:
        self._conn.remove_listener(self._on_session)
        self._loop = None
        self._clear()

    @property
    def _running(self) -> bool:
        return self._loop is not None

    # ------------------------------------------------------------ lookups
    async def credential(self, username: str, mechanism: str) -> ScramCredential | None:
        """``username``'s credential for ``mechanism`` (a SCRAM mechanism
        name), None if the user has none or it is unusable.
        ServiceUnavailableError when ZooKeeper cannot be reached; another
        ZkcoordError if it refuses (e.g. an ACL on ``/config/users``)."""
        mechanism_of(mechanism)
        if not self._running:
            raise RuntimeError("ScramCredentialStore.start() has not been awaited")
        path = user_path(username)
        if path is None:
            return None
        name = path.rpartition("/")[2]
        if name not in await self._user_names():
            return None
        return (await self._user(name)).get(mechanism)

    async def _user_names(self) -> frozenset[str]:
        if self._names is not None:
            return self._names
        if self._listing is None or self._listing.stale:
            self._listing = _Shared()
            self._listing.start(self._list(self._listing))
        return await self._listing.wait()

    async def _list(self, me: _Shared) -> frozenset[str]:
        try:
            names = await self._conn.retry(f"list Kafka's users ({USERS})", self._inner_list)
        finally:
            if self._listing is me:
                self._listing = None
        if not me.stale and self._running:
            self._names = names
        return names

    async def _inner_list(self) -> frozenset[str]:
        client = self._conn.client
        self.list_reads += 1
        try:
            return frozenset(await aio.call(client.get_children_async, USERS, self._on_list_watch))
        except NoNodeError:
            pass
        # No user yet: watch for the znode to appear (exists sets a watch on a missing znode).
        self.list_reads += 1
        if await aio.call(client.exists_async, USERS, self._on_list_watch) is not None:
            raise ForceRetryError()  # created meanwhile: list it
        return frozenset()

    async def _user(self, name: str) -> Credentials:
        cached = self._cache.get(name)
        if cached is not None:
            self._cache.move_to_end(name)
            return cached
        read = self._reading.get(name)
        if read is None or read.stale:
            read = self._reading[name] = _Shared()
            read.start(self._read(name, read))
        return await read.wait()

    async def _read(self, name: str, me: _Shared) -> Credentials:
        try:
            found = await self._conn.retry(f"read the SCRAM credentials in {USERS}/{name}", self._inner_read, name)
        finally:
            if self._reading.get(name) is me:
                del self._reading[name]
        if found is not None and not me.stale and self._running:
            self._cache[name] = found
            while len(self._cache) > self.max_users:
                self._cache.popitem(last=False)
        return found or {}

    async def _inner_read(self, name: str) -> Credentials | None:
        """The znode's credentials; None if it is gone (no watch was set:
        not to be cached; the children watch tells of a new one)."""
        path = f"{USERS}/{name}"
        self.user_reads += 1
        try:
            data, stat = await aio.call(self._conn.client.get_async, path, self._on_user_watch)
        except NoNodeError:
            return None
        found, problems = parse_user_config(path, data)
        if problems and self._first_warning(path, stat.mzxid):
            for problem in problems:
                log.warning("%s", problem)
        return found

    def _first_warning(self, path: str, mzxid: int) -> bool:
        key = (path, mzxid)
        if key in self._warned:
            return False
        self._warned[key] = None
        if len(self._warned) > _MAX_WARNED:
            self._warned.popitem(last=False)
        return True

    # ------------------------------------------------------------ watches and sessions
    def _on_user_watch(self, event: WatchedEvent) -> None:  # a kazoo thread
        loop = self._loop
        if loop is not None:
            aio.post(loop, self._user_changed, event)

    def _on_list_watch(self, event: WatchedEvent) -> None:  # a kazoo thread
        loop = self._loop
        if loop is not None:
            aio.post(loop, self._list_changed, event)

    def _user_changed(self, event: WatchedEvent) -> None:
        if event.type == EventType.NONE or not event.path:
            self._clear()  # the connection dropped: kazoo forgot every watch
            return
        name = event.path.rpartition("/")[2]
        self._cache.pop(name, None)
        if name in self._reading:
            self._reading[name].stale = True

    def _list_changed(self, event: WatchedEvent) -> None:
        if event.type == EventType.NONE:
            self._clear()
            return
        self._names = None
        if self._listing is not None:
            self._listing.stale = True

    def _on_session(self, event: SessionEvent) -> None:
        if event in (SessionEvent.LOST, SessionEvent.CONNECTED):
            self._clear()

    def _clear(self) -> None:
        self._cache.clear()
        self._names = None
        for shared in (self._listing, *self._reading.values()):
            if shared is not None:
                shared.stale = True
