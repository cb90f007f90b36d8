"""``zkcoord migrate layout``: the version of zkcoord's own ZooKeeper layout.

* ``status`` shows the stored layout version and every migration this
  zkcoord knows, applied (when, by whom) or pending. Exit 0: up to date;
  1: something to apply (``up``); 2: the layout is newer than this zkcoord.
* ``up`` applies the pending migrations in order, each in one multi-op with
  its record in ``/zkcoord/layout``, so two ``up`` runs at once apply each
  migration once. Already up to date: says so and changes nothing.

Rendering lives here; the work is in :mod:`zkcoord.zk.layout`.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from zkcoord.cli.base import ZkcoordGroup, run_with_zookeeper as _run
from zkcoord.cli.render import echo_document, print_out
from zkcoord.cli.zk_login import zookeeper_login_options
from zkcoord.zk import layout as zk_layout
from zkcoord.zk.layout import Layout, LayoutState, Migration

COLUMNS = ("VERSION", "DESCRIPTION", "STATE", "APPLIED AT", "APPLIED BY")


def _zookeeper_options(func):
    options = [
        click.option("--zookeeper", envvar="ZKCOORD_ZOOKEEPER", show_envvar=True, required=True,
                     help="ZooKeeper connection string HOST:PORT[,HOST:PORT...][/chroot]."),
        click.option("--timeout-ms", type=click.IntRange(1_000, 3_600_000), default=15_000, show_default=True,
                     help="How long to wait for ZooKeeper."),
    ]
    func = zookeeper_login_options(func)  # innermost: listed after --zookeeper
    for option in reversed(options):
        func = option(func)
    return func




@click.group(cls=ZkcoordGroup)
def layout() -> None:
    """The version of zkcoord's ZooKeeper layout (/zkcoord/layout) and its migrations."""


@layout.command()
@_zookeeper_options
@click.option("--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
def status(zookeeper: str, timeout_ms: int, output: str, zk_security) -> None:
    """Show the layout version, and each migration: applied or pending. Changes nothing.

    Exit 0: up to date; 1: migrations to apply (`zkcoord migrate layout up`);
    2: the layout is newer than this zkcoord.
    """
    migrations = zk_layout.discover()
    found = _run(zookeeper, timeout_ms, zk_layout.read_layout, zk_security)
    state = found.state(migrations)
    hosts = zookeeper.strip()
    if output == "json":
        echo_document("migrate layout status", _status_dict(found, migrations, hosts))
    else:
        _print_status(found, migrations, hosts)
    error = zk_layout.refusal(found, migrations, hosts, daemon=False)
    if error:
        raise error
    if state is not LayoutState.CURRENT:
        sys.exit(1)


def _rows(found: Layout, migrations: tuple[Migration, ...]) -> list[dict[str, Any]]:
    applied = {a.version: a for a in (found.record.applied if found.record else ())}
    known = {m.version: m for m in migrations}
    rows = []
    for version in sorted(applied.keys() | known.keys()):
        entry, migration = applied.get(version), known.get(version)
        rows.append({
            "version": version,
            "description": entry.description if entry else migration.description,
            "state": ("applied" if migration else "applied, unknown to this zkcoord") if entry else "pending",
            "applied_at_ms": entry.applied_at_ms if entry else None,
            "applied_by": entry.applied_by if entry else None,
        })
    return rows


def _status_dict(found: Layout, migrations: tuple[Migration, ...], hosts: str) -> dict[str, Any]:
    return {"zookeeper": hosts, "state": found.state(migrations).name.lower(), "version": found.version,
            "known_version": len(migrations), "migrations": _rows(found, migrations)}


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _print_status(found: Layout, migrations: tuple[Migration, ...], hosts: str) -> None:
    state = found.state(migrations)
    detail = {LayoutState.EMPTY: "empty: no zkcoord znodes yet",
              LayoutState.UNINITIALISED: f"not initialised: {', '.join(found.zkcoord_znodes)} but no layout "
                                         "version",
              LayoutState.NEWER: "newer than this zkcoord"}.get(state, state.value)
    click.echo(f"ZooKeeper layout of {hosts}: version {found.version} ({detail}); this zkcoord knows version "
               f"{len(migrations)}")
    table = Table(title_justify="left")
    for column in COLUMNS:
        table.add_column(column, overflow="fold")
    colours = {"applied": "green", "pending": "yellow"}
    for row in _rows(found, migrations):
        cells = [Text(str(row["version"])), Text(row["description"]), Text(row["state"]),
                 Text(_when(row["applied_at_ms"])), Text(row["applied_by"] or "-")]
        cells[2].stylize(colours.get(row["state"], "red"))
        table.add_row(*cells)
    if table.rows:
        print_out(table)
    pending = found.pending(migrations)
    if pending and state is not LayoutState.NEWER:
        click.echo(f"{len(pending)} migration(s) pending: run `zkcoord migrate layout up --zookeeper {hosts}`"
                   + (" (or start a daemon: on an empty ZooKeeper it applies them itself)"
                      if state is LayoutState.EMPTY else ""))


@layout.command()
@_zookeeper_options
def up(zookeeper: str, timeout_ms: int, zk_security) -> None:
    """Apply the pending layout migrations, in order.

    Each migration and its record in /zkcoord/layout are one ZooKeeper
    multi-op: it is applied whole or not at all, and of several `up` runs at
    once only one applies it. Migrations only add what is missing, so
    running `up` again changes nothing.
    """
    migrations = zk_layout.discover()
    result = _run(zookeeper, timeout_ms, lambda conn: zk_layout.apply_pending(conn, migrations), zk_security)
    hosts = zookeeper.strip()
    if not result.applied and not result.by_others:
        click.echo(f"ZooKeeper layout of {hosts} is at version {result.after.version}, up to date; "
                   "nothing to apply")
        return
    for entry in result.applied:
        click.echo(f"applied {entry.version}: {entry.description}")
    for entry in result.by_others:
        click.echo(f"{entry.version}: {entry.description} was applied meanwhile by {entry.applied_by}")
    click.echo(f"ZooKeeper layout of {hosts}: version {result.before.version} -> {result.after.version}, "
               "up to date")
