"""Many one-shot watches in one request: ZooKeeper's SetWatches, which kazoo never sends.

The Java client sends SetWatches (opcode 101) after a reconnect, to set again
the watches it holds, as of the last zxid it saw. For each path the server
then does what a watched read would have seen since that zxid: a data watch
on a znode that is gone fires NodeDeleted at once, on one changed since
NodeDataChanged; an exist watch on a znode that exists fires NodeCreated at
once; a child watch on a znode that is gone fires NodeDeleted, on one whose
children changed since NodeChildrenChanged; otherwise the watch is set. So
reading many znodes without watches (a multiRead) and then setting their
watches as of a zxid taken *before* the read misses nothing a watched read
of each would have caught (a change between the zxid and the read is a
wake-up too many: harmless to a watcher that reads again).

One kazoo request costs the event loop 0.1-0.2 ms and a round trip; setting
the watches of 5,000 groups one ``exists`` at a time holds the loop about a
second (measured 0.5 s of CPU and 2.7 s of wall time), one SetWatches a few
milliseconds.

Rules:

1. The watchers are registered with kazoo exactly where its own watched
   reads register theirs (``_data_watchers`` for data and exist watches,
   ``_child_watchers``), on kazoo's connection thread as the request is
   written, so an event the server sends in answer is never read before its
   watcher is known.
2. kazoo drops every watcher when the connection is lost, calling it with a
   NONE event, and sets none again after a reconnect: a caller sets its
   watches again on RECONNECTED, as for any kazoo watch.
3. One request carries at most about 128 KiB of paths (as the Java client
   cuts its own), well under ZooKeeper's ``jute.maxbuffer``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from kazoo.protocol.serialization import int_struct, long_struct, write_string

from zkcoord.zk import aio
from zkcoord.zk.connection import ZkConnection

__all__ = ["Watch", "last_zxid", "set_watches"]

Watch = tuple[str, Callable]  # (path, watcher): kazoo's ``watch=`` callable, given a WatchedEvent on its thread
_OPCODE = 101
_MAX_BYTES = 128 * 1024


class _SetWatches:
    """SetWatches shaped like kazoo's own request classes (``type``,
    ``serialize``, ``deserialize``), queued with the client's ``_call``."""

    type = _OPCODE

    def __init__(self, client, zxid: int, data: list[Watch], exist: list[Watch], child: list[Watch]) -> None:
        self.client, self.zxid = client, zxid
        self.data, self.exist, self.child = data, exist, child

    def serialize(self) -> bytes:  # kazoo's connection thread, as the request is written (rule 1)
        client = self.client
        if not client._stopped.is_set():
            for path, watcher in self.data + self.exist:
                client._data_watchers[path].add(watcher)
            for path, watcher in self.child:
                client._child_watchers[path].add(watcher)
        out = bytearray(long_struct.pack(self.zxid))
        for watches in (self.data, self.exist, self.child):
            out += int_struct.pack(len(watches))
            for path, _ in watches:
                out += write_string(path)
        return bytes(out)

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> bool:
        return True  # the answer is a header only


def last_zxid(conn: ZkConnection) -> int:
    """The last zxid this connection has seen: take it before a read whose
    watches :func:`set_watches` sets afterwards."""
    return conn.client.last_zxid


async def set_watches(conn: ZkConnection, relative_zxid: int, *, data: Sequence[Watch] = (),
                      exist: Sequence[Watch] = (), child: Sequence[Watch] = ()) -> None:
    """Set these one-shot watches (paths below the chroot) as of
    ``relative_zxid`` (module docstring): ``data`` on znodes that exist,
    ``exist`` on znodes that may not, ``child`` on their children. Raises
    kazoo's ConnectionLoss (and the like) when the connection fails first;
    then no watch of the failed request is left (rule 2)."""
    client = conn.client
    chroot = client.chroot or ""
    requests, parts, size = [], {"data": [], "exist": [], "child": []}, 0
    for kind, watches in (("data", data), ("exist", exist), ("child", child)):
        for path, watcher in watches:
            full = chroot + path
            if size and size + len(full) + 4 > _MAX_BYTES:
                requests.append(_SetWatches(client, relative_zxid, parts["data"], parts["exist"], parts["child"]))
                parts, size = {"data": [], "exist": [], "child": []}, 0
            parts[kind].append((full, watcher))
            size += len(full) + 4
    if size:
        requests.append(_SetWatches(client, relative_zxid, parts["data"], parts["exist"], parts["child"]))
    results = []
    for request in requests:
        result = client.handler.async_result()
        client._call(request, result)  # how kazoo's own *_async methods queue a request
        results.append(result)
    for outcome in await aio.gather(asyncio.get_running_loop(), results):
        if isinstance(outcome, BaseException):
            raise outcome
