"""A small seeded run of the wire fuzzer (``tests/support/fuzz_frames.py``;
the long run is ``bench/fuzz_daemon.py``) against a ``zkcoord run`` daemon
and its gateway, in front of the sandbox's ZooKeeper and broker.

The frames are the same on every run (fixed hypothesis seed). Whatever the
frames, the daemon must stay up, answer or close every one (no hang), log
no handler failure, and keep serving a canary member heartbeating on
another connection.
"""

from __future__ import annotations

import socket
import struct

import pytest
from kafka.protocol.api_header import RequestHeader
from kafka.protocol.metadata import ApiVersionsResponse

from tests.support.daemons import DaemonFleet
from tests.support.fuzz_frames import Canary, Sender, canary_group, run_fuzz, target_specs

pytestmark = pytest.mark.integration
SEED = 16016
DAEMON_FRAMES = 3000
GATEWAY_FRAMES = 1500


def assert_served(outcomes, daemon, canary) -> None:
    assert daemon.alive(), f"the daemon died; its log:\n{daemon.log()}"
    assert outcomes.hangs == [], outcomes.hangs[:5]
    assert outcomes.by_outcome.get("answered (another correlation id)", 0) == 0, outcomes.by_outcome
    lines = daemon.log_path.read_text().splitlines()
    failures = [i for i, line in enumerate(lines) if line.startswith("Traceback")]
    assert failures == [], "\n".join(lines[failures[0] - 2:failures[0] + 40])
    assert canary.failures == [], canary.failures[:5]


def test_fuzzed_frames_never_stop_the_daemon_or_its_gateway(services, zk_hosts, zk, tmp_path):
    with DaemonFleet(zk_hosts, zk, tmp_path / "daemons", options=dict(
            group_initial_rebalance_delay_ms=0, bootstrap_servers=services.bootstrap_servers,
            gateway_listen="127.0.0.1:0")) as fleet:
        daemon = fleet.start(1)
        canary = Canary(daemon.host, daemon.port, canary_group())
        canary.start_member()
        try:
            sender = Sender(daemon.host, daemon.port)
            outcomes = run_fuzz(sender, DAEMON_FRAMES, SEED, target_specs(gateway=False))
            sender.close()
            assert outcomes.sent == DAEMON_FRAMES
            assert_served(outcomes, daemon, canary)
            host, port = daemon.gateway
            sender = Sender(host, port)
            outcomes = run_fuzz(sender, GATEWAY_FRAMES, SEED + 1, target_specs(gateway=True))
            sender.close()
            assert outcomes.sent == GATEWAY_FRAMES
            assert_served(outcomes, daemon, canary)
        finally:
            canary.stop()


# -- what the fuzzer found, one regression test each ------------------------------------------------

def api_versions_frame(version: int, correlation_id: int) -> bytes:
    """An ApiVersions request header (v1) at ``version`` and an empty body, framed."""
    header = RequestHeader(request_api_key=18, request_api_version=version, correlation_id=correlation_id,
                           client_id="fuzz").encode(flexible=False)
    return struct.pack(">i", len(header)) + header


@pytest.mark.parametrize("version", [-1, -32768])
def test_an_api_versions_request_of_a_negative_version_gets_the_kip511_answer_from_the_gateway(
        services, zk_hosts, zk, tmp_path, version):
    """Found by the fuzzer: the gateway closed the connection (logging a
    traceback) where the daemon, like a Kafka broker, answers ApiVersions v0
    with UNSUPPORTED_VERSION and the APIs it serves."""
    with DaemonFleet(zk_hosts, zk, tmp_path / "daemons", options=dict(
            bootstrap_servers=services.bootstrap_servers, gateway_listen="127.0.0.1:0")) as fleet:
        daemon = fleet.start(1)
        for address in (daemon.address, daemon.gateway):  # the daemon answers; the gateway must too
            with socket.create_connection(address, timeout=30) as sock:
                sock.sendall(api_versions_frame(version, 7))
                answer = b""
                while len(answer) < 4 or len(answer) < 4 + struct.unpack(">i", answer[:4])[0]:
                    chunk = sock.recv(65536)
                    assert chunk, f"{address} (daemon at {daemon.address}) closed the connection instead of answering ApiVersions v{version}"
                    answer += chunk
            response = ApiVersionsResponse.decode(answer[8:], version=0)
            assert struct.unpack(">i", answer[4:8])[0] == 7
            assert response.error_code == 35  # UNSUPPORTED_VERSION
            assert {k.api_key for k in response.api_keys} >= {18, 11, 12}
