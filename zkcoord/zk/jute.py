"""ZooKeeper multi-ops encoded once, as bytes, and their answers read without objects.

This module owns the byte form of the offset commits' multi-ops (ZooKeeper's
jute encoding, as kazoo's ``protocol/serialization.py`` writes it) and the
request object that carries them to kazoo. It does no I/O.

Why: kazoo builds a namedtuple per op on the event loop, serializes each on
its connection thread and answers a multi with a stat object per op, all in
Python and all holding the GIL. An offset's ops are the same bytes every
time but for the value, so :class:`OpCodec` encodes a znode's path once (in
the ops that write it: ``create``, ``setData``, ``delete``, ``check``) and an
op is then its cached prefix, the value's length, the value and a fixed
suffix. :class:`EncodedMulti` is a multi whose body is those bytes, joined
once; its answer is read only as far as needed: a multi applies as a whole
or not at all, so the first op's header tells success, and only a refused
multi is walked to find the op that refused (:class:`MultiRefused`).

Rules:

1. The bytes are exactly kazoo's: ``MultiHeader(type, done=False, err=-1)``,
   the op's fields, and the closing ``MultiHeader(-1, True, -1)``;
   ``tests/unit/test_zk_jute.py`` compares them with kazoo's own encoding.
2. Paths are given relative to the connection's chroot and prefixed with it
   here, as kazoo's transaction does (``_prefix_root``).
3. :class:`EncodedMulti` looks like kazoo's own request classes (``type``,
   ``serialize``, ``deserialize``; :mod:`zkcoord.zk.multi_read` does the same):
   its answer is ``[]`` when applied, ``[MultiRefused(...)]`` when refused (a
   list, because kazoo "unchroots" a multi's answer by iterating it).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from kazoo.exceptions import EXCEPTIONS, ZookeeperError
from kazoo.security import OPEN_ACL_UNSAFE

__all__ = ["OpCodec", "EncodedMulti", "MultiRefused", "refusal", "exception_of", "string"]

_INT = struct.Struct("!i")
_HEADER = struct.Struct("!iBi")  # MultiHeader: type, done, err
_CREATE, _DELETE, _SET_DATA, _CHECK, _MULTI, _ERROR = 1, 2, 5, 13, 14, -1
_ANY_VERSION = _INT.pack(-1)
_DONE = _HEADER.pack(-1, True, -1)
_ROLLED_BACK, _RUNTIME_INCONSISTENCY = 0, -2  # the errors of the ops a refused multi did not blame


def string(text: str) -> bytes:
    """A jute ustring: its UTF-8 length, then its bytes."""
    data = text.encode("utf-8")
    return _INT.pack(len(data)) + data


def _acl_bytes(acls) -> bytes:
    out = bytearray(_INT.pack(len(acls)))
    for acl in acls:
        out += _INT.pack(acl.perms) + string(acl.id.scheme) + string(acl.id.id)
    return bytes(out)


def _prefix_root(chroot: str | None, path: str) -> str:
    """kazoo's ``_prefix_root`` for the absolute, normalized paths zkcoord builds."""
    if not chroot or chroot == "/":
        return path
    return chroot.rstrip("/") + path


class OpCodec:
    """The ops of one connection (its chroot and default ACL), encoded.

    ``set_prefix(path)`` / ``create_prefix(path)`` are the cached bytes an op
    on ``path`` starts with; :meth:`set_data`, :meth:`create`,
    :meth:`delete` and :meth:`check` give whole ops.
    """

    def __init__(self, chroot: str | None = None, default_acl: Sequence | None = None,
                 max_cached_paths: int = 200_000) -> None:
        self.chroot = chroot
        self._create_suffix = _acl_bytes(default_acl or OPEN_ACL_UNSAFE) + _INT.pack(0)  # persistent
        self._max = max_cached_paths
        self._paths: dict[str, bytes] = {}

    def path(self, path: str) -> bytes:
        """``path`` (chroot prefixed) as jute writes a string; cached."""
        found = self._paths.get(path)
        if found is None:
            if len(self._paths) >= self._max:
                self._paths.clear()
            found = self._paths[path] = string(_prefix_root(self.chroot, path))
        return found

    @staticmethod
    def set_data_with(encoded_path: bytes, data: bytes) -> bytes:
        """setData of any version, on a path encoded by :meth:`path`."""
        return b"".join((_SET_HEADER, encoded_path, _INT.pack(len(data)), data, _ANY_VERSION))

    def create_with(self, encoded_path: bytes, data: bytes) -> bytes:
        """A persistent create with the connection's ACL, on a path encoded by :meth:`path`."""
        return b"".join((_CREATE_HEADER, encoded_path, _INT.pack(len(data)), data, self._create_suffix))

    def set_data(self, path: str, data: bytes) -> bytes:
        return self.set_data_with(self.path(path), data)

    def create(self, path: str, data: bytes) -> bytes:
        return self.create_with(self.path(path), data)

    def delete(self, path: str, version: int = -1) -> bytes:
        return b"".join((_DELETE_HEADER, self.path(path), _INT.pack(version)))

    def check(self, path: str, version: int) -> bytes:
        return b"".join((_CHECK_HEADER, self.path(path), _INT.pack(version)))


_SET_HEADER = _HEADER.pack(_SET_DATA, False, -1)
_CREATE_HEADER = _HEADER.pack(_CREATE, False, -1)
_DELETE_HEADER = _HEADER.pack(_DELETE, False, -1)
_CHECK_HEADER = _HEADER.pack(_CHECK, False, -1)


@dataclass(frozen=True, slots=True)
class MultiRefused:
    """A refused multi: the op that refused (its index; -1 if none could be
    blamed) and kazoo's exception for its error."""

    index: int
    error: BaseException


class EncodedMulti:
    """A multi-op (OpCode 14) of ops encoded by :class:`OpCodec`, for kazoo's queue."""

    type = _MULTI
    __slots__ = ("payload", "ops")

    def __init__(self, ops: Sequence[bytes]) -> None:
        self.ops = len(ops)
        self.payload = b"".join((*ops, _DONE))

    def serialize(self) -> bytes:
        return self.payload

    @classmethod
    def deserialize(cls, buf: bytes, offset: int) -> list:
        op_type, done, _ = _HEADER.unpack_from(buf, offset)
        if op_type != _ERROR or done:  # a multi's results are all ops' or all errors
            return []
        return [refusal(buf, offset)]

    def __repr__(self) -> str:  # kazoo logs requests at debug level
        return f"EncodedMulti({self.ops} ops, {len(self.payload)} bytes)"


def exception_of(err: int) -> BaseException:
    """kazoo's exception for a ZooKeeper error code (a plain ZookeeperError for an unknown one)."""
    known = EXCEPTIONS.get(err)  # not EXCEPTIONS[err]: its default raises
    return known() if known is not None else ZookeeperError(f"ZooKeeper error code {err}")


def refusal(buf: bytes, offset: int) -> MultiRefused:
    """Walk a refused multi's error results: the first op whose error is not
    "rolled back" or "runtime inconsistency" is the one that refused."""
    index = 0
    while True:
        op_type, done, _ = _HEADER.unpack_from(buf, offset)
        if done or op_type != _ERROR:
            return MultiRefused(-1, exception_of(_RUNTIME_INCONSISTENCY))
        err = _INT.unpack_from(buf, offset + _HEADER.size)[0]
        offset += _HEADER.size + _INT.size
        if err not in (_ROLLED_BACK, _RUNTIME_INCONSISTENCY):
            return MultiRefused(index, exception_of(err))
        index += 1
