"""The ``zkcoord`` command line: one click group, one module per command
family (``local``, and later ``run``, ``migrate``, ``describe`` ...).

Owns turning a :class:`~zkcoord.errors.ZkcoordError` into one red line on
stderr and the error's exit code: users never see a traceback for an error
we expected. Rendering with rich lives only in ``zkcoord.cli``.
"""

from __future__ import annotations

import logging

import click

from zkcoord import __version__
from zkcoord.cli.base import ZkcoordGroup, err_console  # noqa: F401  (re-exported)

@click.group(cls=ZkcoordGroup)
@click.version_option(__version__, prog_name="zkcoord")
@click.option("-v", "--verbose", count=True, help="More log output (-v: info, -vv: debug, libraries too).")
def cli(verbose: int) -> None:
    """zkcoord: Kafka consumer-group coordinators that keep their state in
    ZooKeeper, and the toolkit to move ZooKeeper offsets into Kafka."""
    setup_logging(verbose)


def setup_logging(verbose: int) -> None:
    """Our logs at WARNING (INFO, DEBUG with -v, -vv); kazoo's and
    kafka-python's chatter about connections only with -vv."""
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)]
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet = logging.DEBUG if verbose >= 2 else logging.CRITICAL
    for noisy in ("kazoo", "kafka"):
        logging.getLogger(noisy).setLevel(quiet)


def _register() -> None:
    from zkcoord.cli import consume_cmd, inspect_cmd, layout_cmd, local_cmd, migrate_cmd, run_cmd, spark_cmd

    migrate_cmd.migrate.add_command(layout_cmd.layout)
    migrate_cmd.migrate.add_command(spark_cmd.run_job_command)

    cli.add_command(consume_cmd.consume)
    cli.add_command(inspect_cmd.describe)
    cli.add_command(inspect_cmd.groups)
    cli.add_command(local_cmd.local)
    from zkcoord.cli.handover_cmd import handover
    cli.add_command(handover)
    cli.add_command(migrate_cmd.migrate)
    cli.add_command(run_cmd.run)

    from zkcoord.cli.burrow_cmd import burrow_config
    cli.add_command(burrow_config)

    from zkcoord.cli.zookeeper_acl_cmd import zookeeper_acl
    cli.add_command(zookeeper_acl)


_register()


def main() -> None:
    cli(prog_name="zkcoord")


if __name__ == "__main__":
    main()
