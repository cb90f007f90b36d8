"""The error-reporting click group every zkcoord command group uses.

Owns turning a :class:`~zkcoord.errors.ZkcoordError` into one red line on
stderr and the error's exit code. Kept apart from :mod:`zkcoord.cli.main` so
command modules can import it without importing the whole CLI.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click
from rich.console import Console
from rich.text import Text

from zkcoord.errors import ZkcoordError
from zkcoord.zk.auth import ZkSecurity
from zkcoord.zk.connection import ZkConnection

T = TypeVar("T")

err_console = Console(stderr=True, highlight=False)


class ZkcoordGroup(click.Group):
    """A click group that reports ZkcoordError as a message and exit code."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except ZkcoordError as exc:
            err_console.print(Text.assemble(("error: ", "bold red"), str(exc)), soft_wrap=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            err_console.print("interrupted")
            sys.exit(130)


def run_with_zookeeper(zookeeper: str, timeout_ms: int, work: Callable[[ZkConnection], Awaitable[T]],
                       security: ZkSecurity | None = None) -> T:
    """Run ``work(conn)`` with a started ZooKeeper connection (logged in with
    ``security``), then stop it. A command: ZooKeeper refusing every
    connection is an error at once."""
    conn = ZkConnection(zookeeper, connect_timeout_ms=timeout_ms, request_timeout_ms=timeout_ms,
                        fail_when_refused=True, security=security)

    async def main() -> T:
        async with conn:
            return await work(conn)

    return asyncio.run(main())
