"""A group whose state would be over ``--max-group-state-bytes`` even packed:
nothing is written and the member is told GROUP_MAX_SIZE_REACHED, as Kafka
tells a member a group cannot take; the daemon serves the group's other
members and other groups on. A state over ``--max-state-bytes`` that fits
packed is written packed, and the group is served."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os

import pytest
from kafka.protocol.consumer.group import SyncGroupRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from tests.integration.test_daemon_protocol import E_MEMBER_ID_REQUIRED, E_NONE, daemon_config, join
from tests.support.wire import WireClient
from zkcoord.core.errors import ErrorCode
from zkcoord.server.daemon import Daemon

pytestmark = pytest.mark.integration


def test_an_oversized_group_state_answers_group_max_size_reached(zk_hosts, zk, unique_name):
    full, other, packed = unique_name("g"), unique_name("g"), unique_name("g")
    config = dataclasses.replace(daemon_config(zk_hosts, 1), max_state_bytes=1024, max_group_state_bytes=4096)

    async def member(client, group: str, metadata: bytes) -> list[int]:
        """The error codes a member meets joining and syncing: [join, sync]."""
        found = await client.call(FindCoordinatorRequest(version=3, key=group, key_type=0))
        assert found.error_code == E_NONE
        first = await client.call(join(group, protocols=(("range", metadata),)))
        assert first.error_code == E_MEMBER_ID_REQUIRED
        joined = await client.call(join(group, first.member_id, protocols=(("range", metadata),)))
        if joined.error_code != E_NONE:
            return [joined.error_code]
        synced = await client.call(SyncGroupRequest(
            version=3, group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
            group_instance_id=None, assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                member_id=joined.member_id, assignment=b"a")]))
        return [joined.error_code, synced.error_code]

    async def scenario():
        daemon = Daemon(config)
        running = await daemon.start()
        client = await WireClient.connect(*running.advertised, "c")
        try:
            noise = os.urandom(6000)  # incompressible: over 4,096 bytes packed too
            codes = await member(client, full, noise)
            assert codes[-1] == ErrorCode.GROUP_MAX_SIZE_REACHED
            assert all(code in (E_NONE, ErrorCode.GROUP_MAX_SIZE_REACHED) for code in codes)
            assert zk.exists(f"/coordinators/{full}/state-parts") is None or \
                zk.get_children(f"/coordinators/{full}/state-parts") == []
            assert await member(client, other, b"small") == [E_NONE, E_NONE]  # the daemon serves on
            # Over --max-state-bytes as one JSON znode, but it packs small: written packed, served.
            assert await member(client, packed, b"x" * 2000) == [E_NONE, E_NONE]
            header = json.loads(zk.get(f"/coordinators/{packed}/state")[0])
            assert (header["v"], header["s"], header["mc"]) == (2, "Stable", 1)
        finally:
            await client.close()
            await daemon.stop()

    asyncio.run(scenario())
