"""One answer everywhere to a group's election that holds no node id
(zkcoord.zk.election, rule 4): the daemon answers its clients
COORDINATOR_NOT_AVAILABLE, a migrate command exits with the error naming the
znode, inspection shows it; nobody writes the group."""

from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner
from kafka.protocol.metadata import FindCoordinatorRequest

from tests.integration.test_daemon_protocol import daemon_config
from tests.support.wire import WireClient
from zkcoord.cli.main import cli
from zkcoord.core.errors import ErrorCode
from zkcoord.errors import StateError
from zkcoord.server.daemon import Daemon
from zkcoord.zk.connection import ZkConnection
from zkcoord.zk.modes import set_offset_storage

pytestmark = pytest.mark.integration


def test_a_contender_without_a_node_id_gets_one_answer_everywhere(services, zk_hosts, zk, unique_name):
    group = unique_name("g")
    planted = f"/coordinators/{group}/owner/0123456789abcdef0123456789abcdef__lock__0000000000"

    async def find() -> int:
        daemon = Daemon(daemon_config(zk_hosts, 1))
        running = await daemon.start()  # on an empty chroot: it lays out zkcoord's znodes first
        zk.create(planted, b"not-an-id", makepath=True)
        zk.create(f"/coordinators/{group}/state", json.dumps({"v": 1, "s": "Empty", "g": 0}).encode())
        client = await WireClient.connect(*running.advertised, "c")
        try:
            return (await client.call(FindCoordinatorRequest(version=3, key=group, key_type=0))).error_code
        finally:
            await client.close()
            await daemon.stop()

    assert asyncio.run(find()) == ErrorCode.COORDINATOR_NOT_AVAILABLE

    async def switch() -> None:  # what every migrate command does to a group's mode
        conn = ZkConnection(zk_hosts)
        await asyncio.to_thread(conn.start)
        try:
            await set_offset_storage(conn, group, "dual", timeout_s=5)
        finally:
            await asyncio.to_thread(conn.stop)

    with pytest.raises(StateError, match="nobody can tell who owns") as refused:
        asyncio.run(switch())
    assert planted in str(refused.value)

    runner = CliRunner()
    env = {"COLUMNS": "300"}

    described = runner.invoke(cli, ["describe", group, "--state", "--zookeeper", zk_hosts], env=env)
    assert "Traceback" not in described.output
    assert planted in described.output
    assert json.loads(zk.get(f"/coordinators/{group}/state")[0]) == {"v": 1, "s": "Empty", "g": 0}
