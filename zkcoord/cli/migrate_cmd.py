"""``zkcoord migrate``: plan and carry out the move of legacy ZooKeeper
offsets into Kafka, and export / import legacy offsets in the formats users
already have.

* ``plan``   reads ZooKeeper and Kafka, decides per partition, prints the
  plan (table, json or csv) and its totals; changes nothing; exit 0.
* ``export`` writes the legacy offsets of groups as kafka-consumer-groups
  CSV or ExportZkOffsets lines.
* ``import`` reads such a file, checks every line, then writes the offsets
  into ZooKeeper's legacy layout (one multi-op per group); ``--dry-run``
  shows what would change.
* ``apply``, ``verify``, ``finalize``, ``rollback``, ``status``: the
  migration itself (:mod:`zkcoord.migrate.apply` and its siblings), group by
  group; exit 1 when a group could not be done, with the reason in its row.

Rendering lives here; the work is in :mod:`zkcoord.migrate`.
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import io
import json
import os
import sys
from datetime import datetime, timezone
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from zkcoord.cli.base import ZkcoordGroup, run_with_zookeeper as _run
from zkcoord.cli.kafka_login import kafka_login_options
from zkcoord.cli.render import echo_document, print_out
from zkcoord.cli.zk_login import zookeeper_login_options
from zkcoord.core.legacy_values import Unparsable, read_legacy_value, shown
from zkcoord.core.migration import Decision, Options, Plan, parse_legacy_offset
from zkcoord.errors import UsageError
from zkcoord.kafka.offsets import KafkaOffsets
from zkcoord.migrate import formats
from zkcoord.migrate.apply import Adapters, ApplyOptions, apply_groups, run_with_adapters
from zkcoord.migrate.finalize import finalize_groups
from zkcoord.migrate.rollback import rollback_groups
from zkcoord.migrate.status import group_status
from zkcoord.migrate.verify import verify_groups
from zkcoord.zk.legacy import LegacyOffsets
from zkcoord.migrate.plan import Selection, gather_plan, select_groups
from zkcoord.zk.connection import ZkConnection
from zkcoord.zk.paths import OffsetPaths

T = TypeVar("T")
PLAN_COLUMNS = ("group", "topic", "partition", "legacy", "kafka", "log_start", "log_end", "decision", "target",
                "note")


def _zookeeper_options(func):
    options = [
        click.option("--zookeeper", envvar="ZKCOORD_ZOOKEEPER", show_envvar=True, required=True,
                     help="ZooKeeper connection string HOST:PORT[,HOST:PORT...][/chroot]."),
        click.option("--zk-root", envvar="ZKCOORD_OFFSETS_ZK_ROOT", show_envvar=True, default="/consumers",
                     show_default=True, help="Root of the legacy offsets (/kafka/consumers for a chrooted layout)."),
        click.option("--timeout-ms", type=click.IntRange(1_000, 3_600_000), default=15_000, show_default=True,
                     help="How long to wait for ZooKeeper and Kafka."),
    ]
    func = zookeeper_login_options(func)  # innermost: listed after --zookeeper
    for option in reversed(options):
        func = option(func)
    return func


def _selection_options(func):
    options = [
        click.option("--group", "groups", multiple=True, metavar="G", help="A group (repeatable)."),
        click.option("--all", "all_groups", is_flag=True, help="Every group: under --zk-root (plan, apply, export); with a migration record (verify, finalize, rollback, status)."),
        click.option("--pattern", metavar="REGEX", help="Groups whose whole name matches REGEX."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _kafka_option(func):
    """--bootstrap-servers and its login (--command-config): the command gets ``kafka_security``."""
    func = kafka_login_options(func)
    return click.option("--bootstrap-servers", envvar="ZKCOORD_BOOTSTRAP_SERVERS", show_envvar=True, required=True,
                        help="Kafka brokers HOST:PORT[,HOST:PORT...].")(func)


@click.group(cls=ZkcoordGroup)
def migrate() -> None:
    """Move legacy ZooKeeper offsets into Kafka's __consumer_offsets."""


# ------------------------------------------------------------------ plan
@migrate.command()
@_selection_options
@_zookeeper_options
@_kafka_option
@click.option("--allow-rewind", is_flag=True, help="Plan to move Kafka back to older legacy offsets.")
@click.option("--force", is_flag=True, help="Plan the log end for legacy offsets beyond it.")
@click.option("--output", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
def plan(groups: tuple[str, ...], all_groups: bool, pattern: str | None, zookeeper: str, zk_root: str,
         timeout_ms: int, bootstrap_servers: str, allow_rewind: bool, force: bool, output: str, zk_security,
         kafka_security) -> None:
    """Show, per partition, what migrating the legacy offsets would do. Changes nothing.

    Decisions: copy, equal, kafka-ahead-kept (Kafka is never rewound without
    --allow-rewind: rewind), clamped-to-log-start, beyond-log-end-refused
    (--force: beyond-log-end-forced, commits the log end), topic-missing,
    partition-missing, unparsable.

    A group whose zkcoord state znode is corrupt is planned with a note
    naming the znode and what is wrong (apply refuses it); the exit code is
    1 only when every --group named is such a group.
    """
    selection = Selection(tuple(groups), all_groups, pattern)
    options = Options(allow_rewind=allow_rewind, force=force)
    OffsetPaths(zk_root)
    kafka = KafkaOffsets(bootstrap_servers, request_timeout_ms=timeout_ms, security=kafka_security)

    async def work(conn: ZkConnection) -> Plan:
        await asyncio.to_thread(kafka.start)
        try:
            return await gather_plan(LegacyOffsets(conn, zk_root), kafka, selection, options)
        finally:
            await asyncio.to_thread(kafka.close)

    result = _run(zookeeper, timeout_ms, work, zk_security)
    if output == "json":
        echo_document("migrate plan", _plan_dict(result, zookeeper, zk_root, bootstrap_servers))
    else:
        {"table": _print_table, "csv": _print_csv}[output](result, zk_root)
    if selection.groups and result.groups and all(g.activity.state_error for g in result.groups):
        sys.exit(1)  # every group asked for by name has a corrupt state: nothing it asked about is usable


def _row_values(row) -> dict[str, Any]:
    f, p = row.facts, row.plan
    return {"group": f.group, "topic": f.topic, "partition": f.partition, "legacy": f.legacy_raw,
            "kafka": f.kafka_offset, "log_start": f.log_start, "log_end": f.log_end,
            "decision": p.decision.value, "target": p.target_offset, "note": p.note}


def _decision_style(decision: Decision) -> str:
    if decision.flagged:
        return "yellow" if decision.writes else "red"
    return "green" if decision.writes else "dim"


def _totals_lines(result: Plan) -> list[str]:
    t = result.totals
    counts = ", ".join(f"{n} {d.value}" for d, n in t.by_decision.items() if n)
    active = f"; {t.active_groups} group(s) with active members" if t.active_groups else ""
    return [f"{t.groups} group(s), {t.partitions} partition(s)" + (f": {counts}" if counts else ""),
            f"{t.to_write} to write, {t.flagged} flagged{active}; nothing was changed"]


def _print_table(result: Plan, zk_root: str) -> None:
    out: list[RenderableType] = []
    table = _new_table(f"migration plan ({zk_root} -> Kafka)", ("GROUP", "TOPIC", "PARTITION", "LEGACY", "KAFKA",
                                                                 "LOG START", "LOG END", "DECISION", "TARGET", "NOTE"))
    for row in result.rows:
        values = _row_values(row)
        cells = [Text("-" if values[c] is None else str(values[c])) for c in PLAN_COLUMNS]
        cells[7].stylize(_decision_style(row.decision))
        table.add_row(*cells)
    if result.rows:
        out.append(table)
    elif not result.groups:
        out.append(Text(f"no group under {zk_root} is selected"))
    for group in result.groups:
        if not group.rows:
            out.append(Text(f"group {group.group}: no legacy offsets"))
        for note in group.notes:
            out.append(Text.assemble((f"group {group.group}: ", "bold"), note))
    print_out(*out, *(Text(line) for line in _totals_lines(result)))


def _plan_dict(result: Plan, zookeeper: str, zk_root: str, bootstrap_servers: str) -> dict[str, Any]:
    groups = []
    for g in result.groups:
        a = g.activity
        groups.append({
            "group": g.group, "kafka_state": a.kafka_state, "kafka_members": a.kafka_members,
            "zkcoord_members": a.zkcoord_members, "offset_storage": a.offset_storage,
            "legacy_consumers": a.legacy_consumers, "state_error": a.state_error, "active": a.active,
            "to_write": g.to_write,
            "flagged": g.flagged, "notes": list(g.notes),
            "partitions": [{k: v for k, v in _row_values(r).items() if k != "group"} for r in g.rows],
        })
    return {"zookeeper": zookeeper.strip(), "zk_root": zk_root, "bootstrap_servers": bootstrap_servers,
            "options": {"allow_rewind": result.options.allow_rewind, "force": result.options.force},
            "groups": groups, "totals": result.totals.as_dict()}


def _print_csv(result: Plan, zk_root: str) -> None:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(PLAN_COLUMNS)
    for row in result.rows:
        writer.writerow(["" if v is None else v for v in _row_values(row).values()])
    click.echo(out.getvalue(), nl=False)
    for line in _totals_lines(result):  # stdout stays one CSV table
        click.echo(line, err=True)


# ------------------------------------------------------------------ export
@migrate.command()
@_selection_options
@_zookeeper_options
@click.option("--format", "fmt", type=click.Choice(formats.FORMATS), default="csv", show_default=True,
              help="csv: kafka-consumer-groups --export; zk-lines: ExportZkOffsets.")
@click.option("--file", "file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write here instead of to stdout.")
def export(groups: tuple[str, ...], all_groups: bool, pattern: str | None, zookeeper: str, zk_root: str,
           timeout_ms: int, fmt: str, file: Path | None, zk_security) -> None:
    """Write legacy offsets as CSV or ExportZkOffsets lines.

    CSV has no group column when exactly one --group is given, as
    kafka-consumer-groups exports one group. Values that are not offsets are
    skipped and named on stderr.
    """
    selection = Selection(tuple(groups), all_groups, pattern)
    OffsetPaths(zk_root)

    async def work(conn: ZkConnection):
        legacy = LegacyOffsets(conn, zk_root)
        chosen = await select_groups(legacy, selection)
        return legacy, await legacy.read_groups(chosen)

    legacy, found = _run(zookeeper, timeout_ms, work, zk_security)
    offsets: formats.Offsets = {}
    for name, group in found.items():
        for (topic, partition), raw in sorted(group.offsets.items()):
            value = parse_legacy_offset(raw)
            if value is None:
                why = read_legacy_value(raw)
                what = f"unparsable ({why.reason})" if isinstance(why, Unparsable) else \
                    "no committed offset" if why == -1 else "negative, no position in any log"
                click.echo(f"skipped {legacy.partition_path(name, topic, partition)}: it holds {shown(raw)}, "
                           f"{what}", err=True)
                continue
            offsets.setdefault(name, {})[(topic, partition)] = value
    with_group = None if fmt != "csv" else len(groups) != 1
    text = formats.write_offsets(offsets, fmt, with_group=with_group, root=zk_root)
    count = sum(len(v) for v in offsets.values())
    if file is None:
        click.echo(text, nl=False)
    else:
        _write_file(file, text)
    click.echo(f"exported {count} offset(s) of {len(offsets)} group(s)" + (f" to {file}" if file else ""),
               err=True)


def _write_file(file: Path, text: str) -> None:
    try:
        file.write_text(text)
    except OSError as exc:
        raise UsageError(f"cannot write {file}: {exc.strerror or exc}") from None


# ------------------------------------------------------------------ import
@migrate.command(name="import")
@click.option("--file", "file", required=True, type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
              help="The offsets file ('-': stdin).")
@click.option("--format", "fmt", type=click.Choice(formats.FORMATS), default="csv", show_default=True)
@click.option("--group", default=None, metavar="G", help="The group of a topic,partition,offset CSV.")
@_zookeeper_options
@click.option("--dry-run", is_flag=True, help="Show what would be written; write nothing.")
def import_(file: Path, fmt: str, group: str | None, zookeeper: str, zk_root: str, timeout_ms: int,
            dry_run: bool, zk_security) -> None:
    """Write legacy offsets from a file into ZooKeeper.

    Every line is checked before anything is written. Each group's offsets
    are written in one ZooKeeper multi-op, as the plain decimal strings
    legacy consumers read.
    """
    OffsetPaths(zk_root)
    source = "stdin" if str(file) == "-" else str(file)
    offsets = formats.read_offsets(_read_file(file), fmt, group=group, root=zk_root, source=source)
    count = sum(len(v) for v in offsets.values())

    async def work(conn: ZkConnection):
        legacy = LegacyOffsets(conn, zk_root)
        if dry_run:
            return await legacy.read_groups(offsets)
        return await legacy.write(offsets)

    outcome = _run(zookeeper, timeout_ms, work, zk_security)
    if not dry_run:
        click.echo(f"wrote {count} offset(s) of {len(offsets)} group(s) under {zk_root}")
        return
    table = _new_table(f"import {source} into {zk_root} (dry run)", ("GROUP", "TOPIC", "PARTITION", "CURRENT", "NEW"))
    for name in sorted(offsets):
        current = outcome[name].offsets
        for (topic, partition), value in sorted(offsets[name].items()):
            now = current.get((topic, partition), "-")
            now = "-" if now is None else now if len(now) <= 40 else shown(now)  # a corrupt value, cut short
            cells = (name, topic, str(partition), now, str(value))
            table.add_row(*(Text(cell) for cell in cells))
    print_out(table, Text(f"dry run: would write {count} offset(s) of {len(offsets)} group(s); nothing was written"))


def _read_file(file: Path) -> str:
    try:
        data = sys.stdin.buffer.read() if str(file) == "-" else file.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {file}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{file} is not UTF-8 text ({exc})") from None


# ------------------------------------------------------------------ apply, verify, finalize, rollback, status
_output_option = click.option("--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
_backup_file_option = click.option(
    "--backup-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="Also append each backup / archive to this file, one JSON object per line.")


def _with_adapters(zookeeper: str, zk_root: str, timeout_ms: int, bootstrap_servers: str | None,
                   work: Callable[[Adapters], Awaitable[T]], writes: bool = True, security=None,
                   kafka_security=None) -> T:
    """Run ``work`` with started adapters (ZooKeeper logged in with
    ``security``, Kafka with ``kafka_security``); commands that write zkcoord
    znodes (``writes``) first make sure the ZooKeeper layout is current."""
    return run_with_adapters(zookeeper, bootstrap_servers, work, zk_root=zk_root, timeout_ms=timeout_ms,
                             ensure_layout=writes, fail_when_refused=True, security=security,
                             kafka_security=kafka_security)


def _json_lines_sink(file: Path | None):
    """A function appending one JSON line per call to ``file`` (checked now), or None."""
    if file is None:
        return None
    try:
        with file.open("a"):
            pass
    except OSError as exc:
        raise UsageError(f"cannot write --backup-file {file}: {exc.strerror or exc}") from None

    def sink(entry: dict) -> None:
        with file.open("a") as out:
            out.write(json.dumps(entry, separators=(",", ":")) + "\n")
            out.flush()
            os.fsync(out.fileno())

    return sink


def _new_table(title: str, columns: tuple[str, ...]) -> Table:
    table = Table(title=Text(title), title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _table(title: str, columns: tuple[str, ...], rows: list[tuple]) -> None:
    table = _new_table(title, columns)
    for row in rows:
        table.add_row(*(Text("-" if cell is None else str(cell)) for cell in row))
    print_out(table)


def _echo_groups(command: str, groups: list[dict[str, Any]], zookeeper: str, zk_root: str,
                 bootstrap_servers: str | None = None) -> None:
    """The JSON document of a per-group migrate command (see zkcoord.cli.render)."""
    context = {"zookeeper": zookeeper.strip(), "zk_root": zk_root}
    if command != "migrate status":
        context["bootstrap_servers"] = bootstrap_servers
    echo_document(command, {**context, "groups": groups})


def _finish(failed: int, what: str) -> None:
    if failed:
        click.echo(f"{failed} group(s) {what}", err=True)
        sys.exit(1)


@migrate.command()
@_selection_options
@_zookeeper_options
@_kafka_option
@click.option("--allow-rewind", is_flag=True, help="Move Kafka back to older legacy offsets.")
@click.option("--force", is_flag=True, help="Commit the log end for legacy offsets beyond it.")
@click.option("--allow-active-kafka-members", is_flag=True,
              help="Do not refuse groups that have members in Kafka's own coordinator.")
@_backup_file_option
@_output_option
def apply(groups, all_groups, pattern, zookeeper, zk_root, timeout_ms, bootstrap_servers, allow_rewind, force,
          allow_active_kafka_members, backup_file, output, zk_security, kafka_security) -> None:
    """Carry the plan out: per group back up, commit to Kafka, switch to dual.

    Resumable: a group continues from the phase a crash left it in; groups
    already in dual or kafka are left alone. Exit 1 if a group was refused
    or failed.
    """
    selection = Selection(tuple(groups), all_groups, pattern)
    options = ApplyOptions(allow_rewind, force, allow_active_kafka_members)
    sink = _json_lines_sink(backup_file)

    def progress(group: str, phase: str) -> None:
        click.echo(f"group {group}: {phase}", err=True)

    results = _with_adapters(zookeeper, zk_root, timeout_ms, bootstrap_servers,
                             lambda a: apply_groups(a, selection, options, on_step=progress, backup_sink=sink),
                             security=zk_security, kafka_security=kafka_security)
    if output == "json":
        _echo_groups("migrate apply", [dataclasses.asdict(r) for r in results], zookeeper, zk_root, bootstrap_servers)
    else:
        _table("migrate apply", ("GROUP", "OUTCOME", "PHASE", "COMMITTED", "SKIPPED", "MODE", "MESSAGE"),
               [(r.group, r.outcome, r.phase, len(r.committed), len(r.skipped),
                 f"{r.mode.before} -> {r.mode.after} ({r.mode.via})" if r.mode else None, r.message or None)
                for r in results])
        for r in results:
            for topic, partition, decision, note in r.skipped:
                click.echo(f"group {r.group}: {topic}-{partition} not migrated ({decision}): {note}")
    _finish(sum(not r.ok for r in results), "refused or failed")


@migrate.command()
@_selection_options
@_zookeeper_options
@_kafka_option
@_output_option
def verify(groups, all_groups, pattern, zookeeper, zk_root, timeout_ms, bootstrap_servers, output, zk_security,
           kafka_security) -> None:
    """List every partition where Kafka and ZooKeeper differ in migrated groups.

    Both directions: Kafka behind ZooKeeper, and ZooKeeper behind (or
    without) Kafka's offset (not looked for once a group is in kafka).
    --all and --pattern choose among migrated groups. The result is recorded
    (see migrate status). Exit 1 if any partition differs or a named group
    is not migrated.
    """
    selection = Selection(tuple(groups), all_groups, pattern)
    results = _with_adapters(zookeeper, zk_root, timeout_ms, bootstrap_servers,
                             lambda a: verify_groups(a, selection), security=zk_security,
                             kafka_security=kafka_security)
    if output == "json":
        _echo_groups("migrate verify", [dataclasses.asdict(r) for r in results], zookeeper, zk_root,
                     bootstrap_servers)
    else:
        _table("migrate verify", ("GROUP", "PHASE", "RESULT", "CHECKED", "NOTES"),
               [(r.group, r.phase, _verdict(r), r.checked, "; ".join(r.notes) or None) for r in results])
        behind = [(r.group, b.topic, b.partition, b.zookeeper, b.kafka) for r in results for b in r.behind]
        if behind:
            _table("Kafka behind ZooKeeper", ("GROUP", "TOPIC", "PARTITION", "ZOOKEEPER", "KAFKA"), behind)
        stale = [(r.group, b.topic, b.partition, b.zookeeper, b.kafka) for r in results for b in r.zookeeper_behind]
        if stale:
            _table("ZooKeeper behind Kafka", ("GROUP", "TOPIC", "PARTITION", "ZOOKEEPER", "KAFKA"), stale)
    _finish(sum(r.clean is not True for r in results), "not clean or not migrated")


def _verdict(result) -> str:
    if result.clean is None:
        return "not migrated"
    if result.clean:
        return "clean"
    parts = [f"{len(result.behind)} behind"] if result.behind else []
    if result.zookeeper_behind:
        parts.append(f"{len(result.zookeeper_behind)} zookeeper behind")
    return ", ".join(parts)


@migrate.command()
@_selection_options
@_zookeeper_options
@_kafka_option
@click.option("--delete-legacy", is_flag=True, help="Delete the legacy offset znodes once archived.")
@_backup_file_option
@_output_option
def finalize(groups, all_groups, pattern, zookeeper, zk_root, timeout_ms, bootstrap_servers, delete_legacy,
             backup_file, output, zk_security, kafka_security) -> None:
    """Move groups in dual whose verify is clean to kafka.

    Verifies first; archives the legacy offsets under
    /zkcoord/migrations/<group>/archive, and deletes them only with
    --delete-legacy. Exit 1 if a group could not be finalized.
    """
    selection = Selection(tuple(groups), all_groups, pattern)
    sink = _json_lines_sink(backup_file)
    results = _with_adapters(zookeeper, zk_root, timeout_ms, bootstrap_servers,
                             lambda a: finalize_groups(a, selection, delete_legacy=delete_legacy, archive_sink=sink),
                             security=zk_security, kafka_security=kafka_security)
    if output == "json":
        _echo_groups("migrate finalize", [dataclasses.asdict(r) for r in results], zookeeper, zk_root,
                     bootstrap_servers)
    else:
        _table("migrate finalize", ("GROUP", "OUTCOME", "PHASE", "ARCHIVED", "DELETED", "MESSAGE"),
               [(r.group, r.outcome, r.phase, r.archived, r.deleted, r.message or None) for r in results])
    _finish(sum(not r.ok for r in results), "not finalized")


@migrate.command()
@_selection_options
@_zookeeper_options
@_kafka_option
@click.option("--to-backup", is_flag=True, help="Restore the backup taken by apply instead of the max of both.")
@_output_option
def rollback(groups, all_groups, pattern, zookeeper, zk_root, timeout_ms, bootstrap_servers, to_backup,
             output, zk_security, kafka_security) -> None:
    """Return migrated groups to ZooKeeper offset storage.

    Copies Kafka's offsets into ZooKeeper where they are ahead (the max of
    both), or with --to-backup restores the backup of apply in both stores
    (a rewind: stop the consumers first).
    """
    selection = Selection(tuple(groups), all_groups, pattern)
    results = _with_adapters(zookeeper, zk_root, timeout_ms, bootstrap_servers,
                             lambda a: rollback_groups(a, selection, to_backup=to_backup), security=zk_security,
                             kafka_security=kafka_security)
    if output == "json":
        _echo_groups("migrate rollback", [dataclasses.asdict(r) for r in results], zookeeper, zk_root,
                     bootstrap_servers)
    else:
        _table("migrate rollback", ("GROUP", "OUTCOME", "PHASE", "ZK WRITTEN", "KAFKA RESTORED", "KAFKA DELETED",
                                    "MESSAGE"),
               [(r.group, r.outcome, r.phase, len(r.written), len(r.kafka_restored), len(r.kafka_deleted),
                 r.message or None) for r in results])
    _finish(sum(not r.ok for r in results), "not rolled back")


@migrate.command()
@_selection_options
@_zookeeper_options
@_output_option
def status(groups, all_groups, pattern, zookeeper, zk_root, timeout_ms, output, zk_security) -> None:
    """Each group's offset storage, migration phase, since when, and last verify.

    Without --group / --pattern: every group with a migration record.
    """
    selection = Selection(tuple(groups), all_groups or not (groups or pattern), pattern)

    async def work(adapters: Adapters):
        recorded = await adapters.store.list_groups()
        chosen = selection.choose(set(recorded) | set(groups), "/zkcoord/migrations")
        return await group_status(adapters.conn, adapters.store, chosen)

    found = _with_adapters(zookeeper, zk_root, timeout_ms, None, work, writes=False, security=zk_security)
    if output == "json":
        _echo_groups("migrate status", [s.as_dict() for s in found], zookeeper, zk_root)
        return
    if not found:
        click.echo("no migrated group")
        return
    _table("migration status", ("GROUP", "MODE", "PHASE", "SINCE", "LAST VERIFY"),
           [(s.group, s.mode, s.phase, _when(s.since_ms), _last_verify(s)) for s in found])


def _when(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _last_verify(s) -> str:
    if s.verify_at_ms is None:
        return "never"
    verdict = "clean" if s.verify_clean else f"{s.verify_behind} behind" + (
        f", {s.verify_zookeeper_behind} zookeeper behind" if s.verify_zookeeper_behind else "")
    return f"{verdict} ({_when(s.verify_at_ms)})"
