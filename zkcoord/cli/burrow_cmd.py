"""``zkcoord burrow-config``: write a Burrow 1.2 configuration that monitors
zkcoord's groups in every offset storage mode.

It connects to nothing: the configuration is built by the pure
:mod:`zkcoord.monitor.burrow` from the flags, then written to stdout or,
with ``--output FILE``, to FILE (through a temporary file beside it and a
rename, so Burrow never reads half a file). Bad input is one ``error:``
line naming it, exit 2.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from pathlib import Path

import click

from zkcoord.errors import UsageError
from zkcoord.monitor.burrow import LOG_LEVELS, NUMBERS, BurrowSettings, burrow_toml

CONFIG_NAME = "burrow.toml"  # the name Burrow looks for in its -config-dir
_DEFAULTS = {field.name: field.default for field in dataclasses.fields(BurrowSettings)}


def _number_options(func):
    """One ``--<name>`` option per whole number Burrow takes; their ranges are
    checked by :class:`BurrowSettings`, so the error names the range."""
    for number in reversed(NUMBERS):
        func = click.option(number.flag, number.field, type=int, default=_DEFAULTS[number.field],
                            show_default=True, help=f"Burrow's {number.meaning} ({number.low} to {number.high}).")(func)
    return func


@click.command("burrow-config")
@click.option("--zookeeper", envvar="ZKCOORD_ZOOKEEPER", show_envvar=True, required=True,
              help="zkcoord's ZooKeeper connection string HOST:PORT[,HOST:PORT...][/chroot].")
@click.option("--bootstrap-servers", envvar="ZKCOORD_BOOTSTRAP_SERVERS", show_envvar=True, required=True,
              help="Kafka brokers HOST:PORT[,HOST:PORT...] (Burrow reads __consumer_offsets and log end offsets).")
@click.option("--cluster", default="local", show_default=True,
              help="Burrow's name for the cluster, as in /v3/kafka/<cluster>/consumer/<group>/status.")
@click.option("--zk-root", envvar="ZKCOORD_OFFSETS_ZK_ROOT", show_envvar=True, default="/consumers",
              show_default=True, help="The daemons' --offsets-zk-root (inside the chroot); must end in /consumers.")
@click.option("--http-listen", default=":8000", show_default=True,
              help="[HOST]:PORT of Burrow's HTTP server (no host: every interface; port 0: any free port).")
@click.option("--output", "output", default="-", show_default=True, metavar="FILE",
              help=f"Where to write the configuration (Burrow reads {CONFIG_NAME} in its -config-dir); - is stdout.")
@_number_options
@click.option("--log-level", type=click.Choice(LOG_LEVELS), default="info", show_default=True)
@click.option("--log-file", default="", help="Burrow's log file (default: its stdout).")
@click.option("--pidfile", default="", help="Burrow's pid file (default: burrow.pid in its working directory).")
def burrow_config(zookeeper: str, bootstrap_servers: str, cluster: str, zk_root: str, http_listen: str,
                  output: str, log_level: str, log_file: str, pidfile: str, **numbers: int) -> None:
    """Write a Burrow configuration monitoring zkcoord's consumer groups.

    Groups in zookeeper storage are read from the legacy layout through
    Burrow's ZooKeeper module, groups in dual and kafka storage from
    __consumer_offsets through its Kafka module, both into one Burrow
    cluster: a group in dual storage is one group there. Changes nothing
    and connects to nothing.
    """
    settings = BurrowSettings(zookeeper=zookeeper, bootstrap_servers=bootstrap_servers, cluster=cluster,
                              zk_root=zk_root, http_listen=http_listen, log_level=log_level, log_file=log_file,
                              pidfile=pidfile, **numbers)
    text = burrow_toml(settings)
    if output == "-":
        click.echo(text, nl=False)
        return
    path = Path(output)
    _write_atomically(path, text)
    click.echo(f"wrote {path}; start Burrow with: Burrow -config-dir {path.parent.resolve()}", err=True)
    if path.name != CONFIG_NAME:
        click.echo(f"note: Burrow reads only {CONFIG_NAME} from its -config-dir: rename {path.name} to it",
                   err=True)


def _write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in its directory and a rename."""
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise UsageError(f"cannot write --output {str(path)!r}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise UsageError(f"cannot write --output {str(path)!r}: {exc.strerror or exc}") from None
