"""Daemon settings: flags over environment over config file over defaults,
and a clear ConfigError naming the setting and its source."""

from __future__ import annotations

import pytest

from zkcoord.config import DaemonConfig, build_config, describe_settings, parse_host_port
from zkcoord.errors import ConfigError


def test_precedence_flag_env_file_default(tmp_path):
    config_file = tmp_path / "zkcoord.toml"
    config_file.write_text('zookeeper = "zk-file:2181"\nnode-id = 7\nlisten = "0.0.0.0:9400"\n'
                           "group_initial_rebalance_delay_ms = 100\n")
    env = {"ZKCOORD_NODE_ID": "8", "ZKCOORD_LISTEN": "127.0.0.1:9500"}
    config = build_config({"listen": "127.0.0.1:9600", "node_id": None}, config_file, environ=env)
    assert config.zookeeper == "zk-file:2181"  # file
    assert config.node_id == 8  # env over file
    assert config.listen == "127.0.0.1:9600"  # flag over env
    assert config.group_initial_rebalance_delay_ms == 100
    assert config.group_min_session_timeout_ms == 6000  # default


def test_config_file_from_environment(tmp_path):
    config_file = tmp_path / "c.toml"
    config_file.write_text('zookeeper = "a:1,b:2/chroot"\n')
    config = build_config({}, None, environ={"ZKCOORD_CONFIG": str(config_file)})
    assert config.zookeeper == "a:1,b:2/chroot"


@pytest.mark.parametrize("flags, env, message", [
    ({}, {}, "--zookeeper (ZKCOORD_ZOOKEEPER) is required"),
    ({"zookeeper": "zk"}, {}, "zookeeper='zk' is not HOST:PORT"),
    ({"zookeeper": "zk:1", "listen": "nohost"}, {}, "listen='nohost' is not HOST:PORT"),
    ({"zookeeper": "zk:1"}, {"ZKCOORD_NODE_ID": "one"}, "node_id from $ZKCOORD_NODE_ID must be a whole number"),
    ({"zookeeper": "zk:1", "node_id": -5}, {}, "node_id=-5 is out of range"),
    ({"zookeeper": "zk:1", "group_min_session_timeout_ms": 9000, "group_max_session_timeout_ms": 8000}, {},
     "group_max_session_timeout_ms=8000 is out of range"),
    ({"zookeeper": "zk:1", "offsets_zk_root": "consumers"}, {}, "offsets_zk_root='consumers' must start with '/'"),
])
def test_bad_settings_name_the_setting(flags, env, message):
    with pytest.raises(ConfigError) as info:
        build_config(flags, None, environ=env)
    assert message in str(info.value)


def test_unknown_or_mistyped_file_keys(tmp_path):
    bad_key = tmp_path / "a.toml"
    bad_key.write_text('zookeeper = "zk:1"\nzookeper_typo = 1\n')
    with pytest.raises(ConfigError, match="unknown key 'zookeper_typo'"):
        build_config({}, bad_key, environ={})
    bad_type = tmp_path / "b.toml"
    bad_type.write_text('zookeeper = 2181\n')
    with pytest.raises(ConfigError, match="zookeeper from config file .* must be a string"):
        build_config({}, bad_type, environ={})
    with pytest.raises(ConfigError, match="does not exist"):
        build_config({}, tmp_path / "missing.toml", environ={})
    broken = tmp_path / "c.toml"
    broken.write_text("zookeeper = \n")
    with pytest.raises(ConfigError, match="cannot be read"):
        build_config({}, broken, environ={})


def test_advertised_address():
    config = DaemonConfig(zookeeper="zk:1", listen="127.0.0.1:0")
    assert config.advertised_address(41000) == ("127.0.0.1", 41000)
    assert DaemonConfig(zookeeper="zk:1", advertised="coord-1:9300").advertised_address(5) == ("coord-1", 9300)
    assert parse_host_port("[::1]:9092", "x") == ("::1", 9092)


def test_every_setting_has_three_spellings():
    rows = describe_settings()
    assert ("--node-id", "ZKCOORD_NODE_ID", "node_id", "-1") in rows
    assert len(rows) == len({r[0] for r in rows})


def test_every_setting_is_a_run_flag():
    from zkcoord.cli.run_cmd import run

    flags = {opt for param in run.params for opt in param.opts}
    assert {row[0] for row in describe_settings()} <= flags


def test_consumer_protocol_settings_reach_the_core():
    config = build_config({"group_consumer_assignors": "range,uniform", "group_consumer_session_timeout_ms": 30000,
                           "group_consumer_migration_policy": "Upgrade"}, None, environ={"ZKCOORD_ZOOKEEPER": "zk:1"})
    consumer = config.consumer_group_config
    assert consumer.default_assignor == "range" and consumer.session_timeout_ms == 30000
    assert consumer.migration_policy == "upgrade" and consumer.upgrade_enabled and not consumer.downgrade_enabled
    assert consumer.assignor_offload and consumer.offload_min_size == 2_000
    off = build_config({"group_consumer_assignor_offload_enable": "false",
                        "group_consumer_assignor_offload_min_size": 10}, None, environ={"ZKCOORD_ZOOKEEPER": "zk:1"})
    assert not off.consumer_group_config.assignor_offload and off.consumer_group_config.offload_min_size == 10
    assert config.rebalance_protocols == {"classic", "consumer"}
    assert DaemonConfig(zookeeper="zk:1", group_coordinator_rebalance_protocols="classic").rebalance_protocols == {
        "classic"}


@pytest.mark.parametrize("settings, message", [
    ({"group_coordinator_rebalance_protocols": "consumer"}, "classic is required"),
    ({"group_coordinator_rebalance_protocols": "classic,streams"}, "streams unknown"),
    ({"group_consumer_assignors": "sticky"}, "name one or more of uniform, range"),
    ({"group_consumer_migration_policy": "sideways"}, "migration.policy='sideways'"),
    ({"group_consumer_heartbeat_interval_ms": 45000}, "must be below"),
    ({"group_consumer_session_timeout_ms": 0}, "group_consumer_session_timeout_ms=0 is out of range"),
    ({"group_consumer_assignment_interval_ms": -1}, "group_consumer_assignment_interval_ms=-1"),
    ({"group_consumer_assignor_offload_min_size": -1}, "group_consumer_assignor_offload_min_size=-1 is out of range"),
])
def test_bad_consumer_protocol_settings_name_the_setting(settings, message):
    with pytest.raises(ConfigError, match=message):
        DaemonConfig(zookeeper="zk:1", **settings)


def test_a_bad_offload_switch_names_the_setting():
    with pytest.raises(ConfigError, match="group_consumer_assignor_offload_enable from .* must be true or false"):
        build_config({"group_consumer_assignor_offload_enable": "sometimes"}, None,
                     environ={"ZKCOORD_ZOOKEEPER": "zk:1"})

