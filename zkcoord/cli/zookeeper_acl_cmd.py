"""``zkcoord zookeeper-acl``: the ZooKeeper ACLs of zkcoord's own znodes.

What Kafka's ``zookeeper-security-migration --zookeeper.acl=secure|unsecure``
does for Kafka's znodes, for zkcoord's (which ones: :mod:`zkcoord.zk.znode_acls`):

* ``show``     each subtree's znodes counted by ACL; changes nothing.
* ``secure``   sets Kafka's secure ACL: every right to this command's
  ZooKeeper login, READ to everybody (what daemons with
  ``zookeeper_set_acl`` create). Needs a login.
* ``unsecure`` sets them back to open (everybody may do everything).

``--dry-run`` counts what would change. The order, as with Kafka: give every
daemon and tool the login first, then ``zookeeper_set_acl``, then run
``secure``; to go back, drop ``zookeeper_set_acl``, run ``unsecure``, then
drop the login. Exit 0; 2 for a bad option, an unreachable ZooKeeper, a
refused login or a znode this login may not change. Rendering lives here.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from zkcoord.cli.base import ZkcoordGroup, run_with_zookeeper
from zkcoord.cli.render import echo_document, print_out
from zkcoord.cli.zk_login import zookeeper_login_options
from zkcoord.zk import znode_acls
from zkcoord.zk.auth import ZkSecurity
from zkcoord.zk.paths import OffsetPaths

__all__ = ["zookeeper_acl"]


def _options(func):
    options = [
        click.option("--zookeeper", envvar="ZKCOORD_ZOOKEEPER", show_envvar=True, required=True,
                     help="ZooKeeper connection string HOST:PORT[,HOST:PORT...][/chroot]."),
        click.option("--zk-root", envvar="ZKCOORD_OFFSETS_ZK_ROOT", show_envvar=True, default="/consumers",
                     show_default=True, help="Root of the legacy offsets (the daemons' --offsets-zk-root)."),
        click.option("--timeout-ms", type=click.IntRange(1_000, 3_600_000), default=15_000, show_default=True,
                     help="How long to wait for ZooKeeper."),
        click.option("--output", type=click.Choice(["table", "json"]), default="table", show_default=True),
    ]
    func = zookeeper_login_options(func)  # innermost: listed after --zookeeper
    for option in reversed(options):
        func = option(func)
    return func


_dry_run = click.option("--dry-run", is_flag=True, help="Count what would change; change nothing.")


@click.group("zookeeper-acl", cls=ZkcoordGroup)
def zookeeper_acl() -> None:
    """Show, secure or unsecure the ZooKeeper ACLs of zkcoord's own znodes.

    zkcoord's znodes: /coordinators and /zkcoord with everything below, and
    the offsets (and offsets-metadata) subtrees of the groups zkcoord
    coordinates. Never /consumers, /consumers/<group> (legacy consumers
    register under them), legacy groups' offsets or Kafka's znodes.
    """


@zookeeper_acl.command()
@_options
def show(zookeeper: str, zk_root: str, timeout_ms: int, output: str, zk_security: ZkSecurity | None) -> None:
    """Count zkcoord's znodes by ACL (open, secure, other). Changes nothing."""
    _execute("show", zookeeper, zk_root, timeout_ms, output, zk_security, dry_run=True)


@zookeeper_acl.command()
@_options
@_dry_run
def secure(zookeeper: str, zk_root: str, timeout_ms: int, output: str, zk_security: ZkSecurity | None,
           dry_run: bool) -> None:
    """Let only this ZooKeeper login write zkcoord's znodes; everybody reads them.

    Sets Kafka's secure ACL (CREATOR_ALL_ACL + READ_ACL_UNSAFE, as
    zookeeper.set.acl makes) on every znode that has another: ephemeral ones
    included. Give the daemons the same login and zookeeper_set_acl first,
    or what they create afterwards is open again.
    """
    _execute("secure", zookeeper, zk_root, timeout_ms, output, zk_security, dry_run=dry_run)


@zookeeper_acl.command()
@_options
@_dry_run
def unsecure(zookeeper: str, zk_root: str, timeout_ms: int, output: str, zk_security: ZkSecurity | None,
             dry_run: bool) -> None:
    """Make zkcoord's znodes open again (anybody may do anything).

    Needs the login that secured them (only it may change their ACL). Drop
    zookeeper_set_acl from the daemons first.
    """
    _execute("unsecure", zookeeper, zk_root, timeout_ms, output, zk_security, dry_run=dry_run)


def _execute(action: str, zookeeper: str, zk_root: str, timeout_ms: int, output: str,
             security: ZkSecurity | None, *, dry_run: bool) -> None:
    OffsetPaths(zk_root)  # ConfigError before any I/O

    async def work(conn) -> znode_acls.AclRun:
        return await znode_acls.run(conn, action, offsets_root=zk_root, dry_run=dry_run, security=security)

    result = run_with_zookeeper(zookeeper, timeout_ms, work, security)
    hosts = zookeeper.strip()
    if output == "json":
        echo_document("zookeeper-acl", _as_dict(result, hosts, zk_root, security))
        return
    _print(result, hosts)


def _as_dict(result: znode_acls.AclRun, hosts: str, zk_root: str, security: ZkSecurity | None) -> dict[str, Any]:
    return {"zookeeper": hosts, "zk_root": zk_root, "action": result.action, "dry_run": result.dry_run,
            "login": security.describe() if security is not None else "no login",
            "target_acl": list(result.target), "zkcoord_groups": result.groups,
            "subtrees": [s.as_dict() for s in result.subtrees], "changed": result.changed}


def _print(result: znode_acls.AclRun, hosts: str) -> None:
    show = result.action == "show"
    head = f"zookeeper-acl {result.action} on {hosts}: {result.groups} group(s) coordinated by zkcoord"
    if not show:
        head += f"; target ACL {', '.join(result.target)}"
    changed = "WOULD CHANGE" if result.dry_run else "CHANGED"
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for column in ("SUBTREE", "ROOTS", "ZNODES", "OPEN", "SECURE", "OTHER", *(() if show else (changed,))):
        table.add_column(column, overflow="fold")
    for s in result.subtrees:
        counts = [str(s.by_kind.get(kind, 0)) for kind in ("open", "secure", "other")]
        table.add_row(s.label, str(s.roots), str(s.znodes), *counts, *(() if show else (str(s.changed),)))
    out = [Text(head), table]
    if show:
        acls = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
        for column in ("ACL", "ZNODES"):
            acls.add_column(column, overflow="fold")
        totals = sum((s.by_acl for s in result.subtrees), start=Counter())
        for acl, count in sorted(totals.items(), key=lambda item: (-item[1], item[0])):
            acls.add_row(acl or "(none)", str(count))
        out.append(acls)
    else:
        verb = "would change" if result.dry_run else "changed"
        for s in result.subtrees:
            out += [Text(f"  {verb} {p}") for p in s.sample]
            if s.changed > len(s.sample):
                out.append(Text(f"  ... and {s.changed - len(s.sample)} more under {s.label}"))
        out.append(Text(f"dry run: would change {result.changed} znode(s); nothing was changed" if result.dry_run
                        else f"changed the ACL of {result.changed} znode(s)"))
    print_out(*out)
