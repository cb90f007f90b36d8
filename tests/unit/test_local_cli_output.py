"""What ``zkcoord local status`` and ``local env`` print from a sandbox's
state file, read through click's CliRunner (stdout is not a terminal, as in
a pipe). The servers recorded here never ran: every row is ``down``, which
needs no probe of a port."""

from __future__ import annotations

import json
import shlex

from click.testing import CliRunner

from zkcoord.cli.main import cli


def write_state(state_dir, daemons: list[dict]) -> None:
    state_dir.mkdir(parents=True)
    (state_dir / "sandbox.json").write_text(json.dumps({
        "zookeeper": {"name": "zookeeper", "port": 24101, "pid": None},
        "brokers": [{"name": "kafka-0", "port": 28433, "pid": None}],
        "started_at": 0.0,
        "daemons": daemons,
    }))


def local(*args: str):
    result = CliRunner().invoke(cli, ["local", *args], env={"COLUMNS": "80"})
    assert "Traceback" not in result.output, result.output
    return result


def test_status_piped_prints_every_cell_whole_one_row_a_line(tmp_path):
    state_dir = tmp_path / "a-sandbox-state-directory-whose-log-paths-are-longer-than-a-terminal-line"
    write_state(state_dir, [{"name": "zkcoord-1", "port": 29300, "pid": None, "gateway_port": 29400}])

    result = local("status", "--state-dir", str(state_dir))

    assert result.exit_code == 1  # every server is down
    for log in ("zookeeper", "kafka-0", "zkcoord-1"):
        assert f"{state_dir}/logs/{log}.log" in result.output  # whole, not cut to the width of a terminal
    lines = result.output.splitlines()
    assert [line.split()[0] for line in lines] == ["SERVER", "zookeeper", "kafka-0", "zkcoord-1", "zkcoord-1"]
    for line, (name, address, log) in zip(lines[1:], [
            ("zookeeper", "127.0.0.1:24101", "zookeeper"), ("kafka-0", "127.0.0.1:28433", "kafka-0"),
            ("zkcoord-1", "127.0.0.1:29300", "zkcoord-1"), ("zkcoord-1 gateway", "127.0.0.1:29400", "zkcoord-1")]):
        assert line.startswith(name + " ")
        assert f" {address} " in line and " down " in line
        assert line.endswith(f" {state_dir}/logs/{log}.log")


def test_status_and_env_give_each_daemons_metrics_url_in_node_id_order(tmp_path):
    state_dir = tmp_path / "sandbox"
    write_state(state_dir, [
        {"name": "zkcoord-1", "port": 29300, "pid": None, "gateway_port": 29400, "metrics_port": 29501},
        {"name": "zkcoord-2", "port": 29310, "pid": None, "gateway_port": 29410, "metrics_port": 29502},
    ])

    status = local("status", "--state-dir", str(state_dir))
    rows = {line.split("  ")[0]: line.split() for line in status.output.splitlines()}
    assert rows["zkcoord-1 metrics"][2:4] == ["http://127.0.0.1:29501", "-"]
    assert rows["zkcoord-2 metrics"][2:5] == ["http://127.0.0.1:29502", "-", "down"]

    env = local("env", "--state-dir", str(state_dir))
    assert env.exit_code == 0
    assert "export ZKCOORD_METRICS_URLS=http://127.0.0.1:29501,http://127.0.0.1:29502" in env.output.splitlines()


def test_env_without_daemons_has_no_metrics_urls(tmp_path):
    write_state(tmp_path / "sandbox", [])

    env = local("env", "--state-dir", str(tmp_path / "sandbox"))

    assert env.exit_code == 0
    assert [line.split("=")[0] for line in env.output.splitlines()] == [
        "export ZKCOORD_ZOOKEEPER", "export ZKCOORD_BOOTSTRAP_SERVERS", "export ZKCOORD_TOOLS_LOG4J"]


def test_env_names_the_tools_log4j_file_quoted_for_the_shell(tmp_path):
    state_dir = tmp_path / "a sandbox"  # a space: the export must survive eval
    write_state(state_dir, [])

    env = local("env", "--state-dir", str(state_dir))

    assert env.exit_code == 0
    [line] = [line for line in env.output.splitlines() if line.startswith("export ZKCOORD_TOOLS_LOG4J=")]
    assert shlex.split(line) == ["export", f"ZKCOORD_TOOLS_LOG4J={state_dir}/tools-log4j.properties"]


def test_status_and_env_of_a_spark_cluster(tmp_path):
    state_dir = tmp_path / "sandbox"
    write_state(state_dir, [])
    raw = json.loads((state_dir / "sandbox.json").read_text())
    raw["spark_master"] = {"name": "spark-master", "port": 27077, "pid": None, "ui_port": 28080}
    raw["spark_workers"] = [{"name": f"spark-worker-{i}", "port": 27100 + i, "pid": None, "ui_port": 28100 + i}
                            for i in (1, 2)]
    (state_dir / "sandbox.json").write_text(json.dumps(raw))

    status = local("status", "--state-dir", str(state_dir))
    rows = {line.split("  ")[0]: line.split() for line in status.output.splitlines()}
    assert rows["spark-master"][1:4] == ["127.0.0.1:27077", "-", "down"]
    assert rows["spark-master ui"][2:5] == ["http://127.0.0.1:28080", "-", "down"]
    assert rows["spark-worker-2 ui"][2] == "http://127.0.0.1:28102"

    env = local("env", "--state-dir", str(state_dir))
    lines = env.output.splitlines()
    assert "export ZKCOORD_SPARK_MASTER=spark://127.0.0.1:27077" in lines
    assert "export ZKCOORD_SPARK_MASTER_UI=http://127.0.0.1:28080" in lines


def test_a_spark_clusters_ports_are_promised_and_kept_in_the_state_file():
    from zkcoord.local import spark_cluster
    from zkcoord.local.sandbox import SandboxState, Server

    state = SandboxState(Server("zookeeper", 24101))
    spark_cluster.add_workers(state, 2)
    spark_cluster.add_workers(state, 1)  # fewer: nothing removed
    assert [s.name for s in spark_cluster.servers(state)] == ["spark-master", "spark-worker-1", "spark-worker-2"]
    ports = [p for s in spark_cluster.servers(state) for p in (s.port, s.ui_port)]
    assert len(set(ports)) == 6 and set(ports) <= state.ports() and 24101 not in ports
    again = SandboxState.from_json(state.to_json())
    assert again.spark_master == state.spark_master and again.spark_workers == state.spark_workers
