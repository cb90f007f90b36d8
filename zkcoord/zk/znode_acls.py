"""The ACLs of zkcoord's own znodes, read and set after the fact.

This module owns ``zkcoord zookeeper-acl`` (what Kafka's
zookeeper-security-migration, ``ZkSecurityMigrator``, does for Kafka's
znodes): which znodes are zkcoord's, walking them, and setting Kafka's
secure ACL (:data:`~zkcoord.zk.auth.SECURE_ACL`) or the open one on each.

zkcoord's znodes, the subtrees walked (:func:`subtrees`)::

    /coordinators and below          elections, contenders (ephemeral), group states
    /zkcoord and below               nodes (ephemeral), layout, node ids, migrations
    <root>/<group>/offsets           and below, of each group zkcoord coordinates
    <root>/<group>/offsets-metadata  (a child of /coordinators): what its daemons write

Never ``<root>`` (``/consumers``) or ``<root>/<group>`` themselves, nor a
group's ``ids`` and ``owners`` (legacy consumers register there:
:mod:`zkcoord.zk.auth` rule 1), nor the offsets of groups zkcoord does not
coordinate (legacy groups), nor Kafka's znodes.

Rules:

1. Read before write: every znode's ACL is read, and only those that differ
   from the target are set (any version, as Kafka's tool does). A dry run
   reads only. What a secure ACL should be is known from the login
   (:meth:`~zkcoord.zk.auth.ZkSecurity.identities`): ALL for each identity
   of this session, READ for everybody; for a GSSAPI login (the server maps
   the principal) any secure ACL counts as done.
2. Level by level, each level's reads (ACL and children) and then its sets
   pipelined in slices of :data:`SLICE` requests, each slice one idempotent
   step under the connection's retry. Ephemeral znodes are included; a
   znode deleted meanwhile is skipped, as Kafka's tool skips it.
3. ZooKeeper refusing a set (the ACL gives ADMIN to another identity) is
   one AuthorizationError naming the znode, its ACL and how many znodes
   were changed before it.
4. The daemons' session records (``/zkcoord/node-sessions/<node-id>``,
   ephemeral: :mod:`zkcoord.zk.nodes` rule 5) are left as they were made,
   readable by the daemons' own login only with ``set_acl``: the secure
   ACL's READ for everybody would let anyone end a daemon's session.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.security import ACL, Id, Permissions

from zkcoord.errors import AuthorizationError, ConfigError
from zkcoord.zk import aio, paths
from zkcoord.zk.auth import OPEN_ACL, SECURE_ACL, ZkSecurity, acl_kind, acl_text
from zkcoord.zk.connection import ZkConnection

__all__ = ["ACTIONS", "SLICE", "SAMPLE", "Subtree", "SubtreeReport", "AclRun", "subtrees", "run"]

ACTIONS = ("show", "secure", "unsecure")
SLICE = 1000  # requests in flight at once
SAMPLE = 10  # paths of each subtree reported as changed (or to change)


@dataclass(frozen=True)
class Subtree:
    """One kind of subtree: its roots (one, or one per group) and its label."""

    label: str  # "/coordinators", "/consumers/*/offsets"
    roots: tuple[str, ...]


@dataclass
class SubtreeReport:
    """What one kind of subtree holds (``by_kind``: open / secure / other;
    ``by_acl``: each distinct ACL) and what was (or would be) changed."""

    label: str
    roots: int
    znodes: int = 0
    by_kind: Counter = field(default_factory=Counter)
    by_acl: Counter = field(default_factory=Counter)
    changed: int = 0
    sample: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"subtree": self.label, "roots": self.roots, "znodes": self.znodes, "by_kind": dict(self.by_kind),
                "by_acl": dict(self.by_acl), "changed": self.changed, "sample": list(self.sample)}


@dataclass
class AclRun:
    """One run of :func:`run`."""

    action: str
    dry_run: bool
    target: tuple[str, ...]  # the ACL set, as acl_text shows it (show: empty)
    groups: int  # groups zkcoord coordinates (their offsets were walked)
    subtrees: list[SubtreeReport]

    @property
    def changed(self) -> int:
        return sum(s.changed for s in self.subtrees)


async def subtrees(conn: ZkConnection, offsets_root: str = paths.DEFAULT_CONSUMERS_ROOT) -> list[Subtree]:
    """zkcoord's subtrees (module docstring): the groups are the children of
    /coordinators, their offsets under ``offsets_root``."""
    layout = paths.OffsetPaths(offsets_root)

    async def inner() -> list[str]:
        try:
            return sorted(await aio.call(conn.client.get_children_async, paths.COORDINATORS))
        except NoNodeError:
            return []

    names = await conn.retry(f"list the groups under {paths.COORDINATORS}", inner)
    # A child of /coordinators is a group's znode name (paths.group_name): the same name under the offsets root.
    return [Subtree(paths.COORDINATORS, (paths.COORDINATORS,)), Subtree(paths.ROOT, (paths.ROOT,)),
            Subtree(f"{layout.root}/*/{paths.OFFSETS}", tuple(f"{layout.root}/{n}/{paths.OFFSETS}" for n in names)),
            Subtree(f"{layout.root}/*/{paths.OFFSETS_METADATA}",
                    tuple(f"{layout.root}/{n}/{paths.OFFSETS_METADATA}" for n in names))]


class _Target:
    """The ACL an action sets, and whether a znode already has it (rule 1)."""

    def __init__(self, action: str, security: ZkSecurity | None) -> None:
        self.action = action
        self.acl = list(SECURE_ACL) if action == "secure" else list(OPEN_ACL)
        ids = security.identities() if security is not None and action == "secure" else frozenset()
        self.expected = None if ids is None else frozenset(
            [ACL(Permissions.ALL, i) for i in ids] + [ACL(Permissions.READ, Id("world", "anyone"))])
        if action == "unsecure":
            self.expected = frozenset(OPEN_ACL)

    def done(self, acls: list[ACL]) -> bool:
        if self.expected is None:
            return acl_kind(acls) == "secure"
        return frozenset(acls) == self.expected and len(acls) == len(self.expected)

    def shown(self) -> tuple[str, ...]:
        if self.action == "show":
            return ()
        if self.expected is None:
            return tuple(acl_text(a) for a in SECURE_ACL)
        return tuple(sorted(acl_text(a) for a in self.expected))


async def run(conn: ZkConnection, action: str, *, offsets_root: str = paths.DEFAULT_CONSUMERS_ROOT,
              dry_run: bool = False, security: ZkSecurity | None = None) -> AclRun:
    """Show, secure or unsecure zkcoord's znodes (module docstring). ``secure``
    needs a login (``security``): ZooKeeper gives the ACL to it."""
    if action not in ACTIONS:
        raise ConfigError(f"zookeeper-acl action {action!r} is not one of {', '.join(ACTIONS)}")
    if action == "secure" and not dry_run and (security is None or not security.logs_in):
        raise ConfigError("zookeeper-acl secure needs a ZooKeeper login (--zookeeper-sasl-jaas-file or "
                          "ZKCOORD_ZOOKEEPER_DIGEST): the secure ACL gives every right to the identity that sets "
                          "it, and ZooKeeper refuses it from a session that has not logged in")
    target = _Target(action, security)
    found = await subtrees(conn, offsets_root)
    result = AclRun(action, dry_run, target.shown(), len(found[2].roots), [])
    changed_before = 0
    for subtree in found:
        report = SubtreeReport(subtree.label, len(subtree.roots))
        result.subtrees.append(report)
        await _walk(conn, subtree.roots, target, report, write=action != "show" and not dry_run,
                    changed_before=changed_before)
        changed_before += report.changed
    return result


async def _walk(conn: ZkConnection, roots: Iterable[str], target: _Target, report: SubtreeReport, *, write: bool,
                changed_before: int) -> None:
    level = list(roots)
    while level:
        below: list[str] = []
        for start in range(0, len(level), SLICE):
            chunk = level[start:start + SLICE]
            read = await conn.retry(f"read the ACLs of {len(chunk)} znode(s) under {report.label}", _read, conn,
                                    chunk)
            todo = []
            for path, (acls, children) in read.items():
                report.znodes += 1
                report.by_kind[acl_kind(acls)] += 1
                report.by_acl[", ".join(sorted(acl_text(a) for a in acls))] += 1
                if path != paths.NODE_SESSIONS:  # its children keep the ACL they were made with (rule 4)
                    below += [f"{path}/{c}" for c in sorted(children)]
                if target.action != "show" and not target.done(acls):
                    todo.append((path, acls))
            if write and todo:
                await conn.retry(f"set the ACLs of {len(todo)} znode(s) under {report.label}", _set, conn, todo,
                                 target.acl, changed_before + report.changed)
            report.changed += len(todo)
            report.sample += [p for p, _ in todo[:max(0, SAMPLE - len(report.sample))]]
        level = below


async def _read(conn: ZkConnection, chunk: list[str]) -> dict[str, tuple[list[ACL], list[str]]]:
    """``{path: (acls, children)}`` of the znodes of ``chunk`` that exist."""
    client, loop = conn.client, asyncio.get_running_loop()
    acls, children = await asyncio.gather(aio.gather(loop, [client.get_acls_async(p) for p in chunk]),
                                          aio.gather(loop, [client.get_children_async(p) for p in chunk]))
    found = {}
    for path, acl, kids in zip(chunk, acls, children):
        for outcome in (acl, kids):
            if isinstance(outcome, BaseException) and not isinstance(outcome, NoNodeError):
                raise outcome
        if not isinstance(acl, BaseException) and not isinstance(kids, BaseException):
            found[path] = (acl[0], kids)
    return found


async def _set(conn: ZkConnection, todo: list[tuple[str, list[ACL]]], acl: list[ACL], changed_before: int) -> None:
    loop = asyncio.get_running_loop()
    outcomes = await aio.gather(loop, [conn.client.set_acls_async(path, acl) for path, _ in todo])
    for (path, current), outcome in zip(todo, outcomes):
        if isinstance(outcome, NoAuthError):
            raise AuthorizationError(
                f"ZooKeeper at {conn.hosts} refused to change the ACL of {path} "
                f"({', '.join(acl_text(a) for a in current)}): only an identity with ADMIN on it may; log in as "
                f"one (--zookeeper-sasl-jaas-file, ZKCOORD_ZOOKEEPER_DIGEST). At least {changed_before} znode(s) "
                "were changed before it; the command run again changes only what is left")
        if isinstance(outcome, BaseException) and not isinstance(outcome, NoNodeError):
            raise outcome
