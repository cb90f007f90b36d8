"""The version of zkcoord's ZooKeeper layout, and the migrations that move it.

This module owns ``/zkcoord/layout``::

    {"version": 1,
     "applied": [{"version": 1, "description": "create zkcoord's root znodes",
                  "applied_at_ms": 1795315596682,
                  "applied_by": "zkcoord 0.1.0 migrate layout up on host-a pid 4242 run 1a2b3c4d"}]}

and finding, ordering and applying the migrations in
:mod:`zkcoord.zk.layout_migrations` (the top-level ``migrations/`` directory,
linked into the package so that it is installed with it; how to write one is
in ``migrations/README.md``).

Rules:

1. Migrations are modules ``vNNN_<name>.py`` whose ``VERSION`` is that
   number, numbered 1, 2, 3 ... without gaps; a module that breaks this is a
   :class:`~zkcoord.errors.StateError` when they are loaded, never skipped.
2. A migration's ``up(client, tx)`` reads with kazoo's blocking API (we run
   it on a worker thread) and adds its writes to ``tx``. We add the new
   record to the same multi-op: a create of ``/zkcoord/layout``, or a set at
   the znode version we read. So a migration and its record land together
   or not at all, and of two concurrent ``up`` runs only one multi-op can
   land; the other reads again and finds nothing left to do. There is no
   partially applied layout.
3. ``up`` only adds what is missing, so running it again (after an answer
   lost with the connection, on a layout made by hand, or after the record
   was deleted) adds nothing. Who applied what is found in the record by the
   ``applied_by`` of this run, never from a commit's answer.
4. A daemon (:func:`ensure_layout`) starts on the CURRENT layout only. On an
   EMPTY ZooKeeper (first run: no record and no zkcoord znodes, so nothing
   to convert) it applies every migration itself; on any other layout it
   refuses with the command to run (:class:`LayoutState` says which).
"""

from __future__ import annotations

import asyncio
import enum
import importlib
import json
import logging
import os
import pkgutil
import re
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.retry import ForceRetryError

import zkcoord
from zkcoord.errors import ConfigError, StateError
from zkcoord.zk import aio, paths
from zkcoord.zk.connection import ZkConnection

__all__ = ["MIGRATIONS_PACKAGE", "Migration", "AppliedMigration", "LayoutRecord", "LayoutState", "Layout",
           "UpResult", "discover", "ordered", "read_layout", "apply_pending", "check_layout", "ensure_layout",
           "refusal", "applied_by"]

log = logging.getLogger(__name__)

MIGRATIONS_PACKAGE = "zkcoord.zk.layout_migrations"
_MODULE_NAME = re.compile(r"v(\d+)_[a-z0-9_]+")
# How often one migration may meet a concurrent change to the znodes it
# writes before we call it broken rather than unlucky.
_MAX_CONFLICTS = 5


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


# ---------------------------------------------------------------- migrations
@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    module: str
    up: Callable[[Any, Any], None]  # (KazooClient, TransactionRequest)


def discover(package: str = MIGRATIONS_PACKAGE) -> tuple[Migration, ...]:
    """Every migration module of ``package``, ordered by version (rule 1)."""
    try:
        pkg = importlib.import_module(package)
        names = [info.name for info in pkgutil.iter_modules(pkg.__path__)]
    except (ImportError, AttributeError) as exc:
        raise StateError(f"cannot load the layout migrations {package} ({exc}); zkcoord/zk/layout_migrations "
                         "must be a link to the top-level migrations/ directory: reinstall zkcoord") from None
    found = []
    for name in names:
        if name.startswith("_"):
            continue
        match = _MODULE_NAME.fullmatch(name)
        if match is None:
            raise StateError(f"layout migration module {package}.{name}: the name must be vNNN_<name> "
                             "(lower case); rename it, or start it with '_' if it is not a migration")
        found.append(_load(f"{package}.{name}", int(match.group(1))))
    return ordered(found)


def _load(module_name: str, number: int) -> Migration:
    module = importlib.import_module(module_name)
    version, description, up = (getattr(module, attr, None) for attr in ("VERSION", "DESCRIPTION", "up"))
    problem = None
    if isinstance(version, bool) or not isinstance(version, int) or version != number:
        problem = f"VERSION must be {number}, as its name says, not {version!r}"
    elif not isinstance(description, str) or not description.strip():
        problem = "DESCRIPTION must be a non-empty string"
    elif not callable(up):
        problem = "it has no up(client, tx) function"
    if problem:
        raise StateError(f"layout migration module {module_name}: {problem}")
    return Migration(version, description.strip(), module_name, up)


def ordered(migrations: Sequence[Migration]) -> tuple[Migration, ...]:
    """``migrations`` by version; StateError unless they are exactly 1..N."""
    result = tuple(sorted(migrations, key=lambda m: m.version))
    for expected, migration in enumerate(result, start=1):
        if migration.version != expected:
            same = [m.module for m in result if m.version == migration.version]
            why = (f"version {migration.version} is defined twice ({', '.join(same)})" if len(same) > 1
                   else f"version {expected} is missing (the next is {migration.module})")
            raise StateError(f"layout migrations must be numbered 1, 2, 3 ... without gaps: {why}")
    return result


# ---------------------------------------------------------------- the record
@dataclass(frozen=True)
class AppliedMigration:
    version: int
    description: str
    applied_at_ms: int
    applied_by: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "description": self.description, "applied_at_ms": self.applied_at_ms,
                "applied_by": self.applied_by}


@dataclass(frozen=True)
class LayoutRecord:
    """What ``/zkcoord/layout`` holds. Unknown keys (a newer zkcoord's) are ignored."""

    version: int
    applied: tuple[AppliedMigration, ...]

    def to_json(self) -> bytes:
        return json.dumps({"version": self.version, "applied": [a.to_dict() for a in self.applied]},
                          separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes | None) -> LayoutRecord:
        try:
            raw = json.loads((data or b"").decode())
            applied = tuple(AppliedMigration(_int(e["version"]), str(e["description"]), _int(e["applied_at_ms"]),
                                             str(e.get("applied_by", ""))) for e in raw["applied"])
            record = cls(_int(raw["version"]), applied)
        except (UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise _corrupt(data, f"{type(exc).__name__}: {exc}") from None
        if [a.version for a in record.applied] != list(range(1, record.version + 1)):
            raise _corrupt(data, f"version {record.version} but the applied versions are "
                                 f"{[a.version for a in record.applied]}")
        return record

    def with_applied(self, entry: AppliedMigration) -> LayoutRecord:
        return LayoutRecord(entry.version, self.applied + (entry,))


EMPTY_RECORD = LayoutRecord(0, ())


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{value!r} is not a whole number >= 0")
    return value


def _corrupt(data: bytes | None, why: str) -> StateError:
    return StateError(f"{paths.LAYOUT} holds {(data or b'')[:80]!r}, not a layout record ({why}); restore it, or "
                      "delete it and run `zkcoord migrate layout up` (migrations only add what is missing)")


def applied_by(role: str) -> str:
    """Who applies, as recorded: unique per run, so a run knows its own entries."""
    return (f"zkcoord {zkcoord.__version__} {role} on {socket.gethostname()} pid {os.getpid()} "
            f"run {uuid.uuid4().hex[:8]}")


# ---------------------------------------------------------------- the state
class LayoutState(enum.Enum):
    """Where a ZooKeeper's layout stands against the migrations this zkcoord knows.

    =============  ================================================  =====================================
    state          found                                             a daemon starting
    =============  ================================================  =====================================
    EMPTY          no /zkcoord/layout, no /zkcoord, no /coordinators  applies every migration (first run)
    UNINITIALISED  zkcoord znodes but no /zkcoord/layout (written     refuses: run `migrate layout up`
                   by a zkcoord from before layout versions)
    OLDER          a version below the newest known                  refuses: run `migrate layout up`
    CURRENT        the newest known version                          starts
    NEWER          a version above the newest known                  refuses: upgrade zkcoord
    =============  ================================================  =====================================

    ``migrate layout up`` applies what is pending in the first three, and
    refuses NEWER as a daemon does.
    """

    EMPTY = "empty"
    UNINITIALISED = "not initialised"
    OLDER = "older"
    CURRENT = "up to date"
    NEWER = "newer"


@dataclass(frozen=True)
class Layout:
    """One read of the layout: the record (None: no znode), the znode's
    version (for the versioned set), and whether zkcoord wrote here before."""

    record: LayoutRecord | None
    znode_version: int | None
    zkcoord_znodes: tuple[str, ...] = ()

    @property
    def version(self) -> int:
        return self.record.version if self.record else 0

    def state(self, migrations: Sequence[Migration]) -> LayoutState:
        latest = len(migrations)
        if self.record is None:
            return LayoutState.UNINITIALISED if self.zkcoord_znodes else LayoutState.EMPTY
        if self.version > latest:
            return LayoutState.NEWER
        return LayoutState.OLDER if self.version < latest else LayoutState.CURRENT

    def pending(self, migrations: Sequence[Migration]) -> tuple[Migration, ...]:
        return tuple(m for m in migrations if m.version > self.version)


def refusal(layout: Layout, migrations: Sequence[Migration], hosts: str, *, daemon: bool) -> ConfigError | None:
    """The error refusing ``layout`` (a daemon also refuses OLDER and
    UNINITIALISED ones), or None."""
    state = layout.state(migrations)
    if state is LayoutState.NEWER:
        last = layout.record.applied[-1].applied_by if layout.record and layout.record.applied else ""
        return ConfigError(f"ZooKeeper layout version {layout.version} is newer than this zkcoord knows "
                           f"({len(migrations)}); upgrade zkcoord (layout of {hosts}"
                           + (f", last changed by {last})" if last else ")"))
    if not daemon or state in (LayoutState.CURRENT, LayoutState.EMPTY):
        return None
    command = f"run `zkcoord migrate layout up --zookeeper {hosts}`, then start the daemon again"
    if state is LayoutState.UNINITIALISED:
        return ConfigError(f"the ZooKeeper layout at {hosts} is not initialised: it has "
                           f"{', '.join(layout.zkcoord_znodes)} but no {paths.LAYOUT}; {command}")
    pending = ", ".join(f"{m.version} ({m.description})" for m in layout.pending(migrations))
    return ConfigError(f"the ZooKeeper layout at {hosts} is version {layout.version}, older than this zkcoord "
                       f"needs ({len(migrations)}; pending: {pending}); {command}")


# ---------------------------------------------------------------- ZooKeeper
async def read_layout(conn: ZkConnection) -> Layout:
    """The layout as stored now; StateError if the record is not one."""
    return await conn.retry("read the ZooKeeper layout version", _inner_read, conn)


async def _inner_read(conn: ZkConnection) -> Layout:
    client = conn.client
    probes = (paths.ROOT, paths.COORDINATORS)
    got, *found = await aio.gather(asyncio.get_running_loop(),
                                   [client.get_async(paths.LAYOUT)] + [client.exists_async(p) for p in probes])
    for outcome in (got, *found):
        if isinstance(outcome, BaseException) and not isinstance(outcome, NoNodeError):
            raise outcome
    present = tuple(p for p, stat in zip(probes, found) if stat is not None)
    if isinstance(got, NoNodeError):
        return Layout(None, None, present)
    data, stat = got
    return Layout(LayoutRecord.from_json(data), stat.version, present)


@dataclass(frozen=True)
class UpResult:
    before: Layout
    after: Layout
    applied: tuple[AppliedMigration, ...]      # by this run
    by_others: tuple[AppliedMigration, ...]    # by a concurrent run, meanwhile


async def apply_pending(conn: ZkConnection, migrations: Sequence[Migration] | None = None, *,
                        by: str | None = None, clock_ms: Callable[[], int] = _wall_clock_ms) -> UpResult:
    """Apply every pending migration in order, each in one multi-op with its
    record (rule 2). ConfigError on a NEWER layout; StateError if a
    migration fails (nothing of it is written)."""
    migrations = discover() if migrations is None else ordered(migrations)
    by = by or applied_by("migrate layout up")
    before = await read_layout(conn)
    conflicts: dict[int, int] = {}
    while not await conn.retry("apply the pending layout migrations", _inner_step, conn, migrations, by,
                               clock_ms, conflicts):
        pass
    after = await read_layout(conn)
    new = after.record.applied[before.version:] if after.record else ()
    return UpResult(before, after, tuple(a for a in new if a.applied_by == by),
                    tuple(a for a in new if a.applied_by != by))


async def _inner_step(conn: ZkConnection, migrations: tuple[Migration, ...], by: str,
                      clock_ms: Callable[[], int], conflicts: dict[int, int]) -> bool:
    """Apply the next pending migration; True when none is left."""
    layout = await _inner_read(conn)
    error = refusal(layout, migrations, conn.hosts, daemon=False)
    if error:
        raise error
    pending = layout.pending(migrations)
    if not pending:
        return True
    migration, client = pending[0], conn.client
    tx = client.transaction()
    try:
        await asyncio.to_thread(migration.up, client, tx)
    except KazooException:
        raise  # retried or translated by conn.retry
    except Exception as exc:
        raise StateError(f"layout migration {migration.version} ({migration.module}) failed: {exc!r}; "
                         "nothing of it was written") from exc
    entry = AppliedMigration(migration.version, migration.description, clock_ms(), by)
    record = (layout.record or EMPTY_RECORD).with_applied(entry).to_json()
    if layout.znode_version is None:
        tx.create(paths.LAYOUT, record)
    else:
        tx.set_data(paths.LAYOUT, record, version=layout.znode_version)
    failure = aio.transaction_failure(await aio.call(tx.commit_async))
    if failure is None:
        log.info("applied ZooKeeper layout migration %d (%s) at %s", migration.version, migration.description,
                 conn.hosts)
        return False
    index, exc = failure
    if index in (-1, len(tx.operations) - 1) and isinstance(exc, (NodeExistsError, BadVersionError)):
        raise ForceRetryError()  # another run recorded a migration first: read again
    conflicts[migration.version] = conflicts.get(migration.version, 0) + 1
    if isinstance(exc, (NodeExistsError, NoNodeError, BadVersionError)) and \
            conflicts[migration.version] < _MAX_CONFLICTS:
        raise ForceRetryError()  # a znode it writes changed since it read: read again
    op = tx.operations[index]
    path = op.path[len(conn.chroot or ""):] or "/"
    raise StateError(f"layout migration {migration.version} ({migration.module}) failed: its "
                     f"{type(op).__name__.lower()} of {path} got {type(exc).__name__}; nothing of it was written")


async def check_layout(conn: ZkConnection, migrations: Sequence[Migration] | None = None) -> None:
    """ConfigError unless the layout is the one this zkcoord knows (or EMPTY)."""
    migrations = discover() if migrations is None else ordered(migrations)
    error = refusal(await read_layout(conn), migrations, conn.hosts, daemon=True)
    if error:
        raise error


async def ensure_layout(conn: ZkConnection, migrations: Sequence[Migration] | None = None, *,
                        clock_ms: Callable[[], int] = _wall_clock_ms) -> tuple[AppliedMigration, ...]:
    """For a daemon at start (rule 4): apply every migration on an EMPTY
    ZooKeeper, then refuse anything but the CURRENT layout. Returns what it
    applied."""
    migrations = discover() if migrations is None else ordered(migrations)
    layout = await read_layout(conn)
    applied: tuple[AppliedMigration, ...] = ()
    if layout.state(migrations) is LayoutState.EMPTY and migrations:
        log.info("ZooKeeper at %s has no zkcoord znodes yet (first run): applying the %d layout migration(s) "
                 "this zkcoord knows", conn.hosts, len(migrations))
        result = await apply_pending(conn, migrations, by=applied_by("daemon (first run)"), clock_ms=clock_ms)
        applied, layout = result.applied, result.after
    error = refusal(layout, migrations, conn.hosts, daemon=True)
    if error:
        raise error
    return applied
