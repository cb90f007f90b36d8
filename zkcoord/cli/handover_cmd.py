"""``zkcoord handover``: an operator's switches of a live handover (docs/handover.md).

* ``keep GROUP``: the group stays in handover even when no legacy consumer
  is left: its owner daemon keeps its members registered under
  ``/consumers/<group>/ids`` and holds their owner znodes, so a legacy
  consumer started again (a rollback) takes only its range, never a
  partition a zkcoord member consumes. Takes effect at once on the owner;
  a group nobody owns is adopted by a live daemon.
* ``end GROUP``: stop keeping it: the handover ends by itself once no legacy
  consumer is registered (registrations and owner znodes deleted, the group
  rebalanced under zkcoord alone).

Rendering lives here; the work is in :mod:`zkcoord.zk.handover`.
"""

from __future__ import annotations

import click

from zkcoord.cli.base import ZkcoordGroup, run_with_zookeeper
from zkcoord.cli.render import print_out
from zkcoord.cli.zk_login import zookeeper_login_options
from zkcoord.zk import paths
from zkcoord.zk.handover import LegacyRebalanceZk


def _options(func):
    func = zookeeper_login_options(func)
    func = click.option("--timeout-ms", type=click.IntRange(1_000, 3_600_000), default=15_000, show_default=True,
                        help="How long to wait for ZooKeeper.")(func)
    func = click.option("--zookeeper", envvar="ZKCOORD_ZOOKEEPER", show_envvar=True, required=True,
                        help="ZooKeeper connection string HOST:PORT[,HOST:PORT...][/chroot].")(func)
    return click.argument("group")(func)


@click.group(cls=ZkcoordGroup)
def handover() -> None:
    """Switches of a live handover from legacy ZooKeeper consumers (keep, end)."""


def _set(group: str, zookeeper: str, timeout_ms: int, zk_security, kept: bool) -> None:
    paths.handover_marker(group)  # a group id that cannot name a znode: UsageError before connecting

    async def work(conn):
        await LegacyRebalanceZk(conn).set_kept(group, kept)

    run_with_zookeeper(zookeeper, timeout_ms, work, zk_security)


@handover.command()
@_options
def keep(group: str, zookeeper: str, timeout_ms: int, zk_security) -> None:
    """Keep GROUP in handover even with no legacy consumer left (a rollback stays possible)."""
    _set(group, zookeeper, timeout_ms, zk_security, True)
    print_out(f"group {group!r}: kept in handover; its members stay registered as legacy consumers until "
              f"`zkcoord handover end {group}`")


@handover.command()
@_options
def end(group: str, zookeeper: str, timeout_ms: int, zk_security) -> None:
    """Stop keeping GROUP in handover: it ends once no legacy consumer is registered."""
    _set(group, zookeeper, timeout_ms, zk_security, False)
    print_out(f"group {group!r}: no longer kept; the handover ends once no legacy consumer is registered")
