"""A dead daemon's session ended by the daemon that probes it, on real ZooKeeper.

Each daemon probes the next live one's listener (zkcoord.core.peer_probe);
a port that refuses connections proves the process gone, and the prober
ends its ZooKeeper session with the id and password the dead daemon
recorded beside its registration (zkcoord.zk.nodes rule 5). The daemons
here run with a 60 s ZooKeeper session time-out, so that a registration
gone within the tests' waits (45 s) can only have been ended that way; a
daemon paused with SIGSTOP still accepts connections (its kernel queues
them) and must keep its session.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from tests.support.daemons import logged_fleet, wait_for
from tests.support.members import Ledger, Member, close_all, converge
from tests.support.placement import placed_name
from zkcoord.zk import paths
from zkcoord.zk.connection import end_session

pytestmark = pytest.mark.integration
SESSION_MS = 60_000  # the daemons' ZooKeeper session time-out: never reached by the waits below
WAIT_S = 45.0  # bound of every wait for a condition


@pytest.fixture
def fleet(zk_hosts, zk, tmp_path):
    with logged_fleet(zk_hosts, zk, tmp_path / "logs",
                      zk_session_timeout_ms=SESSION_MS, group_initial_rebalance_delay_ms=0) as fleet:
        yield fleet


def accept_queue(port: int) -> int:
    """Connections the kernel holds for the listener on ``port`` that its
    process has not accepted: the receive queues of every LISTEN socket on
    the port in /proc (the daemon's listener is several, zkcoord.wire.listening)."""
    queued, listening = 0, False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                listening = True
                queued += int(fields[4].split(":")[1], 16)  # tx_queue:rx_queue; a listener's rx: its accept queue
    if not listening:
        raise AssertionError(f"no listening socket on port {port}")
    return queued


def test_end_session_ends_a_live_session_and_says_when_it_had_expired(zk_hosts, zk):
    other = KazooClient(hosts=zk_hosts, timeout=SESSION_MS / 1000)
    other.start(timeout=30)
    states = []
    other.add_listener(states.append)
    try:
        other.create("/mine", b"x", ephemeral=True)
        session_id, password = other.client_id
        assert end_session(zk_hosts, session_id, password) is True
        assert zk.exists("/mine") is None  # its ephemeral znode went with it, at once
        wait_for(lambda: KazooState.LOST in states, WAIT_S, "the session's own client told it is lost")
        assert end_session(zk_hosts, session_id, password) is False  # already over: said so, nothing else ended
    finally:
        other.stop()
        other.close()


def test_kill_9_of_an_owner_ends_its_session_at_once_and_its_group_is_served_by_the_other(fleet, zk, unique_name):
    first, second = fleet.start_many(1, 2)
    group = placed_name(unique_name, "g", ([1, 2], 1), ([2], 2))

    # Each daemon records its session beside its registration (written just after it): the id is the
    # registration's owner.
    for daemon in (first, second):
        _, stat = zk.get(paths.node(daemon.node_id))
        wait_for(lambda: zk.exists(paths.node_session(daemon.node_id)) is not None, WAIT_S,
                 f"daemon {daemon.node_id}'s session record")
        record = json.loads(zk.get(paths.node_session(daemon.node_id))[0])
        assert int(record["session_id"], 16) == stat.ephemeralOwner
        assert len(bytes.fromhex(record["password"])) == 16

    async def scenario():
        member = Member("m", group, lambda: [first.address, second.address], Ledger())
        try:
            assert await converge([member]) == 1
            assert member.coordinator_id == 1
            first.kill()
            # 60 s before ZooKeeper would expire it, the prober ends the dead daemon's session ...
            wait_for(lambda: fleet.session_gone(1), WAIT_S, "daemon 1's registration gone")
            assert zk.exists(paths.node_session(1)) is None
            # The registration goes with the session's close; the daemon logs once the close returned.
            wait_for(lambda: "node 1: session ended" in second.log(200), WAIT_S, "daemon 2 says it ended the session")
            # ... and the group, taken over by daemon 2, goes on in its generation.
            assert await converge([member]) == 1
            assert member.coordinator_id == 2
        finally:
            await close_all([member])

    asyncio.run(scenario())


def test_a_paused_daemon_accepts_the_probes_and_keeps_its_session(fleet, zk):
    first, second = fleet.start_many(1, 2)
    prober, probed = first, second  # daemon 1 probes the next after it, 2 (and 2 probes 1)
    probed.pause()
    try:
        # Every probe of the paused daemon is accepted by its kernel and waits in its accept queue.
        wait_for(lambda: accept_queue(probed.port) >= 8, WAIT_S, f"8 probes queued at daemon {probed.node_id}")
        assert fleet.registration(probed.node_id) is not None
        assert "refused" not in prober.log(200)
    finally:
        probed.resume()
    wait_for(lambda: accept_queue(probed.port) == 0, WAIT_S, f"daemon {probed.node_id} accepted its queue")
    assert fleet.registration(probed.node_id)["pid"] == probed.pid
