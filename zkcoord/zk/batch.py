"""Many groups' writes at once: multis, sets, creates and deletes, all in flight together.

The batched paths (the Spark job's apply mode, :mod:`zkcoord.migrate.apply_batch`)
move a whole batch of groups through one step with one request per group,
every request of the step sent before the first answer is awaited. This module
is how they do it without touching kazoo:

- a multi is a list of :class:`Op` (built with :func:`create`, :func:`put`,
  :func:`check`, :func:`delete`); :func:`multis` sends many and gives each one
  a :class:`Multi`: applied (``ok``, the results of its ops) or not (``why``);
- :func:`set_many`, :func:`children_many`, :func:`delete_many` send many
  plain requests and give each its outcome (the value, or the exception
  instance: a batch never raises for one group);
- :func:`missing` and :func:`failed` tell a read's outcome apart
  (:func:`zkcoord.zk.bulk_reads.read_znodes` gives the same kind);
- :class:`Contenders`: one command's contenders in many groups' elections
  (the batched form of :class:`~zkcoord.zk.ownership.GroupOwnership`'s
  contend, fence and release, by the rules of :mod:`zkcoord.zk.election`).

None of it retries: a batch hands a group whose request failed to its
single-group path, which retries and says why.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import NoNodeError

from zkcoord.zk import aio, paths
from zkcoord.zk.connection import ZkConnection
from zkcoord.zk.ownership import Fence

__all__ = ["Op", "Multi", "create", "put", "check", "delete", "multis", "set_many", "children_many",
           "delete_many", "ensure_path", "missing", "failed", "Contenders"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Op:
    """One operation of a multi."""

    kind: str  # "create" | "set" | "check" | "delete"
    path: str
    data: bytes = b""
    version: int = -1
    ephemeral: bool = False
    sequence: bool = False


def create(path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False) -> Op:
    return Op("create", path, data, ephemeral=ephemeral, sequence=sequence)


def put(path: str, data: bytes, version: int) -> Op:
    """Create ``path`` (``version`` -1: it did not exist when read) or set it at ``version``."""
    return create(path, data) if version < 0 else Op("set", path, data, version)


def check(path: str, version: int) -> Op:
    return Op("check", path, version=version)


def delete(path: str, version: int = -1) -> Op:
    return Op("delete", path, version=version)


@dataclass(frozen=True)
class Multi:
    """A multi's outcome: applied as a whole (``results``: one per op, a created
    znode's path for a create) or not at all (``error``; ``failed_op`` the op that
    refused, -1 if unknown, None when no answer came)."""

    results: tuple = ()
    error: BaseException | None = None
    failed_op: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def why(self) -> str:
        if self.error is None:
            return "applied"
        if self.failed_op is None:
            return repr(self.error)
        return f"op {self.failed_op}: {type(self.error).__name__}"


def _transaction(client: Any, ops: Sequence[Op]) -> Any:
    txn = client.transaction()
    for op in ops:
        if op.kind == "create":
            txn.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequence)
        elif op.kind == "set":
            txn.set_data(op.path, op.data, op.version)
        elif op.kind == "check":
            txn.check(op.path, op.version)
        elif op.kind == "delete":
            txn.delete(op.path, op.version)
        else:
            raise ValueError(f"unknown multi op {op.kind!r}")
    return txn.commit_async()


def _multi(outcome: object) -> Multi:
    if isinstance(outcome, BaseException):
        return Multi(error=outcome)
    failure = aio.transaction_failure(outcome)
    if failure is not None:
        return Multi(error=failure[1], failed_op=failure[0])
    return Multi(results=tuple(outcome))


async def multis(conn: ZkConnection, txns: Sequence[Sequence[Op]]) -> list[Multi]:
    """Send every multi at once; each one's outcome, in order."""
    loop, client = asyncio.get_running_loop(), conn.client
    outcomes = await aio.gather(loop, [_transaction(client, ops) for ops in txns])
    return [_multi(o) for o in outcomes]


async def set_many(conn: ZkConnection, writes: Sequence[tuple[str, bytes, int]]) -> list[int | BaseException]:
    """Set each ``(path, data, version)`` at once; each one's new version, or its exception."""
    client = conn.client
    outcomes = await aio.gather(asyncio.get_running_loop(),
                                [client.set_async(path, data, version) for path, data, version in writes])
    return [o if isinstance(o, BaseException) else o.version for o in outcomes]


async def children_many(conn: ZkConnection, parents: Sequence[str]) -> list[list[str] | BaseException]:
    client = conn.client
    return await aio.gather(asyncio.get_running_loop(), [client.get_children_async(p) for p in parents])


async def delete_many(conn: ZkConnection, targets: Sequence[str]) -> list[BaseException | None]:
    """Delete each znode at once; None where it is gone (a missing znode counts as gone)."""
    client = conn.client
    outcomes = await aio.gather(asyncio.get_running_loop(), [client.delete_async(p) for p in targets])
    return [o if isinstance(o, BaseException) and not isinstance(o, NoNodeError) else None for o in outcomes]


async def ensure_path(conn: ZkConnection, path: str) -> bool:
    """Create ``path`` and its parents (a multi cannot); False (logged) if that failed:
    the multis that need it then fail, and their groups take the single-group path."""
    try:
        await aio.call(conn.client.ensure_path_async, path)
        return True
    except Exception as exc:  # noqa: BLE001 (any failure is the multis' to report)
        log.debug("could not ensure %s: %r", path, exc)
        return False


def missing(outcome: object) -> bool:
    """A read's outcome says the znode does not exist."""
    return isinstance(outcome, NoNodeError)


def failed(outcome: object) -> bool:
    """A read failed for another reason than a missing znode."""
    return isinstance(outcome, BaseException) and not isinstance(outcome, NoNodeError)


class Contenders:
    """One command's contenders in many groups' elections at once.

    Every contender has the prefix of this object (a uuid and the contender
    marker) and holds ``node_id``; it is ephemeral, so it also goes with the
    session. :meth:`contend` creates one per group; the caller reads each
    election (:func:`zkcoord.zk.election.ordered`) and, where its contender is
    the lowest, writes fenced by :meth:`fence` and may release in the same
    multi with :meth:`resign`; :meth:`release` deletes the rest, finding by
    prefix a contender whose create's answer was lost.
    """

    def __init__(self, conn: ZkConnection, node_id: int) -> None:
        self.conn, self.data = conn, str(node_id).encode()
        self.prefix = uuid.uuid4().hex + paths.CONTENDER_MARKER
        self._held: dict[str, str | None] = {}  # group -> our contender's path (None: may exist, not known)

    def _path(self, group: str) -> str:
        return f"{paths.owner_dir(group)}/{self.prefix}"

    async def contend(self, groups: Mapping[str, Sequence[str] | None], *, root_missing: bool = False
                      ) -> dict[str, str | BaseException]:
        """A contender in each group's election. ``groups``: group -> the parents of its
        contender known to be missing (``()``: none), or None if not known. Where they are
        known, ONE multi creates them and the contender; otherwise, or if that multi failed
        (somebody created a parent meanwhile), a create that makes its path first, as kazoo
        does. ``root_missing``: ``/coordinators`` was found missing (a multi cannot create
        it). Group -> its contender's path, or why it has none."""
        for group in groups:
            self._held.setdefault(group, None)
        known = [g for g, parents in groups.items() if parents is not None]
        if root_missing and any(groups[g] for g in known):
            await ensure_path(self.conn, paths.COORDINATORS)
        done = await multis(self.conn, [[*(create(p) for p in groups[g]),
                                         create(self._path(g), self.data, ephemeral=True, sequence=True)]
                                        for g in known])
        found: dict[str, str | BaseException] = {}
        rest = [g for g, parents in groups.items() if parents is None]
        for group, outcome in zip(known, done):
            if outcome.ok:
                found[group] = outcome.results[-1]
            elif outcome.failed_op is None:  # no answer: the contender may exist (release finds it)
                found[group] = outcome.error
            else:
                log.debug("group %s: the contender's multi failed (%s); creating it with its path", group,
                          outcome.why)
                rest.append(group)
        client = self.conn.client
        created = await aio.gather(asyncio.get_running_loop(),
                                   [client.create_async(self._path(g), self.data, ephemeral=True, sequence=True,
                                                        makepath=True) for g in rest])
        found.update(zip(rest, created))
        for group, outcome in found.items():
            if not isinstance(outcome, BaseException):
                self._held[group] = outcome
        return {g: found[g] for g in groups}

    def _fence(self, group: str) -> Fence:
        contender = self._held.get(group)
        if contender is None:
            raise ValueError(f"no known contender of ours in group {group!r}")
        return Fence(group, contender)

    def fence(self, group: str) -> Op:
        """The op that makes a multi fail unless our contender in ``group`` is still
        there: the daemon's fence (:class:`~zkcoord.zk.ownership.Fence`), as an op."""
        fence = self._fence(group)
        return check(fence.path, fence.version)

    def resign(self, group: str) -> Op:
        """The op that releases ``group``'s election in the multi that writes as its owner;
        once that multi applied, call :meth:`resigned`."""
        fence = self._fence(group)
        return delete(fence.path, fence.version)

    def resigned(self, group: str) -> None:
        self._held.pop(group, None)

    async def release(self) -> None:
        """Delete every contender still held (by prefix where the path is not known)."""
        held, self._held = self._held, {}
        if not held:
            return
        known = [c for c in held.values() if c]
        unknown = [g for g, c in held.items() if not c]
        listed = await children_many(self.conn, [paths.owner_dir(g) for g in unknown])
        known += [paths.contender(g, c) for g, names in zip(unknown, listed) if isinstance(names, list)
                  for c in names if c.startswith(self.prefix)]
        for path, outcome in zip(known, await delete_many(self.conn, known)):
            if outcome is not None:
                log.warning("could not delete our contender %s (%r); it goes with this session", path, outcome)
