"""Printing the CLI's rich output (tables, notes) on stdout.

This module owns one rule every command's tables follow: on a terminal they
are printed as rich lays them out (folded to the terminal's width); anywhere
else (a pipe, a file, ``make demo | tee demo.log``, click's CliRunner) they
are printed at the width of the widest of them, without colour, so no row
and no line is ever wrapped: one table row is one line, as
kafka-consumer-groups prints it, and grep and awk see whole rows.

It also owns the one shape of every ``--output json`` document: a JSON
object whose first field is ``"schema": "zkcoord/<command>/v<N>"`` (within
a version fields are only added, never renamed or removed), then what the
command reports; a command that reports per group has them under
``"groups"``. The schema names are :data:`SCHEMAS`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import click
from rich.console import Console, RenderableType
from rich.measure import Measurement

from zkcoord.inspect.model import DESCRIBE_SCHEMA, GROUPS_SCHEMA

__all__ = ["SCHEMAS", "document", "echo_document", "print_out", "stdout_console"]

# every --output json document names one of these in its "schema"
SCHEMAS = {
    "describe": DESCRIBE_SCHEMA,  # their documents are zkcoord.inspect.model's reports
    "groups": GROUPS_SCHEMA,
    "consume": "zkcoord/consume/v1",  # one record per line
    "migrate plan": "zkcoord/migrate-plan/v1",
    "migrate apply": "zkcoord/migrate-apply/v1",
    "migrate verify": "zkcoord/migrate-verify/v1",
    "migrate finalize": "zkcoord/migrate-finalize/v1",
    "migrate rollback": "zkcoord/migrate-rollback/v1",
    "migrate status": "zkcoord/migrate-status/v1",
    "migrate layout status": "zkcoord/migrate-layout-status/v1",
    "migrate run-job": "zkcoord/migrate-run-job/v1",
    "zookeeper-acl": "zkcoord/zookeeper-acl/v1",
}

_MIN_WIDTH = 80
_UNBOUNDED = 1_000_000


def stdout_console() -> Console:
    """A console on the current stdout (what click's CliRunner swaps in, too)."""
    return Console(highlight=False)


def print_out(*renderables: RenderableType, console: Console | None = None) -> None:
    """Print ``renderables`` on stdout: as they are on a terminal, else unwrapped."""
    if not renderables:
        return  # not even an empty line
    console = console or stdout_console()
    if console.is_terminal:
        for renderable in renderables:
            console.print(renderable)
        return
    unbounded = console.options.update_width(_UNBOUNDED)
    widths = [Measurement.get(console, unbounded, r).maximum for r in renderables]
    wide = Console(highlight=False, width=max([_MIN_WIDTH, *widths]), no_color=True)
    with wide.capture() as captured:
        for renderable in renderables:
            wide.print(renderable)
    click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


def document(command: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """``{"schema": <the command's schema>, **fields}``."""
    return {"schema": SCHEMAS[command], **fields}


def echo_document(command: str, fields: Mapping[str, Any], *, indent: int | None = 2) -> None:
    """Print the command's ``--output json`` document on stdout (dataclasses as objects)."""
    separators = None if indent else (",", ":")
    click.echo(json.dumps(document(command, fields), indent=indent, separators=separators, default=_jsonable))


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
