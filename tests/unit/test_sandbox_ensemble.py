"""The sandbox's ZooKeeper ensemble and replicated brokers, without servers:
names and ids, connect strings, ``zoo.cfg``'s server lines, roles read from
``srvr``, replication settings, ports promised in ``sandbox.json``, and what
``local status`` / ``local env`` print for an ensemble (every server down:
no port is probed)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from zkcoord.cli.main import cli
from zkcoord.errors import UsageError
from zkcoord.local import config_files, ensemble
from zkcoord.local.sandbox import Sandbox, SandboxState, Server

# What ZooKeeper 3.8.6 answers to srvr, as leader, as follower and without a quorum.
SRVR_LEADER = """Zookeeper version: 3.8.6-4f0fd5a8c7e9e4ff2ce3e40ecfa8b8a0dd2d1e27, built on 2025-01-01 00:00 UTC
Latency min/avg/max: 0/0.5/3
Received: 12
Sent: 11
Connections: 1
Outstanding: 0
Zxid: 0x100000004
Mode: leader
Node count: 6
Proposal sizes last/min/max: 48/48/92
"""
SRVR_FOLLOWER = SRVR_LEADER.replace("Mode: leader", "Mode: follower").replace(
    "Proposal sizes last/min/max: 48/48/92\n", "")
SRVR_NO_QUORUM = "This ZooKeeper instance is not currently serving requests\n"


def test_names_and_ids():
    assert ensemble.server_names(1) == ["zookeeper"]
    assert ensemble.server_names(5) == [f"zookeeper-{i}" for i in range(1, 6)]
    assert [ensemble.myid(n) for n in ("zookeeper-3", "zookeeper", "zookeeper-x", "kafka-1", "zkcoord-2")] == [
        3, None, None, None, None]
    assert [ensemble.is_zookeeper(n) for n in ("zookeeper", "zookeeper-2", "kafka-0")] == [True, True, False]
    assert Server("zookeeper-4", 1).myid == 4 and Server("zookeeper", 1).myid is None


@pytest.mark.parametrize("count", [0, 2, 4, 6, -1])
def test_sizes_other_than_1_3_5_are_refused_naming_the_option(count):
    with pytest.raises(UsageError, match=f"--zookeepers {count}: the sandbox runs 1 ZooKeeper server, or an "
                                         "ensemble of 3 or 5"):
        ensemble.check_size(count)


def test_a_sandbox_keeps_its_count():
    ensemble.check_same("/s", 3, None)  # not asked: kept
    ensemble.check_same("/s", 3, 3)
    with pytest.raises(UsageError, match=r"The sandbox in /s runs a ZooKeeper ensemble of 3, not 1; run `zkcoord "
                                         r"local down` first to change --zookeepers\."):
        ensemble.check_same("/s", 3, 1)
    with pytest.raises(UsageError, match="runs 1 ZooKeeper server, not 5"):
        ensemble.check_same("/s", 1, 5)


def test_quorum_and_connect_string():
    assert [ensemble.quorum(n) for n in (1, 3, 5)] == [1, 2, 3]
    assert ensemble.connect_string([21811, 21812, 21813]) == "127.0.0.1:21811,127.0.0.1:21812,127.0.0.1:21813"
    with pytest.raises(ValueError):
        ensemble.connect_string([])


def test_roles_read_from_srvr_and_mntr():
    assert ensemble.mode(SRVR_LEADER) == "leader"
    assert ensemble.mode(SRVR_FOLLOWER) == "follower"
    assert ensemble.mode(SRVR_LEADER.replace("Mode: leader", "Mode: standalone")) == "standalone"
    assert ensemble.mode(SRVR_NO_QUORUM) is None
    assert ensemble.mode("") is None  # nothing answered
    assert ensemble.mode("zk_version\t3.8.6\nzk_server_state\tfollower\nzk_znode_count\t6\n") == "follower"
    assert ensemble.SERVING_MODES == {"leader", "follower", "standalone"}


def test_zoo_cfg_of_an_ensemble_member(tmp_path):
    peers = [ensemble.Peer(2, 22002, 23002), ensemble.Peer(1, 22001, 23001), ensemble.Peer(3, 22003, 23003)]
    lines = config_files.zoo_cfg(tmp_path / "data", 21812, peers=peers).splitlines()

    assert lines[-3:] == ["server.1=127.0.0.1:22001:23001", "server.2=127.0.0.1:22002:23002",
                          "server.3=127.0.0.1:22003:23003"]
    assert {"tickTime=500", "initLimit=20", "syncLimit=10", "clientPort=21812", "clientPortAddress=127.0.0.1",
            f"dataDir={tmp_path / 'data'}", "4lw.commands.whitelist=*"} <= set(lines)
    standalone = config_files.zoo_cfg(tmp_path / "data", 21812).splitlines()
    assert not [line for line in standalone if line.startswith("server.")]
    assert {"initLimit=10", "syncLimit=5"} <= set(standalone)  # unchanged for one server
    with_sasl = config_files.zoo_cfg(tmp_path, 1, sasl=True, peers=peers).splitlines()
    assert f"authProvider.1={config_files.SASL_AUTH_PROVIDER}" in with_sasl
    assert "server.3=127.0.0.1:22003:23003" in with_sasl
    with pytest.raises(ValueError, match="same myid"):
        ensemble.server_lines([ensemble.Peer(1, 1, 2), ensemble.Peer(1, 3, 4)])


def properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


@pytest.mark.parametrize("brokers, factor, min_isr", [(1, 1, 1), (2, 2, 1), (3, 3, 2)])
def test_brokers_replicate_offsets_transactions_and_topics(tmp_path, brokers, factor, min_isr):
    zk = "127.0.0.1:21811,127.0.0.1:21812,127.0.0.1:21813"
    props = properties(config_files.server_properties(1, 29092, zk, tmp_path, brokers))
    assert props["zookeeper.connect"] == zk
    assert (props["offsets.topic.replication.factor"], props["transaction.state.log.replication.factor"],
            props["default.replication.factor"]) == (str(factor),) * 3
    assert (props["min.insync.replicas"], props["transaction.state.log.min.isr"]) == (str(min_isr),) * 2
    assert props["offsets.topic.num.partitions"] == str(config_files.OFFSETS_TOPIC_PARTITIONS)


def test_a_new_ensembles_ports_are_distinct_promised_and_kept(tmp_path):
    sandbox = Sandbox(tmp_path / "sandbox")
    state = sandbox._fresh_state(brokers=3, zookeepers=3)

    assert [z.name for z in state.zookeepers] == ["zookeeper-1", "zookeeper-2", "zookeeper-3"]
    assert [s.name for s in state.servers] == ["zookeeper-1", "zookeeper-2", "zookeeper-3", "kafka-0", "kafka-1",
                                               "kafka-2"]
    ports = [p for z in state.zookeepers for p in (z.port, z.quorum_port, z.election_port)]
    ports += [b.port for b in state.brokers]
    assert len(set(ports)) == len(ports) == 12 and set(ports) == state.ports()
    assert [p.server_line() for p in state.ensemble_peers()] == [
        f"server.{z.myid}=127.0.0.1:{z.quorum_port}:{z.election_port}" for z in state.zookeepers]
    assert sandbox.zookeeper_address(state) == ",".join(f"127.0.0.1:{z.port}" for z in state.zookeepers)

    again = SandboxState.from_json(state.to_json())
    assert again.zookeepers == state.zookeepers and again.ensemble_peers() == state.ensemble_peers()
    raw = json.loads(state.to_json())
    assert raw["zookeeper"]["name"] == "zookeeper-1"  # readers of sandbox.json find the first server where it was


def test_a_standalone_sandbox_is_as_before(tmp_path):
    sandbox = Sandbox(tmp_path / "sandbox")
    state = sandbox._fresh_state(brokers=1)
    assert [s.name for s in state.servers] == ["zookeeper", "kafka-0"]
    assert state.zookeeper_peers == [] and state.ensemble_peers() == []
    assert (state.zookeeper.quorum_port, state.zookeeper.election_port) == (None, None)
    assert sandbox.zookeeper_address(state) == f"127.0.0.1:{state.zookeeper.port}"
    # a sandbox.json written before ensembles existed loads as one standalone server
    old = {"zookeeper": {"name": "zookeeper", "port": 24101, "pid": None},
           "brokers": [{"name": "kafka-0", "port": 28433, "pid": None}], "started_at": 0.0}
    loaded = SandboxState.from_json(json.dumps(old))
    assert [z.name for z in loaded.zookeepers] == ["zookeeper"] and loaded.ensemble_peers() == []


def write_ensemble_state(state_dir) -> None:
    state_dir.mkdir(parents=True)
    (state_dir / "sandbox.json").write_text(json.dumps({
        "zookeeper": {"name": "zookeeper-1", "port": 24101, "pid": None, "quorum_port": 24201, "election_port": 24301},
        "zookeeper_peers": [
            {"name": f"zookeeper-{i}", "port": 24100 + i, "pid": None, "quorum_port": 24200 + i,
             "election_port": 24300 + i} for i in (2, 3)],
        "brokers": [{"name": f"kafka-{i}", "port": 28430 + i, "pid": None} for i in range(3)],
        "started_at": 0.0,
    }))


def local(*args: str):
    result = CliRunner().invoke(cli, ["local", *args], env={"COLUMNS": "80"})
    assert "Traceback" not in result.output, result.output
    return result


def test_status_and_env_of_an_ensemble(tmp_path):
    state_dir = tmp_path / "sandbox"
    write_ensemble_state(state_dir)

    status = local("status", "--state-dir", str(state_dir))
    assert status.exit_code == 1  # every server is down
    rows = [line.split() for line in status.output.splitlines()[1:]]
    assert [row[:4] for row in rows] == [
        ["zookeeper-1", "127.0.0.1:24101", "-", "down"], ["zookeeper-2", "127.0.0.1:24102", "-", "down"],
        ["zookeeper-3", "127.0.0.1:24103", "-", "down"], ["kafka-0", "127.0.0.1:28430", "-", "down"],
        ["kafka-1", "127.0.0.1:28431", "-", "down"], ["kafka-2", "127.0.0.1:28432", "-", "down"]]
    assert rows[1][-1] == f"{state_dir}/logs/zookeeper-2.log"

    env = local("env", "--state-dir", str(state_dir))
    assert env.exit_code == 0
    lines = env.output.splitlines()
    assert lines[0] == "export ZKCOORD_ZOOKEEPER=127.0.0.1:24101,127.0.0.1:24102,127.0.0.1:24103"
    assert lines[1] == "export ZKCOORD_BOOTSTRAP_SERVERS=127.0.0.1:28430,127.0.0.1:28431,127.0.0.1:28432"


@pytest.mark.parametrize("value", ["2", "4", "7", "three"])
def test_up_refuses_other_ensemble_sizes_before_doing_anything(tmp_path, value):
    result = local("up", "--zookeepers", value, "--state-dir", str(tmp_path / "s"))
    assert result.exit_code == 2
    assert "--zookeepers" in result.output and "'1', '3', '5'" in result.output
    assert not (tmp_path / "s").exists()


def test_stopping_or_starting_a_server_the_sandbox_does_not_have_names_its_servers(tmp_path):
    state_dir = tmp_path / "sandbox"
    write_ensemble_state(state_dir)
    sandbox = Sandbox(state_dir)
    with pytest.raises(UsageError, match=r"No server 'zookeeper' in the sandbox; it has \['zookeeper-1', "
                                         r"'zookeeper-2', 'zookeeper-3', 'kafka-0'"):
        sandbox.start_zookeeper("zookeeper")
    with pytest.raises(UsageError, match="'kafka-1' is not a ZooKeeper server; the sandbox's are"):
        sandbox.start_zookeeper("kafka-1")
