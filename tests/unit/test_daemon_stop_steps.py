"""A stop step that fails or runs out of time says why (zkcoord.server.daemon):
the warning names the cause, never an empty reason, and a release cut short
says how many groups were still held."""

from __future__ import annotations

import asyncio
import logging

from zkcoord.config import DaemonConfig
from zkcoord.server.daemon import Daemon


class _Manager:
    """What the stop asks of the manager when its release runs out of time."""

    def __init__(self, held: int) -> None:
        self.held = held

    def still_owned(self) -> int:
        return self.held


def _daemon(timeout_ms: int = 10) -> Daemon:
    return Daemon(DaemonConfig(zookeeper="127.0.0.1:2181", shutdown_timeout_ms=timeout_ms))  # no I/O until start()


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_release_that_runs_out_of_time_says_how_many_groups_were_still_held(caplog):
    daemon = _daemon(10)
    daemon.manager = _Manager(held=7)
    with caplog.at_level(logging.WARNING, logger="zkcoord.daemon"):
        done = asyncio.run(daemon._stop_step("release groups", lambda: asyncio.sleep(3600), 0.01))
    assert done is False
    assert _warnings(caplog) == [
        "shutdown: could not release groups: not done within 10 ms (--shutdown-timeout-ms); 7 groups still held: "
        "their election nodes go when the ZooKeeper session closes, and the other daemons take them over then"]


def test_any_step_that_runs_out_of_time_names_the_time_out(caplog):
    with caplog.at_level(logging.WARNING, logger="zkcoord.daemon"):
        asyncio.run(_daemon(10)._stop_step("close the listener", lambda: asyncio.sleep(3600), 0.01))
    assert _warnings(caplog) == ["shutdown: could not close the listener: not done within 10 ms "
                                 "(--shutdown-timeout-ms)"]


def test_a_failure_without_a_message_is_named_by_its_type(caplog):
    async def fails():
        raise ConnectionResetError()

    with caplog.at_level(logging.WARNING, logger="zkcoord.daemon"):
        assert asyncio.run(_daemon()._stop_step("unregister", fails, 5)) is False
    assert _warnings(caplog) == ["shutdown: could not unregister: ConnectionResetError()"]


def test_a_step_that_is_not_there_is_skipped_and_one_that_ends_is_done(caplog):
    daemon = _daemon()
    with caplog.at_level(logging.WARNING, logger="zkcoord.daemon"):
        assert asyncio.run(daemon._stop_step("close the gateway", None, 5)) is False
        assert asyncio.run(daemon._stop_step("release groups", lambda: asyncio.sleep(0), 5)) is True
    assert _warnings(caplog) == []
