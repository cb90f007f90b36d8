"""The ZooKeeper login settings (zkcoord.zk.auth), their flags, variables and
config keys, and what the SASL ZooKeeper's files say: exact outcomes, no
server (tests/integration/test_zk_security.py has the real ZooKeeper)."""

from __future__ import annotations

import logging
import pickle

import click
import pytest
from click.testing import CliRunner
from kazoo.client import KazooClient
from kazoo.protocol.states import KeeperState
from kazoo.protocol.serialization import SASL, Auth
from kazoo.security import ACL, CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE, Id, Permissions, make_digest_acl_credential

from zkcoord.cli.zk_login import zookeeper_login_options
from zkcoord.config import DaemonConfig, build_config
from zkcoord.errors import ConfigError
from zkcoord.local import config_files
from zkcoord.migrate.spark_tasks import TaskSpec
from zkcoord.password import Password
from zkcoord.security.properties import parse_jaas_file
from zkcoord.zk.auth import (
    OPEN_ACL, SECURE_ACL, SaslLogin, ZkSecurity, acl_kind, acl_text, digest_id, digest_mismatch, zk_security,
)
from zkcoord.zk.connection import _HideCredentials, login_refused

SECRET = "s3cret-Pa55"
DIGEST_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"


def jaas(tmp_path, text: str, name: str = "client.jaas"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def digest_client(user: str = "zkcoord", password: str = SECRET, section: str = "Client") -> str:
    return f'{section} {{\n  {DIGEST_MODULE} required\n  username="{user}"\n  password="{password}";\n}};\n'


# ------------------------------------------------------------------ ZkSecurity
def test_secure_acl_is_kafkas_default_and_open_is_open():
    assert SECURE_ACL == [*CREATOR_ALL_ACL, *READ_ACL_UNSAFE]
    assert OPEN_ACL == list(OPEN_ACL_UNSAFE)


def test_sasl_digest_md5_login_from_the_client_section(tmp_path):
    path = jaas(tmp_path, "// Kafka's file too\n" + digest_client() + "KafkaClient { x required; };\n")
    security = ZkSecurity(path, set_acl=True)
    assert security.login() == SaslLogin("DIGEST-MD5", f"JAAS file {path}, section Client", username="zkcoord",
                                         password=Password(SECRET))
    assert security.kazoo_options() == {
        "default_acl": SECURE_ACL,
        "sasl_options": {"mechanism": "DIGEST-MD5", "username": "zkcoord", "password": SECRET,
                         "service": "zookeeper"}}
    assert security.identities() == frozenset({Id("sasl", "zkcoord")})
    assert security.describe() == f"SASL DIGEST-MD5 as user 'zkcoord' (JAAS file {path}, section Client)"


def test_another_section_and_a_digest_login_together(tmp_path):
    path = jaas(tmp_path, digest_client("zk-admin", section="ZkAdmin"))
    security = ZkSecurity(path, "ZkAdmin", digest="ops:" + SECRET)
    options = security.kazoo_options()
    assert options["default_acl"] is None  # open, as before
    assert options["auth_data"] == {("digest", "ops:" + SECRET)}
    assert options["sasl_options"]["username"] == "zk-admin"
    user, credential = make_digest_acl_credential("ops", SECRET).split(":", 1)
    assert security.identities() == frozenset({Id("sasl", "zk-admin"), Id("digest", f"{user}:{credential}")})
    assert digest_id("ops", SECRET) == f"{user}:{credential}"
    assert security.describe() == (f"SASL DIGEST-MD5 as user 'zk-admin' (JAAS file {path}, section ZkAdmin) and "
                                   "digest as user 'ops'")


def test_no_secret_in_repr_describe_or_pickle_text(tmp_path):
    path = jaas(tmp_path, digest_client())
    security = ZkSecurity(path, digest="ops:" + SECRET, set_acl=True).loaded()
    shown = [repr(security), str(security), security.describe(), repr(security.sasl),
             repr(TaskSpec("zk:2181", "k:9092", zk_security=security))]
    assert [SECRET in text for text in shown] == [False] * len(shown)
    copy = pickle.loads(pickle.dumps(security))  # what a Spark task receives: no file needed
    assert copy == security and copy.kazoo_options()["sasl_options"]["password"] == SECRET


@pytest.mark.parametrize("settings, message", [
    ({"set_acl": True}, "zookeeper_set_acl (--zookeeper-set-acl, ZKCOORD_ZOOKEEPER_SET_ACL) needs a ZooKeeper "
                        "login: ZooKeeper refuses to create a znode only its creator may write from a session that "
                        "has not logged in"),
    ({"digest": SECRET}, "zookeeper_digest (--zookeeper-digest, ZKCOORD_ZOOKEEPER_DIGEST) is not USER:PASSWORD: "
                         "it needs a user name, then ':', then the password (its value is not shown)"),
    ({"digest": ":" + SECRET}, "zookeeper_digest (--zookeeper-digest, ZKCOORD_ZOOKEEPER_DIGEST) is not "
                               "USER:PASSWORD"),
    ({"sasl_jaas_file": "x.jaas", "sasl_client_section": " "}, "zookeeper_sasl_client_section "
                                                               "(--zookeeper-sasl-client-section) is empty"),
])
def test_bad_settings_are_config_errors_without_the_secret(settings, message):
    with pytest.raises(ConfigError) as info:
        ZkSecurity(**settings)
    assert str(info.value).startswith(message)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize("text, section, message", [
    (digest_client(section="Other"), "Client",
     "JAAS file {path} has no section 'Client' (its sections: Other); add one, or name another with "
     "zookeeper_sasl_client_section"),
    (f'Client {{ {DIGEST_MODULE} required username="zkcoord"; }};', "Client",
     "JAAS file {path}, section Client: DigestLoginModule needs the options username and password (password "
     "missing or empty)"),
    ('Client { org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="b"; };',
     "Client", "JAAS file {path}, section Client: login module org.apache.kafka.common.security.plain."
               "PlainLoginModule is not one ZooKeeper's client uses"),
    (f'Client {{ {DIGEST_MODULE} required username="a" password="b"; {DIGEST_MODULE} required username="c" '
     'password="d"; };', "Client", "JAAS file {path}, section Client: expected one login module, found 2"),
    ('Client { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true principal="zk@R"; };',
     "Client", "JAAS file {path}, section Client: Krb5LoginModule (GSSAPI) needs the Python package kerberos"),
])
def test_jaas_sections_zookeeper_cannot_use(tmp_path, text, section, message):
    path = jaas(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        ZkSecurity(path, section).kazoo_options()
    assert str(info.value).startswith(message.format(path=path))


def test_a_missing_jaas_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=f"JAAS file {tmp_path}/none.jaas does not exist"):
        ZkSecurity(str(tmp_path / "none.jaas")).kazoo_options()


def test_gssapi_passes_the_principal():
    login = SaslLogin("GSSAPI", "JAAS file k, section Client", principal="zkcoord/host@REALM")
    assert login.sasl_options() == {"mechanism": "GSSAPI", "service": "zookeeper", "principal": "zkcoord/host@REALM"}
    assert ZkSecurity(sasl=login, set_acl=True).identities() is None  # the server maps the principal


def test_zk_security_is_none_for_no_settings():
    assert zk_security(None, None, None, False) is None
    assert zk_security("", "Client", "", None) is None
    assert zk_security(None, None, "u:p", True) == ZkSecurity(digest=Password("u:p"), set_acl=True)


# ------------------------------------------------------------------ reading ACLs
ANYONE = Id("world", "anyone")


@pytest.mark.parametrize("acls, kind", [
    ([ACL(Permissions.ALL, ANYONE)], "open"),
    ([ACL(Permissions.ALL, Id("sasl", "zkcoord")), ACL(Permissions.READ, ANYONE)], "secure"),
    ([ACL(Permissions.ALL, Id("digest", "u:x")), ACL(Permissions.ALL, Id("sasl", "z")), ACL(Permissions.READ, ANYONE)],
     "secure"),
    ([ACL(Permissions.ALL, Id("sasl", "zkcoord"))], "other"),  # nobody else reads
    ([ACL(Permissions.READ | Permissions.WRITE, ANYONE), ACL(Permissions.ALL, Id("sasl", "z"))], "other"),
    ([ACL(Permissions.ALL, Id("ip", "10.0.0.1")), ACL(Permissions.READ, ANYONE)], "other"),
    ([], "other"),
])
def test_acl_kinds(acls, kind):
    assert acl_kind(acls) == kind


def test_acl_text_cuts_a_digest_hash_short():
    assert [acl_text(a) for a in [ACL(Permissions.ALL, Id("digest", "ops:" + digest_id("ops", SECRET)[4:])),
                                  ACL(Permissions.READ | Permissions.WRITE, ANYONE)]] == \
        [f"digest:ops:{digest_id('ops', SECRET)[4:10]}...=ALL", "world:anyone=READ,WRITE"]


def test_digest_mismatch_names_a_wrong_password_only():
    ours = ZkSecurity(digest="ops:" + SECRET)
    right = [ACL(Permissions.ALL, Id("digest", digest_id("ops", SECRET))), ACL(Permissions.READ, ANYONE)]
    wrong = [ACL(Permissions.ALL, Id("digest", digest_id("ops", "other"))), ACL(Permissions.READ, ANYONE)]
    redacted = [ACL(Permissions.ALL, Id("digest", "ops:x")), ACL(Permissions.READ, ANYONE)]  # seen without ADMIN
    someone_else = [ACL(Permissions.ALL, Id("digest", digest_id("dev", "x")))]
    assert [digest_mismatch(a, ours) for a in (right, wrong, redacted, someone_else, OPEN_ACL)] == \
        ["ops" if a in (wrong, redacted) else None for a in (right, wrong, redacted, someone_else, OPEN_ACL)]


def test_login_refused_tells_an_unanswered_exchange_from_a_refusal(tmp_path):
    path = jaas(tmp_path, digest_client())
    security = ZkSecurity(path)
    lead = f"ZooKeeper at zk:2181 refused the login (SASL DIGEST-MD5 as user 'zkcoord' (JAAS file {path}, section Client)): "
    assert login_refused("zk:2181", security, 1, 0.02, 10_000) == \
        lead + "a wrong password or a user the server does not know; check the login's user and password"
    assert login_refused("zk:2181", security, 2, 5.1, 10_000) == \
        lead + ("the server did not answer the SASL exchange within 5 s: is SASL enabled on it (authProvider.1="
                "org.apache.zookeeper.server.auth.SASLAuthenticationProvider in zoo.cfg and a Server section in its "
                "JAAS file)?")


def test_kazoo_debug_lines_of_auth_and_sasl_packets_hide_them():
    def record(*args):
        entry = logging.LogRecord("kazoo.client", logging.DEBUG, __file__, 1, "Sending request(xid=%s): %s", args,
                                  None)
        _HideCredentials().filter(entry)
        return entry.getMessage()

    assert record(-4, Auth(0, "digest", "ops:" + SECRET)) == \
        "Sending request(xid=-4): Auth(scheme='digest', auth=[hidden])"
    assert record(1, SASL(b"username=\"zkcoord\",response=abc")) == "Sending request(xid=1): SASL(token=[hidden])"
    assert record(2, "GetData(path='/x')") == "Sending request(xid=2): GetData(path='/x')"


# ------------------------------------------------------------------ daemon settings, flags, variables
def test_daemon_settings_from_environment_and_file(tmp_path):
    path = jaas(tmp_path, digest_client())
    config_file = tmp_path / "d.toml"
    config_file.write_text(f'zookeeper = "zk:2181"\nzookeeper_sasl_jaas_file = "{path}"\nzookeeper-set-acl = true\n')
    config = build_config({}, config_file, environ={"ZKCOORD_ZOOKEEPER_DIGEST": "ops:" + SECRET})
    assert (config.zookeeper_set_acl, config.zookeeper_digest, config.zookeeper_sasl_client_section) == \
        (True, Password("ops:" + SECRET), "Client")
    assert config.zookeeper_security == ZkSecurity(path, "Client", Password("ops:" + SECRET), True)
    assert SECRET not in repr(config)
    assert build_config({"zookeeper": "zk:1"}, environ={}).zookeeper_security is None


@pytest.mark.parametrize("text, value", [("true", True), ("TRUE", True), ("1", True), ("yes", True), ("on", True),
                                         ("false", False), ("0", False), ("no", False), ("off", False)])
def test_bool_settings_from_text(text, value):
    env = {"ZKCOORD_ZOOKEEPER_SET_ACL": text, "ZKCOORD_ZOOKEEPER_DIGEST": "u:p"}
    assert build_config({"zookeeper": "zk:1"}, environ=env).zookeeper_set_acl is value


def test_bad_bool_and_secret_settings_name_the_setting_not_the_value(tmp_path):
    with pytest.raises(ConfigError) as info:
        build_config({"zookeeper": "zk:1"}, environ={"ZKCOORD_ZOOKEEPER_SET_ACL": "maybe"})
    assert str(info.value) == "zookeeper_set_acl from $ZKCOORD_ZOOKEEPER_SET_ACL must be true or false, got 'maybe'"
    bad = tmp_path / "b.toml"
    bad.write_text(f'zookeeper = "zk:1"\nzookeeper_digest = 12345\nzookeeper_set_acl = "sure"\n')
    with pytest.raises(ConfigError) as info:
        build_config({}, bad, environ={})
    assert str(info.value) == f"zookeeper_digest from config file {bad} must be a string, got a int"
    with pytest.raises(ConfigError) as info:
        build_config({"zookeeper": "zk:1", "zookeeper_set_acl": True}, environ={})
    assert str(info.value).startswith("zookeeper_set_acl (--zookeeper-set-acl, ZKCOORD_ZOOKEEPER_SET_ACL) needs a "
                                      "ZooKeeper login")


def test_run_flags_give_a_password():
    from zkcoord.cli.run_cmd import run

    flags = {opt for param in run.params for opt in param.opts}
    assert {"--zookeeper-sasl-jaas-file", "--zookeeper-sasl-client-section", "--zookeeper-digest",
            "--zookeeper-set-acl"} <= flags
    config = DaemonConfig(zookeeper="zk:1", zookeeper_digest="u:" + SECRET)  # a flag's text
    assert isinstance(config.zookeeper_digest, Password) and SECRET not in repr(config)


# ------------------------------------------------------------------ the commands' decorator
@click.command()
@zookeeper_login_options
def _probe(zk_security):
    click.echo(repr(zk_security))
    if zk_security is not None:
        click.echo(zk_security.digest.value if zk_security.digest else "-")


def test_login_options_from_flags_and_variables(tmp_path):
    runner = CliRunner()
    assert runner.invoke(_probe, []).output == "None\n"
    path = jaas(tmp_path, digest_client())
    out = runner.invoke(_probe, ["--zookeeper-sasl-jaas-file", path, "--zookeeper-set-acl"],
                        env={"ZKCOORD_ZOOKEEPER_DIGEST": "u:" + SECRET}).output.splitlines()
    assert out == [f"ZkSecurity(sasl_jaas_file='{path}', sasl_client_section='Client', digest=[hidden], "
                   "set_acl=True, sasl=None)", "u:" + SECRET]
    env = {"ZKCOORD_ZOOKEEPER_SASL_JAAS_FILE": path, "ZKCOORD_ZOOKEEPER_SASL_CLIENT_SECTION": "Other",
           "ZKCOORD_ZOOKEEPER_SET_ACL": "1"}
    assert runner.invoke(_probe, [], env=env).output.splitlines()[0] == (
        f"ZkSecurity(sasl_jaas_file='{path}', sasl_client_section='Other', digest=None, set_acl=True, sasl=None)")


def test_every_zookeeper_command_takes_the_login():
    from zkcoord.cli.main import cli

    def commands(group, prefix=()):
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                yield from commands(command, (*prefix, name))
            else:
                yield (*prefix, name), command

    with_zookeeper = {" ".join(name): {o for p in c.params for o in p.opts}
                      for name, c in commands(cli) if any("--zookeeper" in p.opts for p in c.params)}
    lacking = sorted(name for name, opts in with_zookeeper.items()
                     if not {"--zookeeper-sasl-jaas-file", "--zookeeper-digest", "--zookeeper-set-acl"} <= opts)
    # burrow-config only writes Burrow's configuration: Burrow, not zkcoord, connects to ZooKeeper;
    # local legacy runs Kafka 1.1.1's old consumer, which connects with its own settings (--property)
    assert lacking == ["burrow-config", "local legacy"]
    assert {"describe", "groups", "migrate run-job", "migrate layout up", "zookeeper-acl secure"} <= set(with_zookeeper)


# ------------------------------------------------------------------ the SASL ZooKeeper's files
def test_zoo_cfg_with_sasl(tmp_path):
    plain = config_files.zoo_cfg(tmp_path, 2181).splitlines()
    sasl = config_files.zoo_cfg(tmp_path, 2181, sasl=True).splitlines()
    assert sasl == [*plain, "authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider"]
    required = config_files.zoo_cfg(tmp_path, 2181, sasl=True, require_auth=True).splitlines()
    assert required == [*sasl, "enforce.auth.enabled=true", "enforce.auth.schemes=sasl"]


def test_server_and_client_jaas_read_back(tmp_path):
    server = config_files.zookeeper_server_jaas({"zkcoord": SECRET, "odd": 'a"b\\c'})
    assert repr(server) == "[hidden]"
    [module] = parse_jaas_file(server.value)["Server"]
    assert (module.class_name, module.flag, dict(module.options)) == \
        (DIGEST_MODULE, "required", {"user_zkcoord": SECRET, "user_odd": 'a"b\\c'})
    client = config_files.zookeeper_client_jaas("zkcoord", Password('q"\\z'))
    path = jaas(tmp_path, client.value)
    assert ZkSecurity(path).login().password == Password('q"\\z')


def test_run_job_tasks_get_the_login_read_on_the_driver(tmp_path):
    from zkcoord.migrate.plan import Selection
    from zkcoord.migrate.spark_job import JobConfig

    path = jaas(tmp_path, digest_client())
    security = ZkSecurity(path, set_acl=True).loaded()
    spec = JobConfig("zk:2181", "k:9092", Selection(all_groups=True), str(tmp_path / "r"), zk_security=security).task_spec()
    (tmp_path / "client.jaas").unlink()  # an executor has no such file
    received = pickle.loads(pickle.dumps(spec))
    assert received.zk_security.kazoo_options()["sasl_options"]["password"] == SECRET
    assert SECRET not in repr(received)


class _RefusedAtOnce(KazooClient):
    """kazoo's own client, whose connection says CONNECTED and then, before
    start() wakes, AUTH_FAILED: the order kazoo's SASL exchange gives when
    ZooKeeper refuses a login at once (its connection thread runs the
    exchange after reporting CONNECTED). No socket is opened."""

    def start_async(self):
        self._session_callback(KeeperState.CONNECTED)
        self._session_callback(KeeperState.AUTH_FAILED)
        return self._live


def test_a_login_refused_before_start_wakes_is_a_refusal_not_a_time_out():
    from kazoo.exceptions import AuthFailedError
    from kazoo.handlers.threading import KazooTimeoutError

    from zkcoord.zk.connection import start_short_lived

    with pytest.raises(KazooTimeoutError):  # what kazoo's start() says on its own
        _RefusedAtOnce(hosts="127.0.0.1:1").start(timeout=1)
    with pytest.raises(AuthFailedError):
        start_short_lived(_RefusedAtOnce(hosts="127.0.0.1:1"), 1)
