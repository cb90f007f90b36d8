"""zkcoord.security.plain_users: the users SASL/PLAIN logins are checked against."""

from __future__ import annotations

import logging
import os

import pytest

from zkcoord.errors import ConfigError
from zkcoord.password import Password
from zkcoord.security.plain_users import PlainUsers, parse_plain_users

BROKER_JAAS = """
// the broker's own file: zkcoord reads the same users
KafkaServer {
    org.apache.kafka.common.security.plain.PlainLoginModule required
    username="admin"
    password="admin-secret"
    user_admin="admin-secret"
    user_alice="alice \\"quoted\\" secret";
};
Client {
    org.apache.zookeeper.server.auth.DigestLoginModule required username="zk" password="zk-secret";
};
"""
SECRETS = ("admin-secret", 'alice "quoted" secret', "zk-secret", "bob-pw", "bob-pw-2", "carol-pw")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _write(path, text: str) -> None:
    path.write_text(text)
    st = os.stat(path)  # a later mtime even within the file system's timestamp granularity
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000 * (1 + int(st.st_mtime_ns % 7))))


def _no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


def test_a_brokers_jaas_file(tmp_path):
    path = tmp_path / "kafka_server_jaas.conf"
    path.write_text(BROKER_JAAS)
    users = PlainUsers(path)
    users.load()
    assert users.usernames == ["admin", "alice"]
    assert users.check("alice", Password('alice "quoted" secret')) is True
    assert users.check("admin", "admin-secret") is True
    assert users.check("alice", Password("admin-secret")) is False
    assert users.check("zk", Password("zk-secret")) is False  # the Client section is not a source of users
    assert users.check("nobody", Password("admin-secret")) is False
    assert users.check("", Password("")) is False
    _no_secret(repr(users))


def test_the_one_section_with_a_plain_module_or_the_named_one():
    listener = 'sasl_ssl.KafkaServer { org.apache.kafka.common.security.plain.PlainLoginModule required user_a="pa"; };'
    assert set(parse_plain_users(listener, "f")) == {"a"}
    two = listener + (' other.KafkaServer { org.apache.kafka.common.security.plain.PlainLoginModule required '
                      'user_b="pb"; };')
    with pytest.raises(ConfigError) as info:
        parse_plain_users(two, "users file f")
    assert str(info.value) == ("users file f: sections other.KafkaServer, sasl_ssl.KafkaServer each have a "
                               "PlainLoginModule; name the one to use")
    assert set(parse_plain_users(two, "f", section="other.KafkaServer")) == {"b"}
    with pytest.raises(ConfigError, match="section Nope has no PlainLoginModule"):
        parse_plain_users(two, "f", section="Nope")


def test_a_properties_file(tmp_path):
    path = tmp_path / "users.properties"
    path.write_text("# name=password\nbob=bob-pw\ncarol : carol-pw\nweird\\=name=x=y\n")
    users = PlainUsers(path)
    assert users.check("bob", "bob-pw") is True  # the first check loads the file
    assert users.check("carol", Password("carol-pw")) is True
    assert users.check("weird=name", "x=y") is True
    assert users.check("bob", "carol-pw") is False


@pytest.mark.parametrize("text, expected", [
    ("", "no users; write one <name>=<password> line per user"),
    ("# only a comment\n", "no users"),
    ("bob=\ncarol=x\n", "user(s) bob have an empty password"),
    ("KafkaServer { org.apache.kafka.common.security.scram.ScramLoginModule required; };",
     "no section has a PlainLoginModule"),
    ('KafkaServer { org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="b"; };',
     'the PlainLoginModule of section KafkaServer has no user_<name>="<password>" options'),
    ('KafkaServer { org.apache.kafka.common.security.plain.PlainLoginModule required user_a="bob-pw" ',
     "the options of org.apache.kafka.common.security.plain.PlainLoginModule do not end with ';'"),
])
def test_bad_files_fail_load_naming_the_file(tmp_path, text, expected):
    path = tmp_path / "users"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        PlainUsers(path).load()
    assert str(info.value).startswith(f"users file {path}")
    assert expected in str(info.value)
    _no_secret(str(info.value))


def test_a_missing_file_fails_load(tmp_path):
    with pytest.raises(ConfigError) as info:
        PlainUsers(tmp_path / "absent").load()
    assert str(info.value) == f"users file {tmp_path / 'absent'} does not exist"


def test_changes_are_read_at_most_once_per_interval(tmp_path):
    path = tmp_path / "users.properties"
    path.write_text("bob=bob-pw\n")
    clock = FakeClock()
    users = PlainUsers(path, stat_interval_s=1.0, clock=clock)
    users.load()
    _write(path, "bob=bob-pw-2\ncarol=carol-pw\n")
    assert users.check("bob", "bob-pw") is True  # not looked at yet
    clock.now = 1.0
    assert users.check("bob", "bob-pw") is False
    assert users.check("bob", "bob-pw-2") is True
    assert users.check("carol", "carol-pw") is True
    _write(path, "carol=carol-pw\n")
    clock.now = 1.5
    assert users.check("bob", "bob-pw-2") is True
    clock.now = 2.0
    assert users.check("bob", "bob-pw-2") is False
    assert users.usernames == ["carol"]


def test_a_broken_or_missing_file_keeps_the_last_good_users_and_logs_once(tmp_path, caplog):
    path = tmp_path / "jaas.conf"
    path.write_text(BROKER_JAAS)
    users = PlainUsers(path, stat_interval_s=0)
    users.load()
    with caplog.at_level(logging.WARNING, "zkcoord.security.plain_users"):
        _write(path, BROKER_JAAS.replace("required", "requird", 1))
        assert users.check("admin", "admin-secret") is True
        assert users.check("admin", "admin-secret") is True
        path.unlink()
        assert users.check("admin", "admin-secret") is True
        assert users.check("admin", "admin-secret") is True
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        f"users file {path}, section KafkaServer: line 4: login module "
        f"org.apache.kafka.common.security.plain.PlainLoginModule needs a flag, one of required, requisite, "
        f"sufficient, optional; keeping the 2 users read before",
        f"users file {path} cannot be read (No such file or directory); keeping the 2 users read before",
    ]
    _no_secret("\n".join(messages))
    _write(path, "admin=bob-pw\n")
    assert users.check("admin", "bob-pw") is True  # a good file again is used at once
    assert users.usernames == ["admin"]
