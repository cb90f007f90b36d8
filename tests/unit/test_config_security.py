"""The daemon's security settings (zkcoord.config): Kafka's names in three
spellings, listeners as PROTOCOL://HOST:PORT, secrets that never print, and
a ConfigError naming the setting for every bad combination."""

from __future__ import annotations

import pytest

from zkcoord.config import DaemonConfig, build_config, parse_listener
from zkcoord.errors import ConfigError
from zkcoord.password import Password


def test_listeners_take_kafkas_protocol_prefix():
    assert parse_listener("127.0.0.1:9300", "listen") == ("PLAINTEXT", "127.0.0.1", 9300)
    assert parse_listener("sasl_ssl://0.0.0.0:9093", "listen") == ("SASL_SSL", "0.0.0.0", 9093)
    assert parse_listener("SSL://[::1]:9094", "listen") == ("SSL", "::1", 9094)
    config = DaemonConfig(zookeeper="zk:1", listen="SASL_PLAINTEXT://127.0.0.1:0")
    assert config.listener_protocol == "SASL_PLAINTEXT" and config.listen_address == ("127.0.0.1", 0)
    assert config.gateway_protocol == "PLAINTEXT"


def test_an_unknown_protocol_is_named():
    with pytest.raises(ConfigError, match=r"listen='TLS://h:1': unknown security protocol 'TLS'"):
        DaemonConfig(zookeeper="zk:1", listen="TLS://h:1")


@pytest.mark.parametrize("values, message", [
    ({"listen": "SSL://127.0.0.1:0"}, "ssl_keystore_location"),
    ({"gateway_listen": "SASL_SSL://127.0.0.1:0", "bootstrap_servers": "k:9092"}, "ssl_keystore_location"),
    ({"ssl_client_auth": "sometimes"}, "ssl_client_auth='sometimes' must be one of none, requested, required"),
    ({"sasl_enabled_mechanisms": "GSSAPI"}, "not GSSAPI"),
    ({"listen": "SASL_PLAINTEXT://127.0.0.1:0", "sasl_enabled_mechanisms": ""}, "sasl_enabled_mechanisms is empty"),
    ({"listen": "SASL_PLAINTEXT://127.0.0.1:0", "sasl_enabled_mechanisms": "PLAIN"}, "sasl_plain_users_file"),
    ({"authorizer_class_name": "org.example.Mine"}, "kafka.security.authorizer.AclAuthorizer"),
    ({"super_users": "admin"}, "'admin' is not TYPE:NAME"),
])
def test_bad_security_settings_name_the_setting(values, message):
    with pytest.raises(ConfigError, match=message):
        DaemonConfig(zookeeper="zk:1", **values)


def test_three_spellings_and_secrets(tmp_path):
    config_file = tmp_path / "zkcoord.toml"
    config_file.write_text('zookeeper = "zk:1"\nlisten = "SASL_SSL://127.0.0.1:9300"\n'
                           'ssl.keystore.location = "/etc/zkcoord/keystore.p12"\n'
                           'ssl.keystore.password = "from-the-file"\n'
                           'sasl-enabled-mechanisms = "SCRAM-SHA-512"\n'
                           "allow_everyone_if_no_acl_found = true\n")
    env = {"ZKCOORD_SSL_KEYSTORE_PASSWORD": "from-the-environment", "ZKCOORD_SUPER_USERS": "User:admin"}
    config = build_config({"ssl_key_password": "from-a-flag", "allow_everyone_if_no_acl_found": None},
                          config_file, environ=env)
    assert config.ssl_keystore_location == "/etc/zkcoord/keystore.p12"
    assert config.ssl_keystore_password == Password("from-the-environment")
    assert config.ssl_key_password == Password("from-a-flag")
    assert config.sasl_mechanisms == ("SCRAM-SHA-512",)
    assert config.allow_everyone_if_no_acl_found is True
    assert config.super_user_principals == ("User:admin",)
    shown = repr(config)
    assert "from-the-environment" not in shown and "from-a-flag" not in shown and "[hidden]" in shown


def test_bools_and_passwords_of_the_wrong_type_do_not_echo(tmp_path):
    with pytest.raises(ConfigError, match="allow_everyone_if_no_acl_found from .* must be true or false"):
        build_config({}, None, environ={"ZKCOORD_ZOOKEEPER": "zk:1", "ZKCOORD_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "maybe"})
    config_file = tmp_path / "bad.toml"
    config_file.write_text('zookeeper = "zk:1"\nssl_keystore_password = 12345678\n')
    with pytest.raises(ConfigError) as caught:
        build_config({}, config_file, environ={})
    assert "ssl_keystore_password" in str(caught.value) and "12345678" not in str(caught.value)
