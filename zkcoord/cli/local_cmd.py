"""``zkcoord local``: the local ZooKeeper + Kafka sandbox (up, status, down,
env, fetch), and beside it the reference peer: a Kafka 4.x node in KRaft
mode (``up --kafka4``)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from zkcoord.errors import UsageError
from zkcoord.local import ensemble, jars, kraft, spark_cluster
from zkcoord.local.sandbox import MAX_BROKERS, MAX_DAEMONS, Sandbox

console = Console(highlight=False, soft_wrap=True)

state_dir_option = click.option(
    "--state-dir", type=click.Path(file_okay=False, path_type=Path), envvar="ZKCOORD_STATE_DIR",
    default=None, show_envvar=True,
    help="Where the sandbox keeps data, logs and pids [default: ~/.local/state/zkcoord/sandbox].",
)


def _log(msg: str) -> None:
    console.print(f"[dim]{msg}[/]", markup=True)


@click.group()
def local() -> None:
    """A real ZooKeeper 3.8 (one server or an ensemble) and Kafka 3.9
    (ZooKeeper mode) on loopback, and optionally a Kafka 4.x node in KRaft
    mode beside them (--kafka4)."""


def _kafka4_settings(ctx, param, values: tuple[str, ...]) -> dict[str, str | None]:
    try:
        return kraft.parse_settings(values)
    except UsageError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


@local.command()
@click.option("--zookeepers", type=click.Choice([str(n) for n in ensemble.SIZES]), default=None,
              help="ZooKeeper servers: 1, or an ensemble of 3 or 5 (zookeeper-1..N on loopback, each with its own "
                   "client, quorum and election ports; every client is given all of them) [default: 1 for a new "
                   "sandbox; an existing one keeps its own].")
@click.option("--brokers", type=click.IntRange(1, MAX_BROKERS), default=None,
              help="Number of Kafka brokers; topics, the offsets and transaction topics are replicated on up to 3 "
                   "of them [default: 1 for a new sandbox; an existing one keeps its own].")
@click.option("--daemons", type=click.IntRange(0, MAX_DAEMONS), default=0, show_default=True,
              help="Also run this many zkcoord coordinator daemons (node ids 1..N), each with a gateway.")
@click.option("--workers", type=click.IntRange(0, 16), default=0, show_default=True,
              help="Each new daemon's zkcoord run --workers: worker processes behind its addresses (0: one per "
                   "core, at least 2).")
@click.option("--secure", is_flag=True,
              help="A secure sandbox: a local CA, SASL_SSL (SCRAM-SHA-512) brokers, daemons and gateways, "
                   "ZooKeeper with SASL and ACLs, users admin, alice and bob with Kafka's ACLs.")
@click.option("--kafka4", is_flag=True,
              help=f"Also run Apache Kafka {jars.KAFKA4_VERSION} in KRaft mode (one node, broker and controller; "
                   "KIP-848's consumer protocol on), the reference peer; it stays until `local down`.")
@click.option("--kafka4-config", "kafka4_config", metavar="KEY=VALUE", multiple=True, callback=_kafka4_settings,
              help="A broker setting of the Kafka 4.x node, e.g. group.consumer.migration.policy=upgrade "
                   "(repeatable; KEY= removes one; implies --kafka4). Kept for later `up`s; a change restarts "
                   "the node, keeping its data.")
@click.option("--spark-workers", type=click.IntRange(0, spark_cluster.MAX_WORKERS), default=0, show_default=True,
              help="Also run a Spark standalone cluster: a master and this many workers, from the installed "
                   "pyspark (for migrate run-job --spark-master $ZKCOORD_SPARK_MASTER).")
@state_dir_option
def up(zookeepers: str | None, brokers: int | None, daemons: int, workers: int, secure: bool, kafka4: bool,
       kafka4_config: dict[str, str | None], spark_workers: int, state_dir: Path | None) -> None:
    """Start the sandbox (fetching the jars with Maven the first time)."""
    sandbox = Sandbox(state_dir, log=_log)
    state, started = sandbox.up(brokers, daemons, secure=secure, kafka4=kafka4, kafka4_settings=kafka4_config,
                                workers=workers, spark_workers=spark_workers,
                                zookeepers=None if zookeepers is None else int(zookeepers))
    if started:
        console.print(f"sandbox up in {sandbox.state_dir} (started: {', '.join(started)})")
    else:
        console.print(f"sandbox already up in {sandbox.state_dir}; nothing changed")
    console.print(f"zookeeper:         {sandbox.zookeeper_address(state)}"
                  + (f"  (an ensemble of {len(state.zookeepers)})" if state.zookeeper_peers else ""))
    console.print(f"bootstrap servers: {sandbox.bootstrap_servers(state)}")
    if state.kafka4:
        settings = " ".join(f"{k}={v}" for k, v in state.kafka4_settings.items()) or "none"
        console.print(f"kafka {jars.KAFKA4_VERSION} (KRaft): {sandbox.kafka4_bootstrap_servers(state)}  "
                      f"(its settings: {settings})")
    if state.spark_master:
        console.print(f"spark master:      {spark_cluster.master_url(state)}  ({len(state.spark_workers)} worker(s); "
                      f"web UI {spark_cluster.ui_url(state)})")
    if state.daemons:
        console.print(f"zkcoord daemons:   {sandbox.daemon_addresses(state)}")
        console.print(f"gateways:          {sandbox.gateway_addresses(state)}  (bootstrap.servers of stock Kafka clients)")
        if sandbox.metrics_urls(state):
            console.print(f"metrics, health:   {sandbox.metrics_urls(state)}  (GET /metrics, /health)")
    if state.secure:
        exports = sandbox.secure_environment(state)
        console.print("security:          SASL_SSL, SCRAM-SHA-512; users admin (super user), alice, bob")
        console.print(f"client configs:    {exports['ZKCOORD_CLIENT_CONFIG_DIR']}  (<user>.properties, "
                      "<user>.librdkafka.conf)")


@local.command()
@state_dir_option
def status(state_dir: Path | None) -> None:
    """Show each server (a daemon's gateway and metrics endpoint on rows of
    their own), its pid and whether it answers. Exit 1 if any is not up.
    A member of a ZooKeeper ensemble is named with its role
    (zookeeper-2 leader, zookeeper-1 follower), or is "no quorum" while it
    runs but serves no clients.

    On a terminal: a table. Piped: plain columns, nothing cut or wrapped."""
    sandbox = Sandbox(state_dir)
    rows = sandbox.status()
    if not rows:
        console.print(f"no sandbox in {sandbox.state_dir} (run `zkcoord local up`)")
        sys.exit(3)
    cells = [(row.name, row.address, str(row.pid or "-"), row.state, row.log_file) for row in rows]
    if console.is_terminal:
        _print_table(f"sandbox {sandbox.state_dir}", cells)
    else:
        for line in plain_columns([STATUS_COLUMNS, *cells]):
            click.echo(line)
    if any(row.state != "up" for row in rows):
        sys.exit(1)


STATUS_COLUMNS = ("SERVER", "ADDRESS", "PID", "STATE", "LOG")
STATE_COLOURS = {"up": "green", "down": "red", "unresponsive": "yellow", "not ready": "yellow", "no quorum": "yellow"}


def _print_table(title: str, cells: list[tuple[str, ...]]) -> None:
    """A narrow terminal folds the long cells (addresses, log paths), never cuts them."""
    table = Table(title=title)
    for column in STATUS_COLUMNS:
        table.add_column(column, overflow="fold")
    for name, address, pid, state, log_file in cells:
        table.add_row(name, address, pid, f"[{STATE_COLOURS[state]}]{state}[/]", log_file)
    console.print(table)


def plain_columns(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows as left-aligned columns two spaces apart, as wide as their longest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


@local.command()
@state_dir_option
def down(state_dir: Path | None) -> None:
    """Stop every sandbox server and delete its data and logs."""
    sandbox = Sandbox(state_dir)
    stopped = sandbox.down()
    console.print(f"sandbox down; stopped: {', '.join(stopped) or 'nothing was running'}; "
                  f"removed {sandbox.state_dir}")


@local.command()
@state_dir_option
def env(state_dir: Path | None) -> None:
    """Print export lines for the sandbox addresses (eval "$(zkcoord local env)").

    ZKCOORD_ZOOKEEPER names every ZooKeeper server (the whole ensemble, in
    myid order); ZKCOORD_BOOTSTRAP_SERVERS every broker.

    With daemons also ZKCOORD_COORDINATORS, ZKCOORD_GATEWAY_SERVERS and
    ZKCOORD_METRICS_URLS (their /metrics and /health base URLs, node-id order).
    With the Kafka 4.x node (up --kafka4) also ZKCOORD_KAFKA4_BOOTSTRAP_SERVERS
    and ZKCOORD_TOOLS_LOG4J2, the logging of Kafka 4.x's tools (log4j2).
    With a Spark cluster (up --spark-workers N) also ZKCOORD_SPARK_MASTER
    (spark://..., which migrate run-job reads) and ZKCOORD_SPARK_MASTER_UI
    (its web UI; /json/ lists the workers and applications).
    ZKCOORD_TOOLS_LOG4J: the logging of Kafka's tools run by hand from the
    jars (java -Dlog4j.configuration=file:$ZKCOORD_TOOLS_LOG4J ...), warnings
    and errors on stderr, as Kafka's shell scripts give them.
    A secure sandbox adds ZKCOORD_CLIENT_CONFIG_DIR (a <user>.properties and
    <user>.librdkafka.conf per user) and zkcoord's own logins:
    ZKCOORD_KAFKA_CLIENT_CONFIG (admin), ZKCOORD_ZOOKEEPER_SASL_JAAS_FILE and
    ZKCOORD_ZOOKEEPER_SET_ACL=true (zkcoord's znodes get Kafka's secure ACL)."""
    sandbox = Sandbox(state_dir)
    state = sandbox.load()
    if state is None:
        click.echo(f"no sandbox in {sandbox.state_dir} (run `zkcoord local up`)", err=True)
        sys.exit(3)
    exports = {"ZKCOORD_ZOOKEEPER": sandbox.zookeeper_address(state),
               "ZKCOORD_BOOTSTRAP_SERVERS": sandbox.bootstrap_servers(state)}
    if state.daemons:
        exports["ZKCOORD_COORDINATORS"] = sandbox.daemon_addresses(state)
        exports["ZKCOORD_GATEWAY_SERVERS"] = sandbox.gateway_addresses(state)
        if sandbox.metrics_urls(state):
            exports["ZKCOORD_METRICS_URLS"] = sandbox.metrics_urls(state)
    if state.kafka4:
        exports[kraft.BOOTSTRAP_ENV] = sandbox.kafka4_bootstrap_servers(state)
    exports["ZKCOORD_TOOLS_LOG4J"] = str(sandbox.tools_log4j)
    if state.kafka4:
        exports["ZKCOORD_TOOLS_LOG4J2"] = str(sandbox.tools_log4j2)
    exports.update(spark_cluster.environment(state))
    exports.update(sandbox.secure_environment(state))
    for name, value in exports.items():
        click.echo(f"export {name}={shlex.quote(value)}")  # a state directory may hold a space


@local.command()
@click.option("--legacy", is_flag=True,
              help="Instead: fetch Kafka 1.1.1's old ZooKeeper consumer (for the legacy test and benchmark) "
                   "and compile its driver, into <cache>/legacy.")
@click.option("--kafka4", is_flag=True,
              help=f"Also fetch Kafka {jars.KAFKA4_VERSION} (broker, clients, tools), for `up --kafka4` and the "
                   "tests of the reference peer.")
def fetch(legacy: bool, kafka4: bool) -> None:
    """Fetch the ZooKeeper and Kafka jars into the cache (done by `up` too)."""
    if legacy and kafka4:
        raise click.UsageError("--legacy and --kafka4: give one.")
    if legacy:
        from zkcoord.local.legacy import driver_classpath

        classpath = driver_classpath(log=_log)
        console.print(f"legacy consumer {jars.LEGACY_KAFKA_VERSION} (Scala {jars.LEGACY_SCALA_VERSION}): {classpath}")
        return
    for dist in [*jars.fetch_all(log=_log), *([jars.kafka4_distribution(log=_log)] if kafka4 else [])]:
        console.print(f"{dist.name} {dist.version}: {dist.classpath} ({dist.source})")
    console.print(f"jar cache: {jars.cache_dir() / 'jars'} ({jars.cache_size_bytes() / 2**20:.0f} MiB)")


@local.command()
@click.argument("group")
@click.argument("topics", nargs=-1)
@click.option("--name", default="a", show_default=True,
              help="The consumer's name: it registers as <group>_<name>1 (consumer.id), <name>2... with --members.")
@click.option("--members", type=click.IntRange(1, 16), default=1, show_default=True,
              help="Consumers in this one JVM.")
@click.option("--streams", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Streams (threads) per consumer and topic.")
@click.option("--whitelist", metavar="REGEX", default=None,
              help="Subscribe by a whitelist (a Java regex over topic names) instead of TOPICS.")
@click.option("--property", "properties", metavar="KEY=VALUE", multiple=True,
              help="An old-consumer setting (repeatable), e.g. rebalance.backoff.ms=500; auto.commit.enable=true "
                   "and auto.commit.interval.ms=1000 unless given.")
@click.option("--log-records", is_flag=True, help="Also print a line per record consumed.")
@click.option("--zookeeper", envvar="ZKCOORD_ZOOKEEPER", show_envvar=True, required=True,
              help="ZooKeeper of the Kafka cluster (the old consumer finds the brokers there).")
def legacy(group: str, topics: tuple[str, ...], name: str, members: int, streams: int, whitelist: str | None,
           properties: tuple[str, ...], log_records: bool, zookeeper: str) -> None:
    """Run Kafka 1.1.1's old ZooKeeper consumer (ZookeeperConsumerConnector) in GROUP on TOPICS, in the
    foreground, printing its events as JSON lines (claim, release, commit, ...). SIGTERM or Ctrl-C stops it
    cleanly (it commits and leaves); kill -9 leaves its registration until its ZooKeeper session expires.
    What a live handover starts from (docs/handover.md)."""
    import os

    from zkcoord.local.legacy import LegacySettings, command, driver_classpath

    if not topics and whitelist is None:
        raise click.UsageError("give the TOPICS to consume, or --whitelist REGEX")
    if topics and whitelist is not None:
        raise click.UsageError(f"topics {', '.join(topics)} and --whitelist {whitelist!r}: give one")
    settings_given = {}
    for item in properties:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--property")
        settings_given[key.strip()] = value
    props = {"auto.commit.enable": "true", "auto.commit.interval.ms": "1000", **settings_given}
    try:
        settings = LegacySettings(zookeeper, group, topics[0] if topics else "_", members=members, prefix=name,
                                  log_records=log_records, properties=tuple(props.items()), streams=streams,
                                  whitelist=whitelist, topics=tuple(topics[1:]))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    classpath = driver_classpath(log=_log)
    argv = command(settings, classpath)
    sys.stdout.flush()
    os.execv(argv[0], argv)  # the JVM takes this process's place: signals reach it as they would the app
