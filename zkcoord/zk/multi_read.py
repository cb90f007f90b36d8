"""ZooKeeper's multiRead (3.6+), which kazoo lacks, and many reads at once.

:func:`read_znodes` reads many znodes, in multiRead requests (up to 1000
znodes and 512 KiB per request) or one pipelined request per znode;
:func:`read_many` picks multiRead when the server has it (asked once per
connection). The daemon's bulk reads (OffsetFetch, the existence checks of
unknown groups) and the migration toolkit's (:mod:`zkcoord.zk.bulk_reads`)
use them.

Rules:

1. multiRead returns every op's outcome on its own, so a missing znode is a
   NoNodeError in its slot, as with one read per znode.
2. kazoo has no multiRead: :class:`_MultiRead` is a request class shaped like
   kazoo's own (``type``, ``serialize``, ``deserialize``), queued with the
   client's ``_call`` as kazoo's ``*_async`` methods queue theirs.
3. Single reads are issued at most ``_SINGLE_CALLS_PER_STEP`` per event-loop
   step: kazoo costs the loop 0.1-0.2 ms per request issued.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import namedtuple

from kazoo.exceptions import EXCEPTIONS, NoNodeError, ZookeeperError
from kazoo.protocol.states import ZnodeStat
from kazoo.protocol.serialization import int_struct, multiheader_struct, read_buffer, read_string, stat_struct, \
    write_string

from zkcoord.zk import aio
from zkcoord.zk.connection import ZkConnection

__all__ = ["GET_DATA", "GET_CHILDREN", "read_znodes", "read_many", "multi_read_supported"]

log = logging.getLogger(__name__)

_GET_DATA, _GET_CHILDREN, _ERROR = 4, 8, -1
GET_DATA, GET_CHILDREN = _GET_DATA, _GET_CHILDREN  # the op kinds of read_znodes
_OPS_PER_READ = 1000
_SINGLE_CALLS_PER_STEP = 100  # single reads issued between two yields to the event loop
_BYTES_PER_READ = 512 * 1024  # well under jute.maxbuffer (1 MiB)
_VERSION = re.compile(r"Zookeeper version: (\d+)\.(\d+)")


class _MultiRead(namedtuple("_MultiRead", "ops")):
    """ZooKeeper's multiRead request (OpCode 22, 3.6+): ``ops`` are
    ``(_GET_DATA | _GET_CHILDREN, absolute path)``; the answer is each op's
    data, children or exception instance, in order. kazoo's own request
    classes look the same (``type``, ``serialize``, ``deserialize``)."""

    type = 22
    stats = False  # True (:class:`_MultiReadStats`): a data op answers ``(data, ZnodeStat)``

    def serialize(self) -> bytes:
        out = bytearray()
        for op, path in self.ops:
            out += multiheader_struct.pack(op, False, -1)
            out += write_string(path)
            out.append(0)  # no watch
        out += multiheader_struct.pack(-1, True, -1)
        return bytes(out)

    @classmethod
    def deserialize(cls, buf: bytes, offset: int) -> list:
        results: list = []
        while True:
            op, done, _ = multiheader_struct.unpack_from(buf, offset)
            offset += multiheader_struct.size
            if done:
                return results
            if op == _GET_DATA:
                data, offset = read_buffer(buf, offset)
                if cls.stats:
                    results.append((data, ZnodeStat._make(stat_struct.unpack_from(buf, offset))))
                else:
                    results.append(data)
                offset += stat_struct.size
            elif op == _GET_CHILDREN:
                count = int_struct.unpack_from(buf, offset)[0]
                offset += int_struct.size
                children = []
                for _ in range(max(count, 0)):
                    child, offset = read_string(buf, offset)
                    children.append(child)
                results.append(children)
            elif op == _ERROR:
                code = int_struct.unpack_from(buf, offset)[0]
                offset += int_struct.size
                kind = EXCEPTIONS.get(code)  # .get: the defaultdict raises for codes it does not know
                results.append(kind() if kind is not None else ZookeeperError(f"ZooKeeper error code {code}"))
            else:
                raise ValueError(f"multiRead answer with op type {op}")

class _MultiReadStats(_MultiRead):
    """multiRead whose data ops answer ``(data, ZnodeStat)``: for versioned writes after the read."""

    stats = True

async def read_znodes(conn: ZkConnection, ops: list[tuple[int, str]], *, multi: bool, stats: bool = False) -> list:
    """Every op's outcome, in order (``GET_DATA``: the data, or ``(data,
    ZnodeStat)`` with ``stats``; ``GET_CHILDREN``: the names; a failure:
    the exception instance, NoNodeError included). ``multi``: in multiRead
    requests (ZooKeeper 3.6+), else one pipelined request per znode. Never
    raises for one op; a lost connection shows as each op's ConnectionLoss."""
    client = conn.client
    if not multi:
        calls = []
        for start in range(0, len(ops), _SINGLE_CALLS_PER_STEP):  # each call costs the loop ~0.1-0.2 ms
            if start:
                await asyncio.sleep(0)
            calls += [client.get_children_async(path) if op == GET_CHILDREN else client.get_async(path)
                      for op, path in ops[start:start + _SINGLE_CALLS_PER_STEP]]
        outcomes = await aio.gather(asyncio.get_running_loop(), calls)
        return [o[0] if op == GET_DATA and not stats and isinstance(o, tuple) else o
                for (op, _), o in zip(ops, outcomes)]
    kind = _MultiReadStats if stats else _MultiRead
    chroot = client.chroot or ""
    pending, sizes, chunk, size = [], [], [], 0
    for op, path in ops:
        full = chroot + path
        if chunk and (len(chunk) >= _OPS_PER_READ or size + len(full) + 16 > _BYTES_PER_READ):
            pending.append(_send(client, kind(chunk)))
            sizes.append(len(chunk))
            chunk, size = [], 0
        chunk.append((op, full))
        size += len(full) + 16
    if chunk:
        pending.append(_send(client, kind(chunk)))
        sizes.append(len(chunk))
    results: list = []
    for outcome, count in zip(await aio.gather(asyncio.get_running_loop(), pending), sizes):
        results += [outcome] * count if isinstance(outcome, BaseException) else outcome
    return results

async def read_many(conn: ZkConnection, ops: list[tuple[int, str]], *, stats: bool = False) -> list:
    """:func:`read_znodes`, in multiRead requests when the server has them
    (asked once per connection, :func:`multi_read_supported`). For the
    daemon's bulk reads on its event loop: issuing one kazoo request costs
    the loop 0.1-0.2 ms (measured: 1,500 single reads held it 160-290 ms,
    one multiRead of them 9-19 ms)."""
    if conn.multi_read is None:
        conn.multi_read = await multi_read_supported(conn)
    return await read_znodes(conn, ops, multi=conn.multi_read, stats=stats)


def _send(client, request):
    result = client.handler.async_result()
    client._call(request, result)  # how kazoo's own *_async methods queue a request
    return result

async def multi_read_supported(conn: ZkConnection) -> bool:
    """True if the server we are connected to says (``srvr``) it is 3.6 or later."""
    try:
        answer = await asyncio.to_thread(conn.client.command, b"srvr")
    except Exception as exc:  # 4lw disabled or refused: do not guess
        log.info("ZooKeeper srvr failed (%r); reading one znode per request", exc)
        return False
    match = _VERSION.search(answer)
    return match is not None and (int(match.group(1)), int(match.group(2))) >= (3, 6)
