"""The workers of ``zkcoord run --workers N``: their ports (zkcoord.core.workers),
the settings, the supervisor's sum of their metrics (zkcoord.server.worker_metrics),
and the gateway's kernel path for long answers (zkcoord.gateway.splice) on
real loopback sockets."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from tests.support.ports import foreign_listener
from zkcoord.config import DaemonConfig
from zkcoord.core.workers import WorkerPlan, highest_port, worker_count
from zkcoord.errors import ConfigError
from zkcoord.gateway.gateway import GatewaySettings
from zkcoord.gateway.splice import Splicer, splice_available
from zkcoord.server.worker_metrics import relabel


def test_worker_k_has_the_shared_port_plus_k_and_its_gateway_port_after_the_brokers():
    plan = WorkerPlan(2, 3, listen_port=9300, gateway_port=9400, broker_span=32)
    assert plan.own_port(9300) == 9302
    assert plan.own_gateway_port(9400) == 9400 + 32 + 2  # brokers 0-31 on 9401..9432
    assert plan.own_port(0) == 0 and plan.own_gateway_port(0) == 0  # the kernel picks
    assert highest_port(9300, 3) == 9303 and highest_port(9400, 3, 32) == 9435


def test_workers_are_numbered_from_one_and_default_to_one_per_core():
    with pytest.raises(ValueError):
        WorkerPlan(0, 2)
    with pytest.raises(ValueError):
        WorkerPlan(3, 2)
    assert worker_count(0, 8) == 8 and worker_count(3, 8) == 3 and worker_count(0, 0) == 1


def test_the_workers_setting_is_checked_and_their_ports_must_fit():
    assert DaemonConfig(zookeeper="zk:2181", workers=4).worker_count == 4
    with pytest.raises(ConfigError, match="workers=-1 is out of range"):
        DaemonConfig(zookeeper="zk:2181", workers=-1)
    config = DaemonConfig(zookeeper="zk:2181", listen="127.0.0.1:65534")
    with pytest.raises(ConfigError, match="listen port 65534 leaves no room for the own ports of 2 workers"):
        config.check_worker_ports(2)
    config.check_worker_ports(1)  # one worker: no own ports


def test_a_worker_advertises_its_own_port_from_the_advertised_one():
    config = DaemonConfig(zookeeper="zk:2181", listen="0.0.0.0:9300", advertised="coord-1.example:19300")
    assert config.advertised_address(9302, WorkerPlan(2, 2, 9300)) == ("coord-1.example", 19302)
    kernel = DaemonConfig(zookeeper="zk:2181", listen="0.0.0.0:0", advertised="coord-1.example:19300")
    assert kernel.advertised_address(41234, WorkerPlan(2, 2, 40000)) == ("coord-1.example", 41234)


def test_a_workers_gateway_shares_the_configured_ports_and_registers_its_own():
    config = DaemonConfig(zookeeper="zk:2181", bootstrap_servers="k:9092", gateway_listen="0.0.0.0:9400",
                          gateway_advertised="gw.example", gateway_broker_ids="1-3")
    settings = GatewaySettings.from_config(config, worker=WorkerPlan(1, 2, 9300, 9400, 3))
    assert (settings.listen_port, settings.worker_port, settings.worker_advertised_port) == (9400, 9404, 9404)
    assert not settings.picks_ports
    kernel = DaemonConfig(zookeeper="zk:2181", bootstrap_servers="k:9092", gateway_listen="127.0.0.1:0")
    settings = GatewaySettings.from_config(kernel, worker=WorkerPlan(2, 2, 9300, 41000, 32))
    assert (settings.listen_port, settings.worker_port, settings.picks_ports) == (41000, 0, True)


def test_the_supervisor_labels_each_workers_samples_and_keeps_one_help_per_family():
    families: dict = {}
    relabel('# HELP a_total A.\n# TYPE a_total counter\na_total{api="Heartbeat",error="NONE"} 3.0\n'
            '# HELP b B.\n# TYPE b gauge\nb 1.0\n', 1, families)
    relabel('# HELP a_total A.\n# TYPE a_total counter\na_total{api="Heartbeat",error="NONE"} 4.0\n'
            '# HELP b B.\n# TYPE b gauge\nb 0.0\n', 2, families)
    assert families["a_total"] == ({"HELP": "# HELP a_total A.", "TYPE": "# TYPE a_total counter"},
                                   ['a_total{worker="1",api="Heartbeat",error="NONE"} 3.0',
                                    'a_total{worker="2",api="Heartbeat",error="NONE"} 4.0'])
    assert families["b"][1] == ['b{worker="1"} 1.0', 'b{worker="2"} 0.0']


class _Sink(asyncio.Protocol):
    def __init__(self) -> None:
        self.data = bytearray()
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.data += data


async def _pair(loop) -> tuple[_Sink, _Sink]:
    """A loopback TCP connection: (client side, server side) protocols."""
    accepted: asyncio.Future = loop.create_future()

    def server_side():
        sink = _Sink()
        loop.call_soon(lambda: accepted.done() or accepted.set_result(sink))
        return sink

    server = await loop.create_server(server_side, "127.0.0.1", 0)
    _, client = await loop.create_connection(_Sink, "127.0.0.1", server.sockets[0].getsockname()[1])
    server_sink = await accepted
    server.close()
    return client, server_sink


@pytest.mark.skipif(not splice_available(), reason="os.splice is Linux only")
def test_the_splicer_moves_exactly_the_answers_bytes_and_leaves_the_next_to_the_event_loop():
    async def scenario():
        loop = asyncio.get_running_loop()
        broker_side, gateway_upstream = await _pair(loop)  # the broker writes, the gateway reads
        gateway_client, client = await _pair(loop)  # the gateway writes, the client reads
        answer, following = os.urandom(3 << 20), b"the next answer"
        done: asyncio.Future = loop.create_future()
        gateway_upstream.transport.pause_reading()
        splicer = Splicer(gateway_upstream.transport, gateway_client.transport, lambda: done.set_result(True),
                          lambda why: done.set_exception(AssertionError(why)), lambda: done.set_result(False))
        assert splicer.usable()
        broker_side.transport.write(answer[:1000])
        assert splicer.start(len(answer))
        broker_side.transport.write(answer[1000:] + following)  # the next answer is right behind
        assert await asyncio.wait_for(done, 30) is True
        gateway_upstream.transport.resume_reading()
        while len(client.data) < len(answer) or gateway_upstream.data != following:
            await asyncio.sleep(0.01)
        assert bytes(client.data) == answer  # every byte, in order, no more
        splicer.close()
        for sink in (broker_side, gateway_upstream, gateway_client, client):
            sink.transport.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))


@pytest.mark.parametrize("other_reuses_port", [False, True], ids=["plain", "reuse-port"])
def test_a_shared_port_another_process_listens_on_is_refused_not_joined(other_reuses_port):
    # The supervisor holds the workers' shared port with SO_REUSEPORT: without its check, that socket would
    # join another process's reuse-port listener there and the two would split its clients. The port is
    # refused before anything else starts (no ZooKeeper is needed to see it).
    with foreign_listener(other_reuses_port) as other:
        port = other.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZKCOORD_")}
        result = subprocess.run([sys.executable, "-m", "zkcoord", "run", "--zookeeper", "127.0.0.1:1", "--listen",
                                 f"127.0.0.1:{port}", "--node-id", "7", "--workers", "2"],
                                capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    assert f"error: listen: cannot listen on 127.0.0.1:{port}: " in result.stderr
    assert "address already in use" in result.stderr.lower()
    assert "worker 1 started" not in result.stderr
