"""``zkcoord groups`` and ``zkcoord describe``: inspection on the command line.

* ``groups``   every group zkcoord knows (state znodes), every legacy group
  (under ``--zk-root``) and, with ``--bootstrap-servers``, every group Kafka
  knows: name, type (Kafka 4.x's ``--list --type``), state, owner daemon,
  members, storage mode, source.
* ``describe`` the three views of ``kafka-consumer-groups --describe``
  (``--offsets``, the default; ``--members``; ``--state``) plus what only
  zkcoord knows: owner daemon, generation, storage mode, both stores side by
  side during dual-commit, the migration phase. A KIP-848 consumer group is
  shown as Kafka 4.x's tool shows it: group and target assignment epochs,
  assignor, each member's type, epoch, current and target assignment.

Both read ZooKeeper directly (so they work with every daemon down, and say
so), print tables or JSON (the schema is in :mod:`zkcoord.inspect.model`),
and with ``--watch`` refresh in place. Exit codes: 0; 1 a named group is
unknown, or every named group's state znode is corrupt (a corrupt group is
listed by ``groups`` as state Corrupt and reported by ``describe``, and the
others are still shown: exit 0); 2 ZooKeeper cannot be reached, a bad
option, or a daemon or Kafka refused the login. ``--command-config`` (Kafka
client properties) logs in to the brokers and to the owner daemons alike.
The work is in :mod:`zkcoord.inspect`; rendering lives here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from zkcoord.cli.kafka_login import kafka_login_options
from zkcoord.cli.render import document as document_of, print_out, stdout_console
from zkcoord.cli.zk_login import zookeeper_login_options
from zkcoord.core.groups import KINDS
from zkcoord.core.membership import OFFSET_STORAGES
from zkcoord.errors import UsageError, ZkcoordError
from zkcoord.inspect import Inspector, select
from zkcoord.inspect.gather import NO_KAFKA
from zkcoord.inspect.model import DescribeReport, GroupsReport, GroupView
from zkcoord.kafka.offsets import KafkaOffsets
from zkcoord.zk.auth import ZkSecurity
from zkcoord.zk.connection import ZkConnection
from zkcoord.zk.paths import OffsetPaths

R = TypeVar("R", DescribeReport, GroupsReport)
STATES = {s.lower(): s for kind in KINDS for s in kind.state_names}  # every group type's states
TYPES = tuple(kind.name for kind in KINDS)  # classic, consumer
TYPE_NAMES = {"classic": "Classic", "consumer": "Consumer"}  # as Kafka 4.x's tools print a group type


# ------------------------------------------------------------------ options
def _common_options(func):
    options = [
        click.option("--zookeeper", envvar="ZKCOORD_ZOOKEEPER", show_envvar=True, required=True,
                     help="ZooKeeper connection string HOST:PORT[,HOST:PORT...][/chroot]."),
        click.option("--zk-root", envvar="ZKCOORD_OFFSETS_ZK_ROOT", show_envvar=True, default="/consumers",
                     show_default=True, help="Root of the legacy offsets (/kafka/consumers for a chrooted layout)."),
        click.option("--bootstrap-servers", envvar="ZKCOORD_BOOTSTRAP_SERVERS", show_envvar=True, default=None,
                     help="Kafka brokers HOST:PORT[,...]: log end offsets, lag, Kafka's offsets and groups."),
        click.option("--timeout-ms", type=click.IntRange(1_000, 3_600_000), default=15_000, show_default=True,
                     help="How long to wait for ZooKeeper and Kafka."),
        click.option("--output", type=click.Choice(["table", "json"]), default="table", show_default=True),
        click.option("--watch", is_flag=True, help="Refresh in place until Ctrl-C (JSON: one document per line)."),
        click.option("--interval", type=click.FloatRange(0.2, 3600), default=2.0, show_default=True,
                     help="Seconds between refreshes with --watch."),
        click.option("--count", type=click.IntRange(1), default=None,
                     help="With --watch: stop after this many refreshes."),
    ]
    func = zookeeper_login_options(kafka_login_options(func))  # innermost: listed after the others
    for option in reversed(options):
        func = option(func)
    return func


@dataclass(frozen=True)
class _Target:
    zookeeper: str
    zk_root: str
    bootstrap_servers: str | None
    timeout_ms: int
    output: str
    watch: bool
    interval: float
    count: int | None
    security: ZkSecurity | None = None  # the ZooKeeper login
    kafka_security: Any = None  # KafkaClientSecurity: the login to the brokers and the daemons


def _target(**kw: Any) -> _Target:
    OffsetPaths(kw["zk_root"])  # ConfigError before any I/O
    return _Target(kw["zookeeper"], kw["zk_root"], kw["bootstrap_servers"] or None, kw["timeout_ms"],
                   kw["output"], kw["watch"], kw["interval"], kw["count"], kw["zk_security"], kw["kafka_security"])


# ------------------------------------------------------------------ groups
@click.command()
@click.option("--state", "states", multiple=True, metavar="STATE",
              help="Only groups in this state (repeatable or comma-separated; any case).")
@click.option("--mode", "modes", multiple=True, type=click.Choice(OFFSET_STORAGES),
              help="Only groups with this offset storage (repeatable).")
@click.option("--type", "types", multiple=True, type=click.Choice(TYPES, case_sensitive=False),
              help="Only groups of this type (repeatable): classic, or consumer (KIP-848).")
@_common_options
def groups(states: tuple[str, ...], modes: tuple[str, ...], types: tuple[str, ...], **options: Any) -> None:
    """List consumer groups: zkcoord's, legacy ones and (with --bootstrap-servers) Kafka's.

    Columns: GROUP, TYPE (Classic, or Consumer: a KIP-848 consumer group;
    "-" for legacy groups and groups only Kafka knows), STATE, OWNER (the
    daemon coordinating it), MEMBERS, STORAGE (where its offsets are:
    zookeeper, dual, kafka) and SOURCE (who uses it: zkcoord, a state znode;
    legacy, old ZooKeeper consumers registered under --zk-root, or offsets
    there and no zkcoord state; kafka, members in Kafka's own coordinator,
    or offsets in Kafka zkcoord did not write). States of zkcoord groups are
    as last stored in ZooKeeper. HANDOVER is added when a listed group is
    "mixed": legacy consumers registered under --zk-root beside zkcoord's
    members (a live handover, docs/handover.md).
    """
    wanted = _parse_states(states)
    kinds = tuple(dict.fromkeys(t.lower() for t in types))
    target = _target(**options)

    async def report(inspector: Inspector) -> GroupsReport:
        found = await inspector.groups()
        return GroupsReport(found.zookeeper, found.zk_root, found.bootstrap_servers, found.daemons,
                            select(found.groups, wanted, modes, kinds), found.notes)

    title = ("zkcoord groups" + "".join(f" --state {s}" for s in wanted) + "".join(f" --mode {m}" for m in modes)
             + "".join(f" --type {t}" for t in kinds))
    _execute(target, report, _groups_table, title, "groups")


def _parse_states(states: tuple[str, ...]) -> tuple[str, ...]:
    found = []
    for item in (s.strip() for value in states for s in value.split(",")):
        if item.lower() not in STATES:
            raise UsageError(f"--state {item!r} is not a group state; use one of {', '.join(STATES.values())}")
        found.append(STATES[item.lower()])
    return tuple(found)


def _groups_table(report: GroupsReport) -> list[RenderableType]:
    out: list[RenderableType] = [_note(n) for n in report.notes]
    if not report.groups:
        return out + [Text("no consumer groups found")]
    handovers = any(g.handover for g in report.groups)  # the column only when a group is in one
    table = _table("GROUP", "TYPE", "STATE", "OWNER", "MEMBERS", "STORAGE", "SOURCE",
                   *(["HANDOVER"] if handovers else []))
    for g in report.groups:
        owner = "-" if g.owner is None else g.owner.label()
        table.add_row(g.group, _type_name(g.group_type), _state_text(g.state), owner, _cell(g.members),
                      _cell(g.storage), "+".join(g.sources), *([_cell(g.handover)] if handovers else []))
    return out + [table] + [_error(f"group {g.group}: {g.error}") for g in report.groups if g.error]


# ------------------------------------------------------------------ describe
@click.command()
@click.argument("group_ids", nargs=-1, metavar="GROUP...")
@click.option("--all-groups", is_flag=True, help="Describe every group `zkcoord groups` lists.")
@click.option("--offsets", "offsets_view", is_flag=True, help="Per partition offsets, log end, lag, owner (default).")
@click.option("--members", "members_view", is_flag=True,
              help="Per member: id, host, client, #partitions (consumer groups: and member type).")
@click.option("--state", "state_view", is_flag=True,
              help="Coordinator, strategy, state, #members, generation (consumer groups: group and target epochs).")
@click.option("--verbose", is_flag=True, help="Members: the assignment (consumer groups: epochs, current and target "
                                               "assignments). Offsets: both stores. State: more columns.")
@_common_options
def describe(group_ids: tuple[str, ...], all_groups: bool, offsets_view: bool, members_view: bool,
             state_view: bool, verbose: bool, **options: Any) -> None:
    """Describe consumer groups as kafka-consumer-groups --describe does, plus
    zkcoord's owner daemon, generation, storage mode and, during dual-commit,
    the ZooKeeper and Kafka offsets side by side.

    A KIP-848 consumer group shows its type, group and target assignment
    epochs and assignor, and per member its type (Consumer, or Classic for
    a classic-protocol member in a mixed group), epoch, current and target
    assignment, as Kafka 4.x's kafka-consumer-groups does.

    Reads ZooKeeper directly (and the owner daemon when it answers), so it
    works with every daemon down. A group with registrations under
    <zk-root>/<group>/ids gets a section of its legacy rebalance: each
    registered consumer id, legacy or zkcoord member, its subscription
    (topic or regex:streams) and the partitions its owner znodes hold, then
    those of the subscribed topics nobody holds. LOG-END-OFFSET and LAG need
    --bootstrap-servers. A partition with a committed offset and no owner
    shows "-" as its consumer. A named group that exists nowhere is an
    error line on stderr ("Consumer group 'x' does not exist (...)", as
    kafka-consumer-groups says it) and exit 1 (that tool exits 0: a script
    could not tell). Exit 1 too if every named group's state znode is corrupt;
    a corrupt group among others (or with --all-groups) is reported and the
    rest described, exit 0.
    """
    if sum((offsets_view, members_view, state_view)) > 1:
        raise UsageError("--offsets, --members and --state are different views: give at most one")
    if bool(group_ids) == all_groups:
        raise UsageError("name the groups to describe (GROUP...) or give --all-groups, not both")
    view = "members" if members_view else "state" if state_view else "offsets"
    target = _target(**options)

    async def report(inspector: Inspector) -> DescribeReport:
        names = list(group_ids) or [g.group for g in (await inspector.groups()).groups]
        return dataclasses.replace(await inspector.describe(names), listed=all_groups)

    title = "zkcoord describe " + (" ".join(group_ids) or "--all-groups") + f" --{view}"
    _execute(target, report, lambda r: _describe_tables(r, view, verbose), title, "describe")


def _describe_tables(report: DescribeReport, view: str, verbose: bool) -> list[RenderableType]:
    kafka_matters = view == "offsets" and bool(report.groups)  # log ends of the groups shown
    out: list[RenderableType] = [_note(n) for n in report.notes if kafka_matters or n != NO_KAFKA]
    if view == "state":
        return out + _state_view(report.groups, verbose)
    for g in report.groups:
        out.append(Text(""))
        out.append(_heading(g))
        out += [_note(n, indent=True) for n in g.notes]
        out.append(_members_table(g, verbose) if view == "members" else _offsets_table(g, verbose))
        out += _legacy_rebalance(g)
    return out


def _heading(g: GroupView) -> Text:
    parts = [g.state]
    if g.group_type == "consumer":
        parts.append("type consumer" + (" (mixed: classic and consumer members)" if g.mixed else ""))
        parts += [f"group epoch {g.group_epoch}", f"assignment epoch {g.assignment_epoch}",
                  f"assignor {g.assignment_strategy or '-'}"]
    if g.generation is not None:
        parts.append(f"generation {g.generation}")
    parts.append(f"storage {g.storage}")
    if g.coordinator is not None:
        parts.append(f"coordinator {g.coordinator.label()}")
    if g.migration is not None:
        parts.append(f"migration phase {g.migration.phase}")
    parts.append({"daemon": "live from the owner", "zookeeper": "read from ZooKeeper",
                  "kafka": "from Kafka"}.get(g.read_from, g.read_from))
    return Text.assemble((f"Consumer group {g.group!r}", "bold"), ": " + ", ".join(parts))


def _offsets_table(g: GroupView, verbose: bool) -> Table:
    both = verbose or g.storage == "dual"
    columns = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET"]
    columns += ["ZK-OFFSET", "KAFKA-OFFSET"] if both else []
    table = _table(*columns, "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID")
    for row in g.offsets:
        cells = [g.group, row.topic, str(row.partition), _cell(row.current_offset)]
        stores = [_cell(row.zookeeper_offset), _cell(row.kafka_offset)] if both else []
        cells += stores + [_cell(row.log_end_offset), _cell(row.lag), _cell(row.member_id), _cell(row.host),
                           _cell(row.client_id)]
        style = "yellow" if both and row.zookeeper_offset != row.kafka_offset else ""
        table.add_row(*cells, style=style)
    return table


def _members_table(g: GroupView, verbose: bool) -> Table:
    if g.group_type == "consumer":
        return _consumer_members_table(g, verbose)
    columns = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    table = _table(*columns, *(["ASSIGNMENT"] if verbose else []))
    for m in g.members:
        cells = [g.group, m.member_id, _cell(m.group_instance_id), _cell(m.host), _cell(m.client_id),
                 _cell(m.partitions)]
        if verbose:
            cells.append(_assignment(m.assignment))
        table.add_row(*cells)
    return table


def _consumer_members_table(g: GroupView, verbose: bool) -> Table:
    """Kafka 4.x's ``--describe --members [--verbose]`` of a consumer group, plus MEMBER-TYPE (what its
    UPGRADED column says of a mixed group: Consumer is ``true``, Classic ``false``), always shown."""
    columns = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-TYPE"]
    verbose_columns = ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
    table = _table(*columns, *(verbose_columns if verbose else []))
    for m in g.members:
        cells = [g.group, m.member_id, _cell(m.group_instance_id), _cell(m.host), _cell(m.client_id),
                 _cell(m.partitions), _type_name(m.member_type)]
        if verbose:
            cells += [_cell(m.member_epoch), _assignment4(m.assignment), _cell(g.assignment_epoch),
                      _assignment4(m.target_assignment)]
        table.add_row(*cells)
    return table


def _legacy_rebalance(g: GroupView) -> list[RenderableType]:
    """The registrations under ``<root>/<group>/ids``: each one's kind, subscription and owner znodes,
    then the partitions nobody owns and why a registration cannot be read."""
    section = g.legacy_rebalance
    if section is None:
        return []
    table = _table("GROUP", "CONSUMER-ID", "KIND", "PATTERN", "SUBSCRIPTION", "OWNED", "MEMBER")
    for c in section.consumers:
        table.add_row(g.group, c.consumer_id, c.kind, _cell(c.pattern), c.subscription_label(), _assignment(c.owned),
                      _cell(c.member))
    notes = [f"partitions of subscribed topics no owner znode holds: {_assignment(section.unowned)}"] \
        if section.unowned else []
    notes += [f"{_assignment(owned)} held by thread {thread}, of no registered consumer"
              for thread, owned in section.other_owners]
    notes += [f"consumer {c.consumer_id}: {c.problem}" for c in section.consumers if c.problem]
    heading = Text.assemble(("Legacy rebalance", "bold"), f" under {section.ids_dir}: {section.summary()}")
    return [heading, table, *(_note(n, indent=True) for n in notes)]


def _assignment(assignment) -> str:
    """kafka-consumer-groups' form: ``a(0,1),b(2)``; ``-`` for none or unknown."""
    if not assignment:
        return "-"
    return ",".join(f"{topic}({','.join(str(p) for p in ps)})" for topic, ps in assignment)


def _assignment4(assignment) -> str:
    """Kafka 4.x's kafka-consumer-groups form: ``a:0,1;b:2``; ``-`` for none or unknown."""
    if not assignment:
        return "-"
    return ";".join(f"{topic}:{','.join(str(p) for p in ps)}" for topic, ps in assignment)


def _type_name(group_type: str | None) -> str:
    return TYPE_NAMES.get(group_type or "", _cell(group_type))


def _state_view(views: tuple[GroupView, ...], verbose: bool) -> list[RenderableType]:
    """One table of every group; with a consumer group among them, its type and epochs too."""
    consumers = any(g.group_type == "consumer" for g in views)
    columns = ["GROUP", *(["TYPE"] if consumers else []), "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE",
               "#MEMBERS", "GENERATION", *(["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"] if consumers else []),
               "STORAGE", "MIGRATION"]
    table = _table(*columns, *(["PROTOCOL-TYPE", "READ-FROM"] if verbose else []))
    notes: list[RenderableType] = []
    for g in views:
        coordinator = "-" if g.coordinator is None else g.coordinator.label()
        cells = [g.group, *([_type_name(g.group_type)] if consumers else []), coordinator,
                 _cell(g.assignment_strategy), _state_text(g.state), str(len(g.members)), _cell(g.generation),
                 *([_cell(g.group_epoch), _cell(g.assignment_epoch)] if consumers else []), g.storage,
                 "-" if g.migration is None else g.migration.phase]
        table.add_row(*cells, *([_cell(g.protocol_type), g.read_from] if verbose else []))
        notes += [_note(f"{g.group}: {n}") for n in g.notes]
        if g.legacy_rebalance is not None:
            notes.append(_note(f"{g.group}: legacy rebalance: {g.legacy_rebalance.summary()}; "
                               "--offsets or --members shows it"))
    return ([table] if views else []) + notes


# ------------------------------------------------------------------ rendering helpers
def _table(*columns: str) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _cell(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def _state_text(state: str) -> Text:
    colour = {"Stable": "green", "Empty": "dim", "Dead": "red", "Corrupt": "bold red"}.get(state, "yellow")
    return Text(state, style=colour)


def _note(text: str, indent: bool = False) -> Text:
    return Text.assemble(("  " if indent else "") + "note: ", Text(text, style="yellow"))


def _error(message: str) -> Text:
    return Text.assemble(("error: ", "bold red"), message)


def _error_lines(report: DescribeReport | GroupsReport) -> list[str]:
    return [e.message for e in getattr(report, "errors", ())]


# ------------------------------------------------------------------ running
def _execute(target: _Target, report: Callable[[Inspector], Awaitable[R]],
             tables: Callable[[R], list[RenderableType]], title: str, command: str) -> None:
    kafka = KafkaOffsets(target.bootstrap_servers, request_timeout_ms=target.timeout_ms, client_id="zkcoord-inspect",
                         security=target.kafka_security) if target.bootstrap_servers else None
    conn = ZkConnection(target.zookeeper, connect_timeout_ms=target.timeout_ms, request_timeout_ms=target.timeout_ms,
                        fail_when_refused=True, security=target.security)

    async def main() -> int:
        async with conn:
            inspector = Inspector(conn, zk_root=target.zk_root, kafka=kafka,
                                  live_timeout_s=min(3.0, target.timeout_ms / 1000), security=target.kafka_security)
            try:
                if target.watch:
                    return await _watch(target, lambda: report(inspector), tables, title, command)
                return _emit(target, await report(inspector), tables)
            finally:
                if kafka is not None:
                    await asyncio.to_thread(kafka.close)

    try:
        code = asyncio.run(main())
    except KeyboardInterrupt:
        if not target.watch:
            raise
        code = 0  # Ctrl-C is how a watch ends
    if code:
        sys.exit(code)


def _emit(target: _Target, report: R, tables: Callable[[R], list[RenderableType]]) -> int:
    if target.output == "json":
        click.echo(json.dumps(report.as_dict(), indent=2))
    else:
        print_out(*tables(report))
    errors = Console(stderr=True, highlight=False, soft_wrap=True)
    for message in _error_lines(report):
        errors.print(_error(message))
    return getattr(report, "exit_code", 0)


async def _watch(target: _Target, report: Callable[[], Awaitable[R]],
                 tables: Callable[[R], list[RenderableType]], title: str, command: str) -> int:
    """Refresh every ``interval`` s: in place on a terminal, one snapshot after
    another elsewhere, one JSON document per line with --output json. A
    refresh that fails shows its error and the watch goes on."""
    console = stdout_console()
    live = Live(console=console, auto_refresh=False) if target.output == "table" and console.is_terminal else None
    code, done = 0, 0
    with live if live is not None else contextlib.nullcontext():
        while target.count is None or done < target.count:
            found, failure = None, None
            try:
                found = await report()
                code = getattr(found, "exit_code", 0)
            except ZkcoordError as exc:
                failure, code = str(exc), exc.exit_code
            done += 1
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            if target.output == "json":
                document = document_of(command, {"error": failure}) if found is None else found.as_dict()
                click.echo(json.dumps(dict(document, at=stamp), separators=(",", ":")))
            else:
                header = Text.assemble((f"Every {target.interval:g}s: {title}", "bold"), f"    {stamp}")
                body = [_error(failure + " (retrying)")] if found is None else tables(found) + [
                    _error(m) for m in _error_lines(found)]
                if live is not None:
                    live.update(Group(header, *body), refresh=True)
                else:
                    print_out(header, *body, Text(""), console=console)
            if target.count is None or done < target.count:
                await asyncio.sleep(target.interval)
    return code
