"""The Burrow configuration: exact sections for zkcoord's settings, what
Burrow 1.2 would panic on refused first with the input named, and the
``zkcoord burrow-config`` command (stdout, a file, one error line)."""

from __future__ import annotations

import tomllib

import pytest
from click.testing import CliRunner

from zkcoord.cli.main import cli
from zkcoord.errors import ConfigError, UsageError
from zkcoord.monitor.burrow import BurrowSettings, burrow_toml, render, sections


def parsed(settings: BurrowSettings) -> dict:
    return tomllib.loads(burrow_toml(settings))


def test_default_configuration_covers_both_offset_stores_in_one_cluster():
    config = parsed(BurrowSettings("zk-1:2181,zk-2:2181", "k1:9092,k2"))
    assert config["zookeeper"] == {"servers": ["zk-1:2181", "zk-2:2181"], "root-path": "/burrow"}
    assert config["client-profile"] == {"zkcoord": {"client-id": "burrow-local", "kafka-version": "2.1.0"}}
    assert config["cluster"] == {"local": {"class-name": "kafka", "servers": ["k1:9092", "k2:9092"],
                                           "client-profile": "zkcoord", "offset-refresh": 10, "topic-refresh": 60}}
    assert config["consumer"] == {
        "local-zookeeper": {"class-name": "kafka_zk", "cluster": "local", "servers": ["zk-1:2181", "zk-2:2181"],
                            "zookeeper-path": ""},
        "local-kafka": {"class-name": "kafka", "cluster": "local", "servers": ["k1:9092", "k2:9092"],
                        "client-profile": "zkcoord", "offsets-topic": "__consumer_offsets", "start-latest": False},
    }
    assert config["httpserver"] == {"default": {"address": ":8000"}}
    assert config["storage"] == {"default": {"class-name": "inmemory", "intervals": 10, "min-distance": 1,
                                             "expire-group": 604800}}
    assert config["evaluator"] == {"default": {"class-name": "caching", "expire-cache": 10}}
    assert config["logging"] == {"level": "info"}
    assert "general" not in config  # no pidfile asked for: Burrow's default


def test_chroot_and_zk_root_become_the_zookeeper_path_burrow_appends_consumers_to():
    config = parsed(BurrowSettings("zk-1:2181/kafka", "k1:9092", zk_root="/legacy/consumers"))
    assert config["consumer"]["local-zookeeper"]["zookeeper-path"] == "/kafka/legacy"
    assert config["zookeeper"]["root-path"] == "/kafka/burrow"
    assert parsed(BurrowSettings("zk:1/a/b", "k:1"))["consumer"]["local-zookeeper"]["zookeeper-path"] == "/a/b"


def test_every_setting_reaches_its_key():
    settings = BurrowSettings("[::1]:2181", "[::1]:9093,k3", cluster="prod-eu_1", http_listen="127.0.0.1:0",
                              intervals=5, min_distance_s=2, offset_refresh_s=1, topic_refresh_s=3,
                              expire_group_s=120, expire_cache_s=1, log_level="debug", log_file="/var/log/b.log",
                              pidfile="/run/burrow/burrow.pid")
    config = parsed(settings)
    assert config["general"] == {"pidfile": "/run/burrow/burrow.pid"}
    assert config["logging"] == {"level": "debug", "filename": "/var/log/b.log"}
    assert config["zookeeper"]["servers"] == ["[::1]:2181"]
    assert config["cluster"]["prod-eu_1"]["servers"] == ["[::1]:9093", "k3:9092"]
    assert config["cluster"]["prod-eu_1"]["offset-refresh"] == 1
    assert config["cluster"]["prod-eu_1"]["topic-refresh"] == 3
    assert set(config["consumer"]) == {"prod-eu_1-zookeeper", "prod-eu_1-kafka"}
    assert {c["cluster"] for c in config["consumer"].values()} == {"prod-eu_1"}
    assert config["httpserver"]["default"]["address"] == "127.0.0.1:0"
    assert config["storage"]["default"] == {"class-name": "inmemory", "intervals": 5, "min-distance": 2,
                                            "expire-group": 120}
    assert config["evaluator"]["default"]["expire-cache"] == 1


def test_the_file_says_what_each_module_reads():
    text = burrow_toml(BurrowSettings("zk:2181/kafka", "k:9092"))
    assert text.startswith("# Burrow 1.2 configuration written by `zkcoord burrow-config`")
    assert "# Groups in zookeeper (and dual) offset storage: zkcoord's legacy layout, " \
           "/kafka/consumers/<group>/offsets/<topic>/<partition>.\n[consumer.local-zookeeper]" in text


def test_render_quotes_strings_as_toml():
    text = render({"s": {"a": 'quote " back \\ slash', "b": "é ü", "c": ["x", "y"], "d": True, "e": 0}})
    assert tomllib.loads(text) == {"s": {"a": 'quote " back \\ slash', "b": "é ü", "c": ["x", "y"], "d": True,
                                         "e": 0}}
    assert sections(BurrowSettings("zk:1", "k:1", log_file='/tmp/a "b"/c')) ["logging"]["filename"] == \
        '/tmp/a "b"/c'


@pytest.mark.parametrize("changes, error, message", [
    ({"zookeeper": ""}, ConfigError, "the ZooKeeper connection string is empty"),
    ({"zookeeper": "zk"}, ConfigError, "'zk' is not HOST:PORT"),
    ({"zookeeper": "zk_1:2181"}, UsageError, "--zookeeper 'zk_1:2181': Burrow 1.2 accepts only IP addresses and "
                                             "host names of letters, digits, '-' and '.'; 'zk_1' is neither"),
    ({"zookeeper": "300.1.1.1:2181"}, UsageError, "'300.1.1.1' is neither"),
    ({"zookeeper": "zk:2181/kafka cluster"}, UsageError,
     "the offsets root '/kafka cluster/consumers' (chroot and --zk-root) cannot be used by Burrow 1.2"),
    ({"bootstrap_servers": ""}, ConfigError, "the Kafka bootstrap servers are empty"),
    ({"bootstrap_servers": "k1:9092,k_2:9092"}, UsageError, "--bootstrap-servers 'k1:9092,k_2:9092'"),
    ({"bootstrap_servers": "k1:0"}, ConfigError, "'k1:0' is not HOST:PORT"),
    ({"zk_root": "/legacy/offsets"}, UsageError, "--zk-root '/legacy/offsets' cannot be watched by Burrow 1.2"),
    ({"zk_root": "consumers"}, ConfigError, "--zk-root 'consumers' must start with '/'"),
    ({"zk_root": "/my.consumers"}, UsageError, "must end in /consumers"),
    ({"zk_root": "/.x/consumers"}, UsageError, "not '.x'"),
    ({"cluster": "Prod"}, UsageError, "--cluster 'Prod' must be lower-case letters, digits, '-' and '_'"),
    ({"cluster": "a.b"}, UsageError, "--cluster 'a.b'"),
    ({"cluster": ""}, UsageError, "--cluster ''"),
    ({"http_listen": "8000"}, UsageError, "--http-listen '8000' is not [HOST]:PORT"),
    ({"http_listen": "host_x:8000"}, UsageError, "--http-listen 'host_x:8000'"),
    ({"http_listen": ":70000"}, UsageError, "--http-listen ':70000'"),
    ({"intervals": 1}, UsageError, "--intervals 1 must be a whole number from 2 to 1000"),
    ({"min_distance_s": 0}, UsageError, "--min-distance-s 0 must be a whole number from 1 to 3600"),
    ({"offset_refresh_s": True}, UsageError, "--offset-refresh-s True"),
    ({"expire_group_s": 59}, UsageError, "--expire-group-s 59"),
    ({"log_level": "verbose"}, UsageError, "--log-level 'verbose' must be one of debug, info"),
    ({"log_file": "a\nb"}, UsageError, "--log-file 'a\\nb' must not contain control characters"),
])
def test_what_burrow_would_panic_on_is_refused_naming_the_input(changes, error, message):
    settings = {"zookeeper": "zk:2181", "bootstrap_servers": "k:9092", **changes}
    with pytest.raises(error) as info:
        BurrowSettings(**settings)
    assert message in str(info.value)
    assert info.value.exit_code == 2


def run(*args: str):
    result = CliRunner().invoke(cli, ["burrow-config", *args], env={"ZKCOORD_ZOOKEEPER": None,
                                                                    "ZKCOORD_BOOTSTRAP_SERVERS": None,
                                                                    "ZKCOORD_OFFSETS_ZK_ROOT": None})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return result


def test_command_writes_the_configuration_to_stdout():
    result = run("--zookeeper", "zk:2181/kafka", "--bootstrap-servers", "k:9092", "--cluster", "prod")
    assert result.exit_code == 0, result.output
    assert result.stdout == burrow_toml(BurrowSettings("zk:2181/kafka", "k:9092", cluster="prod"))


def test_command_takes_zkcoord_environment_variables():
    result = CliRunner().invoke(cli, ["burrow-config"], env={"ZKCOORD_ZOOKEEPER": "zk:2181/c",
                                                            "ZKCOORD_BOOTSTRAP_SERVERS": "k:9092",
                                                            "ZKCOORD_OFFSETS_ZK_ROOT": "/old/consumers"})
    assert result.exit_code == 0, result.output
    assert tomllib.loads(result.stdout)["consumer"]["local-zookeeper"]["zookeeper-path"] == "/c/old"


def test_command_writes_a_file_and_says_how_to_start_burrow(tmp_path):
    target = tmp_path / "burrow.toml"
    target.write_text("old")
    result = run("--zookeeper", "zk:2181", "--bootstrap-servers", "k:9092", "--intervals", "5", "--output",
                 str(target))
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert tomllib.loads(target.read_text())["storage"]["default"]["intervals"] == 5
    assert result.stderr == f"wrote {target}; start Burrow with: Burrow -config-dir {tmp_path}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["burrow.toml"]  # no temporary file left


def test_command_notes_a_file_burrow_would_not_read(tmp_path):
    result = run("--zookeeper", "zk:2181", "--bootstrap-servers", "k:9092", "--output", str(tmp_path / "b.toml"))
    assert result.exit_code == 0
    assert "note: Burrow reads only burrow.toml from its -config-dir: rename b.toml to it" in result.stderr


@pytest.mark.parametrize("args, message", [
    (["--zookeeper", "zk_1:2181", "--bootstrap-servers", "k:9092"], "error: --zookeeper 'zk_1:2181'"),
    (["--zookeeper", "zk:2181", "--bootstrap-servers", "k:9092", "--zk-root", "/offsets"],
     "error: --zk-root '/offsets' cannot be watched by Burrow 1.2"),
    (["--zookeeper", "zk:2181", "--bootstrap-servers", "k:9092", "--output", "/nonexistent-dir/burrow.toml"],
     "error: cannot write --output '/nonexistent-dir/burrow.toml': No such file or directory"),
    (["--zookeeper", "zk:2181", "--bootstrap-servers", "k:9092", "--min-distance-s", "0"],
     "error: --min-distance-s 0 must be a whole number from 1 to 3600"),
])
def test_command_bad_input_is_one_error_line_and_exit_2(args, message):
    result = run(*args)
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), result.stderr
    assert "Traceback" not in result.output
