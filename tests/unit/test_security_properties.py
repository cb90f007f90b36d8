"""Java .properties and JAAS parsing (zkcoord.security.properties), and Password."""

from __future__ import annotations

import pickle

import pytest

from zkcoord.errors import ConfigError
from zkcoord.password import Password, reveal
from zkcoord.security.properties import parse_jaas_config, parse_jaas_file, parse_properties, read_properties


def test_properties_as_java_reads_them():
    text = "\n".join([
        "# a comment",
        "! another",
        "security.protocol=SASL_SSL",
        "sasl.mechanism : SCRAM-SHA-512",
        "ssl.truststore.location /etc/kafka/ca.pem",
        "  indented.key = value with spaces  ",
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\",
        '    username="alice" \\',
        '    password="a=b;c";',
        r"escaped\=key=x\:y",
        r"unicode=caf\u00e9",
        "empty=",
        "security.protocol=SSL",
    ])
    props = parse_properties(text)
    assert props == {
        "security.protocol": "SSL",  # the later one wins
        "sasl.mechanism": "SCRAM-SHA-512",
        "ssl.truststore.location": "/etc/kafka/ca.pem",
        "indented.key": "value with spaces  ",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="alice" password="a=b;c";',
        "escaped=key": "x:y",
        "unicode": "café",
        "empty": "",
    }


def test_a_bad_unicode_escape_names_the_line():
    with pytest.raises(ConfigError, match=r"client.properties, line 2: malformed \\uxxxx"):
        parse_properties("a=1\nb=\\u12", where="client.properties")


def test_a_missing_properties_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        read_properties(tmp_path / "nope.properties")


def test_jaas_config_value():
    [module] = parse_jaas_config(
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
        'password="p\\"w;d" tokenauth=false;')
    assert module.class_name == "org.apache.kafka.common.security.scram.ScramLoginModule"
    assert module.simple_name == "ScramLoginModule"
    assert module.flag == "required"
    assert dict(module.options) == {"username": "alice", "password": 'p"w;d', "tokenauth": "false"}
    assert "p\"w" not in repr(module)


def test_jaas_file_sections_and_comments():
    sections = parse_jaas_file("""
        // the brokers' ZooKeeper login
        Client {
            org.apache.zookeeper.server.auth.DigestLoginModule required
            username="kafka"
            password="kafka-secret";
        };
        /* PLAIN users */
        KafkaServer {
            org.apache.kafka.common.security.plain.PlainLoginModule required
            username="admin" password="admin-secret"
            user_admin="admin-secret"
            user_alice="alice-secret";
            com.example.Other optional;
        };
    """)
    assert list(sections) == ["Client", "KafkaServer"]
    assert dict(sections["Client"][0].options) == {"username": "kafka", "password": "kafka-secret"}
    plain, other = sections["KafkaServer"]
    assert plain.options["user_alice"] == "alice-secret"
    assert (other.class_name, other.flag, dict(other.options)) == ("com.example.Other", "optional", {})


@pytest.mark.parametrize("text, message", [
    ("", "is empty"),
    ("org.Foo username=x;", "needs a flag"),
    ("org.Foo required username;", "expected key=value"),
    ('org.Foo required username="x"', "do not end with ';'"),
    ('org.Foo required username="x', "unterminated quoted value"),
])
def test_bad_jaas_config_values(text, message):
    with pytest.raises(ConfigError, match=message) as caught:
        parse_jaas_config(text)
    assert '"x' not in str(caught.value)


def test_bad_jaas_file():
    with pytest.raises(ConfigError, match="section Client is not closed"):
        parse_jaas_file('Client { a.B required x="y";')


def test_password_never_prints():
    secret = Password("s3cret")
    assert str(secret) == repr(secret) == f"{secret}" == f"{secret!r}" == "[hidden]"
    assert f"{secret:>10}" == "  [hidden]"
    assert secret.value == "s3cret" and reveal(secret) == "s3cret" and reveal("plain") == "plain"
    assert reveal(None) is None
    assert secret == Password("s3cret") and secret != Password("other") and secret != "s3cret"
    assert pickle.loads(pickle.dumps(secret)) == secret
    assert "s3cret" not in repr({"password": secret})
    assert not Password("")
